//! Merges over a criss-cross history: two branches that merged each other's heads have two
//! best merge bases, and git merges from a virtual base merging the two.

use serde_json::{Value, json};

use super::support::{BOT, Fixture};

/// `POST repository/branches` at `start`.
async fn branch(fx: &Fixture, name: &str, start: &str) {
    let created = fx
        .post(
            BOT,
            &format!("{}/repository/branches", fx.root),
            json!({ "branch": name, "ref": start }),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text);
}

/// Writes `path` on `branch` (created or updated).
async fn write(fx: &Fixture, branch: &str, action: &str, path: &str, content: &str) -> String {
    let committed = fx
        .post(
            BOT,
            &format!("{}/repository/commits", fx.root),
            json!({ "branch": branch, "commit_message": "edit", "actions": [
                { "action": action, "file_path": path, "content": content }
            ] }),
        )
        .await;
    assert_eq!(committed.status, 201, "{}", committed.text);
    committed.str("id").to_owned()
}

/// An MR from `source` into `target`, green and approved.
async fn ready(fx: &Fixture, source: &str, target: &str) -> u64 {
    let mr = fx
        .post(
            BOT,
            &format!("{}/merge_requests", fx.root),
            json!({ "source_branch": source, "target_branch": target, "title": "x" }),
        )
        .await;
    assert_eq!(mr.status, 201, "{}", mr.text);
    let iid = mr.body["iid"].as_u64().unwrap();
    fx.poll_pipeline(iid, "success").await;
    fx.approve_both(iid).await;
    iid
}

async fn merge(fx: &Fixture, iid: u64) -> Value {
    let merged = fx.put(BOT, &fx.mr_path(iid, "/merge"), json!({})).await;
    assert_eq!(merged.status, 200, "{}", merged.text);
    merged.body
}

#[tokio::test]
async fn a_criss_cross_history_merges_from_a_virtual_base() {
    let fx = Fixture::start().await;
    branch(&fx, "p", "main").await;
    branch(&fx, "q", "main").await;
    write(&fx, "p", "create", "f.txt", "p\n").await;
    let q1 = write(&fx, "q", "create", "g.txt", "q\n").await;
    branch(&fx, "q-at-1", &q1).await;
    // p into q, and q's first head into p: each side holds the other's head.
    let p_into_q = ready(&fx, "p", "q").await;
    let q_into_p = ready(&fx, "q-at-1", "p").await;
    merge(&fx, p_into_q).await;
    merge(&fx, q_into_p).await;
    // q edits the file p brought. From the base q1 alone both sides changed f.txt;
    // from p's head alone, or from the virtual base, only q did.
    write(&fx, "q", "update", "f.txt", "p2\n").await;

    let last = ready(&fx, "q", "p").await;
    fx.get(BOT, &fx.mr_path(last, "")).await;
    let mr = fx.get(BOT, &fx.mr_path(last, "")).await.body;
    assert_eq!(mr["detailed_merge_status"], "mergeable", "{mr}");
    merge(&fx, last).await;
    let files = fx.sim.files(fx.project, "p").unwrap();
    assert_eq!(files["f.txt"], "p2\n");
    assert_eq!(files["g.txt"], "q\n");
}
