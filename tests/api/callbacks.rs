//! Signed callbacks from the approval system and the deploy pipeline:
//! verification, dedupe by callback id, the ownership + awaiting guard, and
//! deploy confirmation through flip-once.

use changegate::db::Db;
use changegate::domain::{BindingStatus, StepStatus};
use changegate::signature::{WebhookSecret, sign};
use changegate::store;
use serde_json::{Value, json};

use crate::helpers::{TestApp, each_backend, sqlite_db};
use crate::requests::{apply_body, requester_app};
use crate::store::{TO_MERGED, change};

const APPROVAL_SECRET: &str = "whsec_Y2hhbmdlZ2F0ZS10ZXN0LWFwcHJvdmFsLXNlY3JldCE=";
const DEPLOY_SECRET: &str = "whsec_Y2hhbmdlZ2F0ZS10ZXN0LWRlcGxveS1zZWNyZXQhISE=";

fn secrets() -> String {
    format!(
        "[approval]\ncallback_secret = {APPROVAL_SECRET:?}\n[deploy]\ncallback_secret = {DEPLOY_SECRET:?}\n"
    )
}

/// POSTs `body` signed with `secret` at `timestamp` (default now).
pub async fn post_signed(
    app: &TestApp,
    path: &str,
    secret: &str,
    body: &Value,
    timestamp: Option<i64>,
) -> (u16, Value) {
    let bytes = body.to_string();
    let timestamp = timestamp.unwrap_or_else(|| chrono::Utc::now().timestamp());
    let id = format!("msg_{}", uuid::Uuid::new_v4().simple());
    let signature = sign(
        &WebhookSecret::parse(secret).unwrap(),
        &id,
        timestamp,
        bytes.as_bytes(),
    );
    let response = app
        .client
        .post(format!("{}{path}", app.address))
        .header("content-type", "application/json")
        .header("webhook-id", id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .body(bytes)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

fn decision(callback_id: &str, operation_id: &str, result: &str) -> Value {
    json!({ "callbackId": callback_id, "operationId": operation_id, "result": result })
}

async fn applied(app: &TestApp, user: &str, target_body: &Value) -> String {
    let answer: Value = app
        .post_as(user, "/api/v1/applications", target_body)
        .await
        .json()
        .await
        .unwrap();
    answer["operationId"].as_str().unwrap().to_owned()
}

async fn status_of(app: &TestApp, user: &str, operation_id: &str) -> Value {
    app.get_as(user, &format!("/api/v1/operations/{operation_id}"))
        .await
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn an_approval_applies_once_and_later_callbacks_are_stale_or_duplicate() {
    for test_db in each_backend().await {
        let app = requester_app(&test_db.url, &secrets()).await;
        let id = applied(&app, "alice", &apply_body("demo.feature-flags")).await;

        // Arrives while the binding is still APPROVAL_SENDING: accepted.
        let first = post_signed(
            &app,
            "/callbacks/approval",
            APPROVAL_SECRET,
            &decision("cb-1", &id, "APPROVED"),
            None,
        )
        .await;
        assert_eq!(first, (200, json!({ "code": "OK" })), "{}", test_db.name);
        let status = status_of(&app, "alice", &id).await;
        // Approved: it waits for the next merge round (batch.enabled).
        assert_eq!(status["status"], "MR_CREATING", "{status}");
        assert!(
            matches!(
                status["step"]["name"].as_str(),
                Some("QUEUED" | "MR_CREATING")
            ),
            "{status}"
        );

        let repeat = post_signed(
            &app,
            "/callbacks/approval",
            APPROVAL_SECRET,
            &decision("cb-1", &id, "APPROVED"),
            None,
        )
        .await;
        assert_eq!(repeat, (200, json!({ "code": "DUPLICATE" })));
        let late = post_signed(
            &app,
            "/callbacks/approval",
            APPROVAL_SECRET,
            &decision("cb-2", &id, "WITHDRAWN"),
            None,
        )
        .await;
        assert_eq!(late, (200, json!({ "code": "IGNORED_STALE" })));
        assert_eq!(
            status_of(&app, "alice", &id).await["status"],
            "MR_CREATING",
            "{}",
            test_db.name
        );

        let unknown = post_signed(
            &app,
            "/callbacks/approval",
            APPROVAL_SECRET,
            &decision("cb-3", "not-an-id", "APPROVED"),
            None,
        )
        .await;
        assert_eq!(unknown, (200, json!({ "code": "IGNORED_STALE" })));
    }
}

#[tokio::test]
async fn a_late_callback_for_a_previous_operation_of_a_reapplied_relation_is_stale() {
    let db = sqlite_db().await;
    let app = requester_app(&db.url, &secrets()).await;
    let old = applied(&app, "alice", &apply_body("demo.feature-flags")).await;
    let rejected = post_signed(
        &app,
        "/callbacks/approval",
        APPROVAL_SECRET,
        &decision("r-1", &old, "REJECTED"),
        None,
    )
    .await;
    assert_eq!(rejected.1["code"], "OK");
    assert_eq!(status_of(&app, "alice", &old).await["next"], "REAPPLY");

    let new = applied(&app, "alice", &apply_body("demo.feature-flags")).await;
    let stale = post_signed(
        &app,
        "/callbacks/approval",
        APPROVAL_SECRET,
        &decision("r-2", &old, "APPROVED"),
        None,
    )
    .await;
    assert_eq!(stale.1["code"], "IGNORED_STALE");
    assert_eq!(
        status_of(&app, "alice", &new).await["status"],
        "APPROVAL_SENDING",
        "the new request is untouched"
    );

    // An MR-first shape for an approval-first request does not apply.
    let mr_shaped = json!({ "callbackId": "r-3", "operationId": new, "result": "APPROVED", "ext": { "mrId": 7 } });
    let (_, answer) = post_signed(
        &app,
        "/callbacks/approval",
        APPROVAL_SECRET,
        &mr_shaped,
        None,
    )
    .await;
    assert_eq!(answer["code"], "IGNORED_STALE");
    assert_eq!(
        status_of(&app, "alice", &new).await["status"],
        "APPROVAL_SENDING"
    );
}

#[tokio::test]
async fn an_mr_first_approval_carries_the_mr_and_moves_on_to_merging() {
    let db = sqlite_db().await;
    let app = requester_app(&db.url, &secrets()).await;
    let mut request = crate::store::apply("alice", "demo.feature-flags");
    request.flow_order = changegate::config::resolve::FlowOrder::MrFirst;
    let path = [
        (StepStatus::MrCreated, BindingStatus::MrCreated),
        (StepStatus::ApprovalSending, BindingStatus::ApprovalSending),
        (StepStatus::ApprovalSent, BindingStatus::ApprovalSent),
    ];
    let (id, _) = crate::store::drive(&db.db, &request, &path).await;
    let without_mr = decision("m-1", &id, "APPROVED");
    let (_, answer) = post_signed(
        &app,
        "/callbacks/approval",
        APPROVAL_SECRET,
        &without_mr,
        None,
    )
    .await;
    assert_eq!(answer["code"], "IGNORED_STALE");
    let with_mr = json!({ "callbackId": "m-2", "operationId": id, "result": "APPROVED", "ext": { "mrId": 7 } });
    let (_, answer) =
        post_signed(&app, "/callbacks/approval", APPROVAL_SECRET, &with_mr, None).await;
    assert_eq!(answer["code"], "OK");
    assert_eq!(status_of(&app, "alice", &id).await["status"], "MERGING");
}

#[tokio::test]
async fn unsigned_forged_or_stale_callbacks_are_401_and_change_nothing() {
    let db = sqlite_db().await;
    let app = requester_app(&db.url, &secrets()).await;
    let id = applied(&app, "alice", &apply_body("demo.feature-flags")).await;
    let body = decision("x-1", &id, "APPROVED");
    let wrong = "whsec_d3Jvbmctc2VjcmV0LXdyb25nLXNlY3JldC13cm9uZyE=";
    let old = chrono::Utc::now().timestamp() - 600;
    for (case, secret, timestamp) in [
        ("wrong secret", wrong, None),
        ("deploy's secret", DEPLOY_SECRET, None),
        ("ten minutes old", APPROVAL_SECRET, Some(old)),
    ] {
        let (status, answer) =
            post_signed(&app, "/callbacks/approval", secret, &body, timestamp).await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (401, Some("INVALID_SIGNATURE")),
            "{case}"
        );
    }
    let unsigned = app
        .client
        .post(format!("{}/callbacks/approval", app.address))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status(), 401);
    assert_eq!(
        status_of(&app, "alice", &id).await["status"],
        "APPROVAL_SENDING"
    );
    // Refused callbacks count in the API metrics, by route and status.
    let metrics = app.get("/metrics").await.text().await.unwrap();
    let refused: f64 = metrics
        .lines()
        .find(|line| {
            line.starts_with("changegate_http_requests_total")
                && line.contains("route=\"/callbacks/approval\"")
                && line.contains("status=\"401\"")
        })
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("callbacks are not counted: {metrics}"));
    assert!(refused >= 4.0, "{refused}");

    let unconfigured = requester_app(&db.url, "").await;
    let (status, _) = post_signed(
        &unconfigured,
        "/callbacks/approval",
        APPROVAL_SECRET,
        &body,
        None,
    )
    .await;
    assert_eq!(
        status, 401,
        "without a configured secret nothing is accepted"
    );
}

