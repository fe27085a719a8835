//! Status, my bindings, targets, preview and access.

use serde_json::{Value, json};

use super::{apply_body, requester_app};
use crate::helpers::{each_backend, sqlite_db};

#[tokio::test]
async fn other_peoples_operations_are_not_found_but_operators_see_them() {
    for test_db in each_backend().await {
        let app = requester_app(&test_db.url, "").await;
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
        let path = format!(
            "/api/v1/operations/{}",
            answer["operationId"].as_str().unwrap()
        );
        assert_eq!(app.get_as("alice", &path).await.status(), 200);
        assert_eq!(
            app.get_as("bob", &path).await.status(),
            404,
            "{}",
            test_db.name
        );
        assert_eq!(app.get_as("admin", &path).await.status(), 200);
        let missing = app
            .get_as(
                "alice",
                "/api/v1/operations/6d5c3a3e-9f55-4a7f-8d50-2b1f9d9a7c11",
            )
            .await;
        assert_eq!(missing.status(), 404);
        assert_eq!(
            app.get_as("alice", "/api/v1/operations/not-a-uuid")
                .await
                .status(),
            404
        );
    }
}

#[tokio::test]
async fn my_bindings_are_paged_newest_first() {
    for test_db in each_backend().await {
        let app = requester_app(&test_db.url, "[rate_limit]\napply = 0\n").await;
        for i in 0..5 {
            let body = json!({ "targetKey": "team.access", "subjectId": format!("svc-{i}"), "reason": "x" });
            assert_eq!(
                app.post_as("alice", "/api/v1/applications", &body)
                    .await
                    .status(),
                202
            );
        }
        app.post_as(
            "bob",
            "/api/v1/applications",
            &apply_body("demo.feature-flags"),
        )
        .await;
        let first: Value = app
            .get_as("alice", "/api/v1/me/bindings?limit=3")
            .await
            .json()
            .await
            .unwrap();
        let subjects = |page: &Value| {
            page["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b["subjectId"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            subjects(&first),
            ["svc-4", "svc-3", "svc-2"],
            "{}",
            test_db.name
        );
        let cursor = first["nextCursor"].as_str().unwrap();
        let second: Value = app
            .get_as(
                "alice",
                &format!("/api/v1/me/bindings?limit=3&cursor={cursor}"),
            )
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(subjects(&second), ["svc-1", "svc-0"]);
        assert!(second.get("nextCursor").is_none());
        assert_eq!(
            app.get_as("alice", "/api/v1/me/bindings?limit=0")
                .await
                .status(),
            400
        );
        assert_eq!(
            app.get_as("alice", "/api/v1/me/bindings?cursor=abc")
                .await
                .status(),
            400
        );
    }
}

#[tokio::test]
async fn targets_list_what_the_caller_may_apply_for() {
    let db = sqlite_db().await;
    let app = requester_app(&db.url, "").await;
    let keys = |v: Value| {
        v.as_array()
            .unwrap()
            .iter()
            .map(|t| t["key"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    let alice: Value = app
        .get_as("alice", "/api/v1/targets")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(keys(alice), ["demo.feature-flags", "team.access"]);
    let admin: Value = app
        .get_as("admin", "/api/v1/targets")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        keys(admin),
        ["demo.feature-flags", "restricted", "team.access"]
    );
}

#[tokio::test]
async fn preview_shows_the_file_and_never_fails() {
    let db = sqlite_db().await;
    let app = requester_app(&db.url, "").await;
    let preview: Value = app
        .get_as("alice", "/api/v1/preview?targetKey=demo.feature-flags")
        .await
        .json()
        .await
        .unwrap();
    let data = &preview["data"];
    assert_eq!(data["path"], "bindings/demo.feature-flags/alice.json");
    assert_eq!(data["action"], "create");
    assert!(data["content"].as_str().unwrap().ends_with("}\n"));
    for bad in [
        "/api/v1/preview",
        "/api/v1/preview?targetKey=nope",
        "/api/v1/preview?targetKey=team.access&subjectId=../x",
    ] {
        let response = app.get_as("alice", bad).await;
        assert_eq!(response.status(), 200, "{bad}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body, json!({ "data": null }), "{bad}");
    }
}

#[tokio::test]
async fn preview_shows_nothing_a_caller_could_not_apply_for() {
    let db = sqlite_db().await;
    let app = requester_app(&db.url, "").await;
    let someone_else: Value = app
        .get_as(
            "alice",
            "/api/v1/preview?targetKey=demo.feature-flags&subjectId=bob",
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        someone_else,
        json!({ "data": null }),
        "self-only target, another subject"
    );
    let restricted: Value = app
        .get_as("alice", "/api/v1/preview?targetKey=restricted")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        restricted,
        json!({ "data": null }),
        "target rule codes apply"
    );
    let operator: Value = app
        .get_as(
            "admin",
            "/api/v1/preview?targetKey=demo.feature-flags&subjectId=bob",
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        operator["data"]["path"],
        "bindings/demo.feature-flags/bob.json"
    );
    let repeated = app
        .get_as("alice", "/api/v1/preview?targetKey=a&targetKey=b")
        .await;
    assert_eq!(
        repeated.status(),
        200,
        "a malformed query is still a preview of nothing"
    );
}

#[tokio::test]
async fn a_malformed_query_string_is_a_json_400() {
    let db = sqlite_db().await;
    let app = requester_app(&db.url, "").await;
    let response = app.get_as("alice", "/api/v1/me/bindings?limit=many").await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "INVALID_ARGUMENT");
    assert!(body["message"].as_str().unwrap().contains("query string"));
}

#[tokio::test]
async fn the_test_window_opens_and_closes_submissions_by_the_clock() {
    let db = sqlite_db().await;
    let now = chrono::Utc::now();
    let window = |from: i64, to: i64| {
        let at = |minutes: i64| {
            (now + chrono::TimeDelta::minutes(minutes))
                .format("%H:%M")
                .to_string()
        };
        format!("{}-{}", at(from), at(to))
    };
    let config = |window: String| {
        crate::helpers::REQUESTER_CONFIG.replace(
            "mode = \"OPEN\"",
            &format!("mode = \"TEST_WINDOW\"\nwindow = \"{window}\"\ntimezone = \"UTC\""),
        )
    };
    let open = crate::helpers::spawn_app(&db.url, &config(window(-60, 60))).await;
    open.wait_until_ready().await;
    assert_eq!(
        open.post_as(
            "alice",
            "/api/v1/applications",
            &apply_body("demo.feature-flags")
        )
        .await
        .status(),
        202
    );
    let closed = crate::helpers::spawn_app(&db.url, &config(window(60, 120))).await;
    closed.wait_until_ready().await;
    let answer = closed
        .post_as(
            "bob",
            "/api/v1/applications",
            &apply_body("demo.feature-flags"),
        )
        .await;
    assert_eq!(answer.status(), 503);
    let access: Value = closed
        .get_as("bob", "/api/v1/access")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        (access["mode"].as_str(), access["open"].as_bool()),
        (Some("TEST_WINDOW"), Some(false))
    );
    assert_eq!(access["window"]["timezone"], "UTC");
}

#[tokio::test]
async fn a_test_window_without_a_window_admits_nobody_and_says_which_keys_to_set() {
    let db = sqlite_db().await;
    let config =
        crate::helpers::REQUESTER_CONFIG.replace("mode = \"OPEN\"", "mode = \"TEST_WINDOW\"");
    let app = crate::helpers::spawn_app(&db.url, &config).await;
    app.wait_until_ready().await;
    let answer = app
        .post_as(
            "alice",
            "/api/v1/applications",
            &apply_body("demo.feature-flags"),
        )
        .await;
    assert_eq!(answer.status(), 503);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["code"], "SERVICE_CLOSED");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("access.window")),
        "{body}"
    );
    let access: Value = app
        .get_as("alice", "/api/v1/access")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(access["open"], false, "{access}");
    assert!(
        access["problem"]
            .as_str()
            .is_some_and(|m| m.contains("access.window")),
        "{access}"
    );
}
