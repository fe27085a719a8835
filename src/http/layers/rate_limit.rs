//! Per-route rate limiting, by identity or else by client address.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::RouteSpec;
use super::identify::Caller;
use crate::http::error::ApiError;
use crate::observer::observe;
use crate::state::AppState;

/// Middleware: counts the request against its route's bucket. The limit is
/// read from live configuration on every request: `rate_limit.<bucket>`
/// absent → the route's default; blank, 0, negative or unparsable → no limit.
///
/// It runs before idempotency, so a duplicate submission over the limit is
/// answered 429, not DUPLICATE_SUBMIT.
pub async fn rate_limit(
    State((state, spec)): State<(AppState, &'static RouteSpec)>,
    request: Request,
    next: Next,
) -> Response {
    let Some(limit_spec) = &spec.rate_limit else {
        return next.run(request).await;
    };
    let configured = state
        .config
        .current()
        .rate_limit
        .get(limit_spec.bucket)
        .copied();
    let Some(limit) = configured.unwrap_or(Some(limit_spec.default_limit)) else {
        return next.run(request).await;
    };
    // The identity comes first so one person in several tabs or browsers
    // shares one allowance; the address only when there is no identity, with
    // a prefix so the two can never collide.
    let subject = match request.extensions().get::<Caller>() {
        Some(Caller {
            identity: Ok(identity),
            ..
        }) => format!("{}:{}", limit_spec.bucket, identity),
        Some(Caller { client, .. }) => format!("{}:ip:{client}", limit_spec.bucket),
        None => format!("{}:ip:unknown", limit_spec.bucket),
    };
    if state.limiter.try_acquire(&subject, limit) {
        next.run(request).await
    } else {
        observe("rate_limited", || {
            state.observer.rate_limited(limit_spec.bucket)
        });
        ApiError::RateLimited(limit_spec.message).into_response()
    }
}
