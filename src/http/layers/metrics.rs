//! API metrics for every guarded route, and business-activity metrics for the
//! routes on the allow-list. Both only read what is already parsed (route
//! template, method, status) and never the body.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use super::RouteSpec;
use crate::observer::observe;
use crate::state::AppState;

/// Middleware: latency and status per route template (never the raw path,
/// which would make the series unbounded).
pub async fn api_metrics(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|path| path.as_str().to_owned())
        .unwrap_or_default();
    let method = request.method().as_str().to_owned();
    let response = next.run(request).await;
    let status = response.status().as_u16();
    let seconds = started.elapsed().as_secs_f64();
    observe("api_request", || {
        state.observer.api_request(&route, &method, status, seconds)
    });
    response
}

/// Middleware: "received" on arrival, "succeeded" on a 2xx answer, for routes
/// that declare an activity.
pub async fn business_activity(
    State((state, spec)): State<(AppState, &'static RouteSpec)>,
    request: Request,
    next: Next,
) -> Response {
    let Some(activity) = spec.activity else {
        return next.run(request).await;
    };
    observe("activity_received", || {
        state.observer.activity_received(activity)
    });
    let response = next.run(request).await;
    if response.status().is_success() {
        observe("activity_succeeded", || {
            state.observer.activity_succeeded(activity)
        });
    }
    response
}
