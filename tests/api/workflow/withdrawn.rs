//! A request force-failed while its batch MR is open never merges: its file
//! is taken out of the MR with a new commit (the others merge without it),
//! or, when it was the only one, the MR is closed and its branch deleted.

use std::time::{Duration, Instant};

use changegate_sim::gitlab::{GitLabSimOptions, MrState, PipelineOutcome};
use serde_json::{Value, json};

use super::batched::{
    apply_for, approve_all, claim_round, manual_rounds, rounds_until_settled, view,
};
use super::end_to_end::{World, WorldOptions, world_with};
use crate::helpers::each_backend;

/// Manual decisions and rounds; pipelines run until the test ends them.
fn held_pipelines() -> WorldOptions {
    WorldOptions {
        gitlab: GitLabSimOptions {
            pipeline_steps_per_poll: 0,
            ..GitLabSimOptions::default()
        },
        ..manual_rounds()
    }
}

/// Runs claim rounds until every one of `ids` shows `status`.
async fn rounds_until(w: &World, ids: &[String], status: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        claim_round(w).await;
        let mut views = Vec::new();
        for id in ids {
            views.push(view(w, id).await);
        }
        if views.iter().all(|v| v["status"] == status) {
            return;
        }
        assert!(Instant::now() < deadline, "never {status}: {views:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn force_fail(w: &World, id: &str) {
    let failed = w
        .app
        .post_as(
            "admin",
            &format!("/admin/v1/operations/{id}/fail"),
            &json!({ "reason": "wrong request" }),
        )
        .await;
    assert_eq!(failed.status(), 200);
}

/// Waits until `check` holds for the batch branch's files.
async fn branch_until(
    w: &World,
    check: impl Fn(Option<&std::collections::BTreeMap<String, String>>) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let files = w.gitlab.files(w.project, "changegate/merge-batch-1");
        if check(files.as_ref()) {
            return;
        }
        assert!(Instant::now() < deadline, "batch branch: {files:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_member_force_failed_after_its_batch_mr_opened_is_taken_out_and_never_merges() {
    for test_db in each_backend().await {
        let w = world_with(&test_db.url, held_pipelines()).await;
        let ids = vec![
            apply_for(&w, "member0", "read").await,
            apply_for(&w, "member1", "read").await,
        ];
        approve_all(&w, &ids).await;
        rounds_until(&w, &ids, "MR_CREATED").await;
        let opened = w.gitlab.merge_request(w.project, 1).unwrap();
        let first_head = opened.sha.clone();

        force_fail(&w, &ids[0]).await;
        branch_until(&w, |files| {
            files.is_some_and(|f| {
                !f.contains_key("bindings/team.access/member0.json")
                    && f.contains_key("bindings/team.access/member1.json")
            })
        })
        .await;
        let mr = w.gitlab.merge_request(w.project, 1).unwrap();
        assert_ne!(mr.sha, first_head, "{}: a new commit", test_db.name);
        // The pipeline of the new head passes; only that head may merge.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mr = w.gitlab.merge_request(w.project, 1).unwrap();
            if let Some((pipeline, _)) = mr.head_pipeline {
                w.gitlab
                    .force_pipeline(w.project, pipeline, PipelineOutcome::Success)
                    .unwrap();
            }
            if mr.state == MrState::Merged {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{}: never merged: {mr:?}",
                test_db.name
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let views = rounds_until_settled(&w, &ids[1..]).await;
        assert_eq!(
            views[0]["status"], "VALIDATED",
            "{}: {}",
            test_db.name, views[0]
        );
        let stopped = view(&w, &ids[0]).await;
        assert_eq!(
            (stopped["status"].as_str(), stopped["batchId"].clone()),
            (Some("ABANDONED"), Value::Null),
            "{}: {stopped}",
            test_db.name
        );
        let main = w.gitlab.files(w.project, "main").unwrap();
        assert!(
            main.contains_key("bindings/team.access/member1.json"),
            "{}",
            test_db.name
        );
        assert!(
            !main.contains_key("bindings/team.access/member0.json"),
            "{}: the withdrawn request's file never reaches main",
            test_db.name
        );
        let batch: Value = w
            .app
            .get_as("admin", "/admin/v1/batches/1")
            .await
            .json()
            .await
            .unwrap();
        assert!(
            batch.to_string().contains("REMOVED"),
            "{}: the batch's history says so: {batch}",
            test_db.name
        );
    }
}

#[tokio::test]
async fn the_only_member_force_failed_closes_the_batch_mr_and_deletes_its_branch() {
    for test_db in each_backend().await {
        let w = world_with(&test_db.url, held_pipelines()).await;
        let ids = vec![apply_for(&w, "member0", "read").await];
        approve_all(&w, &ids).await;
        rounds_until(&w, &ids, "MR_CREATED").await;

        force_fail(&w, &ids[0]).await;
        branch_until(&w, |files| files.is_none()).await;
        let mr = w.gitlab.merge_request(w.project, 1).unwrap();
        assert_eq!(mr.state, MrState::Closed, "{}: {mr:?}", test_db.name);
        let stopped = view(&w, &ids[0]).await;
        assert_eq!(
            stopped["status"], "ABANDONED",
            "{}: {stopped}",
            test_db.name
        );
        let main = w.gitlab.files(w.project, "main").unwrap();
        assert!(
            !main.contains_key("bindings/team.access/member0.json"),
            "{}",
            test_db.name
        );
    }
}
