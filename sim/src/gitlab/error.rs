//! GitLab's error responses: `{"message": ...}` bodies (string, array or object) with the
//! status codes and helper texts of `lib/api/helpers.rb`, plus Grape's `{"error": ...}`.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// Result alias for the simulator's handlers.
pub type ApiResult<T> = Result<T, ApiError>;

/// Every error answer the simulated endpoints give.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// `unauthorized!`: bad token, and GitLab's quirky answer to a repeated approval.
    #[error("401 Unauthorized")]
    Unauthorized,
    /// `forbidden!` without a reason.
    #[error("403 Forbidden")]
    Forbidden,
    /// `forbidden!(reason)`.
    #[error("403 Forbidden - {0}")]
    ForbiddenBecause(&'static str),
    /// `not_found!(what)`.
    #[error("404 {0} Not Found")]
    NotFound(&'static str),
    /// `not_allowed!`: the merge endpoint's "not mergeable in this state".
    #[error("405 Method Not Allowed")]
    MethodNotAllowed,
    /// The merge endpoint's git-level refusal (422 today, 406 on old versions).
    #[error("Branch cannot be merged")]
    CannotBeMerged(StatusCode),
    /// `render_api_error!(message, status)` with a plain string message.
    #[error("{1}")]
    Message(StatusCode, String),
    /// `render_api_error!(errors[:key], status)`: the message is an array.
    #[error("{}", .1.join(", "))]
    MessageList(StatusCode, Vec<String>),
    /// A model validation (`render_api_error!(errors, 400)` in
    /// `handle_merge_request_errors!`, lib/api/merge_requests.rb): the
    /// message is an object of field → errors.
    #[error("400 {0}: {1}")]
    FieldError(&'static str, String),
    /// Grape's parameter validation, which answers `{"error": ...}`.
    #[error("{0}")]
    InvalidParam(String),
    /// A body that is not JSON; GitLab sets both `message` and `error`.
    #[error("Invalid json")]
    InvalidJson,
    /// The checklist extension's 422, carrying the current checklist.
    #[error("checklist mismatch")]
    ChecklistMismatch(Value),
}

impl ApiError {
    /// A 400 whose message GitLab passes through verbatim.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::Message(StatusCode::BAD_REQUEST, message.into())
    }

    /// `bad_request!(reason)`, which prefixes the reason.
    pub fn bad_request_because(reason: impl std::fmt::Display) -> Self {
        Self::Message(
            StatusCode::BAD_REQUEST,
            format!("400 Bad request - {reason}"),
        )
    }

    /// A 409 with a plain message.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::Message(StatusCode::CONFLICT, message.into())
    }

    /// The 409 of approve and merge when the caller's `sha` is not the head.
    pub fn sha_mismatch(head: &str) -> Self {
        Self::conflict(format!("SHA does not match HEAD of source branch: {head}"))
    }

    fn status(&self) -> StatusCode {
        match self {
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::Forbidden | Self::ForbiddenBecause(_) => StatusCode::FORBIDDEN,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::CannotBeMerged(status)
            | Self::Message(status, _)
            | Self::MessageList(status, _) => *status,
            Self::InvalidParam(_) | Self::InvalidJson | Self::FieldError(..) => {
                StatusCode::BAD_REQUEST
            }
            Self::ChecklistMismatch(_) => StatusCode::UNPROCESSABLE_ENTITY,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = match &self {
            Self::MessageList(_, messages) => json!({ "message": messages }),
            Self::InvalidParam(error) => json!({ "error": error }),
            Self::FieldError(field, error) => json!({ "message": { *field: [error] } }),
            Self::InvalidJson => json!({ "message": "Invalid json", "error": "Invalid json" }),
            Self::ChecklistMismatch(checklist) => {
                json!({ "message": self.to_string(), "checklist": checklist })
            }
            _ => json!({ "message": self.to_string() }),
        };
        tracing::debug!(status = %self.status(), %body, "gitlab simulator error answer");
        (self.status(), Json(body)).into_response()
    }
}
