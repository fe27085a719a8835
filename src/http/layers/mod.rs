//! The cross-cutting layers of the API routes, in the order SPEC §3 fixes:
//! rate limit → authz → API metrics → business-activity metrics → handler.
//! Rate limit and authz run before any body is read, so a malformed body can
//! never earn a 400 ahead of a 401, 403 or 429; they write their own answers.

pub mod authz;
pub mod identify;
pub mod limiter;
pub mod metrics;
pub mod rate_limit;

use axum::extract::{Request, State};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::Response;
use axum::routing::MethodRouter;

use crate::state::AppState;

/// How a route is guarded, declared next to the route.
#[derive(Debug)]
pub struct RouteSpec {
    /// Route name: the key of its rule codes in `[authz.rules]`.
    pub name: &'static str,
    /// Rate limit, if the route has one.
    pub rate_limit: Option<RateLimitSpec>,
    /// Business activity counted for this route (the allow-list), if any.
    pub activity: Option<&'static str>,
}

/// A route's rate limit: requests per subject per minute.
#[derive(Debug)]
pub struct RateLimitSpec {
    /// Bucket, also the key in `[rate_limit]` that overrides the default.
    pub bucket: &'static str,
    /// The limit when `rate_limit.<bucket>` is absent.
    pub default_limit: u32,
    /// What the caller is told when over the limit.
    pub message: &'static str,
}

/// Wraps a route in its layers, as one middleware that runs them in the
/// fixed order (one service in the chain rather than four keeps the
/// per-request cost of the stack small).
pub fn guard(
    state: &AppState,
    spec: &'static RouteSpec,
    route: MethodRouter<AppState>,
) -> MethodRouter<AppState> {
    route.route_layer(from_fn_with_state((state.clone(), spec), guarded))
}

async fn guarded(
    State((state, spec)): State<(AppState, &'static RouteSpec)>,
    mut request: Request,
    next: Next,
) -> Response {
    // Resolved here rather than in a layer of its own: every API route is
    // guarded, and one service fewer in the chain is measurably cheaper.
    let caller = identify::resolve(&state, &request);
    if let Some(refused) = rate_limit::check(&state, spec, &caller) {
        return refused;
    }
    match authz::check(&state, spec, caller.identity).await {
        Ok(authorized) => {
            request.extensions_mut().insert(authorized);
        }
        Err(refused) => return refused,
    }
    metrics::observed(&state, spec, request, next).await
}
