//! `POST /api/v1/applications` (apply) and `POST /api/v1/bindings/{targetKey}/close`.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

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
    #[schema(value_type = Option<uuid::Uuid>)]
    operation_id: Option<String>,
    /// A key of the target catalog (`GET /api/v1/targets`).
    target_key: String,
    /// Who the binding is for; default: the caller. 1 to 128 letters,
    /// digits or `. _ - @ +`, not starting with a dot.
    #[schema(pattern = r"^[A-Za-z0-9_@+-][A-Za-z0-9._@+-]{0,127}$")]
    subject_id: Option<String>,
    /// Parameters the target accepts (a JSON object, at most 8 KiB).
    #[schema(value_type = Option<Object>)]
    params: Option<Value>,
    /// When changegate removes the binding again (RFC 3339, in the future).
    expires_at: Option<DateTime<Utc>>,
    /// The earliest time it may land (RFC 3339, in the future, at most
    /// `scheduling.max_ahead` ahead). Approval is asked at once; once
    /// approved it waits, `SCHEDULED`, and joins the first merge round at
    /// or after this time.
    not_before: Option<DateTime<Utc>>,
    /// Why the change is needed.
    #[schema(schema_with = crate::http::reason::request_reason_schema)]
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
    #[schema(value_type = Option<uuid::Uuid>)]
    operation_id: Option<String>,
    /// Whose binding; default: the caller. As in an application.
    #[schema(pattern = r"^[A-Za-z0-9_@+-][A-Za-z0-9._@+-]{0,127}$")]
    subject_id: Option<String>,
    /// The earliest time the removal may start (RFC 3339, in the future, at
    /// most `scheduling.max_ahead` ahead); it waits `SCHEDULED` until then.
    not_before: Option<DateTime<Utc>>,
    /// Why the binding should go.
    #[schema(schema_with = crate::http::reason::request_reason_schema)]
    reason: String,
    /// Reserved for the server: ignored when a client sends it.
    #[serde(rename = "__authenticatedOperator", default)]
    #[schema(ignore)]
    _operator: Option<serde::de::IgnoredAny>,
}

impl ApplyBody {
    /// The submission this body asks for.
    pub(super) fn into_submission(self) -> Submission {
        Submission {
            kind: OperationKind::Apply,
            operation_id: self.operation_id,
            target_key: self.target_key,
            subject_id: self.subject_id,
            params: self.params,
            expires_at: self.expires_at,
            not_before: self.not_before,
            reason: self.reason,
            revert: None,
            restores_drift: false,
        }
    }
}

impl CloseBody {
    /// The removal of `target_key`'s binding this body asks for.
    pub(super) fn into_submission(self, target_key: String) -> Submission {
        Submission {
            kind: OperationKind::Close,
            operation_id: self.operation_id,
            target_key,
            subject_id: self.subject_id,
            params: None,
            expires_at: None,
            not_before: self.not_before,
            reason: self.reason,
            revert: None,
            restores_drift: false,
        }
    }
}

/// Apply for a binding. Answers 202 `ACCEPTED`, or 202 `DUPLICATE_SUBMIT`
/// with the original operation for a repeated key. The route is rate
/// limited before idempotency is checked: a duplicate over the limit gets 429.
#[utoipa::path(post, path = "/api/v1/applications", tag = "requests",
    request_body = ApplyBody,
    params(("Idempotency-Key" = Option<String>, Header, max_length = 191, min_length = 1,
        pattern = r"^[!-~]([ -~]*[!-~])?$",
        description = "Makes the request idempotent: 1 to 191 visible ASCII characters")),
    responses(
        (status = 202, description = "ACCEPTED or DUPLICATE_SUBMIT", body = Accepted,
            headers(("idempotent-replayed" = String, description = "`true` on a DUPLICATE_SUBMIT")),
            links(("status" = (operation_id = "get_operation_status",
                    parameters(("operationId" = "$response.body#/operationId")),
                    description = "Where the operation is")),
                ("timeline" = (operation_id = "get_timeline",
                    parameters(("operationId" = "$response.body#/operationId")),
                    description = "The steps the operation went through")))),
        (status = 400, description = "INVALID_ARGUMENT: the message names the field"),
        (status = 404, description = "NOT_FOUND: the binding vanished meanwhile"),
        (status = 409, description = "IN_PROGRESS or RETRY_LATER"),
        (status = 422, description = "IDEMPOTENCY_KEY_REUSED"),
        (status = 503, description = "SERVICE_CLOSED: the access mode does not allow submissions now; \
            NOT_READY, DATABASE_UNAVAILABLE or TIMEOUT: retry shortly")))]
