//! The one error type of the HTTP edge and its JSON shape (SPEC §2):
//! `{"code": "...", "message": "...", "requestId": "..."}`.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::request_id;

/// Every error a handler or layer answers with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// No route or resource at this path.
    #[error("no such resource")]
    NotFound,
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

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ErrorBody<'a> {
    code: &'a str,
    message: &'a str,
    request_id: String,
}

impl ApiError {
    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            Self::NotFound => (StatusCode::NOT_FOUND, "NOT_FOUND"),
            Self::NotReady => (StatusCode::SERVICE_UNAVAILABLE, "NOT_READY"),
            Self::Timeout => (StatusCode::SERVICE_UNAVAILABLE, "TIMEOUT"),
            Self::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL"),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        if let Self::Internal(err) = &self {
            tracing::error!(error = ?err, "request failed");
        }
        let message = self.to_string();
        let body = ErrorBody {
            code,
            message: &message,
            request_id: request_id::current().unwrap_or_default(),
        };
        (status, Json(body)).into_response()
    }
}
