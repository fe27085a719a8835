//! Traces: changegate's spans reach an OTLP/HTTP collector (one kept here)
//! with their parents, links and attributes, and every system changegate
//! calls (GitLab, the approval system, the permission service, webhook
//! receivers) hears the trace in `traceparent`.
//!
//! Each test exports through a subscriber of its own thread. Beside the
//! rest of the suite, whose tests install theirs too, spans were at times
//! not recorded (tracing caches per call site whether anyone listens), so
//! these run only with `CHANGEGATE_TEST_TRACES=1`, in a process of their
//! own: `CHANGEGATE_TEST_TRACES=1 cargo test --test api -- traces::`, as
//! CI does. A service has one subscriber for its whole life.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use prost::Message;
use serde_json::Value;
use tracing::subscriber::DefaultGuard;
use tracing_subscriber::layer::SubscriberExt;

use changegate::clients::http::Outbound;
use changegate::traces::Traces;

use crate::helpers::{TestApp, settings_from, spawn_app, sqlite_db};
use crate::requests::apply_body;
use crate::workflow::end_to_end::world;
use crate::workflow::wait_for;

/// The trace and span of the caller in front of changegate.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER: &str = "00f067aa0ba902b7";

fn traceparent() -> String {
    format!("00-{TRACE}-{CALLER}-01")
}

/// An OTLP/HTTP collector that keeps every span sent to it.
#[derive(Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<(String, Span)>>>,
}

impl Collector {
    /// Listens on loopback; returns the collector and its base URL.
    async fn start() -> (Self, String) {
        let collector = Self::default();
        let app = Router::new()
            .route("/v1/traces", post(receive))
            .with_state(collector.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (collector, url)
    }

    /// The spans received, each with its service's name.
    fn spans(&self) -> Vec<(String, Span)> {
        self.spans.lock().unwrap().clone()
    }
}

async fn receive(State(collector): State<Collector>, body: Bytes) -> Vec<u8> {
    let request = ExportTraceServiceRequest::decode(body).unwrap();
    let mut spans = collector.spans.lock().unwrap();
    for resource in request.resource_spans {
        let service = resource
            .resource
            .as_ref()
            .and_then(|resource| text(&resource.attributes, "service.name"))
            .unwrap_or_default();
        for scope in resource.scope_spans {
            spans.extend(scope.spans.into_iter().map(|span| (service.clone(), span)));
        }
    }
    // An empty ExportTraceServiceResponse: everything accepted.
    Vec::new()
}

/// Exports this test's spans to `collector_url`, configured as an operator
/// would; the guard keeps them on this test's thread (its runtime's only).
fn export_to(collector_url: &str) -> (Traces, DefaultGuard) {
    let (settings, problems) = settings_from(&format!(
        "[telemetry]\notlp_endpoint = {collector_url:?}\nservice_name = \"changegate-test\"\n"
    ));
    assert!(problems.is_empty(), "{problems:?}");
    let traces = Traces::start(&settings.telemetry, &Outbound::from_platform().unwrap())
        .unwrap()
        .expect("an endpoint starts the export");
    let guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(traces.layer()));
    (traces, guard)
}

fn text(attributes: &[KeyValue], key: &str) -> Option<String> {
    let value = attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?;
    match value.value.as_ref()? {
        AnyValue::StringValue(text) => Some(text.clone()),
        AnyValue::IntValue(number) => Some(number.to_string()),
        _ => None,
    }
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    text(&span.attributes, key)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn named<'a>(spans: &'a [Span], prefix: &str) -> Vec<&'a Span> {
    spans
        .iter()
        .filter(|span| span.name.starts_with(prefix))
        .collect()
}

/// Whether `span` links to the trace of the caller, for `operation_id`.
fn links_to_caller(span: &Span, operation_id: &str) -> bool {
    span.links.iter().any(|link| {
        hex(&link.trace_id) == TRACE
            && text(&link.attributes, "operation.id").as_deref() == Some(operation_id)
    })
}

async fn get_traced(app: &TestApp, request_id: &str) {
    let answer = app
        .client
        .get(format!("{}/healthz", app.address))
        .header("traceparent", traceparent())
        .header("x-request-id", request_id)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
}