pub async fn apply(
    State(state): State<AppState>,
    AuthUser(caller): AuthUser,
    Database(db): Database,
    headers: HeaderMap,
    AppJson(body): AppJson<ApplyBody>,
) -> ApiResult<Response> {
    submit(&state, &db, &caller, &headers, body.into_submission())
        .await
        .map(IntoResponse::into_response)
}

/// Request removal of a live binding (close phase).
#[utoipa::path(post, path = "/api/v1/bindings/{targetKey}/close", tag = "requests",
    operation_id = "close_binding",
    request_body = CloseBody,
    params(("targetKey" = String, Path, description = "Target of the binding"),
        ("Idempotency-Key" = Option<String>, Header, max_length = 191, min_length = 1,
            pattern = r"^[!-~]([ -~]*[!-~])?$",
            description = "Makes the request idempotent: 1 to 191 visible ASCII characters")),
    responses(
        (status = 202, description = "ACCEPTED or DUPLICATE_SUBMIT", body = Accepted,
            headers(("idempotent-replayed" = String, description = "`true` on a DUPLICATE_SUBMIT")),
            links(("status" = (operation_id = "get_operation_status",
                    parameters(("operationId" = "$response.body#/operationId")),
                    description = "Where the operation is")),
                ("timeline" = (operation_id = "get_timeline",
                    parameters(("operationId" = "$response.body#/operationId")),
                    description = "The steps the operation went through")))),
        (status = 400, description = "INVALID_ARGUMENT: the message names the field"),
        (status = 404, description = "NOT_FOUND: no such binding of yours"),
        (status = 409, description = "IN_PROGRESS or RETRY_LATER"),
        (status = 422, description = "IDEMPOTENCY_KEY_REUSED"),
        (status = 503, description = "SERVICE_CLOSED: the access mode does not allow submissions now; \
            NOT_READY, DATABASE_UNAVAILABLE or TIMEOUT: retry shortly")))]
pub async fn close(
    State(state): State<AppState>,
    AuthUser(caller): AuthUser,
    Database(db): Database,
    Path(target_key): Path<String>,
    headers: HeaderMap,
    AppJson(body): AppJson<CloseBody>,
) -> ApiResult<Response> {
    submit(
        &state,
        &db,
        &caller,
        &headers,
        body.into_submission(target_key),
    )
    .await
    .map(IntoResponse::into_response)
}

/// The 202 answer of a submission.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Accepted {
    /// `ACCEPTED` or `DUPLICATE_SUBMIT`; for a removal asked while the
    /// binding's apply waits for its time (`SCHEDULED`), `WITHDRAWN`: that
    /// apply is cancelled, and `operationId` names it.
    pub code: &'static str,
    /// The operation (the original one for a duplicate).
    pub operation_id: String,
    /// Its binding status now.
    pub status: String,
    /// What the requester should do next: `WAIT`, `CONTACT_TEAM`, `REAPPLY` or `NONE`.
    pub next: &'static str,
}

impl IntoResponse for Accepted {
    fn into_response(self) -> Response {
        let replayed = self.code == "DUPLICATE_SUBMIT";
        let body = Json(self);
        if replayed {
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
