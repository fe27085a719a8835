//! Outbound webhooks: endpoints through the operators' API (validation,
//! secret shown once, rotation, audit), and deliveries checked with the
//! official Standard Webhooks verifier. Shared test support (a receiver,
//! events, driving the relay and workers) lives here too.

use changegate::clients::health::System;
use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use changegate::config::LiveConfig;
use changegate::db::Db;
use changegate::db::events::{BINDING_STATUS_CHANGED, NewEvent, append_event};
use changegate::db::webhook_endpoints::insert_endpoint;
use changegate::domain::BindingStatus;
use changegate::sealing::KeyRing;
use changegate::signature::WebhookSecret;
use changegate::webhooks::relay;
use changegate::webhooks::worker::Deliverer;
use serde_json::{Value, json};
use standardwebhooks::Webhook;

use crate::helpers::{REQUESTER_CONFIG, each_backend, settings_from, spawn_app};

/// One request the receiver got.
#[derive(Debug, Clone)]
pub struct Arrival {
    pub id: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub at: Instant,
    pub answered: u16,
}

/// What the receiver saw and how it answers.
#[derive(Default)]
pub struct Seen {
    pub arrivals: Mutex<Vec<Arrival>>,
    /// Ids answered 2xx.
    pub delivered: Mutex<HashSet<String>>,
    in_flight: Mutex<HashSet<String>>,
    /// Arrivals of an id already answered 2xx, or still in flight elsewhere.
    pub duplicates: AtomicU64,
    /// Answers to give first, in order: (status, Retry-After seconds).
    pub script: Mutex<VecDeque<(u16, Option<u64>)>>,
    /// Percentage of other requests answered 500 at random.
    pub fail_percent: AtomicU64,
    /// Answer once the script is used up (0 means 200).
    pub default_status: AtomicU64,
    /// How long each answer takes, in milliseconds.
    pub delay_ms: AtomicU64,
    /// Every request as it came in, answered or not (its sender may have
    /// gone before the answer): the id and the body.
    pub received: Mutex<Vec<(String, Bytes)>>,
}

/// A loopback HTTP server standing in for a subscriber.
pub struct Receiver {
    pub url: String,
    pub seen: Arc<Seen>,
}

fn random_percent() -> u64 {
    let mut bytes = [0_u8; 8];
    getrandom::fill(&mut bytes).unwrap();
    u64::from_le_bytes(bytes) % 100
}

async fn receive(
    axum::extract::State(seen): axum::extract::State<Arc<Seen>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let id = headers
        .get("webhook-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    {
        let delivered = seen.delivered.lock().unwrap();
        let mut in_flight = seen.in_flight.lock().unwrap();
        if delivered.contains(&id) || !in_flight.insert(id.clone()) {
            seen.duplicates.fetch_add(1, Ordering::SeqCst);
        }
    }
    seen.received
        .lock()
        .unwrap()
        .push((id.clone(), body.clone()));
    let delay = seen.delay_ms.load(Ordering::SeqCst);
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    let scripted = seen.script.lock().unwrap().pop_front();
    let (status, retry_after) = match scripted {
        Some(answer) => answer,
        None if random_percent() < seen.fail_percent.load(Ordering::SeqCst) => (500, None),
        None => match seen.default_status.load(Ordering::SeqCst) {
            0 => (200, None),
            other => (u16::try_from(other).unwrap(), None),
        },
    };
    {
        let mut delivered = seen.delivered.lock().unwrap();
        seen.in_flight.lock().unwrap().remove(&id);
        if (200..300).contains(&status) {
            delivered.insert(id.clone());
        }
    }
    seen.arrivals.lock().unwrap().push(Arrival {
        id,
        headers,
        body,
        at: Instant::now(),
        answered: status,
    });
    let mut response = StatusCode::from_u16(status).unwrap().into_response();
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert("retry-after", seconds.to_string().parse().unwrap());
    }
    response
}

impl Receiver {
    pub async fn start() -> Self {
        let seen = Arc::new(Seen::default());
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(receive))
            .with_state(seen.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { url, seen }
    }

