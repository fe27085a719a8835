//! Taking a landed change back (SPEC §12): a revert is a new request that
//! restores the binding to its state before the reverted one, linked both
//! ways, refused while a newer request is in flight or has landed, and
//! idempotent under its key.

use serde_json::{Value, json};

use super::end_to_end::{World, world};
use super::{apply, close, wait_for};
use crate::helpers::each_backend;

const FILE: &str = "bindings/demo.feature-flags/alice.json";

/// Alice reverts `id` (with `key` as its Idempotency-Key, if any): the answer.
async fn revert(w: &World, id: &str, key: Option<&str>) -> (u16, Value) {
    let mut request = w
        .app
        .client
        .post(format!("{}/api/v1/operations/{id}/revert", w.app.address))
        .header("x-auth-request-user", "alice")
        .json(&json!({ "reason": "take it back" }));
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    let answer = request.send().await.unwrap();
    (answer.status().as_u16(), answer.json().await.unwrap())
}

async fn landed(w: &World, id: &str) -> Value {
    wait_for(&w.app, id, |v| {
        ["VALIDATED", "CLOSED"].contains(&v["status"].as_str().unwrap_or_default())
            || v["next"] == "CONTACT_TEAM"
    })
    .await
}

async fn timeline(w: &World, id: &str) -> Value {
    w.app
        .get_as("alice", &format!("/api/v1/operations/{id}/timeline"))
        .await
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_revert_of_a_first_apply_removes_the_binding_and_both_requests_name_each_other() {
    for test_db in each_backend().await {
        let w = world(&test_db.url, "").await;
        let applied = apply(&w.app).await;
        assert_eq!(landed(&w, &applied).await["status"], "VALIDATED");
        assert!(w.gitlab.file(w.project, "main", FILE).is_some());

        let (status, answer) = revert(&w, &applied, None).await;
        assert_eq!(status, 202, "{}: {answer}", test_db.name);
        let reverting = answer["operationId"].as_str().unwrap().to_owned();
        let view = landed(&w, &reverting).await;
        assert_eq!(view["status"], "CLOSED", "{}: {view}", test_db.name);
        assert_eq!(view["revertOf"], applied.as_str(), "{view}");
        assert!(
            w.gitlab.file(w.project, "main", FILE).is_none(),
            "{}: the revert of a first apply removes its file",
            test_db.name
        );
        let original = timeline(&w, &applied).await;
        assert_eq!(
            original["operation"]["revertedBy"],
            reverting.as_str(),
            "{original}"
        );
        let reverted = timeline(&w, &reverting).await;
        assert_eq!(reverted["operation"]["revertOf"], applied.as_str());
        // The operators' list names both ends too.
        let listed: Value = w
            .app
            .get_as("admin", "/admin/v1/operations?subjectId=alice")
            .await
            .json()
            .await
            .unwrap();
        let row = |id: &str| {
            listed["items"]
                .as_array()
                .unwrap()
                .iter()
                .find(|item| item["operationId"] == id)
                .cloned()
                .unwrap()
        };
        assert_eq!(row(&applied)["revertedBy"], reverting.as_str(), "{listed}");
        assert_eq!(row(&reverting)["revertOf"], applied.as_str(), "{listed}");
    }
}

#[tokio::test]
async fn a_revert_of_a_close_applies_the_removed_parameters_and_a_later_apply_is_reverted_by_a_removal()
 {
    for test_db in each_backend().await {
        let w = world(&test_db.url, "").await;
        let first = apply(&w.app).await;
        landed(&w, &first).await;
        let before = w.gitlab.file(w.project, "main", FILE).unwrap();
        let removal = close(&w.app).await;
        assert_eq!(landed(&w, &removal).await["status"], "CLOSED");

        let (status, answer) = revert(&w, &removal, None).await;
        assert_eq!(status, 202, "{}: {answer}", test_db.name);
        let restoring = answer["operationId"].as_str().unwrap().to_owned();
        assert_eq!(landed(&w, &restoring).await["status"], "VALIDATED");
        let after = w.gitlab.file(w.project, "main", FILE).unwrap();
        assert_eq!(
            after.replace(&restoring, "ID"),
            before.replace(&first, "ID"),
            "{}: the binding is back as it was, written by the revert",
            test_db.name
        );

        // The restoring apply is now a later apply of the binding: its
        // revert removes the file again.
        let (status, answer) = revert(&w, &restoring, None).await;
        assert_eq!(status, 202, "{}: {answer}", test_db.name);
        let again = answer["operationId"].as_str().unwrap().to_owned();
        assert_eq!(landed(&w, &again).await["status"], "CLOSED");
        assert!(w.gitlab.file(w.project, "main", FILE).is_none());
    }
}

#[tokio::test]
async fn only_the_newest_landed_change_can_be_reverted_and_a_key_makes_a_revert_idempotent() {
    for test_db in each_backend().await {
        let w = world(&test_db.url, "").await;
        let applied = apply(&w.app).await;
        landed(&w, &applied).await;

        // The same key twice: one revert, the second answer names it.
        let (status, first) = revert(&w, &applied, Some("undo-1")).await;
        assert_eq!(status, 202, "{first}");
        let (status, repeated) = revert(&w, &applied, Some("undo-1")).await;
        assert_eq!(status, 202, "{repeated}");
        assert_eq!(repeated["code"], "DUPLICATE_SUBMIT", "{repeated}");
        assert_eq!(repeated["operationId"], first["operationId"]);

        // Without a key, a second revert meets the first one in flight.
        let (status, refused) = revert(&w, &applied, None).await;
        assert_eq!(status, 409, "{}: {refused}", test_db.name);
        assert_eq!(refused["code"], "CONFLICT");
        let message = refused["message"].as_str().unwrap();
        assert!(
            message.contains("in flight") || message.contains("landed since"),
            "{message}"
        );

        let reverting = first["operationId"].as_str().unwrap().to_owned();
        landed(&w, &reverting).await;
        let (status, refused) = revert(&w, &applied, None).await;
        assert_eq!(status, 409, "{refused}");
        assert!(
            refused["message"]
                .as_str()
                .unwrap()
                .contains("revert the newest change"),
            "{refused}"
        );
        // Someone else's request is not theirs to revert.
        let answer = w
            .app
            .post_as(
                "mallory",
                &format!("/api/v1/operations/{reverting}/revert"),
                &json!({ "reason": "mine now" }),
            )
            .await;
        assert_eq!(answer.status(), 404);
        // The revert is now the binding's newest landed change: it may be.
        let (status, answer) = revert(&w, &reverting, None).await;
        assert_eq!(status, 202, "{answer}");
    }
}

#[tokio::test]
async fn a_revert_of_a_target_that_needs_no_approval_for_reverts_is_not_sent_for_approval() {
    for test_db in each_backend().await {
        let w = world(
            &test_db.url,
            "[targets.\"quick.undo\"]\nself_only = false\nrevert_requires_approval = false\n",
        )
        .await;
        let body = json!({ "targetKey": "quick.undo", "reason": "first" });
        let answer: Value = w
            .app
            .post_as("alice", "/api/v1/applications", &body)
            .await
            .json()
            .await
            .unwrap();
        let applied = answer["operationId"].as_str().unwrap().to_owned();
        landed(&w, &applied).await;
        let removal: Value = w
            .app
            .post_as(
                "alice",
                "/api/v1/bindings/quick.undo/close",
                &json!({ "reason": "gone" }),
            )
            .await
            .json()
            .await
            .unwrap();
        let removal = removal["operationId"].as_str().unwrap().to_owned();
        landed(&w, &removal).await;
        assert_eq!(w.approval.requests().len(), 1, "the apply asked approval");

        let (status, answer) = revert(&w, &removal, None).await;
        assert_eq!(status, 202, "{}: {answer}", test_db.name);
        let restoring = answer["operationId"].as_str().unwrap().to_owned();
        let view = landed(&w, &restoring).await;
        assert_eq!(view["status"], "VALIDATED", "{view}");
        assert_eq!(
            w.approval.requests().len(),
            1,
            "{}: the revert was not sent for approval",
            test_db.name
        );
    }
}
