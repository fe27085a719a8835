//! Stacked branches, as a merge train builds them: a branch created at another branch's
//! head commit (not yet merged), each with its own merge request into `main`, merged in
//! order with `sha` pinned, under each merge method; and the merge log that tells the
//! order merges happened in.

use changegate_sim::gitlab::{MergeMethod, MrState};
use reqwest::Method;
use serde_json::{Value, json};

use super::support::{BOT, Fixture};
use crate::control_client::call;

async fn with_method(method: MergeMethod) -> Fixture {
    let fx = Fixture::start().await;
    fx.sim
        .update_settings(fx.project, |s| s.merge_method = method)
        .unwrap();
    fx
}

/// The MR as a settled poll shows it (the first poll after a push still says `checking`).
async fn settled(fx: &Fixture, iid: u64) -> Value {
    fx.get(BOT, &fx.mr_path(iid, "")).await;
    fx.get(BOT, &fx.mr_path(iid, "")).await.body
}

fn head(fx: &Fixture, branch: &str) -> String {
    fx.sim
        .branch_head(fx.project, branch)
        .expect("branch exists")
}

/// `POST repository/branches` with `ref` = `start` (a branch name or a commit sha).
async fn branch(fx: &Fixture, name: &str, start: &str) -> Value {
    let created = fx
        .post(
            BOT,
            &format!("{}/repository/branches", fx.root),
            json!({ "branch": name, "ref": start }),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text);
    created.body
}

/// One commit on `branch`: `(action, path, content)` each.
async fn commit(fx: &Fixture, branch: &str, actions: &[(&str, &str, &str)]) -> String {
    let actions: Vec<Value> = actions
        .iter()
        .map(|(action, path, content)| {
            json!({ "action": action, "file_path": path, "content": content })
        })
        .collect();
    let committed = fx
        .post(
            BOT,
            &format!("{}/repository/commits", fx.root),
            json!({ "branch": branch, "commit_message": "bot: batch", "actions": actions }),
        )
        .await;
    assert_eq!(committed.status, 201, "{}", committed.text);
    committed.str("id").to_owned()
}

/// An MR from `source` into `main`, with a green pipeline and both approvals.
async fn ready(fx: &Fixture, source: &str) -> u64 {
    let mr = fx
        .post(
            BOT,
            &format!("{}/merge_requests", fx.root),
            json!({ "source_branch": source, "target_branch": "main", "title": "bot: batch" }),
        )
        .await;
    assert_eq!(mr.status, 201, "{}", mr.text);
    let iid = mr.body["iid"].as_u64().expect("iid");
    fx.poll_pipeline(iid, "success").await;
    fx.approve_both(iid).await;
    iid
}

/// The first car (`bot/a`: `a.json` and `shared.toml`) and the second stacked on its head
/// (`bot/b`: `shared.toml` edited further and `b.json`), both ready; returns their iids.
async fn two_cars(fx: &Fixture) -> (u64, u64) {
    let first = fx
        .ready_mr(
            "bot/a",
            &[("a.json", "{\"a\": 1}\n"), ("shared.toml", "a = 1\n")],
        )
        .await;
    branch(fx, "bot/b", &head(fx, "bot/a")).await;
    commit(
        fx,
        "bot/b",
        &[
            ("update", "shared.toml", "a = 1\nb = 2\n"),
            ("create", "b.json", "{\"b\": 2}\n"),
        ],
    )
    .await;
    (first, ready(fx, "bot/b").await)
}

/// Merges `iid` at its current head, pinned with `sha`.
async fn merge_pinned(fx: &Fixture, iid: u64) -> Value {
    let sha = fx.sim.merge_request(fx.project, iid).unwrap().sha;
    let merged = fx
        .put(BOT, &fx.mr_path(iid, "/merge"), json!({ "sha": sha }))
        .await;
    assert_eq!(merged.status, 200, "{}", merged.text);
    assert_eq!(merged.body["state"], "merged");
    merged.body
}

