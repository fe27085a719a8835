//! A request whose relation a newer one took over says so: its page, its
//! timeline and the operators' list show it superseded, and the list's
//! status filter agrees with what the list shows.

use serde_json::{Value, json};

use crate::helpers::{TestApp, each_backend};
use crate::requests::{apply_body, requester_app};

async fn applied(app: &TestApp) -> String {
    let answer = app
        .post_as(
            "alice",
            "/api/v1/applications",
            &apply_body("demo.feature-flags"),
        )
        .await;
    assert_eq!(answer.status(), 202);
    let answer: Value = answer.json().await.unwrap();
    answer["operationId"].as_str().unwrap().to_owned()
}

async fn read(app: &TestApp, user: &str, path: &str) -> Value {
    let answer = app.get_as(user, path).await;
    assert_eq!(answer.status(), 200, "{path}");
    answer.json().await.unwrap()
}

fn listed_ids(page: &Value) -> Vec<&str> {
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["operationId"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn a_request_whose_relation_moved_on_is_superseded_everywhere_it_is_shown() {
    for test_db in each_backend().await {
        let app = requester_app(&test_db.url, "[rate_limit]\napply = 0\n").await;
        let first = applied(&app).await;
        let rejected = app
            .post_as(
                "admin",
                &format!("/admin/v1/approvals/{first}/reject"),
                &json!({ "reason": "not now" }),
            )
            .await;
        assert_eq!(rejected.status(), 200, "{}", test_db.name);
        let before = read(&app, "alice", &format!("/api/v1/operations/{first}")).await;
        assert_eq!(
            (before["status"].as_str(), before["next"].as_str()),
            (Some("REJECTED"), Some("REAPPLY"))
        );
        assert!(before.get("supersededBy").is_none());

        let second = applied(&app).await;

        let view = read(&app, "alice", &format!("/api/v1/operations/{first}")).await;
        assert_eq!(
            (
                view["status"].as_str(),
                view["next"].as_str(),
                view["supersededBy"].as_str()
            ),
            (Some("REJECTED"), Some("NONE"), Some(second.as_str())),
            "{}: the last status it reached, and nothing left to do about it",
            test_db.name
        );
        assert!(
            view["message"].as_str().unwrap().contains(&second),
            "{view}"
        );
        let current = read(&app, "alice", &format!("/api/v1/operations/{second}")).await;
        assert!(current.get("supersededBy").is_none());
        assert_eq!(current["status"], "APPROVAL_SENDING");

        // The timeline is the same view, with the steps and the relation.
        let timeline = read(
            &app,
            "alice",
            &format!("/api/v1/operations/{first}/timeline"),
        )
        .await;
        assert_eq!(timeline["operation"], view, "{}", test_db.name);
        let items = timeline["items"].as_array().unwrap();
        let last_status = items
            .iter()
            .rev()
            .find_map(|item| item["status"].as_str())
            .unwrap();
        assert_eq!(last_status, "REJECTED");
        assert_eq!(
            items.last().unwrap()["step"]["code"],
            view["step"]["code"],
            "the step shown is the last one recorded"
        );
        let relation: Vec<(&str, bool, &str)> = timeline["relation"]
            .as_array()
            .unwrap()
            .iter()
            .map(|related| {
                (
                    related["operationId"].as_str().unwrap(),
                    related["current"].as_bool().unwrap(),
                    related["status"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            relation,
            [
                (second.as_str(), true, "APPROVAL_SENDING"),
                (first.as_str(), false, "REJECTED"),
            ],
            "{}: newest first, the current one marked",
            test_db.name
        );

        // The operators' list shows it superseded, and the filter agrees.
        let all = read(&app, "admin", "/admin/v1/operations").await;
        let listed = all["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|item| item["operationId"] == first.as_str())
            .unwrap();
        assert_eq!(listed["supersededBy"], second.as_str());
        let superseded = read(&app, "admin", "/admin/v1/operations?status=SUPERSEDED").await;
        assert_eq!(
            listed_ids(&superseded),
            [first.as_str()],
            "{}",
            test_db.name
        );
        let rejected = read(&app, "admin", "/admin/v1/operations?status=REJECTED").await;
        assert!(listed_ids(&rejected).is_empty(), "{rejected}");
        let sending = read(
            &app,
            "admin",
            "/admin/v1/operations?status=APPROVAL_SENDING",
        )
        .await;
        assert_eq!(listed_ids(&sending), [second.as_str()]);
        let bad = app
            .get_as("admin", "/admin/v1/operations?status=SUPERSEDED_BY")
            .await;
        assert_eq!(bad.status(), 400);
    }
}
