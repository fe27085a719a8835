//! Merge gate order, the merge itself, rebase, auto-merge and pipeline outcomes.

use changegate_sim::gitlab::{
    CannotMergeStatus, GitLabSimOptions, MergeMethod, MrState, PipelineOutcome, PipelineStatus,
};
use serde_json::{Value, json};

use super::support::{ALICE, BOB, BOT, Fixture, OUTSIDER, REPORTER};

#[tokio::test]
async fn merge_gates_run_in_gitlab_order_and_merge_changes_the_target() {
    let fx = Fixture::start().await;
    // Semi-linear history, so a target that moved on is `need_rebase`.
    fx.sim
        .update_settings(fx.project, |s| s.merge_method = MergeMethod::RebaseMerge)
        .unwrap();
    let iid = fx.open_mr("bot/one", &[("bindings/a.json", "{}\n")]).await;
    let merge = fx.mr_path(iid, "/merge");
    let wrong_sha = json!({ "sha": "0".repeat(40) });

    for token in [REPORTER, OUTSIDER] {
        let denied = fx.put(token, &merge, wrong_sha.clone()).await;
        assert_eq!(denied.status, 401);
        assert_eq!(denied.body, json!({ "message": "401 Unauthorized" }));
    }
    // CI still running and no approvals: 405, and the stale sha is not reported yet.
    let not_ready = fx.put(BOT, &merge, wrong_sha.clone()).await;
    assert_eq!(not_ready.status, 405);
    assert_eq!(
        not_ready.body,
        json!({ "message": "405 Method Not Allowed" })
    );
    fx.poll_pipeline(iid, "success").await;
    fx.post(ALICE, &fx.mr_path(iid, "/approve"), json!({}))
        .await;
    assert_eq!(fx.put(BOT, &merge, wrong_sha.clone()).await.status, 405);
    fx.post(BOB, &fx.mr_path(iid, "/approve"), json!({})).await;

    // The target moves on: 422 until rebased, still before the sha check.
    let old_main = fx
        .sim
        .push(fx.project, fx.bot, "main", &[("other.txt", Some("x\n"))])
        .unwrap();
    let needs_rebase = fx.put(BOT, &merge, wrong_sha.clone()).await;
    assert_eq!(needs_rebase.status, 422);
    assert_eq!(
        needs_rebase.body,
        json!({ "message": "Branch cannot be merged" })
    );
    fx.get(BOT, &fx.mr_path(iid, "")).await;
    let status = fx.get(BOT, &fx.mr_path(iid, "")).await;
    assert_eq!(status.body["detailed_merge_status"], "need_rebase");
    assert_eq!(status.body["has_conflicts"], false);

    let before = fx.sim.merge_request(fx.project, iid).unwrap().sha;
    let rebase = fx.put(BOT, &fx.mr_path(iid, "/rebase"), json!({})).await;
    assert_eq!(rebase.status, 202);
    assert_eq!(rebase.body, json!({ "rebase_in_progress": true }));
    let poll = fx.mr_path(iid, "?include_rebase_in_progress=true");
    assert_eq!(fx.get(BOT, &poll).await.body["rebase_in_progress"], true);
    let done = fx.get(BOT, &poll).await.body;
    assert_eq!(done["rebase_in_progress"], false);
    assert_eq!(done["merge_error"], Value::Null);
    let head = done["sha"].as_str().unwrap().to_owned();
    assert_ne!(head, before);
    assert_eq!(done["head_pipeline"]["sha"], head.as_str());
    assert!(
        fx.get(BOT, &fx.mr_path(iid, ""))
            .await
            .body
            .get("rebase_in_progress")
            .is_none()
    );
    fx.poll_pipeline(iid, "success").await;

    let stale = fx.put(BOT, &merge, json!({ "sha": before })).await;
    assert_eq!(stale.status, 409);
    assert_eq!(
        stale.str("message"),
        format!("SHA does not match HEAD of source branch: {head}")
    );
    let merged = fx
        .put(
            BOT,
            &merge,
            json!({ "sha": head, "should_remove_source_branch": true }),
        )
        .await;
    assert_eq!(merged.status, 200, "{}", merged.text);
    assert_eq!(merged.body["state"], "merged");
    assert!(merged.body["merged_at"].is_string());
    assert_eq!(merged.body["merge_user"]["username"], "change-bot");
    assert_eq!(merged.body["detailed_merge_status"], "not_open");
    let merge_sha = merged.str("merge_commit_sha").to_owned();
    assert_eq!(
        fx.sim.branch_head(fx.project, "main"),
        Some(merge_sha.clone())
    );
    let files = fx.sim.files(fx.project, "main").unwrap();
    assert_eq!(files["bindings/a.json"], "{}\n");
    assert_eq!(files["other.txt"], "x\n");
    assert_eq!(fx.sim.branch_head(fx.project, "bot/one"), None);
    let commit_parents = fx
        .get(BOT, &format!("{}/repository/branches/main", fx.root))
        .await
        .body["commit"]["parent_ids"]
        .clone();
    assert_eq!(commit_parents, json!([old_main, head]));

    let again = fx.put(BOT, &merge, json!({})).await;
    assert_eq!(again.status, 405);
    let close = fx
        .put(BOT, &fx.mr_path(iid, ""), json!({ "state_event": "close" }))
        .await;
    assert_eq!(close.status, 200);
    assert_eq!(close.body["state"], "merged");
    let reopen = fx
        .put(
            BOT,
            &fx.mr_path(iid, ""),
            json!({ "state_event": "reopen" }),
        )
        .await;
    assert_eq!(reopen.body["state"], "merged");
}

