//! Per-route authorisation: 401 without identity, 403 `Access denied` without
//! permission, before the body is read.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::RouteSpec;
use crate::authz::{PermissionError, static_route_access};
use crate::config::Settings;
use crate::http::error::ApiError;
use crate::identity::{Identity, IdentityError};
use crate::state::AppState;

/// The `[authz.rules]` entry that makes an identity an operator (who may, for
/// example, read other people's requests). Checked in the same round trip as
/// the route's own rule codes.
pub const OPERATOR_RULE: &str = "operator";

/// The authorised caller, in the request extensions after [`check`].
#[derive(Debug, Clone)]
pub struct Authorized {
    /// Who.
    pub identity: Identity,
    /// Whether they also hold the operator rule.
    pub operator: bool,
}

/// The outcome of [`check`]: `Err` is the 401 or 403 to send.
pub type Outcome = Result<Authorized, ApiError>;

/// What [`check`] decided.
pub enum Decision {
    /// Decided without waiting: no identity, no rule, or the static provider.
    Now(Outcome),
    /// Decided when the HTTP provider answers.
    Later(Pin<Box<dyn Future<Output = Outcome> + Send>>),
}

/// Denies unless the caller holds one of the route's rule codes. A missing
/// rule, a provider error or a timeout denies.
pub fn check(
    state: &AppState,
    settings: arc_swap::Guard<Arc<Settings>>,
    spec: &'static RouteSpec,
    identity: Result<Identity, IdentityError>,
) -> Decision {
    let Ok(identity) = identity else {
        return Decision::Now(Err(ApiError::Unauthenticated));
    };
    let Some((route_codes, operator_codes)) = rule_codes(&settings, spec) else {
        return Decision::Now(Err(ApiError::Forbidden));
    };
    if let Some(access) =
        static_route_access(&settings.authz, &identity, route_codes, operator_codes)
    {
        return Decision::Now(decide(spec, identity, Ok(access)));
    }
    // Owned for the wait; next to a network round trip the copies are free.
    let (route_codes, operator_codes) = (route_codes.to_vec(), operator_codes.to_vec());
    let settings = arc_swap::Guard::into_inner(settings);
    let permissions = state.permissions.clone();
    Decision::Later(Box::pin(async move {
        let access = permissions
            .route_access(&settings.authz, &identity, &route_codes, &operator_codes)
            .await;
        decide(spec, identity, access)
    }))
}

/// The route's rule codes and the operator's; `None` (and a warning) when the
/// route has no valid rule.
fn rule_codes<'a>(
    settings: &'a Settings,
    spec: &RouteSpec,
) -> Option<(&'a [String], &'a [String])> {
    let Some(Some(route_codes)) = settings.authz.rules.get(spec.name) else {
        tracing::warn!(
            route = spec.name,
            "no valid authz rule for this route; denying"
        );
        return None;
    };
    let operator_codes: &[String] = match settings.authz.rules.get(OPERATOR_RULE) {
        Some(Some(codes)) => codes,
        _ => &[],
    };
    Some((route_codes, operator_codes))
}

fn decide(
    spec: &RouteSpec,
    identity: Identity,
    access: Result<(bool, bool), PermissionError>,
) -> Outcome {
    match access {
        Ok((true, operator)) => Ok(Authorized { identity, operator }),
        Ok((false, _)) => Err(ApiError::Forbidden),
        Err(err) => {
            tracing::warn!(route = spec.name, "permission check failed; denying: {err}");
            Err(ApiError::Forbidden)
        }
    }
}
