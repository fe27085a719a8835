//! Projects set up as GitLab lets them be: merged results pipelines, approvals
//! optional (Free), and approval rules the reviewer bots cannot meet, which
//! fail the merge step at once with the reason instead of at its deadline.

use changegate_sim::gitlab::{Endpoint, PipelineOutcome, ProjectSettings, Tier};
use serde_json::Value;

use super::end_to_end::{World, world};
use super::gitlab_faults::settled;
use super::{apply, wait_for};
use crate::helpers::{each_backend, plain_client, sqlite_db};

fn configure(w: &World, change: impl FnOnce(&mut ProjectSettings)) {
    w.gitlab.update_settings(w.project, change).unwrap();
}

/// The pipelines of MR `iid` as GitLab lists them, newest first.
async fn mr_pipelines(w: &World, iid: i64) -> Vec<Value> {
    let url = format!(
        "{}/projects/config%2Frepo/merge_requests/{iid}/pipelines",
        w.gitlab.api_url()
    );
    let answer = plain_client()
        .build()
        .unwrap()
        .get(url)
        .header("PRIVATE-TOKEN", "bot-token")
        .send()
        .await
        .unwrap();
    answer.json().await.unwrap()
}

#[tokio::test]
async fn with_merged_results_pipelines_a_request_ends_validated() {
    for test_db in each_backend().await {
        let w = world(&test_db.url, "").await;
        configure(&w, |s| s.merged_results_pipelines = true);
        let id = apply(&w.app).await;

        let view = settled(&w, &id).await;

        assert_eq!(view["status"], "VALIDATED", "{}: {view}", test_db.name);
        let iid = view["mergeRequest"]["iid"].as_i64().unwrap();
        let pipelines = mr_pipelines(&w, iid).await;
        let head = w.gitlab.merge_request(w.project, 1).unwrap().sha;
        assert_eq!(
            pipelines[0]["ref"],
            format!("refs/merge-requests/{iid}/merge"),
            "{}: {pipelines:?}",
            test_db.name
        );
        assert_ne!(
            pipelines[0]["sha"], head,
            "{}: the pipeline ran on the merge ref's commit, not the head",
            test_db.name
        );
    }
}

#[tokio::test]
async fn a_failed_merged_results_pipeline_is_a_pipeline_failure() {
    let db = sqlite_db().await;
    let w = world(&db.url, "").await;
    configure(&w, |s| s.merged_results_pipelines = true);
    w.gitlab
        .script_pipelines(w.project, [PipelineOutcome::Failed])
        .unwrap();
    let id = apply(&w.app).await;

    let view = wait_for(&w.app, &id, |v| v["next"] == "CONTACT_TEAM").await;

    assert_eq!(
        (view["status"].as_str(), view["step"]["name"].as_str()),
        (Some("CREATE_FAILED"), Some("CREATE_PIPELINE_FAILED")),
        "{view}"
    );
    let pipelines = mr_pipelines(&w, 1).await;
    assert_eq!(pipelines[0]["ref"], "refs/merge-requests/1/merge");
    assert_eq!(pipelines[0]["status"], "failed");
    assert_eq!(w.gitlab.calls(Endpoint::Merge), 0);
}

#[tokio::test]
async fn with_approvals_optional_on_the_free_tier_a_request_ends_validated() {
    for test_db in each_backend().await {
        let w = world(&test_db.url, "").await;
        configure(&w, |s| {
            s.tier = Tier::Ce;
            s.approvals_required = 0;
        });
        let id = apply(&w.app).await;

        let view = settled(&w, &id).await;

        assert_eq!(view["status"], "VALIDATED", "{}: {view}", test_db.name);
        assert!(
            w.gitlab.calls(Endpoint::GetApprovals) >= 2,
            "{}: the Free body was read for each reviewer",
            test_db.name
        );
    }
}

/// Fails within `wait_for`'s 10 s, far inside the default 63 s deadline of
/// the merge step's polls.
async fn fails_at_once(w: &World, id: &str, step: &str) -> String {
    let view = wait_for(&w.app, id, |v| v["next"] == "CONTACT_TEAM").await;
    assert_eq!(
        (view["status"].as_str(), view["step"]["name"].as_str()),
        (Some("HANDLE_FAILED"), Some(step)),
        "{view}"
    );
    assert_eq!(w.gitlab.calls(Endpoint::Merge), 0);
    view["message"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn approvals_still_required_after_both_bots_approved_fail_the_step_at_once() {
    let db = sqlite_db().await;
    let w = world(&db.url, "").await;
    configure(&w, |s| {
        s.tier = Tier::Ee;
        s.approvals_required = 3;
    });
    let id = apply(&w.app).await;

    let message = fails_at_once(&w, &id, "HANDLE_MERGE_REFUSED").await;

    assert!(
        message.contains("still needs 1 approval(s) after every reviewer bot approved")
            && message.contains("All Members"),
        "{message}"
    );
    let mr = w.gitlab.merge_request(w.project, 1).unwrap();
    assert_eq!(mr.approved_by, ["rev-alice", "rev-bob"]);
}

#[tokio::test]
async fn reviewer_bots_no_rule_makes_eligible_fail_the_step_at_once_without_approving() {
    let db = sqlite_db().await;
    let w = world(&db.url, "").await;
    let human = w.gitlab.add_user("maintainer", "maintainer-token");
    configure(&w, |s| {
        s.tier = Tier::Ee;
        s.approvals_required = 1;
        s.eligible_approvers = Some(vec![human]);
    });
    let id = apply(&w.app).await;

    let message = fails_at_once(&w, &id, "HANDLE_APPROVE_FAILED").await;

    assert!(
        message.contains("reviewer bot 1 may not approve")
            && message.contains("1 approval(s) still required (rules left: Approvers)"),
        "{message}"
    );
    assert_eq!(
        w.gitlab.calls(Endpoint::Approve),
        0,
        "GitLab said no: no approve was sent to be refused"
    );
}

#[tokio::test]
async fn a_rule_only_the_second_bot_meets_lets_the_first_approve_after_it() {
    let db = sqlite_db().await;
    let w = world(&db.url, "").await;
    let bob = w.users[2];
    configure(&w, |s| {
        s.tier = Tier::Ee;
        s.approvals_required = 1;
        s.eligible_approvers = Some(vec![bob]);
    });
    let id = apply(&w.app).await;

    let view = settled(&w, &id).await;

    assert_eq!(view["status"], "VALIDATED", "{view}");
    let mr = w.gitlab.merge_request(w.project, 1).unwrap();
    assert_eq!(mr.approved_by, ["rev-bob", "rev-alice"]);
}
