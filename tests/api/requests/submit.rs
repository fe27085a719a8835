//! Submissions: accepted, refused while in progress, closed access, the
//! bounded hand-off to the workers, and close requests.

use std::sync::Arc;
use std::time::Duration;

use changegate::app::Parts;
use changegate::workflow::{StepFuture, Steps};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use super::{RecordingSteps, apply_body, count_rows, requester_app};
use crate::helpers::{REQUESTER_CONFIG, each_backend, spawn_app_with, sqlite_db};

#[tokio::test]
async fn an_accepted_application_is_recorded_and_handed_to_the_workers() {
    for test_db in each_backend().await {
        let steps = Arc::new(RecordingSteps::default());
        let parts = Parts {
            steps: Some(steps.clone()),
            ..Parts::default()
        };
        // The dispatcher hands a due operation to the workers again on
        // its next round (these steps leave it due): here it waits, so the
        // one hand-off seen is the submission's.
        let config = format!("{REQUESTER_CONFIG}[executor]\npoll_interval = \"1h\"\n");
        let app = spawn_app_with(&test_db.url, &config, parts).await;
        app.wait_until_ready().await;

        let response = app
            .post_as(
                "alice",
                "/api/v1/applications",
                &apply_body("demo.feature-flags"),
            )
            .await;
        assert_eq!(response.status(), 202, "{}", test_db.name);
        assert!(response.headers().get("idempotent-replayed").is_none());
        let body: Value = response.json().await.unwrap();
        assert_eq!(
            (body["code"].as_str(), body["status"].as_str()),
            (Some("ACCEPTED"), Some("APPROVAL_SENDING"))
        );
        let id = body["operationId"].as_str().unwrap().to_owned();

        for _ in 0..100 {
            if steps.0.lock().unwrap().contains(&id) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(*steps.0.lock().unwrap(), [id.as_str()], "{}", test_db.name);

        let status: Value = app
            .get_as("alice", &format!("/api/v1/operations/{id}"))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(status["subjectId"], "alice");
        assert_eq!(status["status"], "APPROVAL_SENDING");
        assert_eq!(status["step"]["name"], "ACCEPTED");
        assert_eq!(status["next"], "WAIT");

        let again = app
            .post_as(
                "alice",
                "/api/v1/applications",
                &apply_body("demo.feature-flags"),
            )
            .await;
        assert_eq!(again.status(), 409);
        let body: Value = again.json().await.unwrap();
        assert_eq!(body["code"], "IN_PROGRESS");
        assert_eq!(body["operationId"], id.as_str(), "the request in the way");
        let message = body["message"].as_str().unwrap();
        assert!(
            message.contains(&id)
                && message.contains("APPROVAL_SENDING")
                && message.contains("wait"),
            "{message}"
        );
        assert_eq!(
            count_rows(&test_db.db, "operation").await,
            1,
            "{}",
            test_db.name
        );
    }
}

#[tokio::test]
async fn a_closed_service_refuses_submissions_but_still_answers_reads() {
    let db = sqlite_db().await;
    let app = requester_app(&db.url, "").await;
    let closed = crate::helpers::spawn_app(
        &db.url,
        &REQUESTER_CONFIG.replace("mode = \"OPEN\"", "mode = \"CLOSED\""),
    )
    .await;
    closed.wait_until_ready().await;
    let response = closed
        .post_as(
            "alice",
            "/api/v1/applications",
            &apply_body("demo.feature-flags"),
        )
        .await;
    assert_eq!(response.status(), 503);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "SERVICE_CLOSED");
    let access: Value = closed
        .get_as("alice", "/api/v1/access")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        (access["mode"].as_str(), access["open"].as_bool()),
        (Some("CLOSED"), Some(false))
    );
    let open: Value = app
        .get_as("alice", "/api/v1/access")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(open["open"], true);
    assert_eq!(count_rows(&db.db, "operation").await, 0);
}

/// Steps that hold every worker until released.
struct BlockedSteps(Arc<Semaphore>);

impl Steps for BlockedSteps {
    fn run(&self, _: String) -> StepFuture {
        let gate = self.0.clone();
        Box::pin(async move {
            let _permit = gate.acquire().await;
            None
        })
    }
}