/// `alice` applies for the demo target through a trusted proxy that sends
/// the caller's trace.
async fn apply_traced(app: &TestApp) -> reqwest::Response {
    app.client
        .post(format!("{}/api/v1/applications", app.address))
        .header("x-auth-request-user", "alice")
        .header("traceparent", traceparent())
        .json(&apply_body("demo.feature-flags"))
        .send()
        .await
        .unwrap()
}

/// Whether the trace tests run here; says so when they do not.
fn enabled(test: &str) -> bool {
    let on = std::env::var(TRACES_VAR).is_ok_and(|value| value == "1");
    if !on {
        eprintln!("skipped {test}: set {TRACES_VAR}=1 and run traces:: alone");
    }
    on
}

const TRACES_VAR: &str = "CHANGEGATE_TEST_TRACES";

#[tokio::test]
async fn a_request_continues_the_trace_of_a_trusted_proxy_only() {
    if !enabled("a_request_continues_the_trace_of_a_trusted_proxy_only") {
        return;
    }
    let (collector, url) = Collector::start().await;
    let (traces, _guard) = export_to(&url);
    let (trusted_db, untrusting_db) = (sqlite_db().await, sqlite_db().await);
    let trusted = spawn_app(&trusted_db.url, "").await;
    let untrusting = spawn_app(
        &untrusting_db.url,
        "[identity]\ntrusted_proxies = [\"10.0.0.0/8\"]\n",
    )
    .await;
    get_traced(&trusted, "from-a-proxy").await;
    get_traced(&untrusting, "from-anyone").await;
    trusted.stop().await.unwrap();
    untrusting.stop().await.unwrap();
    traces.shutdown().await;

    let spans = collector.spans();
    let server_span = |request_id: &str| {
        spans
            .iter()
            .find(|(_, span)| attribute(span, "request_id").as_deref() == Some(request_id))
            .unwrap_or_else(|| panic!("no span of {request_id} in {spans:?}"))
            .clone()
    };
    let (service, continued) = server_span("from-a-proxy");
    assert_eq!(service, "changegate-test");
    assert_eq!(continued.name, "GET /healthz");
    assert_eq!(continued.kind, SpanKind::Server as i32);
    assert_eq!(hex(&continued.trace_id), TRACE);
    assert_eq!(hex(&continued.parent_span_id), CALLER);
    assert_eq!(attribute(&continued, "method").as_deref(), Some("GET"));
    assert_eq!(attribute(&continued, "route").as_deref(), Some("/healthz"));
    assert_eq!(attribute(&continued, "status").as_deref(), Some("200"));

    let (_, fresh) = server_span("from-anyone");
    assert_ne!(
        hex(&fresh.trace_id),
        TRACE,
        "an untrusted caller's trace is not taken"
    );
    assert!(fresh.parent_span_id.is_empty(), "a new trace: {fresh:?}");
}

