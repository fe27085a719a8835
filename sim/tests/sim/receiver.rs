//! A tiny callback receiver standing in for changegate's `/callbacks/*`: it verifies the
//! Standard Webhooks signature with the official `standardwebhooks` crate, answers like
//! SPEC §2.2 (401 on a bad signature, `OK` or `DUPLICATE` by `callbackId`), can be told to
//! fail the next calls, and records everything it got. It serves plain HTTP, as changegate
//! does, or HTTPS, as the ingress in front of it may.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use axum_server::tls_rustls::RustlsConfig;
use changegate_sim::tls::ServerTls;
use serde_json::{Value, json};
use standardwebhooks::Webhook;
use tokio::net::TcpListener;

/// One callback as received.
#[derive(Clone, Debug)]
pub struct Received {
    /// The request headers.
    pub headers: HeaderMap,
    /// The body, `Null` when it is not JSON.
    pub body: Value,
    /// The outcome of signature verification: the official library's error text on failure.
    pub verified: Result<(), String>,
    /// The status answered.
    pub status: u16,
    /// When it arrived.
    pub at: Instant,
}

impl Received {
    /// A header that must be present and ASCII.
    pub fn header(&self, name: &str) -> &str {
        self.headers[name].to_str().expect("ascii header")
    }
}

#[derive(Default)]
struct Inner {
    received: Vec<Received>,
    seen: HashSet<String>,
    /// Statuses to answer to the next verified calls instead of the normal answer.
    script: VecDeque<u16>,
}

#[derive(Clone)]
struct Ctx {
    webhook: Arc<Webhook>,
    inner: Arc<Mutex<Inner>>,
}

/// A running receiver; dropping it stops the server.
pub struct Receiver {
    base_url: String,
    inner: Arc<Mutex<Inner>>,
    server: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// Serves `POST /callbacks/{kind}` on `127.0.0.1:0`, accepting the `whsec_` `secret`.
    pub async fn start(secret: &str) -> Self {
        Self::start_with(secret, None).await
    }

    /// Like `start`, serving HTTPS only with `tls`, as changegate behind an ingress.
    pub async fn start_https(secret: &str, tls: &ServerTls) -> Self {
        Self::start_with(secret, Some(tls)).await
    }

    async fn start_with(secret: &str, tls: Option<&ServerTls>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let scheme = if tls.is_some() { "https" } else { "http" };
        let base_url = format!("{scheme}://{}", listener.local_addr().expect("addr"));
        let inner = Arc::new(Mutex::new(Inner::default()));
        let ctx = Ctx {
            webhook: Arc::new(Webhook::new(secret).expect("a whsec_ secret")),
            inner: Arc::clone(&inner),
        };
        let app = Router::new()
            .route("/callbacks/{kind}", post(receive))
            .with_state(ctx);
        let server = match tls {
            None => tokio::spawn(async move {
                axum::serve(listener, app).await.expect("receiver serves");
            }),
            Some(tls) => {
                let config = RustlsConfig::from_config(Arc::new(tls.server_config().unwrap()));
                let listener = listener.into_std().unwrap();
                let server = axum_server::from_tcp_rustls(listener, config).unwrap();
                tokio::spawn(async move {
                    let app = app.into_make_service();
                    server.serve(app).await.expect("receiver serves");
                })
            }
        };
        Self {
            base_url,
            inner,
            server,
        }
    }

    /// `{base_url}/callbacks/{kind}`.
    pub fn url(&self, kind: &str) -> String {
        format!("{}/callbacks/{kind}", self.base_url)
    }

    /// Answers `status` to the next verified callback, before normal answers resume.
    pub fn fail_next(&self, status: u16) {
        self.inner
            .lock()
            .expect("receiver state")
            .script
            .push_back(status);
    }

    /// Every callback so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        self.inner.lock().expect("receiver state").received.clone()
    }

    /// Waits until `count` callbacks arrived (panics after `timeout`).
    pub async fn wait_for(&self, count: usize, timeout: Duration) -> Vec<Received> {
        let deadline = Instant::now() + timeout;
        loop {
            let received = self.received();
            if received.len() >= count {
                return received;
            }
            assert!(
                Instant::now() < deadline,
                "expected {count} callbacks, got {received:#?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Asserts that no more than `count` callbacks arrive during `window`.
    pub async fn assert_stays_at(&self, count: usize, window: Duration) {
        tokio::time::sleep(window).await;
        let received = self.received();
        assert_eq!(received.len(), count, "unexpected callbacks: {received:#?}");
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn receive(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, Json<Value>) {
    let verified = ctx
        .webhook
        .verify(&body, &headers)
        .map_err(|err| err.to_string());
    let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let mut inner = ctx.inner.lock().expect("receiver state");
    let (status, answer) = if verified.is_err() {
        (StatusCode::UNAUTHORIZED, json!({ "code": "UNAUTHORIZED" }))
    } else if let Some(code) = inner.script.pop_front() {
        let status = StatusCode::from_u16(code).expect("valid status");
        (status, json!({ "code": "UNAVAILABLE" }))
    } else if inner.seen.insert(parsed["callbackId"].to_string()) {
        (StatusCode::OK, json!({ "code": "OK" }))
    } else {
        (StatusCode::OK, json!({ "code": "DUPLICATE" }))
    };
    inner.received.push(Received {
        headers,
        body: parsed,
        verified,
        status: status.as_u16(),
        at: Instant::now(),
    });
    (status, Json(answer))
}
