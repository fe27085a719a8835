//! The one error type of the HTTP edge and its JSON shape (SPEC §2):
//! `{"code": "...", "message": "...", "requestId": "..."}`. Client errors say
//! what to change; server errors say nothing internal (details go to the log).

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::domain::BindingStatus;
use crate::files::params::FieldError;

use super::request_id;
use crate::db::{Conflict, Contended};

/// The fixed answer to a caller without permission: it never names what is missing.
pub const ACCESS_DENIED: &str = "Access denied";

/// Every error a handler or layer answers with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Malformed input; the message names the field.
    #[error("{0}")]
    InvalidArgument(String),
    /// Parameters that break the target's schema: every failing field,
    /// each named; the message is the first.
    #[error("{}", .0.first().map(ToString::to_string).unwrap_or_default())]
    InvalidFields(Vec<FieldError>),
    /// No readable identity.
    #[error("authentication required")]
    Unauthenticated,
    /// A callback without a valid signature.
    #[error("missing or invalid webhook signature")]
    BadSignature,
    /// A valid identity without permission.
    #[error("{ACCESS_DENIED}")]
    Forbidden,
    /// No route or resource at this path (or not the caller's).
    #[error("no such resource")]
    NotFound,
    /// The path exists, but not with this method (the `Allow` header lists
    /// the methods it has).
    #[error("this method is not allowed here; the Allow header lists the methods that are")]
    MethodNotAllowed,
    /// The relation has a request in progress, live, or awaiting the team:
    /// the message says which request and what helps.
    #[error("{}", in_the_way(*.status, .operation_id))]
    InProgress {
        /// The relation's status.
        status: BindingStatus,
        /// The operation that holds it, named in the answer.
        operation_id: String,
    },
    /// Another request is changing the relation this very moment.
    #[error("another request is changing this target right now; retry shortly")]
    BeingChanged,
    /// The action does not apply to the resource's current state.
    #[error("{0}")]
    Conflict(&'static str),
    /// The same, with a message that names the requests involved.
    #[error("{0}")]
    ConflictWith(String),
    /// A concurrent duplicate whose original vanished: safe to retry.
    #[error("a request with this key was being processed and did not complete; retry")]
    RetryLater,
    /// The idempotency key was used before with a different request.
    #[error("this idempotency key was already used for a different request; use a new key")]
    IdempotencyKeyReused,
    /// Over the rate limit; the message is the route's own.
    #[error("{0}")]
    RateLimited(&'static str),
    /// The access mode does not allow submissions now; with the reason when
    /// the configuration, not the clock, keeps them closed.
    #[error("submissions are closed right now{}; see GET /api/v1/access", .0.map(|why| format!(": {why}")).unwrap_or_default())]
    ServiceClosed(Option<&'static str>),
    /// The body is larger than allowed.
    #[error("request body too large")]
    PayloadTooLarge,
    /// The body is not JSON.
    #[error("send the body as application/json")]
    UnsupportedMediaType,
    /// The database is not connected or not migrated yet.
    #[error("service not ready")]
    NotReady,
    /// The request took longer than `server.request_timeout`.
    #[error("request timed out")]
    Timeout,
    /// Anything unexpected: logged in full, answered generically.
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

/// Shorthand for handler results.
pub type ApiResult<T> = Result<T, ApiError>;

/// Every error answer (SPEC §2).
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Error)]
pub struct ErrorBody<'a> {
    /// Stable code, e.g. `INVALID_ARGUMENT`.
    code: &'a str,
    /// What to change (client errors) or a generic sentence (server errors).
    message: &'a str,
    /// The request's `x-request-id`, to quote when asking for help.
    request_id: String,
    /// `IN_PROGRESS`: the change request in the way.
    #[serde(skip_serializing_if = "Option::is_none")]
    operation_id: Option<String>,
    /// `INVALID_ARGUMENT` for parameters: every field that breaks the
    /// target's schema, each with what is wrong.
    #[serde(skip_serializing_if = "Option::is_none")]
    fields: Option<&'a [FieldError]>,
}

/// What to tell someone whose request `operation_id`, at `status`, holds
/// the relation: when it is live, remove it first; when it failed and
/// waits for the team, contact them; otherwise wait for it.
fn in_the_way(status: BindingStatus, operation_id: &str) -> String {
    match status {
        BindingStatus::Validated => format!(
            "this target is already live (request {operation_id}): request its removal first, then apply again"
        ),
        BindingStatus::CreateFailed | BindingStatus::HandleFailed => format!(
            "request {operation_id} for this target failed and waits for the team: contact the team, quoting it"
        ),
        other => format!(
            "request {operation_id} for this target is still in progress ({other}): wait for it to finish"
        ),
    }
}