#[tokio::test]
async fn a_branch_starts_at_a_commit_sha_and_reads_answer_at_a_sha() {
    let fx = Fixture::start().await;
    fx.open_mr("bot/a", &[("a.json", "{\"a\": 1}\n")]).await;
    let a_head = head(&fx, "bot/a");

    let created = branch(&fx, "bot/b", &a_head).await;
    assert_eq!(created["commit"]["id"], a_head.as_str());
    let abbreviated = branch(&fx, "bot/c", &a_head[..10]).await;
    assert_eq!(abbreviated["commit"]["id"], a_head.as_str());
    let got = fx
        .get(BOT, &format!("{}/repository/branches/bot%2Fb", fx.root))
        .await;
    assert_eq!(got.body["commit"]["id"], a_head.as_str());
    let unknown = fx
        .post(
            BOT,
            &format!("{}/repository/branches", fx.root),
            json!({ "branch": "bot/d", "ref": "0123456789abcdef0123456789abcdef01234567" }),
        )
        .await;
    assert_eq!(unknown.status, 400, "{}", unknown.text);

    let raw = fx
        .get(
            BOT,
            &format!("{}/repository/files/a.json/raw?ref={a_head}", fx.root),
        )
        .await;
    assert_eq!((raw.status, raw.text.as_str()), (200, "{\"a\": 1}\n"));
    let file = fx
        .get(
            BOT,
            &format!("{}/repository/files/a.json?ref={a_head}", fx.root),
        )
        .await;
    assert_eq!(file.body["commit_id"], a_head.as_str());
    let tree = fx
        .get(BOT, &format!("{}/repository/tree?ref={a_head}", fx.root))
        .await;
    assert_eq!(tree.status, 200, "{}", tree.text);
    let paths: Vec<&str> = tree
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert!(paths.contains(&"a.json"), "{paths:?}");

    let b_head = commit(&fx, "bot/b", &[("create", "b.json", "{}\n")]).await;
    let got = fx
        .get(BOT, &format!("{}/repository/branches/bot%2Fb", fx.root))
        .await;
    assert_eq!(got.body["commit"]["id"], b_head.as_str());
    assert_eq!(got.body["commit"]["parent_ids"], json!([a_head]));
    // The file's last commit is the one that wrote it, not the ref's.
    let file = fx
        .get(
            BOT,
            &format!("{}/repository/files/a.json?ref=bot%2Fb", fx.root),
        )
        .await;
    assert_eq!(file.body["commit_id"], b_head.as_str());
    assert_eq!(file.body["last_commit_id"], a_head.as_str());
    assert_eq!(head(&fx, "bot/a"), a_head, "the branch underneath stays");
}