    pub fn arrivals(&self) -> Vec<Arrival> {
        self.seen.arrivals.lock().unwrap().clone()
    }

    pub fn script(&self, answers: &[(u16, Option<u64>)]) {
        self.seen
            .script
            .lock()
            .unwrap()
            .extend(answers.iter().copied());
    }
}

/// Settings for workers driven by the test: private targets allowed, the
/// background loop effectively off, and `webhooks` keys from `extra` (lines
/// of the `[webhooks]` table).
pub fn hooks_config(extra: &str) -> LiveConfig {
    let (settings, problems) = settings_from(&format!(
        "[webhooks]\nallow_private_targets = true\npoll_interval = \"1h\"\n{extra}"
    ));
    assert!(problems.is_empty(), "{problems:?}");
    LiveConfig::new(settings, None, None)
}

/// The key the workers driven by these tests seal and open secrets with.
pub fn sealing_keys() -> Arc<KeyRing> {
    Arc::new(KeyRing::new(&[42; 32], &[]))
}

/// The `[webhooks]` line giving a service the key of [`sealing_keys`].
pub const SEALING_KEY: &str = "secret_key = \"KioqKioqKioqKioqKioqKioqKioqKioqKioqKioqKio=\"\n";

/// A delivery worker on `db`: one "instance".
pub fn deliverer(db: &Db, config: &LiveConfig) -> Deliverer {
    Deliverer::new(
        db.clone(),
        config.clone(),
        crate::helpers::system_client(System::Webhook),
        sealing_keys(),
    )
}

/// An endpoint stored directly, its secret sealed as the service stores
/// it; answers (id, secret).
pub async fn add_endpoint(db: &Db, url: &str, types: &str) -> (i64, String) {
    let secret = WebhookSecret::generate().expose();
    let mut tx = db.begin().await.unwrap();
    let id = insert_endpoint(&mut tx, url, "", types, &sealing_keys().seal(&secret))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    (id, secret)
}

/// Appends `count` binding events, as flips would.
pub async fn add_events(db: &Db, count: usize) {
    for chunk in (0..count).collect::<Vec<_>>().chunks(1000) {
        let mut tx = db.begin().await.unwrap();
        for n in chunk {
            let operation_id = uuid::Uuid::new_v4().to_string();
            let payload = json!({ "n": n, "note": "ünïcode ✓" }).to_string();
            append_event(
                &mut tx,
                &NewEvent {
                    event_type: BINDING_STATUS_CHANGED,
                    operation_id: &operation_id,
                    subject_id: "alice",
                    target_key: "demo.feature-flags",
                    from_status: Some(BindingStatus::Merged),
                    to_status: BindingStatus::Validated,
                    payload: &payload,
                },
            )
            .await
            .unwrap();
        }
        tx.commit().await.unwrap();
    }
}

/// Deliveries in each status.
pub async fn count_status(db: &Db, status: &str) -> i64 {
    changegate::with_pool!(db, reader, |pool| {
        sqlx::query_scalar("SELECT COUNT(*) FROM webhook_delivery WHERE status = ?")
            .bind(status)
            .fetch_one(pool)
            .await
    })
    .unwrap()
}

