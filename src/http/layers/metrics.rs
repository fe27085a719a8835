//! API metrics for every guarded route, and business-activity metrics for the
//! routes on the allow-list. Both only read what is already parsed (route
//! template, method, status) and never the body.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;

use super::RouteSpec;
use crate::observer::observe;
use crate::state::AppState;

/// Runs the rest of the request with API metrics (latency and status per
/// route template, never the raw path, which would make the series unbounded)
/// around business-activity metrics ("received" on arrival, "succeeded" on a
/// 2xx answer, for routes that declare an activity).
pub async fn observed(
    state: &AppState,
    spec: &RouteSpec,
    request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let route = request.extensions().get::<MatchedPath>().cloned();
    let method = request.method().clone();
    if let Some(activity) = spec.activity {
        observe("activity_received", || {
            state.observer.activity_received(activity)
        });
    }
    let response = next.run(request).await;
    let status = response.status();
    if let Some(activity) = spec.activity
        && status.is_success()
    {
        observe("activity_succeeded", || {
            state.observer.activity_succeeded(activity)
        });
    }
    let seconds = started.elapsed().as_secs_f64();
    observe("api_request", || {
        state.observer.api_request(
            route.as_ref().map_or("", MatchedPath::as_str),
            method.as_str(),
            status.as_u16(),
            seconds,
        )
    });
    response
}
