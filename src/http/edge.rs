//! The outermost layer of every route: the request id, the request timeout
//! and the request's trace (its span continues a trusted proxy's W3C trace
//! context), in one service.
//!
//! Hand-written rather than `axum::middleware::from_fn` with tower-http's
//! trace and timeout layers (and its request-id layer, see [`request_id`]):
//! from_fn clones the boxed route and boxes its future on every request, and
//! each layer in the chain adds a future of its own and its own clock reads.
//! Here the route is called directly, its future wrapped in place, and one
//! clock reading serves the deadline and the logged latency.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::BoxError;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{MatchedPath, Request};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use pin_project_lite::pin_project;
use tokio::task::futures::TaskLocalFuture;
use tokio::time::{Instant, Timeout};
use tower::{Layer, Service};
use tracing::Span;
use tracing::instrument::{Instrument, Instrumented};

use super::client_addr::peer_of;
use super::error::ApiError;
use super::request_id;
use crate::config::LiveConfig;
use crate::traces::propagation::{self, TRACEPARENT};

/// Gives every request an id (echoed on the answer and current while it is
/// handled), answers 503 `TIMEOUT` when it takes longer than `limit`, and
/// traces it: a span and a line per request at debug, a line per 5xx answer
/// at error.
#[derive(Clone)]
pub struct EdgeLayer {
    limit: Duration,
    proxies: Option<LiveConfig>,
}

impl EdgeLayer {
    /// Requests are bounded by `limit`; no caller's trace is continued.
    pub fn new(limit: Duration) -> Self {
        Self {
            limit,
            proxies: None,
        }
    }

    /// The same, continuing the trace of requests from
    /// `identity.trusted_proxies` (read live from `config`).
    #[must_use]
    pub fn continuing_traces_from(mut self, config: LiveConfig) -> Self {
        self.proxies = Some(config);
        self
    }
}

impl<S> Layer<S> for EdgeLayer {
    type Service = Edge<S>;

    fn layer(&self, inner: S) -> Edge<S> {
        Edge {
            inner,
            limit: self.limit,
            proxies: self.proxies.clone(),
        }
    }
}

/// See [`EdgeLayer`].
#[derive(Clone)]
pub struct Edge<S> {
    inner: S,
    limit: Duration,
    proxies: Option<LiveConfig>,
}

impl<S, B> Service<Request> for Edge<S>
where
    S: Service<Request, Response = axum::http::Response<B>>,
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = EdgeFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        let id = request_id::of(&mut request);
        let started = Instant::now();
        let span = span_of(&request, &id);
        // Only a span that is exported (traces on) has a trace to continue.
        if !span.is_disabled()
            && request.headers().contains_key(TRACEPARENT)
            && let Some(config) = &self.proxies
        {
            let peer = peer_of(&request);
            let trusted = &config.load().identity.trusted_proxies;
            if trusted.iter().any(|net| net.contains(&peer)) {
                propagation::continue_incoming(&span, request.headers());
            }
        }
        let answer = span.in_scope(|| self.inner.call(request));
        let bounded = Bounded {
            timeout: tokio::time::timeout_at(started + self.limit, answer),
        };
        EdgeFuture {
            scoped: request_id::scope(id.clone(), bounded).instrument(span),
            id: Some(id),
            started,
        }
    }
}

/// The request's span, at debug: the id reaches every logged line without a
/// span (telemetry::WithRequestId), and an enabled span on every request
/// would cost more than the rest of the edge. Exported traces enable it
/// whatever the log level (crate::traces).
fn span_of(request: &Request, id: &HeaderValue) -> Span {
    // The fields are computed only when the span is enabled.
    tracing::debug_span!(
        "request",
        otel.name = format!("{} {}", request.method(), route_of(request)),
        otel.kind = "server",
        method = %request.method(),
        route = route_of(request),
        request_id = id.to_str().unwrap_or_default(),
        status = tracing::field::Empty,
    )
}

fn route_of(request: &Request) -> &str {
    request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str)
}

pin_project! {
    /// The route's answer with the request id on it.
    pub struct EdgeFuture<F> {
        #[pin]
        scoped: Instrumented<TaskLocalFuture<HeaderValue, Bounded<F>>>,
        id: Option<HeaderValue>,
        started: Instant,
    }
}

impl<F, E> Future for EdgeFuture<F>
where
    Bounded<F>: Future<Output = Result<Response, E>>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let mut response = ready!(this.scoped.as_mut().poll(cx))?;
        let span = this.scoped.span();
        let status = response.status();
        span.record("status", status.as_u16());
        // A 500 is changegate failing at its job. Every other answer is
        // logged where its cause is known, at the level of that cause: a
        // database that cannot be used, a route too slow, a probe while
        // starting; a 4xx is the caller's.
        if status == StatusCode::INTERNAL_SERVER_ERROR {
            let latency = this.started.elapsed();
            tracing::error!(parent: span, status = status.as_u16(), ?latency, "request failed");
        } else {
            tracing::debug!(parent: span, status = status.as_u16(), latency = ?this.started.elapsed(), "finished processing request");
        }
        if let Some(id) = this.id.take() {
            response.headers_mut().insert(request_id::HEADER, id);
        }
        Poll::Ready(Ok(response))
    }
}

pin_project! {
    /// The route's answer, or 503 when it is late. Polled inside the id's
    /// scope, so the timeout's error body carries the request id.
    pub struct Bounded<F> {
        #[pin]
        timeout: Timeout<F>,
    }
}

impl<F, B, E> Future for Bounded<F>
where
    F: Future<Output = Result<axum::http::Response<B>, E>>,
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Poll::Ready(match ready!(self.project().timeout.poll(cx)) {
            Ok(answer) => answer.map(|response| response.map(Body::new)),
            Err(_) => {
                tracing::warn!("the route took longer than its timeout; answered 503");
                Ok(ApiError::Timeout.into_response())
            }
        })
    }
}
