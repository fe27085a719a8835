//! The workflow's approval step against the approval-system simulator: the
//! request goes out, the signed decision comes back, and each failure of the
//! approval system lands in its own state with its own advice.

use std::time::{Duration, Instant};

use changegate_sim::approval::{
    ApprovalFault, ApprovalFaultKind, ApprovalSim, ApprovalSimHandle, ApprovalSimOptions, Decision,
    DecisionPolicy,
};
use changegate_sim::callback::generate_secret;
use serde_json::Value;

use crate::helpers::{REQUESTER_CONFIG, TestApp, each_backend, spawn_app};
use crate::requests::apply_body;

pub async fn approval_sim(policy: DecisionPolicy) -> ApprovalSimHandle {
    ApprovalSim::start(ApprovalSimOptions {
        secret: generate_secret(),
        policy,
        lost_response_hold: Duration::from_secs(3),
        ..ApprovalSimOptions::default()
    })
    .await
    .unwrap()
}

/// changegate wired to `sim` over HTTP, and `sim` calling changegate back.
async fn wired_app(db_url: &str, sim: &ApprovalSimHandle, timeout: &str) -> TestApp {
    let config = format!(
        "{REQUESTER_CONFIG}[executor]\npoll_interval = \"100ms\"\n[batch]\ninterval = \"200ms\"\n[approval]\nprovider = \"http\"\nurl = \"{}/approvals\"\ncallback_secret = {:?}\nretries = 2\ntimeout = \"{timeout}\"\n",
        sim.base_url(),
        sim.secret()
    );
    let app = spawn_app(db_url, &config).await;
    app.wait_until_ready().await;
    sim.set_callback_url(format!("{}/callbacks/approval", app.address));
    app
}

/// Polls alice's operation until `done` holds for its status view.
pub async fn wait_for(app: &TestApp, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    wait_for_as(app, "alice", id, done).await
}