async fn merged_with_mr(db: &Db, subject: &str, mr_iid: i64) -> String {
    let (id, _) = crate::store::drive(db, &crate::store::apply(subject, "t"), TO_MERGED).await;
    changegate::with_pool!(db, writer, |pool| {
        sqlx::query("UPDATE operation SET mr_iid = ? WHERE operation_id = ?")
            .bind(mr_iid)
            .bind(&id)
            .execute(pool)
            .await
            .map(|_| ())
    })
    .unwrap();
    id
}

async fn binding_status(db: &Db, subject: &str) -> BindingStatus {
    changegate::db::bindings::get_binding(db, subject, "t")
        .await
        .unwrap()
        .unwrap()
        .status
}

#[tokio::test]
async fn a_deploy_callback_validates_the_merged_operations_of_its_mr() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        let app = requester_app(&test_db.url, &secrets()).await;
        let a = merged_with_mr(db, "a", 11).await;
        merged_with_mr(db, "b", 11).await;
        merged_with_mr(db, "c", 12).await;

        // Named operations: exactly those.
        let named = json!({ "callbackId": "d-1", "mrIid": 11, "status": "success", "operationIds": [a], "sha": "abc" });
        assert_eq!(
            post_signed(&app, "/callbacks/deploy", DEPLOY_SECRET, &named, None)
                .await
                .1["code"],
            "OK"
        );
        assert_eq!(
            binding_status(db, "a").await,
            BindingStatus::Validated,
            "{}",
            test_db.name
        );
        assert_eq!(binding_status(db, "b").await, BindingStatus::Merged);

        // By MR: the rest of MR 11.
        let by_mr = json!({ "callbackId": "d-2", "mrIid": 11, "status": "success" });
        assert_eq!(
            post_signed(&app, "/callbacks/deploy", DEPLOY_SECRET, &by_mr, None)
                .await
                .1["code"],
            "OK"
        );
        assert_eq!(binding_status(db, "b").await, BindingStatus::Validated);
        assert_eq!(
            post_signed(&app, "/callbacks/deploy", DEPLOY_SECRET, &by_mr, None)
                .await
                .1["code"],
            "DUPLICATE"
        );
        let again = json!({ "callbackId": "d-3", "mrIid": 11, "status": "success" });
        assert_eq!(
            post_signed(&app, "/callbacks/deploy", DEPLOY_SECRET, &again, None)
                .await
                .1["code"],
            "IGNORED_STALE"
        );

        // A failed deploy keeps the binding MERGED and tells the requester to contact the team.
        let failed = json!({ "callbackId": "d-4", "mrIid": 12, "status": "failed" });
        assert_eq!(
            post_signed(&app, "/callbacks/deploy", DEPLOY_SECRET, &failed, None)
                .await
                .1["code"],
            "OK"
        );
        assert_eq!(
            binding_status(db, "c").await,
            BindingStatus::Merged,
            "{}",
            test_db.name
        );
        let c = changegate::db::bindings::get_binding(db, "c", "t")
            .await
            .unwrap()
            .unwrap();
        let operation = changegate::db::operations::get_operation(db, &c.operation_id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(operation.step, StepStatus::DeployFailed);
        let reports: i64 = changegate::with_pool!(db, reader, |pool| {
            sqlx::query_scalar("SELECT COUNT(*) FROM deploy_report")
                .fetch_one(pool)
                .await
        })
        .unwrap();
        assert_eq!(reports, 4, "every report is kept, duplicates aside");
    }
}

