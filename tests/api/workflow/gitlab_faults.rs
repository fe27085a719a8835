//! The MR steps against GitLab's awkward answers, with the GitLab simulator:
//! a target that moved on (rebase, or a rebase conflict), merge refusals, a
//! lost approve answer, a reviewer without permission, a pipeline that never
//! ends, an MR merged by someone else, the checklist extension, and storms
//! of 429/5xx answers.

use changegate::clients::health::System;
use std::time::Duration;

use changegate::clients::gitlab::{GitLabClient, RetryPolicy};
use changegate_sim::approval::{Decision, DecisionPolicy};
use changegate_sim::gitlab::{
    AccessLevel, ChecklistItem, Endpoint, Fault, FaultKind, GitLabSimOptions, PipelineOutcome,
};
use secrecy::SecretString;
use serde_json::{Value, json};
use uuid::Uuid;

use super::end_to_end::{World, WorldOptions, world_with};
use super::{apply, move_main_on, use_semi_linear_history, wait_for};
use crate::helpers::sqlite_db;

/// MR first, with approvals held until the test decides them: the MR is
/// open and its pipeline passed while the request waits for approval.
pub(super) fn mr_first_held() -> WorldOptions {
    WorldOptions {
        extra: "[workflow]\nflow_order = \"mr_first\"\n".to_owned(),
        policy: DecisionPolicy::Manual,
        ..WorldOptions::default()
    }
}

pub(super) async fn waiting_for_approval(w: &World, id: &str) -> i64 {
    let view = wait_for(&w.app, id, |v| v["status"] == "APPROVAL_SENT").await;
    view["mergeRequest"]["iid"].as_i64().unwrap()
}

pub(super) async fn approve(w: &World, id: &str) {
    w.approval
        .decide(Uuid::parse_str(id).unwrap(), Decision::Approved)
        .await
        .unwrap();
}

pub(super) async fn settled(w: &World, id: &str) -> Value {
    wait_for(&w.app, id, |v| {
        v["status"] == "VALIDATED" || v["next"] == "CONTACT_TEAM"
    })
    .await
}

