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

async fn approval_sim(policy: DecisionPolicy) -> ApprovalSimHandle {
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
        "{REQUESTER_CONFIG}[approval]\nprovider = \"http\"\nurl = \"{}/approvals\"\ncallback_secret = {:?}\nretries = 2\ntimeout = \"{timeout}\"\n",
        sim.base_url(),
        sim.secret()
    );
    let app = spawn_app(db_url, &config).await;
    app.wait_until_ready().await;
    sim.set_callback_url(format!("{}/callbacks/approval", app.address));
    app
}

/// Polls the operation until `done` holds for its status view.
async fn wait_for(app: &TestApp, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let view: Value = app
            .get_as("alice", &format!("/api/v1/operations/{id}"))
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

async fn apply(app: &TestApp) -> String {
    let answer: Value = app
        .post_as(
            "alice",
            "/api/v1/applications",
            &apply_body("demo.feature-flags"),
        )
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
        assert_eq!(requests.len(), 1);
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

mod end_to_end {
    //! The whole flow against all three simulators: apply → approval →
    //! branch, commit, MR → pipeline → two reviewer approvals → merge →
    //! deploy callback → VALIDATED.

    use changegate_sim::deploy::{DeploySim, DeploySimHandle, DeploySimOptions};
    use changegate_sim::gitlab::{
        AccessLevel, GitLabSim, GitLabSimHandle, GitLabSimOptions, PipelineOutcome, ProjectId,
    };

    use super::*;

    struct World {
        gitlab: GitLabSimHandle,
        project: ProjectId,
        approval: ApprovalSimHandle,
        deploy: DeploySimHandle,
        app: TestApp,
    }

    async fn world(db_url: &str, extra: &str) -> World {
        let gitlab = GitLabSim::start(GitLabSimOptions::default()).await.unwrap();
        let project = gitlab.create_project("config/repo");
        for (name, token) in [
            ("change-bot", "bot-token"),
            ("rev-alice", "alice-token"),
            ("rev-bob", "bob-token"),
        ] {
            let user = gitlab.add_user(name, token);
            gitlab
                .add_member(project, user, AccessLevel::Developer)
                .unwrap();
        }
        let approval = approval_sim(DecisionPolicy::Auto {
            result: Decision::Approved,
            delay: Duration::ZERO,
        })
        .await;
        let deploy = DeploySim::start(
            gitlab.observer(),
            DeploySimOptions {
                secret: generate_secret(),
                ..DeploySimOptions::default()
            },
        )
        .await
        .unwrap();
        let config = format!(
            "{REQUESTER_CONFIG}\
             [gitlab]\nbase_url = {:?}\nproject = \"config/repo\"\nbot_token = \"bot-token\"\nreviewer_tokens = [\"alice-token\", \"bob-token\"]\n\
             [approval]\nprovider = \"http\"\nurl = \"{}/approvals\"\ncallback_secret = {:?}\n\
             [deploy]\ncallback_secret = {:?}\n",
            gitlab.base_url(),
            approval.base_url(),
            approval.secret(),
            deploy.secret(),
        ) + extra;
        let app = spawn_app(db_url, &config).await;
        app.wait_until_ready().await;
        approval.set_callback_url(format!("{}/callbacks/approval", app.address));
        deploy.set_callback_url(format!("{}/callbacks/deploy", app.address));
        World {
            gitlab,
            project,
            approval,
            deploy,
            app,
        }
    }

    #[tokio::test]
    async fn a_request_goes_all_the_way_to_validated() {
        for test_db in each_backend().await {
            let w = world(&test_db.url, "").await;
            let id = apply(&w.app).await;
            let view = wait_for(&w.app, &id, |v| {
                v["status"] == "VALIDATED" || v["next"] == "CONTACT_TEAM"
            })
            .await;
            assert_eq!(
                (view["status"].as_str(), view["step"]["name"].as_str()),
                (Some("VALIDATED"), Some("DEPLOY_CONFIRMED")),
                "{}: {view}",
                test_db.name
            );
            assert_eq!(view["next"], "NONE");
            let iid = view["mergeRequest"]["iid"].as_i64().unwrap();
            let mr = w
                .gitlab
                .merge_request(w.project, u64::try_from(iid).unwrap())
                .unwrap();
            assert_eq!(format!("{:?}", mr.state), "Merged", "{mr:?}");
            let file = w
                .gitlab
                .file(w.project, "main", "bindings/demo.feature-flags/alice.json")
                .unwrap();
            assert!(
                file.contains(&format!("\"operationId\": \"{id}\"")),
                "{file}"
            );
            assert!(file.ends_with("}\n"));
            assert_eq!(w.approval.requests().len(), 1);
            drop(w.deploy);
        }
    }

    #[tokio::test]
    async fn a_live_binding_can_be_closed_and_its_file_is_deleted() {
        let db = crate::helpers::sqlite_db().await;
        let w = world(&db.url, "").await;
        let id = apply(&w.app).await;
        wait_for(&w.app, &id, |v| v["status"] == "VALIDATED").await;
        let path = "bindings/demo.feature-flags/alice.json";
        assert!(w.gitlab.file(w.project, "main", path).is_some());

        let close = serde_json::json!({ "reason": "no longer needed" });
        let answer: Value = w
            .app
            .post_as("alice", "/api/v1/bindings/demo.feature-flags/close", &close)
            .await
            .json()
            .await
            .unwrap();
        let close_id = answer["operationId"].as_str().unwrap().to_owned();
        let view = wait_for(&w.app, &close_id, |v| {
            v["status"] == "CLOSED" || v["next"] == "CONTACT_TEAM"
        })
        .await;
        assert_eq!(
            (
                view["status"].as_str(),
                view["step"]["name"].as_str(),
                view["next"].as_str()
            ),
            (Some("CLOSED"), Some("CLOSED"), Some("REAPPLY")),
            "{view}"
        );
        assert!(
            w.gitlab.file(w.project, "main", path).is_none(),
            "the binding's file is deleted"
        );
        // And the relation can be applied for again.
        assert_eq!(
            w.app
                .post_as(
                    "alice",
                    "/api/v1/applications",
                    &apply_body("demo.feature-flags")
                )
                .await
                .status(),
            202
        );
    }

    #[tokio::test]
    async fn an_mr_first_request_gets_its_mr_before_approval_and_reaches_validated() {
        let db = crate::helpers::sqlite_db().await;
        let w = world(&db.url, "[workflow]\nflow_order = \"mr_first\"\n").await;
        let id = apply(&w.app).await;
        let view = wait_for(&w.app, &id, |v| {
            v["status"] == "VALIDATED" || v["next"] == "CONTACT_TEAM"
        })
        .await;
        assert_eq!(view["status"], "VALIDATED", "{view}");
        let requests = w.approval.requests();
        assert_eq!(requests.len(), 1);
        assert_eq!(
            requests[0].body["ext"]["mrId"], view["mergeRequest"]["iid"],
            "the approval carries the MR"
        );
    }

    #[tokio::test]
    async fn a_failed_pipeline_stops_the_request_with_contact_the_team() {
        let db = crate::helpers::sqlite_db().await;
        let w = world(&db.url, "").await;
        w.gitlab
            .script_pipelines(w.project, [PipelineOutcome::Failed])
            .unwrap();
        let id = apply(&w.app).await;
        let view = wait_for(&w.app, &id, |v| v["status"] == "CREATE_FAILED").await;
        assert_eq!(
            (view["step"]["name"].as_str(), view["next"].as_str()),
            (Some("CREATE_PIPELINE_FAILED"), Some("CONTACT_TEAM"))
        );
    }
}