/// Relays every event and runs `worker` rounds until nothing is queued or
/// sending, or `deadline` passes.
pub async fn drain(db: &Db, worker: &Deliverer, silent: bool, deadline: Duration) {
    let until = Instant::now() + deadline;
    loop {
        while relay::run_once(db, silent).await.unwrap() != changegate::jobs::Outcome::Idle {}
        worker.run_once().await.unwrap();
        if count_status(db, "queued").await + count_status(db, "sending").await == 0 {
            return;
        }
        assert!(Instant::now() < until, "deliveries still pending");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

const OPERATOR_CONFIG: &str = concat!(
    "[webhooks]\npoll_interval = \"1h\"\n",
    "secret_key = \"KioqKioqKioqKioqKioqKioqKioqKioqKioqKioqKio=\"\n"
);

#[tokio::test]
async fn endpoints_are_validated_show_their_secret_once_and_are_audited() {
    for test_db in each_backend().await {
        let app = spawn_app(
            &test_db.url,
            &format!("{REQUESTER_CONFIG}{OPERATOR_CONFIG}"),
        )
        .await;
        app.wait_until_ready().await;
        let base = "/admin/v1/webhook-endpoints";
        let ok_body = json!({ "url": "https://hooks.example.com/a?token=tok-7f3a&team=ops",
                              "eventTypes": ["binding.status_changed"] });
        assert_eq!(app.post_as("bob", base, &ok_body).await.status(), 403);
        for bad in [
            json!({ "url": "ftp://hooks.example.com/a" }),
            json!({ "url": "not a url" }),
            json!({ "url": "http://127.0.0.1:9/a" }),
            json!({ "url": "http://[::1]/a" }),
            json!({ "url": "https://hooks.example.com/a", "eventTypes": ["a,b"] }),
            json!({ "url": "https://hooks.example.com/a", "extra": 1 }),
            json!({ "url": "https://bot:hunter2@hooks.example.com/a" }),
        ] {
            let answer = app.post_as("admin", base, &bad).await;
            assert_eq!(answer.status(), 400, "{bad} on {}", test_db.name);
        }

        let created = app.post_as("admin", base, &ok_body).await;
        assert_eq!(created.status(), 201);
        let created: Value = created.json().await.unwrap();
        let secret = created["secret"].as_str().unwrap().to_owned();
        assert!(secret.starts_with("whsec_"));
        assert!(Webhook::new(&secret).is_ok());
        assert_eq!(created["eventTypes"], json!(["binding.status_changed"]));
        let id = created["id"].as_i64().unwrap();

        let listed = app.get_as("admin", base).await.text().await.unwrap();
        assert!(listed.contains("hooks.example.com") && listed.contains("team=ops"));
        assert!(!listed.contains(&secret) && !listed.contains("whsec_"));
        assert!(
            !listed.contains("tok-7f3a"),
            "the query's secret is not shown: {listed}"
        );

        let patched = app
            .client
            .patch(format!("{}{base}/{id}", app.address))
            .header("x-auth-request-user", "admin")
            .json(&json!({ "description": "team hook", "eventTypes": [], "enabled": false }))
            .send()
            .await
            .unwrap();
        assert_eq!(patched.status(), 200);
        let patched: Value = patched.json().await.unwrap();
        assert_eq!(patched["description"], "team hook");
        assert_eq!(patched["enabled"], false);
        assert_eq!(patched["eventTypes"], json!([]));
        assert!(patched.get("secret").is_none());

        let rotated = app
            .post_as("admin", &format!("{base}/{id}/rotate"), &json!({}))
            .await;
        assert_eq!(rotated.status(), 200);
        let rotated: Value = rotated.json().await.unwrap();
        let new_secret = rotated["secret"].as_str().unwrap().to_owned();
        assert!(new_secret.starts_with("whsec_") && new_secret != secret);
        assert!(rotated["previousSecretValidUntil"].is_string());

        let deliveries = app
            .get_as("admin", &format!("{base}/{id}/deliveries"))
            .await;
        assert_eq!(deliveries.status(), 200);
        let missing = app
            .get_as("admin", &format!("{base}/999999/deliveries"))
            .await;
        assert_eq!(missing.status(), 404);

        let delete = |path: String| {
            app.client
                .delete(format!("{}{path}", app.address))
                .header("x-auth-request-user", "admin")
                .send()
        };
        assert_eq!(delete(format!("{base}/{id}")).await.unwrap().status(), 204);
        assert_eq!(delete(format!("{base}/{id}")).await.unwrap().status(), 404);

        let audit = app
            .get_as("admin", "/admin/v1/audit")
            .await
            .text()
            .await
            .unwrap();
        for action in [
            "webhook.endpoint.create",
            "webhook.endpoint.update",
            "webhook.endpoint.rotate",
            "webhook.endpoint.delete",
        ] {
            assert!(
                audit.contains(action),
                "{action} audited on {}",
                test_db.name
            );
        }
        assert!(!audit.contains(&secret) && !audit.contains(&new_secret));
        assert!(
            !audit.contains("tok-7f3a") && !audit.contains("hunter2"),
            "{audit}"
        );
        app.stop().await.unwrap();
    }
}

fn official_headers(arrival: &Arrival) -> HeaderMap {
    arrival.headers.clone()
}

#[tokio::test]
async fn deliveries_verify_with_the_official_library_and_a_reserialised_body_does_not() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        let receiver = Receiver::start().await;
        let app = spawn_app(
            &test_db.url,
            &format!("{REQUESTER_CONFIG}[webhooks]\npoll_interval = \"1h\"\nallow_private_targets = true\n{SEALING_KEY}"),
        )
        .await;
        app.wait_until_ready().await;
        let created: Value = app
            .post_as(
                "admin",
                "/admin/v1/webhook-endpoints",
                &json!({ "url": receiver.url }),
            )
            .await
            .json()
            .await
            .unwrap();
        let id = created["id"].as_i64().unwrap();
        let old_secret = created["secret"].as_str().unwrap().to_owned();

        add_events(db, 1).await;
        let config = hooks_config("");
        let worker = deliverer(db, &config);
        drain(db, &worker, false, Duration::from_secs(10)).await;
        let first = receiver.arrivals().pop().expect("one delivery arrived");
        let official = Webhook::new(&old_secret).unwrap();
        official
            .verify(&first.body, &official_headers(&first))
            .expect("the official verifier accepts the delivery");
        let parsed: Value = serde_json::from_slice(&first.body).unwrap();
        assert_eq!(parsed["type"], "binding.status_changed");
        assert_eq!(parsed["data"]["toStatus"], "VALIDATED");
        // The same JSON, serialised differently, is not what was signed.
        let reserialised = serde_json::to_vec_pretty(&parsed).unwrap();
        assert_ne!(reserialised, first.body.to_vec());
        assert!(official.verify(&reserialised, &first.headers).is_err());

        // After a rotation both secrets verify during the grace period.
        let rotated: Value = app
            .post_as(
                "admin",
                &format!("/admin/v1/webhook-endpoints/{id}/rotate"),
                &json!({}),
            )
            .await
            .json()
            .await
            .unwrap();
        let new_secret = rotated["secret"].as_str().unwrap().to_owned();
        add_events(db, 1).await;
        drain(db, &worker, false, Duration::from_secs(10)).await;
        let second = receiver.arrivals().pop().unwrap();
        assert_ne!(second.id, first.id);
        let signatures = second.headers["webhook-signature"].to_str().unwrap();
        assert_eq!(signatures.split(' ').count(), 2, "{signatures}");
        for secret in [&old_secret, &new_secret] {
            Webhook::new(secret)
                .unwrap()
                .verify(&second.body, &second.headers)
                .expect("both secrets verify during the grace period");
        }
        let stranger = WebhookSecret::generate().expose();
        assert!(
            Webhook::new(&stranger)
                .unwrap()
                .verify(&second.body, &second.headers)
                .is_err()
        );
        app.stop().await.unwrap();
    }
}

