//! Per-route authorisation: 401 without identity, 403 `Access denied` without
//! permission, before the body is read.

use axum::response::{IntoResponse, Response};

use super::RouteSpec;
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

/// Denies unless the caller holds one of the route's rule codes; `Err` is
/// the 401 or 403 to send. A missing rule, a provider error or a timeout denies.
pub async fn check(
    state: &AppState,
    spec: &RouteSpec,
    identity: Result<Identity, IdentityError>,
) -> Result<Authorized, Response> {
    let Ok(identity) = identity else {
        return Err(ApiError::Unauthenticated.into_response());
    };
    let settings = state.config.current();
    let Some(Some(route_codes)) = settings.authz.rules.get(spec.name) else {
        tracing::warn!(
            route = spec.name,
            "no valid authz rule for this route; denying"
        );
        return Err(ApiError::Forbidden.into_response());
    };
    let operator_codes: &[String] = match settings.authz.rules.get(OPERATOR_RULE) {
        Some(Some(codes)) => codes,
        _ => &[],
    };
    let access = state
        .permissions
        .route_access(&settings.authz, &identity, route_codes, operator_codes)
        .await;
    let (allowed, operator) = match access {
        Ok(access) => access,
        Err(err) => {
            tracing::warn!(route = spec.name, "permission check failed; denying: {err}");
            return Err(ApiError::Forbidden.into_response());
        }
    };
    if !allowed {
        return Err(ApiError::Forbidden.into_response());
    }
    Ok(Authorized { identity, operator })
}
