//! `POST /api/v1/applications` (apply) and `POST /api/v1/bindings/{targetKey}/close`.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};

use super::submission::{Submission, submit};
use crate::domain::OperationKind;
use crate::http::error::ApiResult;
use crate::http::extract::{AppJson, AuthUser, Database};
use crate::state::AppState;

/// Body of an apply request.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ApplyBody {
    /// Client-chosen operation id (UUID), which also makes the request idempotent.
    operation_id: Option<String>,
    /// A key of the target catalog.
    target_key: String,
    /// Who the binding is for; default: the caller.
    subject_id: Option<String>,
    /// Parameters the target accepts (a JSON object).
    #[schema(value_type = Option<Object>)]
    params: Option<Value>,
    /// When changegate removes the binding again (RFC 3339).
    expires_at: Option<DateTime<Utc>>,
    /// Why the change is needed.
    reason: String,
    /// Reserved for the server: ignored when a client sends it.
    #[serde(rename = "__authenticatedOperator", default)]
    #[schema(ignore)]
    _operator: Option<serde::de::IgnoredAny>,
}

/// Body of a close request.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CloseBody {
    /// Client-chosen operation id (UUID), which also makes the request idempotent.
    operation_id: Option<String>,
    /// Whose binding; default: the caller.
    subject_id: Option<String>,
    /// Why the binding should go.
    reason: String,
    /// Reserved for the server: ignored when a client sends it.
    #[serde(rename = "__authenticatedOperator", default)]
    #[schema(ignore)]
    _operator: Option<serde::de::IgnoredAny>,
}

/// Apply for a binding. Answers 202 `ACCEPTED`, or 202 `DUPLICATE_SUBMIT`
/// with the original operation for a repeated key. The route is rate
/// limited before idempotency is checked: a duplicate over the limit gets 429.
#[utoipa::path(post, path = "/api/v1/applications", tag = "requests",
    request_body = ApplyBody,
    params(("Idempotency-Key" = Option<String>, Header, description = "Makes the request idempotent")),
    responses(
        (status = 202, description = "ACCEPTED or DUPLICATE_SUBMIT", body = Object),
        (status = 400, description = "INVALID_ARGUMENT"), (status = 401, description = "UNAUTHENTICATED"),
        (status = 403, description = "Access denied"), (status = 409, description = "IN_PROGRESS or RETRY_LATER"),
        (status = 422, description = "IDEMPOTENCY_KEY_REUSED"), (status = 429, description = "RATE_LIMITED"),
        (status = 503, description = "SERVICE_CLOSED")))]
pub async fn apply(
    State(state): State<AppState>,
    AuthUser(caller): AuthUser,
    Database(db): Database,
    headers: HeaderMap,
    AppJson(body): AppJson<ApplyBody>,
) -> ApiResult<Response> {
    let submission = Submission {
        kind: OperationKind::Apply,
        operation_id: body.operation_id,
        target_key: body.target_key,
        subject_id: body.subject_id,
        params: body.params,
        expires_at: body.expires_at,
        reason: body.reason,
    };
    submit(&state, &db, &caller, &headers, submission)
        .await
        .map(IntoResponse::into_response)
}

/// Request removal of a live binding (close phase).
#[utoipa::path(post, path = "/api/v1/bindings/{targetKey}/close", tag = "requests",
    request_body = CloseBody,
    params(("targetKey" = String, Path, description = "Target of the binding"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes the request idempotent")),
    responses((status = 202, description = "ACCEPTED or DUPLICATE_SUBMIT", body = Object),
        (status = 404, description = "No such binding"), (status = 409, description = "IN_PROGRESS")))]
pub async fn close(
    State(state): State<AppState>,
    AuthUser(caller): AuthUser,
    Database(db): Database,
    Path(target_key): Path<String>,
    headers: HeaderMap,
    AppJson(body): AppJson<CloseBody>,
) -> ApiResult<Response> {
    let submission = Submission {
        kind: OperationKind::Close,
        operation_id: body.operation_id,
        target_key,
        subject_id: body.subject_id,
        params: None,
        expires_at: None,
        reason: body.reason,
    };
    submit(&state, &db, &caller, &headers, submission)
        .await
        .map(IntoResponse::into_response)
}

/// The 202 answer of a submission.
pub struct Accepted {
    /// `ACCEPTED` or `DUPLICATE_SUBMIT`.
    pub code: &'static str,
    /// The operation (the original one for a duplicate).
    pub operation_id: String,
    /// Its binding status now.
    pub status: String,
    /// What the requester should do next.
    pub next: &'static str,
}

impl IntoResponse for Accepted {
    fn into_response(self) -> Response {
        let body = Json(json!({
            "code": self.code,
            "operationId": self.operation_id,
            "status": self.status,
            "next": self.next,
        }));
        if self.code == "DUPLICATE_SUBMIT" {
            (
                StatusCode::ACCEPTED,
                [("idempotent-replayed", "true")],
                body,
            )
                .into_response()
        } else {
            (StatusCode::ACCEPTED, body).into_response()
        }
    }
}
