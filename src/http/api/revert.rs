//! `POST /api/v1/operations/{operationId}/revert` (SPEC §12): a new request
//! that restores a binding to its state before a request that landed. A
//! binding is changed only by an apply while it is absent and a removal
//! while it is live, so the state before an apply is "absent" (the revert
//! removes it) and before a removal it is the parameters it removed (the
//! revert applies them again). Only the newest landed change of a binding
//! can be reverted; the revert goes through the normal approval unless the
//! target says otherwise, and the two requests link both ways.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::applications::Accepted;
use super::preview::{PreviewAnswer, preview};
use super::submission::{IDEMPOTENCY_KEY, Revert, Submission, duplicate_of, submit};
use crate::batch::count_urgent;
use crate::db::Db;
use crate::db::bindings::{BindingRow, get_binding};
use crate::db::idempotency::get_idempotency;
use crate::db::operations::{OperationRow, get_operation_with_status};
use crate::domain::{BindingStatus, OperationId, OperationKind, StepStatus};
use crate::http::error::{ApiError, ApiResult};
use crate::http::extract::{AppJson, AuthUser, Database};
use crate::http::layers::authz::Authorized;
use crate::state::AppState;

/// Body of a revert.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RevertBody {
    /// Why the change is taken back.
    #[schema(schema_with = crate::http::reason::request_reason_schema)]
    reason: String,
    /// Operators only: the revert goes to the merge queue's urgent lane.
    #[serde(default)]
    urgent: bool,
    /// Reserved for the server: ignored when a client sends it.
    #[serde(rename = "__authenticatedOperator", default)]
    #[schema(ignore)]
    _operator: Option<serde::de::IgnoredAny>,
}

/// Reverts a request that reached `VALIDATED` (an apply) or `CLOSED` (a
/// removal): 202 with the new request, which `revertOf` links to this one.
/// The requester of the operation or an operator may call it.
#[utoipa::path(post, path = "/api/v1/operations/{operationId}/revert", tag = "requests",
    operation_id = "revert_operation",
    request_body = RevertBody,
    params(("operationId" = uuid::Uuid, Path, description = "The request to revert"),
        ("Idempotency-Key" = Option<String>, Header, max_length = 191, min_length = 1,
            pattern = r"^[!-~]([ -~]*[!-~])?$",
            description = "Makes the revert idempotent: 1 to 191 visible ASCII characters")),
    responses(
        (status = 202, description = "ACCEPTED (the revert) or DUPLICATE_SUBMIT",
            body = super::applications::Accepted),
        (status = 400, description = "INVALID_ARGUMENT: no usable reason, or the parameters \
            restored no longer pass the target's schema"),
        (status = 403, description = "FORBIDDEN: `urgent` is for operators"),
        (status = 404, description = "NOT_FOUND: no such request of yours"),
        (status = 409, description = "CONFLICT: it has not landed, a newer request for the \
            binding landed since or is in flight, or the binding expired"),
        (status = 422, description = "IDEMPOTENCY_KEY_REUSED: the key made another request")))]
pub async fn revert_operation(
    State(state): State<AppState>,
    AuthUser(caller): AuthUser,
    Database(db): Database,
    Path(operation_id): Path<String>,
    headers: HeaderMap,
    AppJson(body): AppJson<RevertBody>,
) -> ApiResult<Response> {
    if body.urgent && !caller.operator {
        return Err(ApiError::Forbidden);
    }
    if let Some(repeated) = repeated_revert(&db, &caller, &headers, &operation_id).await? {
        return Ok(repeated.into_response());
    }
    let (reverted, binding) = revertible(&db, &operation_id, &caller).await?;
    let submission = restoring(&reverted, &binding, body)?;
    let urgent = submission
        .revert
        .as_ref()
        .is_some_and(|revert| revert.urgent);
    let accepted = submit(&state, &db, &caller, &headers, submission).await?;
    if urgent && accepted.code == "ACCEPTED" {
        count_urgent();
    }
    Ok(accepted.into_response())
}

/// The answer to a revert repeated with its key: the revert that key made,
/// whatever the binding's state now (the first revert may be in flight, or
/// have landed); 422 when the key made another request.
async fn repeated_revert(
    db: &Db,
    caller: &Authorized,
    headers: &HeaderMap,
    operation_id: &str,
) -> ApiResult<Option<Accepted>> {
    let Some(key) = headers
        .get(IDEMPOTENCY_KEY)
        .and_then(|value| value.to_str().ok())
        .map(str::trim)
    else {
        return Ok(None);
    };
    let Some(found) = get_idempotency(db, caller.identity.as_str(), key).await? else {
        return Ok(None);
    };
    let Some((earlier, _, _)) = get_operation_with_status(db, &found.operation_id).await? else {
        return Ok(None);
    };
    if earlier.revert_of.as_deref() != Some(operation_id) {
        return Err(ApiError::IdempotencyKeyReused);
    }
    duplicate_of(db, &earlier.operation_id).await.map(Some)
}

