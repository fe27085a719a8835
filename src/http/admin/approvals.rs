//! Local approvals, when the approval provider is the built-in one:
//! `POST /admin/v1/approvals/{operationId}/approve` and `/reject`.

use axum::Json;
use axum::extract::{Path, State};
use serde_json::{Value, json};

use crate::batch::apply_decision;
use crate::config::ApprovalProvider;
use crate::db::audit::{append_audit, audited_params};
use crate::db::operations::get_operation;
use crate::domain::{ApprovalDecision, BindingStatus, OperationId};
use crate::http::error::{ApiError, ApiResult};
use crate::http::extract::{AppJson, AuthUser, Database};
use crate::http::layers::authz::Authorized;
use crate::state::AppState;
use crate::write_tx;

/// Approves a request awaiting approval. Body: `{"reason"?: string}`.
#[utoipa::path(post, path = "/admin/v1/approvals/{operationId}/approve", tag = "admin",
    params(("operationId" = String, Path)), request_body = Object,
    responses((status = 200, description = "`{code: OK, operationId, status}`", body = Object),
        (status = 404, description = "No such operation"),
        (status = 409, description = "Not awaiting approval, or decided by the approval system")))]
pub async fn approve(
    State(state): State<AppState>,
    AuthUser(caller): AuthUser,
    Database(db): Database,
    Path(operation_id): Path<String>,
    AppJson(body): AppJson<Value>,
) -> ApiResult<Json<Value>> {
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

/// Rejects a request awaiting approval. Body: `{"reason"?: string}`.
#[utoipa::path(post, path = "/admin/v1/approvals/{operationId}/reject", tag = "admin",
    params(("operationId" = String, Path)), request_body = Object,
    responses((status = 200, description = "`{code: OK, operationId, status}`", body = Object),
        (status = 404, description = "No such operation"),
        (status = 409, description = "Not awaiting approval, or decided by the approval system")))]
pub async fn reject(
    State(state): State<AppState>,
    AuthUser(caller): AuthUser,
    Database(db): Database,
    Path(operation_id): Path<String>,
    AppJson(body): AppJson<Value>,
) -> ApiResult<Json<Value>> {
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
    body: &Value,
    decision: ApprovalDecision,
) -> ApiResult<Json<Value>> {
    if state.config.current().approval.provider != ApprovalProvider::Builtin {
        return Err(ApiError::Conflict(
            "approvals are decided by the approval system",
        ));
    }
    if body.get("reason").is_some_and(|reason| !reason.is_string()) {
        return Err(ApiError::InvalidArgument(
            "field `reason`: must be a string".to_owned(),
        ));
    }
    let id = OperationId::parse(operation_id)
        .map_err(|_| ApiError::NotFound)?
        .as_string();
    let operation = get_operation(db, &id).await?.ok_or(ApiError::NotFound)?;
    let operator = caller.identity.as_str();
    let params = audited_params(body, operator);
    let message = params
        .get("reason")
        .and_then(Value::as_str)
        .map(ToOwned::to_owned);
    let action = match decision {
        ApprovalDecision::Approved => "approval.approve",
        _ => "approval.reject",
    };

    let settings = state.config.current();
    let to = write_tx!(db, |tx| {
        let to = apply_decision(
            tx,
            &settings,
            &operation,
            decision,
            operator,
            message.as_deref(),
        )
        .await
        .map_err(ApiError::internal)?
        .ok_or(ApiError::Conflict(
            "the request is not waiting for approval",
        ))?;
        append_audit(tx.db(), operator, action, &id, &params).await?;
        Ok::<_, ApiError>(to)
    })
    .await?;
    if to != BindingStatus::Rejected && state.executor.try_submit(id.clone()).is_err() {
        tracing::warn!(operation_id = %id, "approved, but the worker pool is busy; the resume job will pick it up");
    }
    Ok(Json(
        json!({ "code": "OK", "operationId": id, "status": to.as_str() }),
    ))
}
