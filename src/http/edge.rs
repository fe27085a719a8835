//! The outermost layer of every route: the request id, the request timeout
//! and the request's trace, in one service.
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
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use pin_project_lite::pin_project;
use tokio::task::futures::TaskLocalFuture;
use tokio::time::{Instant, Timeout};
use tower::{Layer, Service};
use tracing::Span;
use tracing::instrument::{Instrument, Instrumented};

use super::error::ApiError;
use super::request_id;

/// Gives every request an id (echoed on the answer and current while it is
/// handled), answers 503 `TIMEOUT` when it takes longer than `limit`, and
/// traces it: a span and a line per request at debug, a line per 5xx answer
/// at error.
#[derive(Clone, Copy)]
pub struct EdgeLayer {
    limit: Duration,
}

impl EdgeLayer {
    /// Requests are bounded by `limit`.
    pub fn new(limit: Duration) -> Self {
        Self { limit }
    }
}

impl<S> Layer<S> for EdgeLayer {
    type Service = Edge<S>;

    fn layer(&self, inner: S) -> Edge<S> {
        Edge {
            inner,
            limit: self.limit,
        }
    }
}

/// See [`EdgeLayer`].
#[derive(Clone)]
pub struct Edge<S> {
    inner: S,
    limit: Duration,
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
/// would cost more than the rest of the edge.
fn span_of(request: &Request, id: &HeaderValue) -> Span {
    // The fields are computed only when the span is enabled.
    tracing::debug_span!(
        "request",
        method = %request.method(),
        route = request
            .extensions()
            .get::<MatchedPath>()
            .map_or("unmatched", MatchedPath::as_str),
        request_id = id.to_str().unwrap_or_default(),
    )
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
        if status.is_server_error() {
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
            Err(_) => Ok(ApiError::Timeout.into_response()),
        })
    }
}