#[tokio::test]
async fn an_apply_is_one_trace_with_its_steps_and_linked_batch_rounds_and_callbacks() {
    if !enabled("an_apply_is_one_trace_with_its_steps_and_linked_batch_rounds_and_callbacks") {
        return;
    }
    let (collector, url) = Collector::start().await;
    let (traces, _guard) = export_to(&url);
    let db = sqlite_db().await;
    let w = world(&db.url, "").await;
    let answer: Value = apply_traced(&w.app).await.json().await.unwrap();
    let id = answer["operationId"].as_str().unwrap().to_owned();
    let view = wait_for(&w.app, &id, |v| {
        v["status"] == "VALIDATED" || v["next"] == "CONTACT_TEAM"
    })
    .await;
    assert_eq!(view["status"], "VALIDATED", "{view}");
    let iid = view["mergeRequest"]["iid"].as_i64().unwrap().to_string();

    // Every call out carried the trace: the approval the apply's own.
    let approvals = w.approval.requests();
    assert!(!approvals.is_empty());
    for request in &approvals {
        let sent = request.traceparent.as_deref().unwrap_or_default();
        assert!(sent.contains(TRACE), "approval request with {sent:?}");
    }
    let gitlab_calls = w.gitlab.requests();
    assert!(!gitlab_calls.is_empty());
    for call in &gitlab_calls {
        assert!(
            call.traceparent.is_some(),
            "GitLab call without traceparent: {call:?}"
        );
    }
    drop(w.deploy);
    w.app.stop().await.unwrap();
    traces.shutdown().await;

    let spans: Vec<Span> = collector.spans().into_iter().map(|(_, s)| s).collect();
    let in_trace = |span: &Span| hex(&span.trace_id) == TRACE;

    let apply = named(&spans, "POST /api/v1/applications");
    assert_eq!(apply.len(), 1, "{apply:?}");
    assert!(in_trace(apply[0]));
    assert_eq!(
        attribute(apply[0], "operation.id").as_deref(),
        Some(id.as_str())
    );

    // The steps are children of the apply, though run later by a worker.
    let steps = named(&spans, "step ");
    assert!(!steps.is_empty(), "no step spans");
    for step in &steps {
        assert!(in_trace(step), "{step:?}");
        assert_eq!(
            attribute(step, "operation.id").as_deref(),
            Some(id.as_str())
        );
        assert!(attribute(step, "step").is_some());
    }
    assert!(
        steps
            .iter()
            .any(|step| step.parent_span_id == apply[0].span_id)
    );
    let approval_call = named(&spans, "POST approval");
    assert_eq!(approval_call.len(), 1, "{approval_call:?}");
    assert_eq!(approval_call[0].kind, SpanKind::Client as i32);
    assert!(
        steps
            .iter()
            .any(|step| step.span_id == approval_call[0].parent_span_id)
    );

    // A batch round works for all its members: it links to each one's apply.
    let rounds = named(&spans, "batch round");
    assert!(!rounds.is_empty(), "no batch round spans");
    for round in &rounds {
        assert!(links_to_caller(round, &id), "{round:?}");
        assert!(attribute(round, "batch.id").is_some());
    }
    assert!(
        rounds
            .iter()
            .any(|round| attribute(round, "mr.iid").as_deref() == Some(iid.as_str()))
    );
    let round_ids: Vec<&[u8]> = rounds.iter().map(|round| &round.span_id[..]).collect();
    let gitlab_spans: Vec<&Span> = spans
        .iter()
        .filter(|span| span.name.ends_with(" gitlab"))
        .collect();
    assert!(
        gitlab_spans
            .iter()
            .any(|call| round_ids.contains(&&call.parent_span_id[..])),
        "GitLab calls inside the batch rounds"
    );

    // The callbacks arrive from outside and link back to the apply.
    for (route, key, value) in [
        ("POST /callbacks/approval", "operation.id", id.as_str()),
        ("POST /callbacks/deploy", "mr.iid", iid.as_str()),
    ] {
        let callbacks = named(&spans, route);
        assert!(
            callbacks.iter().any(|callback| {
                links_to_caller(callback, &id) && attribute(callback, key).as_deref() == Some(value)
            }),
            "{route}: {callbacks:?}"
        );
    }
}

#[tokio::test]
async fn without_an_endpoint_nothing_is_exported_kept_or_sent() {
    if !enabled("without_an_endpoint_nothing_is_exported_kept_or_sent") {
        return;
    }
    let (settings, _) = settings_from("");
    assert!(
        Traces::start(&settings.telemetry, &Outbound::from_platform().unwrap())
            .unwrap()
            .is_none()
    );
    let db = sqlite_db().await;
    let w = world(&db.url, "").await;
    let answer: Value = apply_traced(&w.app).await.json().await.unwrap();
    let id = answer["operationId"].as_str().unwrap().to_owned();
    wait_for(&w.app, &id, |v| v["status"] == "VALIDATED").await;
    assert!(
        w.approval
            .requests()
            .iter()
            .all(|r| r.traceparent.is_none())
    );
    assert!(w.gitlab.requests().iter().all(|r| r.traceparent.is_none()));
}

/// A permission service granting `alice` the requester rule, keeping the
/// `traceparent` of every check it is asked.
async fn traced_permission_service() -> (String, Arc<Mutex<Vec<Option<String>>>>) {
    use axum::Json;
    use axum::http::HeaderMap;

    let heard = Arc::new(Mutex::new(Vec::new()));
    let kept = heard.clone();
    let check = move |headers: HeaderMap, Json(asked): Json<Value>| {
        let kept = kept.clone();
        async move {
            let traceparent = headers
                .get("traceparent")
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned);
            kept.lock().unwrap().push(traceparent);
            let granted: &[&str] = match asked["identity"].as_str() {
                Some("alice") => &["changegate.requester"],
                _ => &[],
            };
            Json(serde_json::json!({ "granted": granted }))
        }
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let routes = Router::new().route("/check", post(check));
    tokio::spawn(async move { axum::serve(listener, routes).await });
    (format!("http://{address}/check"), heard)
}

