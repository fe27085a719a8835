//! The audit log as operators read it (`GET /admin/v1/audit`): parameters
//! without the keys the server reserves, and every operator action the state
//! refused (409) recorded with who tried it, on what, and the refusal's
//! message.

use changegate::batch::{Claimed, claim_batch};
use changegate::db::audit::list_audit;
use changegate::db::batch_queue::enqueue;
use changegate::db::webhook_deliveries::list_for_endpoint;
use changegate::webhooks::relay;
use serde_json::{Value, json};

use crate::helpers::{TestApp, each_backend, one_at_a_time};
use crate::requests::{apply_body, requester_app};
use crate::webhooks::{add_endpoint, add_events};

/// A request of `user`'s, awaiting approval.
async fn applied(app: &TestApp, user: &str) -> String {
    let answer: Value = app
        .post_as(
            user,
            "/api/v1/applications",
            &apply_body("demo.feature-flags"),
        )
        .await
        .json()
        .await
        .unwrap();
    answer["operationId"].as_str().unwrap().to_owned()
}

/// Posts as the operator and answers the 409's message.
async fn refused(app: &TestApp, path: &str, body: &Value) -> String {
    let answer = app.post_as("admin", path, body).await;
    assert_eq!(answer.status(), 409, "{path}");
    let answer: Value = answer.json().await.unwrap();
    answer["message"].as_str().unwrap().to_owned()
}

async fn audit_page(app: &TestApp) -> Vec<Value> {
    let page: Value = app
        .get_as("admin", "/admin/v1/audit?limit=200")
        .await
        .json()
        .await
        .unwrap();
    page["items"].as_array().unwrap().clone()
}

#[tokio::test]
async fn the_audit_log_shows_parameters_without_reserved_keys_and_who_acted_as_actor() {
    for test_db in each_backend().await {
        let app = requester_app(&test_db.url, "").await;
        let id = applied(&app, "alice").await;
        let path = format!("/admin/v1/approvals/{id}/approve");
        let body = json!({ "reason": "looks fine", "__authenticatedOperator": "mallory" });
        assert_eq!(app.post_as("admin", &path, &body).await.status(), 200);
        // An entry with reserved keys deeper down, as a later release might
        // write: none of them is shown either.
        changegate::with_pool!(&test_db.db, writer, |pool| {
            sqlx::query(
                "INSERT INTO audit_log (actor, action, subject, params) VALUES (?, ?, ?, ?)",
            )
            .bind("admin")
            .bind("test.nested")
            .bind("nested")
            .bind(
                json!({
                    "__authenticatedOperator": "admin",
                    "change": { "__origin": "x", "enabled": false },
                    "items": [{ "__n": 1, "n": 2 }],
                })
                .to_string(),
            )
            .execute(pool)
            .await
            .map(drop)
        })
        .unwrap();

        let items = audit_page(&app).await;
        let nested = &items[0];
        assert_eq!(
            nested["params"],
            json!({ "change": { "enabled": false }, "items": [{ "n": 2 }] }),
            "{}",
            test_db.name
        );
        assert_eq!(
            (nested["outcome"].as_str(), &nested["refusalReason"]),
            (Some("DONE"), &Value::Null),
            "an entry written without an outcome was done"
        );
        let approved = &items[1];
        assert_eq!(approved["action"], "approval.approve");
        assert_eq!(approved["actor"], "admin", "who acted is the actor");
        assert_eq!(approved["params"], json!({ "reason": "looks fine" }));
        assert_eq!(approved["outcome"], "DONE");
        // The stored entry keeps the server-written identity (SPEC §2.3).
        let stored = list_audit(&test_db.db, &id).await.unwrap();
        let params: Value = serde_json::from_str(&stored[0].params).unwrap();
        assert_eq!(params["__authenticatedOperator"], "admin");
        app.stop().await.unwrap();
    }
}

