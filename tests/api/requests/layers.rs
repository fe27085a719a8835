//! The layer order (rate limit → authz → metrics → handler) and what each
//! layer answers, before any body is read.

use std::sync::Arc;

use changegate::app::Parts;
use serde_json::Value;

use super::{RecordingObserver, apply_body, requester_app};
use crate::helpers::{REQUESTER_CONFIG, spawn_app_with, sqlite_db};

const MALFORMED: &str = "{\"targetKey\": ";

async fn post_raw(
    app: &crate::helpers::TestApp,
    user: Option<&str>,
    body: &str,
) -> reqwest::Response {
    let mut request = app
        .client
        .post(format!("{}/api/v1/applications", app.address))
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(user) = user {
        request = request.header("x-auth-request-user", user);
    }
    request.send().await.unwrap()
}

async fn code(response: reqwest::Response) -> (u16, String) {
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    (status, body["code"].as_str().unwrap_or_default().to_owned())
}

#[tokio::test]
async fn a_malformed_body_from_an_unauthenticated_caller_gets_401() {
    let db = sqlite_db().await;
    let app = requester_app(&db.url, "").await;
    assert_eq!(
        code(post_raw(&app, None, MALFORMED).await).await,
        (401, "UNAUTHENTICATED".to_owned())
    );
}

#[tokio::test]
async fn a_malformed_body_without_permission_gets_403_access_denied() {
    let db = sqlite_db().await;
    let app = requester_app(&db.url, "[rate_limit]\napply = 0\n").await;
    let config = REQUESTER_CONFIG.replace(
        "\"changegate.requester\" = [\"*\"]",
        "\"changegate.requester\" = [\"alice\"]",
    );
    let app_restricted = crate::helpers::spawn_app(&db.url, &config).await;
    let response = post_raw(&app_restricted, Some("mallory"), MALFORMED).await;
    assert_eq!(response.status(), 403);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["message"], "Access denied");
    assert_eq!(
        code(post_raw(&app, Some("alice"), MALFORMED).await).await.0,
        400
    );
}

#[tokio::test]
async fn a_malformed_body_over_the_limit_gets_429_and_the_limit_is_per_identity() {
    let db = sqlite_db().await;
    let app = requester_app(&db.url, "[rate_limit]\napply = 2\n").await;
    for _ in 0..2 {
        assert_eq!(
            code(post_raw(&app, Some("alice"), MALFORMED).await).await.0,
            400
        );
    }
    assert_eq!(
        code(post_raw(&app, Some("alice"), MALFORMED).await).await,
        (429, "RATE_LIMITED".to_owned())
    );
    assert_eq!(
        code(post_raw(&app, Some("bob"), MALFORMED).await).await.0,
        400,
        "bob has his own allowance"
    );
}

#[tokio::test]
async fn the_default_limit_is_ten_per_minute_and_zero_disables_it() {
    let db = sqlite_db().await;
    let limited = requester_app(&db.url, "").await;
    for _ in 0..10 {
        assert_ne!(
            post_raw(&limited, Some("carol"), MALFORMED).await.status(),
            429
        );
    }
    assert_eq!(
        post_raw(&limited, Some("carol"), MALFORMED).await.status(),
        429
    );

    let unlimited = requester_app(&db.url, "[rate_limit]\napply = 0\n").await;
    for _ in 0..15 {
        assert_eq!(
            post_raw(&unlimited, Some("carol"), MALFORMED)
                .await
                .status(),
            400
        );
    }
}

#[tokio::test]
async fn without_identity_the_limit_is_by_socket_address_and_forged_forwarding_is_ignored() {
    let db = sqlite_db().await;
    // Loopback is not a trusted proxy here: its headers and X-Forwarded-For count for nothing.
    let app = requester_app(
        &db.url,
        "[identity]\ntrusted_proxies = [\"10.0.0.0/8\"]\n[rate_limit]\napply = 2\n",
    )
    .await;
    let mut answers = Vec::new();
    for i in 0..4 {
        let response = app
            .client
            .post(format!("{}/api/v1/applications", app.address))
            .header("content-type", "application/json")
            .header("x-auth-request-user", "admin")
            .header("x-forwarded-for", format!("198.51.100.{i}"))
            .body(MALFORMED)
            .send()
            .await
            .unwrap();
        answers.push(response.status().as_u16());
    }
    assert_eq!(answers, [401, 401, 429, 429]);
}