#[tokio::test]
async fn the_deploy_callback_and_another_flipper_count_a_binding_once() {
    let db = sqlite_db().await;
    let app = requester_app(&db.url, &secrets()).await;
    let id = merged_with_mr(&db.db, "x", 21).await;
    let other = store::flip(
        &db.db,
        &id,
        &[BindingStatus::Merged],
        BindingStatus::Validated,
        change(StepStatus::DeployReconciled),
    );
    let callback = json!({ "callbackId": "race", "mrIid": 21, "status": "success" });
    let (flipped, (_, answer)) = tokio::join!(
        other,
        post_signed(&app, "/callbacks/deploy", DEPLOY_SECRET, &callback, None)
    );
    let by_job = flipped.unwrap().is_some();
    let by_callback = answer["code"] == "OK";
    assert!(
        by_job ^ by_callback,
        "exactly one of them flipped: job {by_job}, callback {answer}"
    );
    let events = changegate::db::events::list_events(&db.db, &id)
        .await
        .unwrap();
    assert_eq!(
        events.iter().filter(|e| e.to_status == "VALIDATED").count(),
        1
    );
}

/// Posts `body` (exact bytes) to the approval callback with these headers.
async fn post_raw(app: &TestApp, body: &str, id: &str, timestamp: i64, signature: &str) -> u16 {
    app.client
        .post(format!("{}/callbacks/approval", app.address))
        .header("content-type", "application/json")
        .header("webhook-id", id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .body(body.to_owned())
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn the_callback_signature_matrix_over_http() {
    let db = sqlite_db().await;
    let app = requester_app(&db.url, &secrets()).await;
    let id = applied(&app, "alice", &apply_body("demo.feature-flags")).await;
    let secret = WebhookSecret::parse(APPROVAL_SECRET).unwrap();
    let now = chrono::Utc::now().timestamp();
    let body = format!(r#"{{"callbackId":"matrix","operationId":"{id}","result":"WITHDRAWN"}}"#);
    let msg = "msg_matrix";
    let good = sign(&secret, msg, now, body.as_bytes());
    let tampered = body.replace("WITHDRAWN", "APPROVED");
    // The same JSON, serialised differently: other bytes, so another signature.
    let reserialised =
        format!(r#"{{ "operationId": "{id}", "callbackId": "matrix", "result": "WITHDRAWN" }}"#);
    let truncated = &good[..good.len() - 4];
    for (case, sent_body, timestamp, signature) in [
        (
            "forged",
            body.as_str(),
            now,
            "v1,Zm9yZ2VkLXNpZ25hdHVyZQ==".to_owned(),
        ),
        ("tampered body", tampered.as_str(), now, good.clone()),
        (
            "re-serialised body",
            reserialised.as_str(),
            now,
            good.clone(),
        ),
        (
            "301 s old",
            body.as_str(),
            now - 301,
            sign(&secret, msg, now - 301, body.as_bytes()),
        ),
        // Far enough ahead that it is still past the tolerance when it
        // arrives, however long the earlier cases took on a loaded machine.
        (
            "330 s ahead",
            body.as_str(),
            now + 330,
            sign(&secret, msg, now + 330, body.as_bytes()),
        ),
        ("empty v1,", body.as_str(), now, "v1,".to_owned()),
        ("truncated", body.as_str(), now, truncated.to_owned()),
    ] {
        assert_eq!(
            post_raw(&app, sent_body, msg, timestamp, &signature).await,
            401,
            "{case}"
        );
    }
    assert_eq!(
        status_of(&app, "alice", &id).await["status"],
        "APPROVAL_SENDING",
        "nothing refused changed anything"
    );
    // Accepted: 299 s old, and a rotated sender's header listing an old
    // signature before the valid one.
    let old = sign(&secret, msg, now - 299, body.as_bytes());
    let rotated = format!("v1,b2xkLXNlY3JldC1zaWduYXR1cmU= {old}");
    assert_eq!(post_raw(&app, &body, msg, now - 299, &rotated).await, 200);
    assert_eq!(status_of(&app, "alice", &id).await["status"], "REJECTED");
}