/// Polls the operation, as `who` sees it, until `done` holds for its status view.
pub async fn wait_for_as(
    app: &TestApp,
    who: &str,
    id: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let view: Value = app
            .get_as(who, &format!("/api/v1/operations/{id}"))
            .await
            .json()
            .await
            .unwrap();
        if done(&view) {
            return view;
        }
        assert!(
            Instant::now() < deadline,
            "gave up waiting; last seen {view}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

pub async fn apply(app: &TestApp) -> String {
    apply_as(app, "alice").await
}

/// `who` applies for itself on `demo.feature-flags`.
pub async fn apply_as(app: &TestApp, who: &str) -> String {
    let answer: Value = app
        .post_as(
            who,
            "/api/v1/applications",
            &apply_body("demo.feature-flags"),
        )
        .await
        .json()
        .await
        .unwrap();
    answer["operationId"].as_str().unwrap().to_owned()
}

/// Someone pushes to `main`, so an open MR is behind its target.
pub fn move_main_on(w: &end_to_end::World) {
    w.gitlab
        .push(
            w.project,
            w.users[0],
            "main",
            &[("docs/other.md", Some("moved on\n"))],
        )
        .unwrap();
}

/// Semi-linear history (`rebase_merge`) on the world's project, so an MR
/// whose target moved on must be rebased before it merges. The simulator
/// merges with merge commits by default, as GitLab does, and never asks for
/// a rebase then.
pub fn use_semi_linear_history(w: &end_to_end::World) {
    w.gitlab
        .update_settings(w.project, |s| {
            s.merge_method = changegate_sim::gitlab::MergeMethod::RebaseMerge;
        })
        .unwrap();
}

/// Alice asks to remove her `demo.feature-flags` binding; the removal's id.
pub async fn close(app: &TestApp) -> String {
    let close = serde_json::json!({ "reason": "no longer needed" });
    let answer: Value = app
        .post_as("alice", "/api/v1/bindings/demo.feature-flags/close", &close)
        .await
        .json()
        .await
        .unwrap();
    answer["operationId"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn an_approved_request_moves_on_to_its_merge_request() {
    for test_db in each_backend().await {
        let sim = approval_sim(DecisionPolicy::Auto {
            result: Decision::Approved,
            delay: Duration::from_millis(50),
        })
        .await;
        let app = wired_app(&test_db.url, &sim, "5s").await;
        let id = apply(&app).await;
        // Approved, the request moves on to its MR, which cannot be written
        // here: no GitLab is configured, a mistake the team has to fix.
        let view = wait_for(&app, &id, |v| v["status"] == "CREATE_FAILED").await;
        assert_eq!(view["step"]["name"], "CREATE_REFUSED", "{}", test_db.name);
        assert_eq!(view["next"], "CONTACT_TEAM");
        assert!(
            view["message"]
                .as_str()
                .unwrap()
                .contains("gitlab.bot_token"),
            "{view}"
        );
        let answers: Vec<Value> = sim.callbacks().into_iter().map(|c| c.answer).collect();
        assert_eq!(
            answers,
            [serde_json::json!({ "code": "OK" })],
            "{}",
            test_db.name
        );
        let requests = sim.requests();
        assert_eq!(requests.len(), 1, "{}", test_db.name);
        assert_eq!(requests[0].body["operationId"], id.as_str());
        assert_eq!(requests[0].body["requestedBy"], "alice");
    }
}

#[tokio::test]
async fn a_rejection_can_be_applied_for_again() {
    let db = crate::helpers::sqlite_db().await;
    let sim = approval_sim(DecisionPolicy::Auto {
        result: Decision::Rejected,
        delay: Duration::ZERO,
    })
    .await;
    let app = wired_app(&db.url, &sim, "5s").await;
    let id = apply(&app).await;
    let view = wait_for(&app, &id, |v| v["status"] == "REJECTED").await;
    assert_eq!(view["next"], "REAPPLY");
}

#[tokio::test]
async fn a_refusing_or_failing_approval_system_means_contact_the_team() {
    let db = crate::helpers::sqlite_db().await;
    let sim = approval_sim(DecisionPolicy::Manual).await;
    let app = wired_app(&db.url, &sim, "5s").await;

    sim.inject(ApprovalFault::new(ApprovalFaultKind::Status(400)).times(1));
    let refused = apply(&app).await;
    let view = wait_for(&app, &refused, |v| v["status"] == "CREATE_FAILED").await;
    assert_eq!(
        (view["step"]["name"].as_str(), view["next"].as_str()),
        (Some("APPROVAL_SEND_FAILED"), Some("CONTACT_TEAM"))
    );
    assert!(view["message"].as_str().unwrap().contains("400"), "{view}");

    // Three 503s outlast one attempt and two retries.
    sim.inject(ApprovalFault::new(ApprovalFaultKind::Status(503)).times(3));
    let body =
        serde_json::json!({ "targetKey": "team.access", "subjectId": "svc-1", "reason": "x" });
    let answer: Value = app
        .post_as("alice", "/api/v1/applications", &body)
        .await
        .json()
        .await
        .unwrap();
    let view = wait_for(&app, answer["operationId"].as_str().unwrap(), |v| {
        v["status"] == "CREATE_FAILED"
    })
    .await;
    assert_eq!(view["next"], "CONTACT_TEAM");

    // Two 503s are absorbed by the retries.
    sim.inject(ApprovalFault::new(ApprovalFaultKind::Status(503)).times(2));
    let body =
        serde_json::json!({ "targetKey": "team.access", "subjectId": "svc-2", "reason": "x" });
    let answer: Value = app
        .post_as("alice", "/api/v1/applications", &body)
        .await
        .json()
        .await
        .unwrap();
    let view = wait_for(&app, answer["operationId"].as_str().unwrap(), |v| {
        v["status"] == "APPROVAL_SENT"
    })
    .await;
    assert_eq!(view["next"], "WAIT");
}

#[tokio::test]
async fn a_lost_answer_waits_and_the_late_decision_still_counts() {
    let db = crate::helpers::sqlite_db().await;
    let sim = approval_sim(DecisionPolicy::Manual).await;
    let app = wired_app(&db.url, &sim, "300ms").await;
    sim.inject(ApprovalFault::new(ApprovalFaultKind::LostResponse).times(1));
    let id = apply(&app).await;
    let view = wait_for(&app, &id, |v| v["step"]["name"] == "APPROVAL_SEND_UNKNOWN").await;
    assert_eq!(
        (view["status"].as_str(), view["next"].as_str()),
        (Some("APPROVAL_SENDING"), Some("WAIT"))
    );

    let operation = uuid::Uuid::parse_str(&id).unwrap();
    let delivered = sim.decide(operation, Decision::Approved).await.unwrap();
    assert_eq!(
        delivered[0].answer,
        serde_json::json!({ "code": "OK" }),
        "the late decision counts"
    );
    wait_for(&app, &id, |v| v["status"] != "APPROVAL_SENDING").await;
}

#[tokio::test]
async fn with_the_builtin_provider_the_request_waits_for_an_operator() {
    let db = crate::helpers::sqlite_db().await;
    let app = spawn_app(&db.url, REQUESTER_CONFIG).await;
    app.wait_until_ready().await;
    let id = apply(&app).await;
    let view = wait_for(&app, &id, |v| v["status"] == "APPROVAL_SENT").await;
    assert_eq!(view["message"], "waiting for an operator's decision");
}

mod batch_numbers;
mod batched;
mod deploy_projects;
mod drift;
mod drift_shared;
pub(crate) mod end_to_end;
mod failure_classes;
mod gitlab_faults;
mod gitlab_truth;
mod https;
mod lost_batch;
mod merge_methods;
mod pipeline_retry;
mod preview;
mod project_settings;
mod queue;
mod rate_limits;
mod reported;
mod repository_files;
mod revert;
mod scheduling;
pub(crate) mod soak;
mod timeline_events;
mod train;
mod train_race;
mod urgent;
mod withdrawn;