#[tokio::test]
async fn conflicting_change_fails_the_rebase() {
    let fx = Fixture::start().await;
    let iid = fx.ready_mr("bot/one", &[("shared.json", "ours\n")]).await;
    fx.sim
        .push(
            fx.project,
            fx.bot,
            "main",
            &[("shared.json", Some("theirs\n"))],
        )
        .unwrap();
    fx.get(BOT, &fx.mr_path(iid, "")).await;
    let status = fx.get(BOT, &fx.mr_path(iid, "")).await.body;
    assert_eq!(status["detailed_merge_status"], "conflict");
    assert_eq!(status["merge_status"], "cannot_be_merged");
    assert_eq!(status["has_conflicts"], true);
    assert_eq!(
        fx.put(BOT, &fx.mr_path(iid, "/merge"), json!({}))
            .await
            .status,
        422
    );

    let sha = fx.sim.merge_request(fx.project, iid).unwrap().sha;
    assert_eq!(
        fx.put(BOT, &fx.mr_path(iid, "/rebase"), json!({}))
            .await
            .status,
        202
    );
    let busy = fx.put(BOT, &fx.mr_path(iid, "/rebase"), json!({})).await;
    assert_eq!(busy.status, 409);
    let poll = fx.mr_path(iid, "?include_rebase_in_progress=true");
    assert_eq!(fx.get(BOT, &poll).await.body["rebase_in_progress"], true);
    let failed = fx.get(BOT, &poll).await.body;
    assert_eq!(failed["rebase_in_progress"], false);
    assert_eq!(
        failed["merge_error"],
        "Rebase failed: Rebase locally, resolve all conflicts, then push the branch."
    );
    assert_eq!(failed["sha"], sha.as_str());

    let branch = format!("{}/repository/branches/bot%2Fone", fx.root);
    fx.send(reqwest::Method::DELETE, Some(BOT), &branch, None)
        .await;
    let gone = fx.put(BOT, &fx.mr_path(iid, "/rebase"), json!({})).await;
    assert_eq!(gone.status, 403);
    assert_eq!(
        gone.body,
        json!({ "message": "403 Forbidden - Source branch does not exist" })
    );
}

#[tokio::test]
async fn cannot_merge_status_is_406_when_configured() {
    let options = GitLabSimOptions {
        cannot_merge_status: CannotMergeStatus::NotAcceptable,
        ..GitLabSimOptions::default()
    };
    let fx = Fixture::with_options(options).await;
    fx.sim
        .update_settings(fx.project, |s| s.merge_method = MergeMethod::RebaseMerge)
        .unwrap();
    let iid = fx.ready_mr("bot/one", &[("a", "a")]).await;
    fx.sim
        .push(fx.project, fx.bot, "main", &[("b", Some("b"))])
        .unwrap();
    let refused = fx.put(BOT, &fx.mr_path(iid, "/merge"), json!({})).await;
    assert_eq!(refused.status, 406);
    assert_eq!(
        refused.body,
        json!({ "message": "Branch cannot be merged" })
    );
}

#[tokio::test]
async fn auto_merge_arms_while_pipeline_runs_and_merges_when_approved() {
    let fx = Fixture::start().await;
    let iid = fx.open_mr("bot/one", &[("a", "a")]).await;
    fx.post(ALICE, &fx.mr_path(iid, "/approve"), json!({}))
        .await;
    let armed = fx
        .put(
            BOT,
            &fx.mr_path(iid, "/merge"),
            json!({ "merge_when_pipeline_succeeds": true }),
        )
        .await;
    assert_eq!(armed.status, 200);
    assert_eq!(armed.body["state"], "opened");
    assert_eq!(armed.body["merge_when_pipeline_succeeds"], true);
    assert_eq!(armed.body["merge_user"]["username"], "change-bot");

    let waiting = fx.poll_pipeline(iid, "success").await;
    assert_eq!(waiting["state"], "opened");
    let approved = fx.post(BOB, &fx.mr_path(iid, "/approve"), json!({})).await;
    assert_eq!(approved.status, 201);
    let snapshot = fx.sim.merge_request(fx.project, iid).unwrap();
    assert_eq!(snapshot.state, MrState::Merged);
    assert_eq!(fx.sim.file(fx.project, "main", "a").as_deref(), Some("a"));
}