#[tokio::test]
async fn metrics_count_allow_listed_activity_and_a_broken_recorder_changes_nothing() {
    let db = sqlite_db().await;
    let observer = Arc::new(RecordingObserver::default());
    let parts = Parts {
        observer: observer.clone(),
        ..Parts::default()
    };
    let app = spawn_app_with(&db.url, REQUESTER_CONFIG, parts).await;
    app.wait_until_ready().await;
    assert_eq!(
        app.post_as(
            "alice",
            "/api/v1/applications",
            &apply_body("demo.feature-flags")
        )
        .await
        .status(),
        202
    );
    assert_eq!(
        app.post_as(
            "alice",
            "/api/v1/applications",
            &apply_body("demo.feature-flags")
        )
        .await
        .status(),
        409
    );
    app.get_as("alice", "/api/v1/targets").await;
    assert_eq!(observer.count("received apply"), 2);
    assert_eq!(observer.count("succeeded apply"), 1, "only the 2xx counts");
    assert_eq!(observer.count("api POST /api/v1/applications 202"), 1);
    assert_eq!(observer.count("api POST /api/v1/applications 409"), 1);
    assert_eq!(observer.count("api GET /api/v1/targets 200"), 1);
    assert_eq!(
        observer.count("received") + observer.count("succeeded"),
        3,
        "reads are not business activity"
    );

    let broken = Arc::new(RecordingObserver {
        panics: true,
        ..RecordingObserver::default()
    });
    let parts = Parts {
        observer: broken,
        ..Parts::default()
    };
    let app = spawn_app_with(
        &db.url,
        &format!("{REQUESTER_CONFIG}[rate_limit]\napply = 1\n"),
        parts,
    )
    .await;
    app.wait_until_ready().await;
    let response = app
        .post_as(
            "bob",
            "/api/v1/applications",
            &apply_body("demo.feature-flags"),
        )
        .await;
    assert_eq!(response.status(), 202);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "ACCEPTED");
    let limited = app
        .post_as(
            "bob",
            "/api/v1/applications",
            &apply_body("demo.feature-flags"),
        )
        .await;
    assert_eq!(
        limited.status(),
        429,
        "a panicking rate-limit metric does not change the answer"
    );
}

/// A permission service granting `changegate.requester` to alice and admin,
/// and `changegate.operator` to admin only.
async fn permission_service() -> String {
    use axum::Json;
    use axum::routing::post;

    let grants = |Json(asked): Json<Value>| async move {
        let held: &[&str] = match asked["identity"].as_str() {
            Some("alice") => &["changegate.requester"],
            Some("admin") => &["changegate.requester", "changegate.operator"],
            _ => &[],
        };
        Json(serde_json::json!({ "granted": held }))
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let routes = axum::Router::new().route("/check", post(grants));
    tokio::spawn(async move { axum::serve(listener, routes).await });
    format!("http://{address}/check")
}

#[tokio::test]
async fn with_the_http_permission_service_the_order_and_the_metrics_are_the_same() {
    let db = sqlite_db().await;
    let config = format!(
        "[authz]\nprovider = \"http\"\nurl = \"{}\"\ntimeout = \"5s\"\n{REQUESTER_CONFIG}[rate_limit]\napply = 2\n",
        permission_service().await
    );
    let observer = Arc::new(RecordingObserver::default());
    let parts = Parts {
        observer: observer.clone(),
        ..Parts::default()
    };
    let app = spawn_app_with(&db.url, &config, parts).await;
    app.wait_until_ready().await;

    assert_eq!(
        code(post_raw(&app, None, MALFORMED).await).await,
        (401, "UNAUTHENTICATED".to_owned())
    );
    let denied = post_raw(&app, Some("bob"), MALFORMED).await;
    assert_eq!(denied.status(), 403);
    let body: Value = denied.json().await.unwrap();
    assert_eq!(body["message"], "Access denied");
    assert_eq!(
        code(post_raw(&app, Some("alice"), MALFORMED).await).await.0,
        400
    );
    let accepted: Value = app
        .post_as(
            "alice",
            "/api/v1/applications",
            &apply_body("demo.feature-flags"),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        code(post_raw(&app, Some("alice"), MALFORMED).await).await,
        (429, "RATE_LIMITED".to_owned())
    );
    assert_eq!(observer.count("received apply"), 2);
    assert_eq!(observer.count("succeeded apply"), 1);
    assert_eq!(observer.count("api POST /api/v1/applications 400"), 1);
    assert_eq!(observer.count("api POST /api/v1/applications 202"), 1);
    assert_eq!(observer.count("limited apply"), 1);

    // The operator flag the service grants reaches the handler.
    let path = format!(
        "/api/v1/operations/{}",
        accepted["operationId"].as_str().unwrap()
    );
    assert_eq!(app.get_as("admin", &path).await.status(), 200);
    assert_eq!(app.get_as("bob", &path).await.status(), 403);
}