/// A W3C traceparent's trace id and parent span id, if well formed.
fn trace_and_parent(traceparent: &str) -> Option<(String, String)> {
    let parts: Vec<&str> = traceparent.split('-').collect();
    match parts.as_slice() {
        ["00", trace, parent, _flags] if trace.len() == 32 && parent.len() == 16 => {
            Some(((*trace).to_owned(), (*parent).to_owned()))
        }
        _ => None,
    }
}

#[tokio::test]
async fn the_permission_service_and_webhook_receivers_hear_the_trace() {
    if !enabled("the_permission_service_and_webhook_receivers_hear_the_trace") {
        return;
    }
    use crate::webhooks::{Receiver, SEALING_KEY, add_endpoint};

    let (collector, url) = Collector::start().await;
    let (traces, _guard) = export_to(&url);

    // The permission check of a request runs inside its span: the caller's
    // trace reaches the permission service. A subscriber hears each flip of
    // the request's binding, from a delivery span linked to the request.
    let (permissions, heard) = traced_permission_service().await;
    let receiver = Receiver::start().await;
    let db = sqlite_db().await;
    add_endpoint(&db.db, &receiver.url, "").await;
    let app = spawn_app(
        &db.url,
        &format!(
            "[authz]\nprovider = \"http\"\nurl = \"{permissions}\"\ntimeout = \"5s\"\n{}\
             [webhooks]\npoll_interval = \"50ms\"\nallow_private_targets = true\n{SEALING_KEY}",
            crate::helpers::REQUESTER_CONFIG
        ),
    )
    .await;
    app.wait_until_ready().await;
    let applied = apply_traced(&app).await;
    assert_eq!(applied.status(), 202);
    let operation_id = applied.json::<serde_json::Value>().await.unwrap()["operationId"]
        .as_str()
        .unwrap()
        .to_owned();
    // Submitted as APPROVAL_SENDING, then APPROVAL_SENT: two flips.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while receiver.arrivals().len() < 2 {
        assert!(std::time::Instant::now() < deadline, "not delivered");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    app.stop().await.unwrap();
    let checks = heard.lock().unwrap().clone();
    assert!(!checks.is_empty(), "the permission service was asked");
    for check in &checks {
        let (trace, _) = check
            .as_deref()
            .and_then(trace_and_parent)
            .unwrap_or_else(|| panic!("a check without a traceparent: {check:?}"));
        assert_eq!(trace, TRACE);
    }
    let arrivals = receiver.arrivals();
    let sent: Vec<(String, String)> = arrivals
        .iter()
        .map(|arrival| {
            arrival
                .headers
                .get("traceparent")
                .and_then(|value| value.to_str().ok())
                .and_then(trace_and_parent)
                .expect("the delivery carries a traceparent")
        })
        .collect();
    traces.shutdown().await;

    let spans: Vec<Span> = collector.spans().into_iter().map(|(_, s)| s).collect();
    let checks = named(&spans, "POST authz");
    assert_eq!(checks.len(), heard.lock().unwrap().len(), "{spans:?}");
    assert!(checks.iter().all(|span| hex(&span.trace_id) == TRACE));
    // Each delivery is sent from its own client span, named in its
    // traceparent, inside a delivery span linked to the submitting request.
    let posts = named(&spans, "POST webhook");
    assert_eq!(posts.len(), arrivals.len(), "{spans:?}");
    for (trace, span_id) in &sent {
        let post = posts
            .iter()
            .find(|span| &hex(&span.span_id) == span_id)
            .expect("the receiver heard a delivery's own span");
        assert_eq!(&hex(&post.trace_id), trace);
        assert_eq!(post.kind, SpanKind::Client as i32);
        let delivery = spans
            .iter()
            .find(|span| span.span_id == post.parent_span_id)
            .expect("the POST's parent span was exported");
        assert_eq!(delivery.name, "webhook delivery");
        assert!(
            links_to_caller(delivery, &operation_id),
            "{delivery:?} does not link to the request that submitted {operation_id}"
        );
    }
}