#[tokio::test]
async fn scripted_and_forced_pipeline_outcomes() {
    let fx = Fixture::start().await;
    fx.sim
        .script_pipelines(
            fx.project,
            [PipelineOutcome::Failed, PipelineOutcome::StuckRunning],
        )
        .unwrap();
    let failing = fx.open_mr("bot/one", &[("a", "a")]).await;
    fx.approve_both(failing).await;
    let failed = fx.poll_pipeline(failing, "failed").await;
    assert_eq!(failed["detailed_merge_status"], "ci_must_pass");
    assert_eq!(
        fx.put(BOT, &fx.mr_path(failing, "/merge"), json!({}))
            .await
            .status,
        405
    );

    let stuck = fx.open_mr("bot/two", &[("b", "b")]).await;
    fx.approve_both(stuck).await;
    for _ in 0..10 {
        fx.get(BOT, &fx.mr_path(stuck, "")).await;
    }
    let mr = fx.get(BOT, &fx.mr_path(stuck, "")).await.body;
    assert_eq!(mr["head_pipeline"]["status"], "running");
    assert_eq!(mr["detailed_merge_status"], "ci_still_running");
    let armed = fx
        .put(
            BOT,
            &fx.mr_path(stuck, "/merge"),
            json!({ "auto_merge": true }),
        )
        .await;
    assert_eq!(armed.body["merge_when_pipeline_succeeds"], true);
    let (id, _) = fx
        .sim
        .merge_request(fx.project, stuck)
        .unwrap()
        .head_pipeline
        .unwrap();
    fx.sim
        .force_pipeline(fx.project, id, PipelineOutcome::Canceled)
        .unwrap();
    assert_eq!(
        fx.sim.pipeline_status(fx.project, id),
        Some(PipelineStatus::Canceled)
    );
    let disarmed = fx.sim.merge_request(fx.project, stuck).unwrap();
    assert!(!disarmed.auto_merge);
    assert_eq!(disarmed.state, MrState::Opened);
}

#[tokio::test]
async fn pipelines_can_be_driven_only_by_the_control_api() {
    let options = GitLabSimOptions {
        pipeline_steps_per_poll: 0,
        ..GitLabSimOptions::default()
    };
    let fx = Fixture::with_options(options).await;
    let iid = fx.open_mr("bot/one", &[("a", "a")]).await;
    for _ in 0..5 {
        fx.get(BOT, &fx.mr_path(iid, "")).await;
    }
    let (id, status) = fx
        .sim
        .merge_request(fx.project, iid)
        .unwrap()
        .head_pipeline
        .unwrap();
    assert_eq!(status, PipelineStatus::Created);
    for expected in [
        PipelineStatus::Pending,
        PipelineStatus::Running,
        PipelineStatus::Success,
    ] {
        fx.sim.advance_pipeline(fx.project, id).unwrap();
        assert_eq!(fx.sim.pipeline_status(fx.project, id), Some(expected));
    }
    assert!(fx.sim.advance_pipeline(fx.project, 1).is_err());
}

#[tokio::test]
async fn a_source_branch_without_commits_reports_commits_status_and_does_not_merge() {
    let fx = Fixture::start().await;
    let created = fx
        .post(
            BOT,
            &format!("{}/repository/branches", fx.root),
            json!({ "branch": "bot/empty", "ref": "main" }),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text);
    let body = json!({ "source_branch": "bot/empty", "target_branch": "main", "title": "nothing" });
    let mr = fx
        .post(BOT, &format!("{}/merge_requests", fx.root), body)
        .await;
    assert_eq!(mr.status, 201, "{}", mr.text);
    let iid = mr.body["iid"].as_u64().unwrap();
    fx.approve_both(iid).await;
    // Once the asynchronous check settles, and still when main moves on past the branch.
    let mut detailed = Value::Null;
    for _ in 0..10 {
        detailed = fx.get(BOT, &fx.mr_path(iid, "")).await.body["detailed_merge_status"].clone();
    }
    assert_eq!(detailed, "commits_status");
    fx.sim
        .push(fx.project, fx.bot, "main", &[("b", Some("b"))])
        .unwrap();
    for _ in 0..10 {
        detailed = fx.get(BOT, &fx.mr_path(iid, "")).await.body["detailed_merge_status"].clone();
    }
    assert_eq!(detailed, "commits_status");

    let refused = fx.put(BOT, &fx.mr_path(iid, "/merge"), json!({})).await;
    assert_eq!(refused.status, 405);
    assert_eq!(refused.body, json!({ "message": "405 Method Not Allowed" }));
    assert_eq!(
        fx.sim.merge_request(fx.project, iid).unwrap().state,
        MrState::Opened
    );
}