#[tokio::test]
async fn with_merge_commits_a_stacked_branch_merges_after_the_one_underneath_with_its_own_tree() {
    let fx = with_method(MergeMethod::Merge).await;
    let main_before = head(&fx, "main");
    let (first, second) = two_cars(&fx).await;
    let (a_head, b_head) = (head(&fx, "bot/a"), head(&fx, "bot/b"));

    // Before the first merges, the second's diff holds both cars' changes.
    let mr = settled(&fx, second).await;
    assert_eq!(mr["detailed_merge_status"], "mergeable", "{mr}");
    assert_eq!(mr["diff_refs"]["base_sha"], main_before.as_str());
    assert_eq!(mr["diff_refs"]["start_sha"], main_before.as_str());
    assert_eq!(mr["diff_refs"]["head_sha"], b_head.as_str());
    assert_eq!(mr["changes_count"], "3", "a.json, shared.toml, b.json");

    let m1 = merge_pinned(&fx, first).await["merge_commit_sha"]
        .as_str()
        .unwrap()
        .to_owned();

    // Its merge base with main is now the first car's head, reached through the merge
    // commit's second parent: no rebase, no conflict on the file both edited.
    let mr = settled(&fx, second).await;
    assert_eq!(mr["detailed_merge_status"], "mergeable", "{mr}");
    assert_eq!(mr["has_conflicts"], false);
    assert_eq!(mr["diff_refs"]["base_sha"], a_head.as_str());
    assert_eq!(mr["diff_refs"]["start_sha"], m1.as_str());
    assert_eq!(mr["changes_count"], "2", "shared.toml and b.json");
    let merged = merge_pinned(&fx, second).await;
    let m2 = merged["merge_commit_sha"].as_str().unwrap().to_owned();
    assert_eq!(head(&fx, "main"), m2);
    let commit = fx
        .get(BOT, &format!("{}/repository/commits/{m2}", fx.root))
        .await;
    assert_eq!(commit.body["parent_ids"], json!([m1, b_head]));
    assert_eq!(
        fx.sim.files(fx.project, "main"),
        fx.sim.files(fx.project, "bot/b"),
        "main's tree is the tested tree"
    );
    // A merged request keeps the diff it merged.
    let first_view = settled(&fx, first).await;
    assert_eq!(first_view["diff_refs"]["start_sha"], main_before.as_str());
    assert_eq!(first_view["changes_count"], "2");

    let log = fx.sim.merge_log(fx.project);
    let order: Vec<u64> = log.iter().map(|m| m.iid).collect();
    assert_eq!(order, [first, second]);
    assert!(
        log.iter()
            .all(|m| m.pinned && m.merge_method == MergeMethod::Merge)
    );
    assert_eq!(
        (log[0].target_before.as_str(), log[0].target_after.as_str()),
        (main_before.as_str(), m1.as_str())
    );
    assert_eq!(
        (
            log[1].target_before.as_str(),
            log[1].head_sha.as_str(),
            log[1].target_after.as_str()
        ),
        (m1.as_str(), b_head.as_str(), m2.as_str())
    );
    assert!(log[0].seq < log[1].seq);
    let noticed: Vec<u64> = fx
        .sim
        .merged_merge_requests()
        .iter()
        .map(|m| m.iid)
        .collect();
    assert_eq!(noticed, [first, second]);

    let over_http = call(
        Method::GET,
        &format!("{}/_sim/projects/config%2Frepo/merges", fx.sim.base_url()),
        None,
    )
    .await;
    assert_eq!(over_http.status, 200);
    assert_eq!(over_http.body[1]["iid"], second);
    assert_eq!(over_http.body[1]["target_before"], m1.as_str());
    assert_eq!(over_http.body[1]["merge_method"], "merge");
    assert_eq!(over_http.body[1]["pinned"], true);
}

#[tokio::test]
async fn with_fast_forward_merges_a_stacked_branch_fast_forwards_after_the_one_underneath() {
    let fx = with_method(MergeMethod::Ff).await;
    let (first, second) = two_cars(&fx).await;
    let (a_head, b_head) = (head(&fx, "bot/a"), head(&fx, "bot/b"));
    assert_eq!(
        merge_pinned(&fx, first).await["merge_commit_sha"],
        Value::Null
    );
    assert_eq!(head(&fx, "main"), a_head);

    let mr = settled(&fx, second).await;
    assert_eq!(mr["detailed_merge_status"], "mergeable", "{mr}");
    assert_eq!(
        merge_pinned(&fx, second).await["merge_commit_sha"],
        Value::Null
    );
    assert_eq!(head(&fx, "main"), b_head);
    let log = fx.sim.merge_log(fx.project);
    assert_eq!(log[1].target_before, a_head);
    assert_eq!(log[1].target_after, b_head);
}

