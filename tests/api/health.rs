//! Operations endpoints and the cross-cutting response rules.

use serde_json::Value;

use crate::helpers::{each_backend, spawn_app};

#[tokio::test]
async fn healthz_readyz_and_metrics_answer_on_each_backend() {
    for test_db in each_backend().await {
        let app = spawn_app(&test_db.url, "").await;
        app.wait_until_ready().await;

        let health = app.get("/healthz").await;
        assert_eq!(health.status(), 200, "{}", test_db.name);
        assert!(health.headers().contains_key("x-request-id"));

        let ready = app.get("/readyz").await;
        let body: Value = ready.json().await.unwrap();
        assert_eq!(body["status"], "ready");

        let metrics = app.get("/metrics").await;
        assert_eq!(metrics.status(), 200);
        // The gauge is process-wide and other tests run apps without a
        // database in this process, so only its presence is checked here.
        let text = metrics.text().await.unwrap();
        assert!(
            text.contains("# TYPE changegate_database_ready gauge"),
            "{text}"
        );

        app.stop().await.expect("graceful stop");
    }
}

#[tokio::test]
async fn unknown_paths_get_the_error_json_with_the_callers_request_id() {
    let test_db = crate::helpers::sqlite_db().await;
    let app = spawn_app(&test_db.url, "").await;

    let response = app
        .client
        .get(format!("{}/no/such/thing", app.address))
        .header("x-request-id", "trace-42")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    assert_eq!(response.headers()["x-request-id"], "trace-42");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "NOT_FOUND");
    assert_eq!(body["requestId"], "trace-42");
    assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()));

    let response = app
        .client
        .get(format!("{}/nothing", app.address))
        .header("x-request-id", "bad id with spaces <x>")
        .send()
        .await
        .unwrap();
    let assigned = response.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_ne!(assigned, "bad id with spaces <x>");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["requestId"], assigned.as_str());

    app.stop().await.unwrap();
}