/// What a revert would do now: the files it writes (as a diff against the
/// target branch), its blockers and its route, as the preview of the apply
/// or removal it submits; nothing written.
#[utoipa::path(post, path = "/api/v1/operations/{operationId}/revert/preview", tag = "requests",
    operation_id = "preview_revert",
    request_body = RevertBody,
    params(("operationId" = uuid::Uuid, Path, description = "The request to revert")),
    responses(
        (status = 200, description = "The files, the blockers and the route", body = PreviewAnswer),
        (status = 404, description = "NOT_FOUND: no such request of yours"),
        (status = 409, description = "CONFLICT: it cannot be reverted (the message says why)")))]
pub async fn preview_revert(
    State(state): State<AppState>,
    AuthUser(caller): AuthUser,
    Database(db): Database,
    Path(operation_id): Path<String>,
    headers: HeaderMap,
    AppJson(body): AppJson<RevertBody>,
) -> ApiResult<Json<PreviewAnswer>> {
    let (reverted, binding) = revertible(&db, &operation_id, &caller).await?;
    let submission = restoring(&reverted, &binding, body)?;
    preview(&state, &db, &caller, &headers, submission)
        .await
        .map(Json)
}

/// The request `operation_id` names and the binding it landed on, when
/// `caller` may revert it now.
async fn revertible(
    db: &Db,
    operation_id: &str,
    caller: &Authorized,
) -> ApiResult<(OperationRow, BindingRow)> {
    let id = OperationId::parse(operation_id)
        .map_err(|_| ApiError::NotFound)?
        .as_string();
    let Some((reverted, status, _)) = get_operation_with_status(db, &id).await? else {
        return Err(ApiError::NotFound);
    };
    if reverted.requested_by != caller.identity.as_str() && !caller.operator {
        return Err(ApiError::NotFound);
    }
    let binding = newest_landed(db, &reverted, status).await?;
    Ok((reverted, binding))
}

/// The binding `reverted` landed on, when it is still the binding's newest
/// landed change and nothing newer is in flight; else why not (409).
async fn newest_landed(
    db: &Db,
    reverted: &OperationRow,
    status: Option<BindingStatus>,
) -> ApiResult<BindingRow> {
    let landed = match reverted.kind {
        OperationKind::Apply => BindingStatus::Validated,
        OperationKind::Close => BindingStatus::Closed,
    };
    let binding = get_binding(db, &reverted.subject_id, &reverted.target_key)
        .await?
        .ok_or(ApiError::NotFound)?;
    match status {
        Some(status) if status == landed => return Ok(binding),
        Some(status) => {
            return Err(ApiError::ConflictWith(format!(
                "only a request that landed can be reverted: an apply that reached VALIDATED or \
                 a removal that reached CLOSED; this one is {status}"
            )));
        }
        None => {}
    }
    let newer = &binding.operation_id;
    if matches!(
        binding.status,
        BindingStatus::Validated | BindingStatus::Merged | BindingStatus::Closed
    ) {
        Err(ApiError::ConflictWith(format!(
            "a newer request for this binding ({newer}) has landed since: revert the newest \
             change instead"
        )))
    } else if binding.status.is_reappliable() || binding.status == BindingStatus::CloseFailed {
        Err(ApiError::ConflictWith(format!(
            "a newer request for this binding ({newer}) ended {} since: the binding is not what \
             this request left; apply or remove it anew",
            binding.status
        )))
    } else {
        Err(ApiError::ConflictWith(format!(
            "a newer request for this binding ({newer}) is in flight ({}): wait for it to end, \
             then revert the newest change",
            binding.status
        )))
    }
}

/// The request that restores `binding` to its state before `reverted`.
fn restoring(
    reverted: &OperationRow,
    binding: &BindingRow,
    body: RevertBody,
) -> ApiResult<Submission> {
    let revert = Some(Revert {
        of: reverted.operation_id.clone(),
        urgent: body.urgent,
    });
    let subject_id = Some(reverted.subject_id.clone());
    let reason = body.reason;
    match reverted.kind {
        OperationKind::Apply => Ok(Submission {
            kind: OperationKind::Close,
            operation_id: None,
            target_key: reverted.target_key.clone(),
            subject_id,
            params: None,
            expires_at: None,
            not_before: None,
            reason,
            revert,
            restores_drift: false,
        }),
        OperationKind::Close => {
            if reverted.step == StepStatus::CloseExpired
                || binding
                    .expires_at
                    .is_some_and(|at| at.and_utc() <= chrono::Utc::now())
            {
                return Err(ApiError::ConflictWith(
                    "the binding was removed because it expired: apply again with a new expiry"
                        .to_owned(),
                ));
            }
            Ok(Submission {
                kind: OperationKind::Apply,
                operation_id: None,
                target_key: reverted.target_key.clone(),
                subject_id,
                params: serde_json::from_str(&binding.params).ok(),
                expires_at: binding.expires_at.map(|at| at.and_utc()),
                not_before: None,
                reason,
                revert,
                restores_drift: false,
            })
        }
    }
}