#[tokio::test]
async fn with_semi_linear_history_a_stacked_branch_needs_a_rebase_once_the_one_underneath_merged() {
    let fx = with_method(MergeMethod::RebaseMerge).await;
    let (first, second) = two_cars(&fx).await;
    assert_eq!(
        settled(&fx, second).await["detailed_merge_status"],
        "mergeable"
    );
    merge_pinned(&fx, first).await;

    let mr = settled(&fx, second).await;
    assert_eq!(mr["detailed_merge_status"], "need_rebase", "{mr}");
    let b_head = head(&fx, "bot/b");
    let refused = fx
        .put(BOT, &fx.mr_path(second, "/merge"), json!({ "sha": b_head }))
        .await;
    assert_eq!(refused.status, 422, "{}", refused.text);

    let rebase = fx.put(BOT, &fx.mr_path(second, "/rebase"), json!({})).await;
    assert_eq!(rebase.status, 202);
    let poll = fx.mr_path(second, "?include_rebase_in_progress=true");
    let mut polls = 0;
    while fx.get(BOT, &poll).await.body["rebase_in_progress"] == true {
        polls += 1;
        assert!(polls < 10, "the rebase never finished");
    }
    let rebased = fx.poll_pipeline(second, "success").await;
    assert_ne!(rebased["sha"], b_head.as_str(), "a new head");
    assert_eq!(
        settled(&fx, second).await["detailed_merge_status"],
        "mergeable"
    );
    merge_pinned(&fx, second).await;
    let files = fx.sim.files(fx.project, "main").unwrap();
    assert_eq!(files["shared.toml"], "a = 1\nb = 2\n");
    assert_eq!(files["a.json"], "{\"a\": 1}\n");
    assert_eq!(files["b.json"], "{\"b\": 2}\n");
}

#[tokio::test]
async fn a_stacked_branch_is_rebuilt_on_main_by_a_forced_commit_and_its_mr_follows() {
    let fx = with_method(MergeMethod::Merge).await;
    let (_, second) = two_cars(&fx).await;
    let (main_head, old_head) = (head(&fx, "main"), head(&fx, "bot/b"));
    let old_pipeline = fx
        .sim
        .merge_request(fx.project, second)
        .unwrap()
        .head_pipeline;
    let commits = format!("{}/repository/commits", fx.root);
    let body = |force: bool| {
        json!({
            "branch": "bot/b",
            "start_sha": main_head,
            "force": force,
            "commit_message": "bot: batch, rebuilt",
            "actions": [{ "action": "create", "file_path": "b.json", "content": "{\"b\": 2}\n" }],
        })
    };
    let refused = fx.post(BOT, &commits, body(false)).await;
    assert_eq!(refused.status, 400, "{}", refused.text);
    assert_eq!(head(&fx, "bot/b"), old_head);

    let rebuilt = fx.post(BOT, &commits, body(true)).await;

    assert_eq!(rebuilt.status, 201, "{}", rebuilt.text);
    assert_eq!(rebuilt.body["parent_ids"], json!([main_head]));
    let new_head = head(&fx, "bot/b");
    assert_eq!(rebuilt.str("id"), new_head);
    let files = fx.sim.files(fx.project, "bot/b").unwrap();
    assert!(
        !files.contains_key("a.json"),
        "the car underneath is gone: {files:?}"
    );
    let mr = fx.sim.merge_request(fx.project, second).unwrap();
    assert_eq!(mr.sha, new_head, "the MR follows its branch");
    assert_ne!(mr.head_pipeline, old_pipeline, "with a pipeline of its own");
}

#[tokio::test]
async fn merging_a_stacked_branch_first_merges_the_one_underneath_with_it() {
    for method in [MergeMethod::Merge, MergeMethod::Ff] {
        let fx = with_method(method).await;
        let (first, second) = two_cars(&fx).await;
        let a_head = head(&fx, "bot/a");

        let merged = merge_pinned(&fx, second).await;

        let underneath = fx.sim.merge_request(fx.project, first).unwrap();
        assert_eq!(underneath.state, MrState::Merged, "{method:?}");
        let expected = match method {
            MergeMethod::Ff => a_head.clone(),
            _ => merged["merge_commit_sha"].as_str().unwrap().to_owned(),
        };
        assert_eq!(
            underneath.merge_commit_sha.as_deref(),
            Some(expected.as_str()),
            "{method:?}"
        );
        let log = fx.sim.merge_log(fx.project);
        let order: Vec<(u64, Option<u64>)> = log.iter().map(|m| (m.iid, m.carried_by)).collect();
        assert_eq!(order, [(second, None), (first, Some(second))], "{method:?}");
        assert!(!log[1].pinned);
        let view = fx.get(BOT, &fx.mr_path(first, "")).await;
        assert_eq!(view.body["state"], "merged");
        assert_eq!(view.body["detailed_merge_status"], "not_open");
    }
}