#[tokio::test]
async fn the_delivery_log_names_each_events_binding_flip_and_operation() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        let app = spawn_app(
            &test_db.url,
            &format!("{REQUESTER_CONFIG}{OPERATOR_CONFIG}"),
        )
        .await;
        app.wait_until_ready().await;
        let (endpoint, _) = add_endpoint(db, "https://hooks.example.com/in", "").await;
        let created = uuid::Uuid::new_v4().to_string();
        let merged = uuid::Uuid::new_v4().to_string();
        let mut tx = db.begin().await.unwrap();
        for (operation_id, subject_id, from_status, to_status) in [
            (&created, "alice", None, BindingStatus::ApprovalSending),
            (
                &merged,
                "bob",
                Some(BindingStatus::Merging),
                BindingStatus::Merged,
            ),
        ] {
            append_event(
                &mut tx,
                &NewEvent {
                    event_type: BINDING_STATUS_CHANGED,
                    operation_id,
                    subject_id,
                    target_key: "team.access",
                    from_status,
                    to_status,
                    payload: "{}",
                },
            )
            .await
            .unwrap();
        }
        tx.commit().await.unwrap();
        // Silent mode: recorded, never sent (no receiver needed).
        while relay::run_once(db, true).await.unwrap() != changegate::jobs::Outcome::Idle {}
        let path = format!("/admin/v1/webhook-endpoints/{endpoint}/deliveries");
        let expected = json!([
            { "operationId": merged, "subjectId": "bob", "targetKey": "team.access",
              "fromStatus": "MERGING", "toStatus": "MERGED", "attempts": 0 },
            { "operationId": created, "subjectId": "alice", "targetKey": "team.access",
              "fromStatus": null, "toStatus": "APPROVAL_SENDING", "attempts": 0 },
        ]);
        let shown = |page: Value| -> Value {
            let keys = [
                "operationId",
                "subjectId",
                "targetKey",
                "fromStatus",
                "toStatus",
                "attempts",
            ];
            page["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|item| {
                    keys.iter()
                        .map(|key| (key.to_string(), item[key].clone()))
                        .collect::<serde_json::Map<_, _>>()
                })
                .collect()
        };
        let page: Value = app.get_as("admin", &path).await.json().await.unwrap();
        assert_eq!(shown(page), expected, "{}", test_db.name);

        // Retention may prune the events before their deliveries: the log
        // still names them, from the body that was (or is to be) sent.
        changegate::with_pool!(db, writer, |pool| {
            sqlx::query("DELETE FROM event")
                .execute(pool)
                .await
                .map(drop)
        })
        .unwrap();
        let page: Value = app.get_as("admin", &path).await.json().await.unwrap();
        assert_eq!(shown(page), expected, "{}", test_db.name);
        app.stop().await.unwrap();
    }
}

