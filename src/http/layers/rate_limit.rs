//! Per-route rate limiting, by identity or else by client address.

use std::net::IpAddr;
use std::time::Instant;

use axum::response::{IntoResponse, Response};

use super::RouteSpec;
use super::identify::Caller;
use crate::config::Settings;
use crate::http::error::ApiError;
use crate::observer::observe;
use crate::state::AppState;

/// Counts the request against its route's bucket; `Some` is the 429 to send.
/// The limit is read from live configuration on every request:
/// `rate_limit.<bucket>` absent → the route's default; blank, 0, negative or
/// unparsable → no limit.
///
/// It runs before idempotency, so a duplicate submission over the limit is
/// answered 429, not DUPLICATE_SUBMIT.
pub fn check(
    state: &AppState,
    settings: &Settings,
    spec: &RouteSpec,
    caller: &Caller,
    arrived: Instant,
) -> Option<Response> {
    let limit_spec = spec.rate_limit.as_ref()?;
    let configured = settings.rate_limit.get(limit_spec.bucket).copied();
    let limit = configured.unwrap_or(Some(limit_spec.default_limit))?;
    // The identity comes first so one person in several tabs or browsers
    // shares one allowance; the address only when there is no identity. The
    // variants keep an identity named like an address apart from it.
    let subject = match caller {
        Caller::Identified(identity) => Subject::Identity(identity.as_str()),
        Caller::Anonymous { client, .. } => Subject::Address(*client),
    };
    let allowed = state
        .limiter
        .try_acquire((limit_spec.bucket, subject), limit, arrived);
    if allowed {
        return None;
    }
    observe("rate_limited", || {
        state.observer.rate_limited(limit_spec.bucket)
    });
    Some(ApiError::RateLimited(limit_spec.message).into_response())
}

/// The message a request of `identity` on `spec`'s route would be refused
/// with now, without counting anything: what a preview tells the caller.
pub fn would_refuse(
    state: &AppState,
    settings: &Settings,
    spec: &RouteSpec,
    identity: &crate::identity::Identity,
) -> Option<&'static str> {
    let limit_spec = spec.rate_limit.as_ref()?;
    let configured = settings.rate_limit.get(limit_spec.bucket).copied();
    let limit = configured.unwrap_or(Some(limit_spec.default_limit))?;
    let subject = Subject::Identity(identity.as_str());
    let admitted = state
        .limiter
        .would_admit((limit_spec.bucket, subject), limit, Instant::now());
    (!admitted).then_some(limit_spec.message)
}

/// Whom a request is counted against, within its bucket.
#[derive(Hash)]
enum Subject<'a> {
    Identity(&'a str),
    Address(IpAddr),
}