/// `(step name, message)` of every recorded step, as `user` reads them.
pub(super) async fn timeline(w: &World, user: &str, id: &str) -> Vec<(String, String)> {
    let timeline: Value = w
        .app
        .get_as(user, &format!("/api/v1/operations/{id}/timeline"))
        .await
        .json()
        .await
        .unwrap();
    timeline["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| {
            (
                entry["step"]["name"].as_str().unwrap().to_owned(),
                entry["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn approvers(w: &World, iid: i64) -> Vec<String> {
    let mut approvers = w
        .gitlab
        .merge_request(w.project, u64::try_from(iid).unwrap())
        .unwrap()
        .approved_by;
    approvers.sort();
    approvers
}

fn failed_with(view: &Value, step: &str) {
    assert_eq!(
        (
            view["status"].as_str(),
            view["step"]["name"].as_str(),
            view["next"].as_str()
        ),
        (Some("HANDLE_FAILED"), Some(step), Some("CONTACT_TEAM")),
        "{view}"
    );
}

#[tokio::test]
async fn an_mr_behind_its_target_is_rebased_then_merged() {
    let db = sqlite_db().await;
    let w = world_with(&db.url, mr_first_held()).await;
    use_semi_linear_history(&w);
    let id = apply(&w.app).await;
    waiting_for_approval(&w, &id).await;
    move_main_on(&w);
    approve(&w, &id).await;
    let view = settled(&w, &id).await;
    assert_eq!(view["status"], "VALIDATED", "{view}");
    assert_eq!(w.gitlab.calls(Endpoint::Rebase), 1);
    let steps = timeline(&w, "alice", &id).await;
    assert!(
        steps
            .iter()
            .any(|(_, message)| message.contains("is behind its target branch: rebasing it")),
        "the rebase is on the timeline: {steps:?}"
    );
}

#[tokio::test]
async fn a_rebase_whose_answer_was_lost_is_waited_for_not_failed() {
    let db = sqlite_db().await;
    let w = world_with(
        &db.url,
        WorldOptions {
            gitlab_keys: "timeout = \"500ms\"".to_owned(),
            gitlab: GitLabSimOptions {
                lost_response_hold: Duration::from_secs(2),
                ..GitLabSimOptions::default()
            },
            ..mr_first_held()
        },
    )
    .await;
    use_semi_linear_history(&w);
    let id = apply(&w.app).await;
    waiting_for_approval(&w, &id).await;
    move_main_on(&w);
    // GitLab rebases; its answer never arrives.
    w.gitlab
        .inject(Fault::new(Endpoint::Rebase, FaultKind::LostResponse).times(1));
    approve(&w, &id).await;
    let view = settled(&w, &id).await;
    assert_eq!(view["status"], "VALIDATED", "{view}");
    assert_eq!(
        w.gitlab.calls(Endpoint::Rebase),
        1,
        "the rebase GitLab did is not asked for again"
    );
    let steps = timeline(&w, "alice", &id).await;
    assert!(
        steps
            .iter()
            .any(|(_, message)| message.contains("is behind its target branch: rebasing it")),
        "the unanswered rebase counts as started (its wait starts afresh): {steps:?}"
    );
}

#[tokio::test]
async fn a_rebase_conflict_is_its_own_failure_and_says_contact_the_team() {
    let db = sqlite_db().await;
    let w = world_with(&db.url, mr_first_held()).await;
    use_semi_linear_history(&w);
    let id = apply(&w.app).await;
    waiting_for_approval(&w, &id).await;
    move_main_on(&w);
    w.gitlab
        .inject(Fault::new(Endpoint::Rebase, FaultKind::RebaseConflict));
    approve(&w, &id).await;
    let view = settled(&w, &id).await;
    failed_with(&view, "HANDLE_REBASE_CONFLICT");
    assert!(
        view["message"].as_str().unwrap().contains("Rebase failed"),
        "{view}"
    );
}

#[tokio::test]
async fn a_refused_merge_is_tried_again_and_succeeds() {
    let db = sqlite_db().await;
    let w = world_with(&db.url, WorldOptions::default()).await;
    w.gitlab
        .inject(Fault::new(Endpoint::Merge, FaultKind::MergeRefused(406)).times(2));
    let id = apply(&w.app).await;
    let view = settled(&w, &id).await;
    assert_eq!(view["status"], "VALIDATED", "{view}");
    assert_eq!(
        w.gitlab.calls(Endpoint::Merge),
        3,
        "two refusals, then the merge"
    );
}

#[tokio::test]
async fn a_lost_approve_answer_is_not_an_approval_failure() {
    let db = sqlite_db().await;
    let w = world_with(
        &db.url,
        WorldOptions {
            gitlab_keys: "timeout = \"500ms\"".to_owned(),
            gitlab: GitLabSimOptions {
                lost_response_hold: Duration::from_secs(2),
                ..GitLabSimOptions::default()
            },
            ..WorldOptions::default()
        },
    )
    .await;
    w.gitlab
        .inject(Fault::new(Endpoint::Approve, FaultKind::LostResponse));
    let id = apply(&w.app).await;
    let view = settled(&w, &id).await;
    assert_eq!(view["status"], "VALIDATED", "{view}");
    let iid = view["mergeRequest"]["iid"].as_i64().unwrap();
    assert_eq!(approvers(&w, iid), ["rev-alice", "rev-bob"]);
    let approves = w
        .gitlab
        .requests()
        .iter()
        .filter(|r| r.endpoint == Endpoint::Approve)
        .count();
    assert_eq!(
        approves, 2,
        "the approval that got through is not sent again"
    );
}

#[tokio::test]
async fn a_reviewer_without_permission_fails_after_the_final_re_read() {
    let db = sqlite_db().await;
    let w = world_with(&db.url, WorldOptions::default()).await;
    w.gitlab
        .add_member(w.project, w.users[2], AccessLevel::Reporter)
        .unwrap();
    let id = apply(&w.app).await;
    let view = settled(&w, &id).await;
    failed_with(&view, "HANDLE_APPROVE_FAILED");
    let iid = view["mergeRequest"]["iid"].as_i64().unwrap();
    assert_eq!(approvers(&w, iid), ["rev-alice"]);
    let calls: Vec<Endpoint> = w
        .gitlab
        .requests()
        .iter()
        .map(|r| r.endpoint)
        .filter(|e| matches!(e, Endpoint::Approve | Endpoint::GetApprovals))
        .collect();
    assert_eq!(
        calls.last(),
        Some(&Endpoint::GetApprovals),
        "the approvers are read once more after the last refusal"
    );
    assert_eq!(w.gitlab.calls(Endpoint::Merge), 0);
}

#[tokio::test]
async fn a_pipeline_that_never_ends_waits_while_a_failed_one_says_contact_the_team() {
    let db = sqlite_db().await;
    let fast_deadline = "[workflow]\nshort_polls = 2\nshort_poll_interval = \"50ms\"\n\
                         long_polls = 2\nlong_poll_interval = \"50ms\"\n";
    let w = world_with(
        &db.url,
        WorldOptions {
            extra: fast_deadline.to_owned(),
            ..WorldOptions::default()
        },
    )
    .await;
    w.gitlab
        .script_pipelines(w.project, [PipelineOutcome::StuckRunning])
        .unwrap();
    let id = apply(&w.app).await;
    let view = wait_for(&w.app, &id, |v| v["step"]["name"] == "PIPELINE_PENDING").await;
    assert_eq!(
        (view["status"].as_str(), view["next"].as_str()),
        (Some("MR_CREATED"), Some("WAIT")),
        "{view}"
    );
    assert!(
        view["message"]
            .as_str()
            .unwrap()
            .contains("has not finished")
    );
}

#[tokio::test]
async fn an_mr_merged_by_someone_else_is_finished_without_approving_again() {
    let db = sqlite_db().await;
    let w = world_with(&db.url, mr_first_held()).await;
    let id = apply(&w.app).await;
    let iid = waiting_for_approval(&w, &id).await;
    let client = GitLabClient::new(
        crate::helpers::system_client(System::GitLab),
        w.gitlab.base_url(),
        Duration::from_secs(5),
        RetryPolicy::default(),
    );
    for token in ["alice-token", "bob-token"] {
        client
            .approve(&SecretString::from(token), "config/repo", iid)
            .await
            .unwrap();
    }
    let bot = SecretString::from("bot-token");
    let mr = client
        .merge_request(&bot, "config/repo", iid)
        .await
        .unwrap();
    client
        .merge(&bot, "config/repo", iid, &mr.sha.unwrap())
        .await
        .unwrap();

    approve(&w, &id).await;
    let view = settled(&w, &id).await;
    assert_eq!(view["status"], "VALIDATED", "{view}");
    assert_eq!(
        w.gitlab.calls(Endpoint::Approve),
        2,
        "only the outside approvals"
    );
    assert_eq!(w.gitlab.calls(Endpoint::Merge), 1, "only the outside merge");
}

fn require_checklist(w: &World, ids: &[&str]) {
    let items: Vec<ChecklistItem> = ids.iter().map(|id| ChecklistItem::new(*id, *id)).collect();
    w.gitlab
        .update_settings(w.project, |settings| {
            settings.approval_checklist_required = true;
            settings.approval_checklist = items;
        })
        .unwrap();
}

fn with_approve_impl(implementation: &str) -> WorldOptions {
    WorldOptions {
        gitlab_keys: format!("approve_impl = {implementation:?}"),
        ..WorldOptions::default()
    }
}

#[tokio::test]
async fn the_checklist_is_fetched_once_and_a_changed_one_heals_itself() {
    let db = sqlite_db().await;
    let w = world_with(&db.url, with_approve_impl("checklist")).await;
    require_checklist(&w, &["tests-pass"]);
    let first = apply(&w.app).await;
    assert_eq!(settled(&w, &first).await["status"], "VALIDATED");

    require_checklist(&w, &["tests-pass", "owner-informed"]);
    let answer: Value = w
        .app
        .post_as(
            "alice",
            "/api/v1/applications",
            &json!({
                "targetKey": "team.access",
                "subjectId": "carol",
                "params": { "level": "read" },
                "reason": "a second request, after the checklist changed"
            }),
        )
        .await
        .json()
        .await
        .unwrap();
    let second = answer["operationId"].as_str().unwrap();
    let view = wait_for(&w.app, second, |v| {
        v["status"] == "VALIDATED" || v["next"] == "CONTACT_TEAM"
    })
    .await;
    assert_eq!(view["status"], "VALIDATED", "{view}");
    assert_eq!(
        w.gitlab.calls(Endpoint::GetApprovalChecklist),
        1,
        "cached per project; the 422 carried the new checklist"
    );
    let mismatches = w
        .gitlab
        .requests()
        .iter()
        .filter(|r| r.endpoint == Endpoint::Approve && r.status == 422)
        .count();
    assert_eq!(mismatches, 1, "healed once, then approved");
}

#[tokio::test]
async fn both_approve_implementations_report_gitlabs_real_status() {
    let db = sqlite_db().await;
    // A checklist the standard approve does not send: 422.
    let w = world_with(&db.url, with_approve_impl("standard")).await;
    require_checklist(&w, &["tests-pass"]);
    let id = apply(&w.app).await;
    let view = settled(&w, &id).await;
    failed_with(&view, "HANDLE_APPROVE_FAILED");
    assert!(view["message"].as_str().unwrap().contains("422"), "{view}");

    // The checklist endpoint down: the merge step polls on (the request
    // says WAIT), and lands once it is back.
    let db = sqlite_db().await;
    let w = world_with(&db.url, with_approve_impl("checklist")).await;
    require_checklist(&w, &["tests-pass"]);
    w.gitlab
        .inject(Fault::new(Endpoint::GetApprovalChecklist, FaultKind::Status(503)).times(1000));
    let id = apply(&w.app).await;
    let merging = wait_for(&w.app, &id, |v| v["status"] == "MERGING").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let waiting = wait_for(&w.app, &id, |_| true).await;
    assert_eq!(
        (waiting["status"].as_str(), waiting["next"].as_str()),
        (Some("MERGING"), Some("WAIT")),
        "{merging} then {waiting}"
    );
    w.gitlab.clear_faults();
    let view = settled(&w, &id).await;
    assert_eq!(view["status"], "VALIDATED", "{view}");

    // Down for good: its 503 is the failure once the step's deadline (two
    // polls here) has passed.
    let db = sqlite_db().await;
    let w = world_with(
        &db.url,
        WorldOptions {
            extra: "[workflow]\nshort_polls = 1\nshort_poll_interval = \"50ms\"\n\
                    long_polls = 1\nlong_poll_interval = \"50ms\"\n"
                .to_owned(),
            ..with_approve_impl("checklist")
        },
    )
    .await;
    require_checklist(&w, &["tests-pass"]);
    w.gitlab
        .inject(Fault::new(Endpoint::GetApprovalChecklist, FaultKind::Status(503)).times(1000));
    let id = apply(&w.app).await;
    let view = settled(&w, &id).await;
    failed_with(&view, "HANDLE_APPROVE_FAILED");
    assert!(view["message"].as_str().unwrap().contains("503"), "{view}");
    let checklist_reads = w.gitlab.calls(Endpoint::GetApprovalChecklist);
    assert!(
        checklist_reads > 4,
        "more than one round's reads of the checklist before failing: {checklist_reads}"
    );
}

#[tokio::test]
async fn storms_of_429_and_5xx_answers_delay_but_do_not_fail_a_request() {
    let db = sqlite_db().await;
    let w = world_with(&db.url, WorldOptions::default()).await;
    w.gitlab.inject(
        Fault::any(FaultKind::Status(503))
            .probability(0.25)
            .times(1000),
    );
    w.gitlab.inject(
        Fault::any(FaultKind::RateLimited {
            retry_after: Duration::ZERO,
        })
        .probability(0.25)
        .times(1000),
    );
    let id = apply(&w.app).await;
    let view = settled(&w, &id).await;
    assert_eq!(view["status"], "VALIDATED", "{view}");
    let faulted = w
        .gitlab
        .requests()
        .iter()
        .filter(|r| matches!(r.status, 429 | 503))
        .count();
    assert!(
        faulted >= 5,
        "the storm happened: {faulted} faulted answers"
    );
}