#[tokio::test]
async fn a_full_pool_is_a_visible_busy_failure_that_may_be_applied_for_again() {
    for test_db in each_backend().await {
        let gate = Arc::new(Semaphore::new(0));
        let parts = Parts {
            steps: Some(Arc::new(BlockedSteps(gate.clone()))),
            ..Parts::default()
        };
        let config = format!(
            "{REQUESTER_CONFIG}[executor]\nworkers = 1\nqueue_capacity = 1\n[rate_limit]\napply = 0\n"
        );
        let app = spawn_app_with(&test_db.url, &config, parts).await;
        app.wait_until_ready().await;

        let mut answers = Vec::new();
        for subject in ["s1", "s2", "s3", "s4"] {
            let body =
                json!({ "targetKey": "team.access", "subjectId": subject, "reason": "load" });
            let answer: Value = app
                .post_as("alice", "/api/v1/applications", &body)
                .await
                .json()
                .await
                .unwrap();
            answers.push(answer);
            // Let the single worker pick up the first one before the queue fills.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let busy: Vec<&Value> = answers
            .iter()
            .filter(|a| a["status"] == "BUSY_REJECTED")
            .collect();
        assert_eq!(busy.len(), 2, "{}: {answers:?}", test_db.name);
        assert!(
            busy.iter()
                .all(|a| a["code"] == "ACCEPTED" && a["next"] == "REAPPLY")
        );

        let id = busy[0]["operationId"].as_str().unwrap();
        let status: Value = app
            .get_as("alice", &format!("/api/v1/operations/{id}"))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(
            (status["status"].as_str(), status["next"].as_str()),
            (Some("BUSY_REJECTED"), Some("REAPPLY"))
        );
        assert_eq!(status["step"]["name"], "BUSY_REJECTED");

        gate.add_permits(10);
        let subject = status["subjectId"].as_str().unwrap();
        let retry = json!({ "targetKey": "team.access", "subjectId": subject, "reason": "again" });
        let answer = app.post_as("alice", "/api/v1/applications", &retry).await;
        assert_eq!(answer.status(), 202, "{}", test_db.name);
        let answer: Value = answer.json().await.unwrap();
        assert_eq!(answer["status"], "APPROVAL_SENDING");
    }
}

#[tokio::test]
async fn close_requires_a_live_binding() {
    let db = sqlite_db().await;
    let app = requester_app(&db.url, "").await;
    let response = app
        .post_as(
            "alice",
            "/api/v1/bindings/demo.feature-flags/close",
            &json!({ "reason": "done" }),
        )
        .await;
    assert_eq!(response.status(), 404);
    app.post_as(
        "alice",
        "/api/v1/applications",
        &apply_body("demo.feature-flags"),
    )
    .await;
    let response = app
        .post_as(
            "alice",
            "/api/v1/bindings/demo.feature-flags/close",
            &json!({ "reason": "done" }),
        )
        .await;
    assert_eq!(
        response.status(),
        409,
        "a binding still in approval cannot be closed yet"
    );
}

#[tokio::test]
async fn subjects_and_targets_are_checked_against_the_catalog_and_the_caller() {
    let db = sqlite_db().await;
    let app = requester_app(&db.url, "[rate_limit]\napply = 0\n").await;
    let someone_else =
        json!({ "targetKey": "demo.feature-flags", "subjectId": "bob", "reason": "x" });
    assert_eq!(
        app.post_as("alice", "/api/v1/applications", &someone_else)
            .await
            .status(),
        403
    );
    assert_eq!(
        app.post_as("admin", "/api/v1/applications", &someone_else)
            .await
            .status(),
        202,
        "operators may"
    );
    let restricted = app
        .post_as("alice", "/api/v1/applications", &apply_body("restricted"))
        .await;
    assert_eq!(restricted.status(), 403);
    let unknown = app
        .post_as(
            "alice",
            "/api/v1/applications",
            &apply_body("no.such.target"),
        )
        .await;
    assert_eq!(unknown.status(), 400);
    let with_params = json!({ "targetKey": "team.access", "subjectId": "svc-1", "params": {"level": "2"}, "reason": "x" });
    assert_eq!(
        app.post_as("alice", "/api/v1/applications", &with_params)
            .await
            .status(),
        202
    );
    let bad_param = json!({ "targetKey": "team.access", "subjectId": "svc-2", "params": {"root": true}, "reason": "x" });
    let answer: Value = app
        .post_as("alice", "/api/v1/applications", &bad_param)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(answer["code"], "INVALID_ARGUMENT");
    assert!(
        answer["message"].as_str().unwrap().contains("params.root"),
        "{answer}"
    );
}

#[tokio::test]
async fn only_the_owner_or_an_operator_may_close_a_live_binding() {
    let db = sqlite_db().await;
    let app = requester_app(&db.url, "[rate_limit]\nclose = 0\n").await;
    let body = json!({ "targetKey": "team.access", "subjectId": "svc-9", "reason": "x" });
    let answer: Value = app
        .post_as("alice", "/api/v1/applications", &body)
        .await
        .json()
        .await
        .unwrap();
    let id = answer["operationId"].as_str().unwrap();
    let mut version = 1;
    for (step, status) in crate::store::TO_MERGED {
        let change = crate::store::change(*step);
        version = changegate::store::transition(&db.db, id, version, Some(*status), change)
            .await
            .unwrap()
            .operation_version;
    }
    let close = json!({ "subjectId": "svc-9", "reason": "done" });
    let mallory = app
        .post_as("mallory", "/api/v1/bindings/team.access/close", &close)
        .await;
    assert_eq!(
        mallory.status(),
        404,
        "someone else's binding is not even shown to exist"
    );
    let owner = app
        .post_as("alice", "/api/v1/bindings/team.access/close", &close)
        .await;
    assert_eq!(owner.status(), 202);
    let owner: Value = owner.json().await.unwrap();
    assert_eq!(owner["status"], "CLOSING");
    let listed: Value = app
        .get_as("alice", "/api/v1/me/bindings")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(listed["items"][0]["status"], "CLOSING");
}
