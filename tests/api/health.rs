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

/// Serves `routes` behind the edge layers alone; the address and a client.
async fn serve_with_edge_layers(
    routes: axum::Router,
    request_timeout: std::time::Duration,
) -> (std::net::SocketAddr, reqwest::Client) {
    let app = changegate::http::with_edge_layers(routes, request_timeout);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (address, crate::helpers::plain_client().build().unwrap())
}

#[tokio::test]
async fn a_panicking_handler_answers_a_generic_500_and_the_server_keeps_serving() {
    use std::time::Duration;

    use axum::Router;
    use axum::routing::get;

    let routes = Router::new()
        .route(
            "/boom",
            get(|| async {
                if true {
                    panic!("secret internal detail");
                }
                "unreachable"
            }),
        )
        .route("/fine", get(|| async { "fine" }));
    let (address, client) = serve_with_edge_layers(routes, Duration::from_secs(5)).await;

    let answer = client
        .get(format!("http://{address}/boom"))
        .header("x-request-id", "panic-test")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 500);
    assert_eq!(answer.headers()["x-request-id"], "panic-test");
    let text = answer.text().await.unwrap();
    assert!(!text.contains("secret internal detail"), "{text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        (body["code"].as_str(), body["requestId"].as_str()),
        (Some("INTERNAL"), Some("panic-test"))
    );
    let fine = client
        .get(format!("http://{address}/fine"))
        .send()
        .await
        .unwrap();
    assert_eq!(fine.status(), 200);
}

#[tokio::test]
async fn a_request_over_the_timeout_answers_503_with_its_request_id() {
    use std::time::{Duration, Instant};

    use axum::Router;
    use axum::routing::get;

    let routes = Router::new()
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                "too late"
            }),
        )
        .route("/fine", get(|| async { "fine" }));
    let (address, client) = serve_with_edge_layers(routes, Duration::from_millis(200)).await;

    let started = Instant::now();
    let answer = client
        .get(format!("http://{address}/slow"))
        .header("x-request-id", "slow-1")
        .send()
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(answer.status(), 503);
    assert_eq!(answer.headers()["x-request-id"], "slow-1");
    let body: Value = answer.json().await.unwrap();
    assert_eq!(
        (body["code"].as_str(), body["requestId"].as_str()),
        (Some("TIMEOUT"), Some("slow-1"))
    );
    let fine = client
        .get(format!("http://{address}/fine"))
        .send()
        .await
        .unwrap();
    assert_eq!(fine.status(), 200);
    assert!(fine.headers().contains_key("x-request-id"));
}

#[tokio::test]
async fn request_latency_is_exported_as_a_histogram_per_route_template() {
    let db = crate::helpers::sqlite_db().await;
    let app = spawn_app(&db.url, crate::helpers::REQUESTER_CONFIG).await;
    app.wait_until_ready().await;
    assert_eq!(app.get_as("alice", "/api/v1/targets").await.status(), 200);

    let text = app.get("/metrics").await.text().await.unwrap();
    assert!(
        text.contains("# TYPE changegate_http_request_duration_seconds histogram"),
        "{text}"
    );
    let bucket = text
        .lines()
        .find(|line| {
            line.starts_with("changegate_http_request_duration_seconds_bucket{")
                && line.contains(r#"route="/api/v1/targets""#)
                && line.contains(r#"le="+Inf""#)
        })
        .unwrap_or_else(|| panic!("no +Inf bucket for the route in {text}"));
    let count: u64 = bucket.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(count >= 1, "{bucket}");
    app.stop().await.expect("graceful stop");
}

/// Every metric has its help text (what `promtool check metrics` asks), and
/// the counters alerts take the increase of exist before their first event:
/// an increase needs a sample before it.
#[tokio::test]
async fn every_metric_has_help_and_alerted_counters_start_at_zero() {
    let db = crate::helpers::sqlite_db().await;
    let app = spawn_app(&db.url, "").await;
    app.wait_until_ready().await;

    // The recorder is the process's: this scrape also shows what other
    // tests recorded, all of which must be described too.
    let text = app.get("/metrics").await.text().await.unwrap();
    let undescribed: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|typed| typed.split(' ').next())
        .filter(|name| !text.contains(&format!("# HELP {name} ")))
        .collect();
    assert!(undescribed.is_empty(), "no help text: {undescribed:?}");
    for series in [
        "changegate_executor_rejected_total ",
        "changegate_config_reload_failures_total ",
        "changegate_config_last_reload_successful ",
        "changegate_store_retries_exhausted_total ",
        "changegate_batches_finished_total{outcome=\"failed\"} ",
        "changegate_merge_queue_round_failures_total{round=\"claim\"} ",
        "changegate_merge_queue_round_failures_total{round=\"drive\"} ",
        "changegate_webhook_attempts_total{result=\"failed\"} ",
    ] {
        assert!(
            text.lines().any(|line| line.starts_with(series)),
            "{series}is not exported: {text}"
        );
    }
    app.stop().await.expect("graceful stop");
}
