//! Local approvals, when the approval provider is the built-in one:
//! `POST /admin/v1/approvals/{operationId}/approve` and `/reject`.

use axum::Json;
use axum::extract::{Path, State};
use serde::Serialize;

use super::attempt::Attempt;
use super::bodies::{OptionalReason, audited};
use crate::config::ApprovalProvider;
use crate::db::operations::get_operation;
use crate::domain::{ApprovalDecision, BindingStatus, OperationId};
use crate::http::error::{ApiError, ApiResult};
use crate::http::extract::{AppJson, AuthUser, Database};
use crate::http::layers::authz::Authorized;
use crate::state::AppState;
use crate::store::apply_decision;
use crate::write_tx;

/// The answer to a decision.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Decided {
    /// `OK`.
    code: &'static str,
    operation_id: String,
    /// The binding status it moved to.
    status: &'static str,
}

/// Approves a request awaiting approval.
#[utoipa::path(post, path = "/admin/v1/approvals/{operationId}/approve", tag = "admin",
    operation_id = "approve_operation",
    params(("operationId" = uuid::Uuid, Path, description = "The operation id")), request_body = OptionalReason,
    responses((status = 200, description = "Approved", body = Decided),
        (status = 404, description = "NOT_FOUND: no such operation"),
        (status = 409, description = "CONFLICT: not awaiting approval, or decided by the approval system")))]
pub async fn approve(
    State(state): State<AppState>,
    AuthUser(caller): AuthUser,
    Database(db): Database,
    Path(operation_id): Path<String>,
    AppJson(body): AppJson<OptionalReason>,
) -> ApiResult<Json<Decided>> {
    decide(
        &state,
        &db,
        &caller,
        &operation_id,
        &body,
        ApprovalDecision::Approved,
    )
    .await
}

/// Rejects a request awaiting approval.
#[utoipa::path(post, path = "/admin/v1/approvals/{operationId}/reject", tag = "admin",
    operation_id = "reject_operation",
    params(("operationId" = uuid::Uuid, Path, description = "The operation id")), request_body = OptionalReason,
    responses((status = 200, description = "Rejected", body = Decided),
        (status = 404, description = "NOT_FOUND: no such operation"),
        (status = 409, description = "CONFLICT: not awaiting approval, or decided by the approval system")))]
pub async fn reject(
    State(state): State<AppState>,
    AuthUser(caller): AuthUser,
    Database(db): Database,
    Path(operation_id): Path<String>,
    AppJson(body): AppJson<OptionalReason>,
) -> ApiResult<Json<Decided>> {
    decide(
        &state,
        &db,
        &caller,
        &operation_id,
        &body,
        ApprovalDecision::Rejected,
    )
    .await
}

async fn decide(
    state: &AppState,
    db: &crate::db::Db,
    caller: &Authorized,
    operation_id: &str,
    body: &OptionalReason,
    decision: ApprovalDecision,
) -> ApiResult<Json<Decided>> {
    let message = body.reason()?;
    let id = OperationId::parse(operation_id)
        .map_err(|_| ApiError::NotFound)?
        .as_string();
    let operator = caller.identity.as_str();
    let action = match decision {
        ApprovalDecision::Approved => "approval.approve",
        _ => "approval.reject",
    };
    let attempt = Attempt::new(operator, action, id.clone(), audited(body, operator));
    let decided = attempt_decision(state, db, &attempt, id, message, decision).await;
    attempt.refusal_audited(db, decided).await
}

async fn attempt_decision(
    state: &AppState,
    db: &crate::db::Db,
    attempt: &Attempt<'_>,
    id: String,
    message: Option<String>,
    decision: ApprovalDecision,
) -> ApiResult<Json<Decided>> {
    let settings = state.config.current();
    if settings.approval.provider != ApprovalProvider::Builtin {
        return Err(ApiError::Conflict(
            "approvals are decided by the approval system",
        ));
    }
    let operation = get_operation(db, &id).await?.ok_or(ApiError::NotFound)?;
    let to = write_tx!(db, |tx| {
        let to = apply_decision(
            tx,
            &settings,
            &operation,
            decision,
            attempt.operator(),
            message.as_deref(),
        )
        .await
        .map_err(ApiError::internal)?
        .ok_or(ApiError::Conflict(
            "the request is not waiting for approval",
        ))?;
        attempt.done(tx.db()).await?;
        Ok::<_, ApiError>(to)
    })
    .await?;
    if to != BindingStatus::Rejected && state.executor.try_submit(id.clone()).is_err() {
        tracing::debug!(operation_id = %id, "approved, but the worker pool is busy; the resume job will pick it up");
    }
    Ok(Json(Decided {
        code: "OK",
        operation_id: id,
        status: to.as_str(),
    }))
}