#[tokio::test]
async fn only_matching_endpoints_get_a_delivery_and_the_log_shows_it() {
    let test_db = crate::helpers::sqlite_db().await;
    let db = &test_db.db;
    let receiver = Receiver::start().await;
    let (all, _) = add_endpoint(db, &receiver.url, "").await;
    let (other, _) = add_endpoint(db, &receiver.url, ",something.else,").await;
    add_events(db, 3).await;
    let worker = deliverer(db, &hooks_config(""));
    drain(db, &worker, false, Duration::from_secs(10)).await;
    assert_eq!(receiver.arrivals().len(), 3);
    let log = changegate::db::webhook_deliveries::list_for_endpoint(db, all, None, 10)
        .await
        .unwrap();
    assert_eq!(log.len(), 3);
    assert!(
        log.iter()
            .all(|d| d.status == "delivered" && d.attempts == 1)
    );
    let none = changegate::db::webhook_deliveries::list_for_endpoint(db, other, None, 10)
        .await
        .unwrap();
    assert!(none.is_empty());
}

#[tokio::test]
async fn a_running_service_relays_and_delivers_on_its_own() {
    for test_db in each_backend().await {
        let receiver = Receiver::start().await;
        let app = spawn_app(
            &test_db.url,
            &format!(
                "{REQUESTER_CONFIG}[webhooks]\npoll_interval = \"50ms\"\nallow_private_targets = true\n{SEALING_KEY}"
            ),
        )
        .await;
        app.wait_until_ready().await;
        let created = app
            .post_as(
                "admin",
                "/admin/v1/webhook-endpoints",
                &json!({ "url": receiver.url }),
            )
            .await;
        assert_eq!(created.status(), 201);
        add_events(&test_db.db, 3).await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while receiver.seen.delivered.lock().unwrap().len() < 3 {
            assert!(
                Instant::now() < deadline,
                "not delivered on {}",
                test_db.name
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        app.stop().await.unwrap();
    }
}