#[tokio::test]
async fn every_refused_operator_action_is_audited_with_its_reason() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        let app = requester_app(&test_db.url, "").await;
        let approved = applied(&app, "alice").await;
        let rejected = applied(&app, "bob").await;
        let approve = |id: &str| format!("/admin/v1/approvals/{id}/approve");
        assert_eq!(
            app.post_as("admin", &approve(&approved), &json!({}))
                .await
                .status(),
            200
        );
        let reject = format!("/admin/v1/approvals/{rejected}/reject");
        assert_eq!(
            app.post_as("admin", &reject, &json!({})).await.status(),
            200
        );

        let (endpoint, _) = add_endpoint(db, "https://hooks.example.com/in", "").await;
        add_events(db, 1).await;
        while relay::run_once(db, false).await.unwrap() != changegate::jobs::Outcome::Idle {}
        let queued = list_for_endpoint(db, endpoint, None, 1).await.unwrap()[0].id;

        let mut tx = db.begin().await.unwrap();
        let member = uuid::Uuid::new_v4().to_string();
        assert!(
            enqueue(&mut tx, &member, "", "config/repo", None)
                .await
                .unwrap()
        );
        tx.commit().await.unwrap();
        let Claimed::Batch { id: batch, .. } = claim_batch(db, "", one_at_a_time(10), &|_| true)
            .await
            .unwrap()
        else {
            panic!("a batch");
        };
        let settle = format!("/admin/v1/batches/{batch}/settle");
        let settled = app
            .post_as("admin", &settle, &json!({ "reason": "stuck" }))
            .await;
        assert_eq!(settled.status(), 200, "{}", test_db.name);

        let frozen = app
            .client
            .put(format!("{}/admin/v1/batches/freeze", app.address))
            .header("x-auth-request-user", "admin")
            .json(&json!({ "frozen": true }))
            .send()
            .await
            .unwrap();
        assert_eq!(frozen.status(), 200);

        // (action, what it was on, the path and body that is refused)
        let mut attempts = vec![
            (
                "approval.approve",
                approved.clone(),
                approve(&approved),
                json!({ "reason": "again" }),
            ),
            (
                "approval.reject",
                approved.clone(),
                format!("/admin/v1/approvals/{approved}/reject"),
                json!({}),
            ),
            (
                "operation.retry",
                rejected.clone(),
                format!("/admin/v1/operations/{rejected}/retry"),
                json!({ "reason": "try it" }),
            ),
            (
                "operation.force_fail",
                rejected.clone(),
                format!("/admin/v1/operations/{rejected}/fail"),
                json!({ "reason": "give up" }),
            ),
            (
                "batch.settle",
                batch.to_string(),
                settle.clone(),
                json!({ "reason": "again" }),
            ),
            (
                "batch.run",
                "merge-queue".to_owned(),
                "/admin/v1/batches/run".to_owned(),
                json!({}),
            ),
            (
                "webhook.delivery.redeliver",
                format!("webhook-delivery:{queued}"),
                format!("/admin/v1/webhook-deliveries/{queued}/redeliver"),
                json!({ "reason": "lost" }),
            ),
        ];
        // Without `webhooks.secret_key` no secret can be stored: on MariaDB.
        // (SQLite generates a key of its own beside the database file.)
        if test_db.name == "mysql" {
            attempts.extend([
                (
                    "webhook.endpoint.rotate",
                    format!("webhook-endpoint:{endpoint}"),
                    format!("/admin/v1/webhook-endpoints/{endpoint}/rotate"),
                    json!({}),
                ),
                (
                    "webhook.endpoint.create",
                    "webhook-endpoints".to_owned(),
                    "/admin/v1/webhook-endpoints".to_owned(),
                    json!({ "url": "https://hooks.example.com/new" }),
                ),
            ]);
        }
        let mut messages = Vec::new();
        for (_, _, path, body) in &attempts {
            messages.push(refused(&app, path, body).await);
        }

        let items = audit_page(&app).await;
        // Newest first: the refusals in reverse order of the attempts.
        let refusals: Vec<&Value> = items
            .iter()
            .filter(|entry| entry["outcome"] == "REFUSED")
            .collect();
        assert_eq!(
            refusals.len(),
            attempts.len(),
            "{}: {items:?}",
            test_db.name
        );
        for ((action, subject, _, body), (entry, message)) in
            attempts.iter().zip(refusals.iter().rev().zip(&messages))
        {
            assert_eq!(entry["action"], *action, "{}", test_db.name);
            assert_eq!(entry["target"], subject.as_str(), "{action}");
            assert_eq!(entry["actor"], "admin", "{action}");
            assert_eq!(entry["refusalReason"], message.as_str(), "{action}");
            assert_eq!(
                entry["params"], *body,
                "{action}: as sent, nothing reserved"
            );
        }
        // What was done stays recorded as done, once each.
        let done: Vec<&str> = items
            .iter()
            .filter(|entry| entry["outcome"] == "DONE")
            .map(|entry| entry["action"].as_str().unwrap())
            .collect();
        assert_eq!(
            done,
            [
                "batch.freeze",
                "batch.settle",
                "approval.reject",
                "approval.approve"
            ],
            "{}",
            test_db.name
        );
        // Refused actions changed nothing.
        assert_eq!(
            list_for_endpoint(db, endpoint, None, 1).await.unwrap()[0].status,
            "queued"
        );
        app.stop().await.unwrap();
    }
}
