//! Local approvals by operators, with the built-in approval provider: only
//! operators, only requests awaiting approval, every action audited with the
//! identity the server writes.

use changegate::db::audit::list_audit;
use serde_json::{Value, json};

use crate::helpers::each_backend;
use crate::requests::{apply_body, requester_app};

async fn applied(app: &crate::helpers::TestApp, user: &str, body: &Value) -> String {
    let answer: Value = app
        .post_as(user, "/api/v1/applications", body)
        .await
        .json()
        .await
        .unwrap();
    answer["operationId"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn an_operator_approves_or_rejects_and_it_is_audited() {
    for test_db in each_backend().await {
        let app = requester_app(&test_db.url, "").await;
        let id = applied(&app, "alice", &apply_body("demo.feature-flags")).await;
        let path = format!("/admin/v1/approvals/{id}/approve");
        let forged = json!({ "reason": "looks fine", "__authenticatedOperator": "mallory" });

        assert_eq!(
            app.post_as("alice", &path, &forged).await.status(),
            403,
            "requesters are not operators"
        );
        let answer = app.post_as("admin", &path, &forged).await;
        assert_eq!(answer.status(), 200, "{}", test_db.name);
        let answer: Value = answer.json().await.unwrap();
        assert_eq!(answer["status"], "MR_CREATING");
        let view: Value = app
            .get_as("alice", &format!("/api/v1/operations/{id}"))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(
            (view["status"].as_str(), view["message"].as_str()),
            (Some("MR_CREATING"), Some("looks fine"))
        );

        let again = app.post_as("admin", &path, &json!({})).await;
        assert_eq!(again.status(), 409);
        let again: Value = again.json().await.unwrap();
        assert_eq!(again["code"], "CONFLICT");

        let audit = list_audit(&test_db.db, &id).await.unwrap();
        assert_eq!(
            audit.len(),
            1,
            "{}: only the action that happened is audited",
            test_db.name
        );
        assert_eq!(
            (audit[0].actor.as_str(), audit[0].action.as_str()),
            ("admin", "approval.approve")
        );
        let params: Value = serde_json::from_str(&audit[0].params).unwrap();
        assert_eq!(
            params["__authenticatedOperator"], "admin",
            "the server's identity wins over the client's"
        );

        let other = applied(&app, "bob", &apply_body("demo.feature-flags")).await;
        let rejected = app
            .post_as(
                "admin",
                &format!("/admin/v1/approvals/{other}/reject"),
                &json!({}),
            )
            .await;
        assert_eq!(rejected.status(), 200);
        let view: Value = app
            .get_as("bob", &format!("/api/v1/operations/{other}"))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(
            (view["status"].as_str(), view["next"].as_str()),
            (Some("REJECTED"), Some("REAPPLY"))
        );

        let missing = app
            .post_as(
                "admin",
                "/admin/v1/approvals/6d5c3a3e-9f55-4a7f-8d50-2b1f9d9a7c11/approve",
                &json!({}),
            )
            .await;
        assert_eq!(missing.status(), 404);
    }
}

#[tokio::test]
async fn with_an_external_approval_system_local_decisions_are_refused() {
    let db = crate::helpers::sqlite_db().await;
    let app = requester_app(
        &db.url,
        "[approval]\nprovider = \"http\"\nurl = \"http://127.0.0.1:1/approvals\"\n",
    )
    .await;
    let id = applied(&app, "alice", &apply_body("demo.feature-flags")).await;
    let answer = app
        .post_as(
            "admin",
            &format!("/admin/v1/approvals/{id}/approve"),
            &json!({}),
        )
        .await;
    assert_eq!(answer.status(), 409);
    assert!(list_audit(&db.db, &id).await.unwrap().is_empty());
}
