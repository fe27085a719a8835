//! Per-route authorisation: 401 without identity, 403 `Access denied` without
//! permission, before the body is read.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::RouteSpec;
use super::identify::Caller;
use crate::http::error::ApiError;
use crate::identity::Identity;
use crate::state::AppState;

/// The `[authz.rules]` entry that makes an identity an operator (who may, for
/// example, read other people's requests). Checked in the same round trip as
/// the route's own rule codes.
pub const OPERATOR_RULE: &str = "operator";

/// The authorised caller, in the request extensions after [`authorize`].
#[derive(Debug, Clone)]
pub struct Authorized {
    /// Who.
    pub identity: Identity,
    /// Whether they also hold the operator rule.
    pub operator: bool,
}

/// Middleware: denies unless the caller holds one of the route's rule codes.
/// A missing rule, a provider error or a timeout denies.
pub async fn authorize(
    State((state, spec)): State<(AppState, &'static RouteSpec)>,
    mut request: Request,
    next: Next,
) -> Response {
    let identity = match request.extensions().get::<Caller>().map(|c| &c.identity) {
        Some(Ok(identity)) => identity.clone(),
        _ => return ApiError::Unauthenticated.into_response(),
    };
    let settings = state.config.current();
    let Some(Some(route_codes)) = settings.authz.rules.get(spec.name) else {
        tracing::warn!(
            route = spec.name,
            "no valid authz rule for this route; denying"
        );
        return ApiError::Forbidden.into_response();
    };
    let operator_codes = settings
        .authz
        .rules
        .get(OPERATOR_RULE)
        .cloned()
        .flatten()
        .unwrap_or_default();
    let mut asked = route_codes.clone();
    asked.extend(
        operator_codes
            .iter()
            .filter(|code| !route_codes.contains(code))
            .cloned(),
    );

    let granted = match state
        .permissions
        .granted(&settings.authz, &identity, &asked)
        .await
    {
        Ok(granted) => granted,
        Err(err) => {
            tracing::warn!(route = spec.name, "permission check failed; denying: {err}");
            return ApiError::Forbidden.into_response();
        }
    };
    if !route_codes.iter().any(|code| granted.contains(code)) {
        return ApiError::Forbidden.into_response();
    }
    let operator = operator_codes.iter().any(|code| granted.contains(code));
    request
        .extensions_mut()
        .insert(Authorized { identity, operator });
    next.run(request).await
}
