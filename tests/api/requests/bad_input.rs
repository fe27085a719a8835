//! Bad input gets a clear 4xx JSON naming the problem, writes nothing, and
//! leaks nothing internal.

use serde_json::{Value, json};

use super::{count_rows, requester_app};
use crate::helpers::sqlite_db;

async fn send(app: &crate::helpers::TestApp, content_type: &str, body: Vec<u8>) -> (u16, Value) {
    let response = app
        .client
        .post(format!("{}/api/v1/applications", app.address))
        .header("x-auth-request-user", "alice")
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

#[tokio::test]
async fn every_kind_of_bad_input_is_a_clear_client_error_and_writes_nothing() {
    let db = sqlite_db().await;
    let app = requester_app(&db.url, "[rate_limit]\napply = 0\n").await;
    let long = "x".repeat(10 * 1024);
    let json = |value: Value| value.to_string().into_bytes();
    let cases: Vec<(&str, &str, Vec<u8>, u16, &str)> = vec![
        (
            "malformed",
            "application/json",
            b"{\"targetKey\": ".to_vec(),
            400,
            "malformed JSON",
        ),
        (
            "not an object",
            "application/json",
            b"[1, 2]".to_vec(),
            400,
            "malformed JSON",
        ),
        (
            "wrong content type",
            "text/plain",
            json(json!({"targetKey": "demo.feature-flags", "reason": "x"})),
            415,
            "application/json",
        ),
        (
            "huge body",
            "application/json",
            vec![b' '; 200 * 1024],
            413,
            "too large",
        ),
        (
            "10 kB reason",
            "application/json",
            json(json!({"targetKey": "demo.feature-flags", "reason": long})),
            400,
            "`reason`",
        ),
        (
            "10 kB target",
            "application/json",
            json(json!({"targetKey": long, "reason": "x"})),
            400,
            "`targetKey`",
        ),
        (
            "missing reason",
            "application/json",
            json(json!({"targetKey": "demo.feature-flags"})),
            400,
            "reason",
        ),
        (
            "wrong type",
            "application/json",
            json(json!({"targetKey": 5, "reason": "x"})),
            400,
            "`targetKey`",
        ),
        (
            "unknown field",
            "application/json",
            json(json!({"targetKey": "demo.feature-flags", "reason": "x", "admin": true})),
            400,
            "unknown field `admin`",
        ),
        (
            "invalid uuid",
            "application/json",
            json(json!({"operationId": "op-1", "targetKey": "demo.feature-flags", "reason": "x"})),
            400,
            "`operationId`",
        ),
        (
            "nul in subject",
            "application/json",
            json(json!({"subjectId": "ali\u{0}ce", "targetKey": "team.access", "reason": "x"})),
            400,
            "`subjectId`",
        ),
        (
            "unicode subject",
            "application/json",
            json(json!({"subjectId": "ålice/../x", "targetKey": "team.access", "reason": "x"})),
            400,
            "`subjectId`",
        ),
        (
            "past expiry",
            "application/json",
            json(
                json!({"targetKey": "demo.feature-flags", "reason": "x", "expiresAt": "2001-01-01T00:00:00Z"}),
            ),
            400,
            "`expiresAt`",
        ),
        (
            "bad expiry",
            "application/json",
            json(
                json!({"targetKey": "demo.feature-flags", "reason": "x", "expiresAt": "tomorrow"}),
            ),
            400,
            "`expiresAt`",
        ),
        (
            "params not object",
            "application/json",
            json(
                json!({"targetKey": "team.access", "subjectId": "s", "params": [1], "reason": "x"}),
            ),
            400,
            "`params`",
        ),
    ];
    for (case, content_type, body, status, needle) in cases {
        let (got, answer) = send(&app, content_type, body).await;
        assert_eq!(got, status, "{case}: {answer}");
        let message = answer["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(needle),
            "{case}: {message:?} should mention {needle:?}"
        );
        assert!(
            message.len() < 400,
            "{case}: the message should not echo the input"
        );
        assert!(
            answer["requestId"]
                .as_str()
                .is_some_and(|id| !id.is_empty()),
            "{case}"
        );
    }
    assert_eq!(count_rows(&db.db, "operation").await, 0);
    assert_eq!(count_rows(&db.db, "binding").await, 0);
}

#[tokio::test]
async fn a_reserved_operator_field_from_a_requester_is_ignored() {
    let db = sqlite_db().await;
    let app = requester_app(&db.url, "").await;
    let body = json!({ "targetKey": "demo.feature-flags", "reason": "x", "__authenticatedOperator": "admin" });
    let response = app.post_as("alice", "/api/v1/applications", &body).await;
    assert_eq!(response.status(), 202);
    let answer: Value = response.json().await.unwrap();
    let id = answer["operationId"].as_str().unwrap();
    let status: Value = app
        .get_as("alice", &format!("/api/v1/operations/{id}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(status["subjectId"], "alice");
}
