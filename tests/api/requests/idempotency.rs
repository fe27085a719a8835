//! Idempotent submission: by `Idempotency-Key` or by client operation id,
//! replaying the original, refusing a reused key, and exactly one operation
//! under concurrency.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::{apply_body, count_rows, requester_app};
use crate::helpers::{TestApp, each_backend, sqlite_db};

async fn post_with_key(app: &TestApp, user: &str, key: &str, body: &Value) -> reqwest::Response {
    app.client
        .post(format!("{}/api/v1/applications", app.address))
        .header("x-auth-request-user", user)
        .header("idempotency-key", key)
        .json(body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_repeated_key_replays_the_original_operation() {
    let db = sqlite_db().await;
    let app = requester_app(&db.url, "").await;
    let body = apply_body("demo.feature-flags");
    let first: Value = post_with_key(&app, "alice", "k-1", &body)
        .await
        .json()
        .await
        .unwrap();
    let again = post_with_key(&app, "alice", "k-1", &body).await;
    assert_eq!(again.status(), 202);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["code"], "DUPLICATE_SUBMIT");
    assert_eq!(again["operationId"], first["operationId"]);
    assert_eq!(again["status"], "APPROVAL_SENDING");

    let changed = post_with_key(
        &app,
        "alice",
        "k-1",
        &json!({ "targetKey": "demo.feature-flags", "reason": "other" }),
    )
    .await;
    assert_eq!(changed.status(), 422);
    let changed: Value = changed.json().await.unwrap();
    assert_eq!(changed["code"], "IDEMPOTENCY_KEY_REUSED");

    // Keys belong to their requester: bob's "k-1" is his own.
    assert_eq!(post_with_key(&app, "bob", "k-1", &body).await.status(), 202);
    assert_eq!(count_rows(&db.db, "operation").await, 2);
}

#[tokio::test]
async fn a_client_operation_id_makes_the_request_idempotent_too() {
    let db = sqlite_db().await;
    let app = requester_app(&db.url, "").await;
    let id = "6d5c3a3e-9f55-4a7f-8d50-2b1f9d9a7c11";
    let body = json!({ "operationId": id, "targetKey": "demo.feature-flags", "reason": "x" });
    let first: Value = app
        .post_as("alice", "/api/v1/applications", &body)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        (first["code"].as_str(), first["operationId"].as_str()),
        (Some("ACCEPTED"), Some(id))
    );
    let second: Value = app
        .post_as("alice", "/api/v1/applications", &body)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        (second["code"].as_str(), second["operationId"].as_str()),
        (Some("DUPLICATE_SUBMIT"), Some(id))
    );
    // Someone else reusing that operation id gets no access to it.
    let stolen = app.post_as("mallory", "/api/v1/applications", &body).await;
    assert_eq!(stolen.status(), 422);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_concurrent_submits_sharing_twenty_ids_create_twenty_operations() {
    for test_db in each_backend().await {
        let app = requester_app(&test_db.url, "[rate_limit]\napply = 0\n").await;
        let ids: Vec<String> = (0..20).map(|_| uuid::Uuid::new_v4().to_string()).collect();
        let mut tasks = Vec::new();
        for _ in 0..10 {
            for (i, id) in ids.iter().enumerate() {
                let (client, address, id) = (app.client.clone(), app.address.clone(), id.clone());
                let body = json!({ "operationId": id, "targetKey": "team.access", "subjectId": format!("svc-{i}"), "reason": "race" });
                tasks.push(tokio::spawn(async move {
                    let response = client
                        .post(format!("{address}/api/v1/applications"))
                        .header("x-auth-request-user", "alice")
                        .json(&body)
                        .send()
                        .await
                        .unwrap();
                    let status = response.status().as_u16();
                    (id, status, response.json::<Value>().await.unwrap())
                }));
            }
        }
        let mut accepted: HashMap<String, usize> = HashMap::new();
        let mut duplicates = 0;
        for task in tasks {
            let (id, status, body) = task.await.unwrap();
            assert_eq!(status, 202, "{}: {body}", test_db.name);
            assert_eq!(
                body["operationId"],
                id.as_str(),
                "every answer carries the winner's id"
            );
            match body["code"].as_str() {
                Some("ACCEPTED") => *accepted.entry(id).or_default() += 1,
                Some("DUPLICATE_SUBMIT") => duplicates += 1,
                other => panic!("{}: unexpected {other:?}", test_db.name),
            }
        }
        assert_eq!(accepted.len(), 20, "{}", test_db.name);
        assert!(accepted.values().all(|n| *n == 1));
        assert_eq!(duplicates, 180);
        assert_eq!(
            count_rows(&test_db.db, "operation").await,
            20,
            "{}",
            test_db.name
        );
        assert_eq!(count_rows(&test_db.db, "idempotency_record").await, 20);
    }
}

#[tokio::test]
async fn expired_keys_are_cleaned_up_by_the_job() {
    let db = sqlite_db().await;
    let app = requester_app(&db.url, "[idempotency]\nttl = \"50ms\"\n").await;
    let body = apply_body("demo.feature-flags");
    let first: Value = post_with_key(&app, "alice", "short", &body)
        .await
        .json()
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(120)).await;
    let outcome = changegate::jobs::idempotency_cleanup::run_once(&db.db)
        .await
        .unwrap();
    assert_eq!(
        outcome,
        changegate::jobs::Outcome::Worked {
            done: 1,
            full: false
        }
    );
    assert_eq!(count_rows(&db.db, "idempotency_record").await, 0);
    // The key is free again; the relation is still in progress, so this is a fresh, refused request.
    let again = post_with_key(&app, "alice", "short", &body).await;
    assert_eq!(again.status(), 409, "{:?}", first);
}
