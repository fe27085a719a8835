//! The project's merge method (merge commit, semi-linear, fast-forward) and merged results
//! pipelines: what GitLab reports before the merge and what the merge leaves behind.

use changegate_sim::gitlab::MergeMethod;
use serde_json::{Value, json};

use super::support::{BOT, Fixture};

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

/// Someone pushes another file to `main`, so open MRs are behind it.
fn move_main_on(fx: &Fixture) -> String {
    fx.sim
        .push(
            fx.project,
            fx.bot,
            "main",
            &[("docs/other.md", Some("moved on\n"))],
        )
        .unwrap()
}

#[tokio::test]
async fn the_project_reports_its_merge_method_merge_commits_by_default_as_gitlab() {
    let fx = Fixture::start().await;
    assert_eq!(fx.get(BOT, &fx.root).await.body["merge_method"], "merge");
    for method in [MergeMethod::RebaseMerge, MergeMethod::Ff] {
        fx.sim
            .update_settings(fx.project, |s| s.merge_method = method)
            .unwrap();
        assert_eq!(
            fx.get(BOT, &fx.root).await.body["merge_method"],
            method.as_str()
        );
    }
}

#[tokio::test]
async fn with_merge_commits_a_target_that_moved_on_needs_no_rebase_and_merges_three_way() {
    let fx = with_method(MergeMethod::Merge).await;
    let iid = fx.ready_mr("bot/one", &[("a.json", "{}\n")]).await;
    let main_before = move_main_on(&fx);
    let mr = settled(&fx, iid).await;
    assert_eq!(mr["detailed_merge_status"], "mergeable", "{mr}");

    let merged = fx.put(BOT, &fx.mr_path(iid, "/merge"), json!({})).await;

    assert_eq!(merged.status, 200, "{}", merged.text);
    let merge_sha = merged.str("merge_commit_sha").to_owned();
    assert_eq!(fx.sim.branch_head(fx.project, "main").unwrap(), merge_sha);
    let files = fx.sim.files(fx.project, "main").unwrap();
    assert_eq!(files["a.json"], "{}\n");
    assert_eq!(
        files["docs/other.md"], "moved on\n",
        "main's own change stays"
    );
    let commit = fx
        .get(BOT, &format!("{}/repository/commits/{merge_sha}", fx.root))
        .await;
    assert_eq!(
        commit.body["parent_ids"],
        json!([main_before, merged.str("sha")])
    );
}

#[tokio::test]
async fn with_merge_commits_a_conflict_is_still_a_conflict() {
    let fx = with_method(MergeMethod::Merge).await;
    let iid = fx.ready_mr("bot/one", &[("a.json", "{\"mr\": 1}\n")]).await;
    fx.sim
        .push(
            fx.project,
            fx.bot,
            "main",
            &[("a.json", Some("{\"main\": 1}\n"))],
        )
        .unwrap();
    let mr = settled(&fx, iid).await;
    assert_eq!(
        (
            mr["detailed_merge_status"].as_str(),
            mr["has_conflicts"].as_bool()
        ),
        (Some("conflict"), Some(true))
    );
    let refused = fx.put(BOT, &fx.mr_path(iid, "/merge"), json!({})).await;
    assert_eq!(refused.status, 422);
}

#[tokio::test]
async fn semi_linear_and_fast_forward_ask_for_a_rebase_when_the_target_moved_on() {
    for method in [MergeMethod::RebaseMerge, MergeMethod::Ff] {
        let fx = with_method(method).await;
        let iid = fx.ready_mr("bot/one", &[("a.json", "{}\n")]).await;
        move_main_on(&fx);
        let mr = settled(&fx, iid).await;
        assert_eq!(mr["detailed_merge_status"], "need_rebase", "{method:?}");
        let refused = fx.put(BOT, &fx.mr_path(iid, "/merge"), json!({})).await;
        assert_eq!(refused.status, 422, "{method:?}");
    }
}

#[tokio::test]
async fn a_fast_forward_moves_the_target_to_the_head_and_makes_no_merge_commit() {
    let fx = with_method(MergeMethod::Ff).await;
    let iid = fx.ready_mr("bot/one", &[("a.json", "{}\n")]).await;
    let head = fx.sim.merge_request(fx.project, iid).unwrap().sha;

    let merged = fx.put(BOT, &fx.mr_path(iid, "/merge"), json!({})).await;

    assert_eq!(merged.status, 200, "{}", merged.text);
    assert_eq!(merged.body["state"], "merged");
    assert_eq!(merged.body["merge_commit_sha"], Value::Null);
    assert_eq!(merged.body["sha"], head.as_str());
    assert_eq!(fx.sim.branch_head(fx.project, "main").unwrap(), head);
    let noticed = fx.sim.merged_merge_requests();
    assert_eq!(
        noticed[0].merged_sha, head,
        "a deploy watching merges sees the head land"
    );
}

#[tokio::test]
async fn merged_results_pipelines_run_on_the_merge_ref_at_a_commit_merging_head_and_target() {
    let fx = Fixture::start().await;
    fx.sim
        .update_settings(fx.project, |s| s.merged_results_pipelines = true)
        .unwrap();
    let main = fx.sim.branch_head(fx.project, "main").unwrap();
    let iid = fx.open_mr("bot/one", &[("a.json", "{}\n")]).await;
    let mr = fx.poll_pipeline(iid, "success").await;
    let pipeline = &mr["head_pipeline"];
    assert_eq!(pipeline["ref"], format!("refs/merge-requests/{iid}/merge"));
    assert_ne!(
        pipeline["sha"], mr["sha"],
        "not the head: the merge ref's commit"
    );
    let commit = fx
        .get(
            BOT,
            &format!(
                "{}/repository/commits/{}",
                fx.root,
                pipeline["sha"].as_str().unwrap()
            ),
        )
        .await;
    assert_eq!(commit.body["parent_ids"], json!([main, mr["sha"]]));
    let listed = fx.get(BOT, &fx.mr_path(iid, "/pipelines")).await;
    assert_eq!(listed.body[0]["id"], pipeline["id"]);
    assert_eq!(listed.body[0]["ref"], pipeline["ref"]);

    // Head and target in conflict: no merge ref commit, a pipeline on the head instead.
    let conflicting = fx.open_mr("bot/two", &[("c.json", "mr\n")]).await;
    fx.sim
        .push(fx.project, fx.bot, "main", &[("b.json", Some("main\n"))])
        .unwrap();
    fx.sim
        .push(fx.project, fx.bot, "bot/two", &[("b.json", Some("mr\n"))])
        .unwrap();
    let mr = fx.poll_pipeline(conflicting, "success").await;
    assert_eq!(
        mr["head_pipeline"]["ref"],
        format!("refs/merge-requests/{conflicting}/head")
    );
    assert_eq!(mr["head_pipeline"]["sha"], mr["sha"]);
}