impl ApiError {
    /// The HTTP status and the stable code.
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            Self::InvalidArgument(_) | Self::InvalidFields(_) => {
                (StatusCode::BAD_REQUEST, "INVALID_ARGUMENT")
            }
            Self::Unauthenticated => (StatusCode::UNAUTHORIZED, "UNAUTHENTICATED"),
            Self::BadSignature => (StatusCode::UNAUTHORIZED, "INVALID_SIGNATURE"),
            Self::Forbidden => (StatusCode::FORBIDDEN, "FORBIDDEN"),
            Self::NotFound => (StatusCode::NOT_FOUND, "NOT_FOUND"),
            Self::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED"),
            Self::InProgress { .. } | Self::BeingChanged => (StatusCode::CONFLICT, "IN_PROGRESS"),
            Self::RetryLater => (StatusCode::CONFLICT, "RETRY_LATER"),
            Self::Conflict(_) | Self::ConflictWith(_) => (StatusCode::CONFLICT, "CONFLICT"),
            Self::IdempotencyKeyReused => {
                (StatusCode::UNPROCESSABLE_ENTITY, "IDEMPOTENCY_KEY_REUSED")
            }
            Self::RateLimited(_) => (StatusCode::TOO_MANY_REQUESTS, "RATE_LIMITED"),
            Self::ServiceClosed(_) => (StatusCode::SERVICE_UNAVAILABLE, "SERVICE_CLOSED"),
            Self::PayloadTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "PAYLOAD_TOO_LARGE"),
            Self::UnsupportedMediaType => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "UNSUPPORTED_MEDIA_TYPE")
            }
            Self::NotReady => (StatusCode::SERVICE_UNAVAILABLE, "NOT_READY"),
            Self::Timeout => (StatusCode::SERVICE_UNAVAILABLE, "TIMEOUT"),
            // The database cannot be used right now (down, unreachable, a
            // cluster node leaving, busy past every retry): nothing was
            // done, and the same request may be sent again.
            Self::Internal(err) if database_unavailable(err) => {
                (StatusCode::SERVICE_UNAVAILABLE, "DATABASE_UNAVAILABLE")
            }
            Self::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL"),
        }
    }

    /// An internal error from anything displayable (one that says the
    /// database cannot be used right now is answered 503, see
    /// [`Self::status_and_code`]; it stays an internal error until then, so
    /// a transaction's retry still sees the conflict in it).
    pub fn internal(err: impl Into<anyhow::Error>) -> Self {
        Self::Internal(err.into())
    }
}

/// Whether `err` or one of its causes is a database error that means "not
/// now" ([`crate::db::is_unavailable`]). A store error wrapping a database
/// error forwards its causes, so it is looked at itself, not only its chain.
fn database_unavailable(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        let sqlx = cause.downcast_ref::<sqlx::Error>().or_else(|| {
            match cause.downcast_ref::<crate::store::StoreError>() {
                Some(crate::store::StoreError::Db(err)) => Some(err),
                _ => None,
            }
        });
        sqlx.is_some_and(crate::db::is_unavailable)
    })
}

impl From<sqlx::Error> for ApiError {
    fn from(err: sqlx::Error) -> Self {
        Self::Internal(err.into())
    }
}

/// How long a client should wait before retrying a 503 for the database.
const DATABASE_RETRY_AFTER_SECS: &str = "5";

impl Contended for ApiError {
    fn conflict(&self) -> Option<Conflict> {
        match self {
            Self::Internal(err) => err.conflict(),
            _ => None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let unavailable =
            status == StatusCode::SERVICE_UNAVAILABLE && code == "DATABASE_UNAVAILABLE";
        let message = match &self {
            Self::Internal(err) if unavailable => {
                tracing::warn!(error = %err, "the database cannot be used right now; answered 503");
                "the database cannot be used right now (unavailable, or busy past every retry); \
                 nothing was done: retry shortly"
                    .to_owned()
            }
            Self::Internal(err) => {
                tracing::error!(error = ?err, "request failed");
                self.to_string()
            }
            other => {
                tracing::debug!(code, "{other}");
                other.to_string()
            }
        };
        let operation_id = match &self {
            Self::InProgress { operation_id, .. } => Some(operation_id.clone()),
            _ => None,
        };
        let fields = match &self {
            Self::InvalidFields(fields) => Some(fields.as_slice()),
            _ => None,
        };
        let body = ErrorBody {
            code,
            message: &message,
            request_id: request_id::current().unwrap_or_default(),
            operation_id,
            fields,
        };
        let mut response = (status, Json(body)).into_response();
        if unavailable {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static(DATABASE_RETRY_AFTER_SECS),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_in_the_way_is_named_with_what_helps() {
        let live = in_the_way(BindingStatus::Validated, "op-1");
        assert!(
            live.contains("op-1") && live.contains("removal first"),
            "{live}"
        );
        for failed in [BindingStatus::CreateFailed, BindingStatus::HandleFailed] {
            let message = in_the_way(failed, "op-2");
            assert!(
                message.contains("op-2") && message.contains("contact the team"),
                "{message}"
            );
        }
        let moving = in_the_way(BindingStatus::Merging, "op-3");
        assert!(
            moving.contains("op-3") && moving.contains("MERGING") && moving.contains("wait"),
            "{moving}"
        );
    }
}
