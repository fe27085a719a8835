//! Operators and stuck requests: `GET /admin/v1/operations` (filters by
//! status, step and age), `POST /admin/v1/operations/{id}/retry` (re-runs the
//! current step: safe, because every step is re-entrant) and
//! `POST /admin/v1/operations/{id}/fail` (gives up, with a reason). Both
//! actions are audited with the server-written operator identity.

use axum::Json;
use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::db::Db;
use crate::db::audit::{append_audit, audited_params};
use crate::db::batches::{batch_of, batches_of, get_batch, rejoin_waiting_set};
use crate::db::history::last_statuses;
use crate::db::leases::make_due_now;
use crate::db::operations::OperationRow;
use crate::db::operations::{OperationFilter, get_operation_with_status, list_operations};
use crate::domain::operator::{self, Retry};
use crate::domain::{BindingStatus, OperationId, StepStatus};
use crate::http::api::status::OperationView;
use crate::http::error::{ApiError, ApiResult};
use crate::http::extract::{AppJson, AppQuery, AuthUser, Database};
use crate::http::page::PageRequest;
use crate::state::AppState;
use crate::store::{Change, StoreError, flip_in, note_in};
use crate::write_tx;

const DEFAULT_PAGE: u32 = 50;
const MAX_PAGE: u32 = 200;
const MAX_REASON_CHARS: usize = 1000;

/// Filters and page of the operations listing.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OperationQuery {
    /// Binding status, e.g. `HANDLE_FAILED`.
    status: Option<String>,
    /// Step code (e.g. `10106`) or name (e.g. `HANDLE_APPROVE_FAILED`).
    step: Option<String>,
    /// Unchanged for at least this many seconds.
    older_than_seconds: Option<u64>,
    /// `nextCursor` of the previous page.
    cursor: Option<String>,
    /// Page size, 1 to 200 (default 50).
    limit: Option<u32>,
}

/// One page of operations, newest first.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OperationPage {
    items: Vec<OperationView>,
    /// Pass as `cursor` for the next page; null on the last page.
    next_cursor: Option<String>,
}

fn invalid(message: &str) -> ApiError {
    ApiError::InvalidArgument(message.to_owned())
}

fn parse_step(text: &str) -> Result<StepStatus, ApiError> {
    let by_code = text
        .parse()
        .ok()
        .and_then(|code| StepStatus::from_code(code).ok());
    by_code
        .or_else(|| StepStatus::ALL.iter().copied().find(|s| s.name() == text))
        .ok_or_else(|| invalid("query `step`: not a step code or name"))
}

/// Operations, newest first, by binding status, step and age.
#[utoipa::path(get, path = "/admin/v1/operations", tag = "admin", params(OperationQuery),
    responses((status = 200, body = OperationPage), (status = 400, description = "Bad filter, cursor or limit")))]
pub async fn list(
    Database(db): Database,
    AppQuery(query): AppQuery<OperationQuery>,
) -> ApiResult<Json<OperationPage>> {
    let page = PageRequest::parse(query.cursor.as_deref(), query.limit, DEFAULT_PAGE, MAX_PAGE)?;
    let filter = OperationFilter {
        status: query
            .status
            .map(|s| {
                s.parse()
                    .map_err(|_| invalid("query `status`: not a binding status"))
            })
            .transpose()?,
        step: query.step.as_deref().map(parse_step).transpose()?,
        unchanged_for_ms: query
            .older_than_seconds
            .map(|s| i64::try_from(s.saturating_mul(1000)).unwrap_or(i64::MAX)),
        before_id: page.before,
        limit: page.fetch_limit(),
    };
    let mut rows = list_operations(&db, &filter).await?;
    let next_cursor = page.finish(&mut rows, |(row, _)| row.id);
    // Operations that handed their binding to a newer one show their last status.
    let superseded: Vec<&str> = rows
        .iter()
        .filter(|(_, status)| status.is_none())
        .map(|(row, _)| row.operation_id.as_str())
        .collect();
    let last = last_statuses(&db, &superseded).await?;
    let listed: Vec<&str> = rows
        .iter()
        .map(|(row, _)| row.operation_id.as_str())
        .collect();
    let mut batches = batches_of(&db, &listed).await?;
    let items = rows
        .into_iter()
        .map(|(row, status)| {
            let status = status.or_else(|| last.get(&row.operation_id)?.parse().ok());
            let (batch_id, obstacle) = batches.remove(&row.operation_id).unzip();
            OperationView::of(row, status).in_batch(batch_id, obstacle.flatten())
        })
        .collect();
    Ok(Json(OperationPage { items, next_cursor }))
}

/// The reason of an operator action: a string, required or not.
fn reason_of(body: &Value, required: bool) -> Result<Option<String>, ApiError> {
    match body.get("reason") {
        None | Some(Value::Null) if !required => Ok(None),
        Some(Value::String(reason)) if !reason.trim().is_empty() => {
            if reason.chars().count() > MAX_REASON_CHARS {
                return Err(invalid("field `reason`: at most 1000 characters"));
            }
            Ok(Some(reason.trim().to_owned()))
        }
        Some(Value::String(_)) | None | Some(Value::Null) => {
            Err(invalid("field `reason`: required, say why"))
        }
        Some(_) => Err(invalid("field `reason`: must be a string")),
    }
}

/// The operation and the status of its binding, which it must still own.
async fn owned(db: &Db, operation_id: &str) -> ApiResult<(String, OperationRow, BindingStatus)> {
    let id = OperationId::parse(operation_id)
        .map_err(|_| ApiError::NotFound)?
        .as_string();
    let (operation, status, _) = get_operation_with_status(db, &id)
        .await?
        .ok_or(ApiError::NotFound)?;
    let status = status.ok_or(ApiError::Conflict(
        "a newer request for the same target replaced this one",
    ))?;
    Ok((id, operation, status))
}

fn changed_meanwhile() -> ApiError {
    ApiError::Conflict("the request changed meanwhile; reload it and try again")
}

async fn answer(db: &Db, id: &str) -> ApiResult<Json<Value>> {
    let (operation, status, _) = get_operation_with_status(db, id)
        .await?
        .ok_or(ApiError::NotFound)?;
    Ok(Json(
        json!({ "code": "OK", "operation": OperationView::of(operation, status) }),
    ))
}

/// Re-runs the operation's current step (a failed one goes back to the step
/// that failed). Body: `{"reason"?: string}`.
#[utoipa::path(post, path = "/admin/v1/operations/{operationId}/retry", tag = "admin",
    params(("operationId" = String, Path)), request_body = Object,
    responses((status = 200, description = "`{code: OK, operation}`", body = Object),
        (status = 404, description = "No such operation"),
        (status = 409, description = "Finished, waiting for an outside decision, or changed meanwhile")))]
pub async fn retry(
    State(state): State<AppState>,
    AuthUser(caller): AuthUser,
    Database(db): Database,
    Path(operation_id): Path<String>,
    AppJson(body): AppJson<Value>,
) -> ApiResult<Json<Value>> {
    let reason = reason_of(&body, false)?;
    let (id, operation, status) = owned(&db, &operation_id).await?;
    let mut plan = operator::retry(operation.kind, status, operation.step)
        .map_err(|why| ApiError::Conflict(why.message()))?;
    // A member of a running batch moves with its batch, never on its own;
    // one whose batch is over (its MR closed) goes back to wait for the next
    // round, or, with batching off now, opens an MR of its own: re-running
    // its step against the closed batch MR could only fail again.
    let mut requeue = false;
    if let Some(batch_id) = batch_of(&db, &id).await? {
        match get_batch(&db, batch_id).await? {
            Some(batch) if batch.status == "RUNNING" => {
                return Err(ApiError::Conflict(
                    "the request is in a running merge batch; settle the batch instead",
                ));
            }
            Some(_)
                if matches!(
                    status,
                    BindingStatus::CreateFailed | BindingStatus::HandleFailed
                ) =>
            {
                requeue = state.config.current().batch.enabled;
                plan = Retry::Rewind(
                    BindingStatus::MrCreating,
                    if requeue {
                        StepStatus::Queued
                    } else {
                        StepStatus::MrCreating
                    },
                );
            }
            _ => {}
        }
    }
    let operator = caller.identity.as_str();
    let message = format!(
        "retried by {operator}{}",
        reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default()
    );
    let params = audited_params(&body, operator);
    write_tx!(&db, |tx| {
        let done = match plan {
            Retry::Rewind(to, step) => {
                let change = Change {
                    step,
                    message: Some(&message),
                    actor: operator,
                };
                flip_in(tx, &id, &[status], to, change)
                    .await
                    .map_err(store_error)?
                    .is_some()
            }
            Retry::RunAgain => {
                let change = Change {
                    step: operation.step,
                    message: Some(&message),
                    actor: operator,
                };
                note_in(tx, &id, &[status], change)
                    .await
                    .map_err(store_error)?
            }
        };
        if !done {
            return Err(changed_meanwhile());
        }
        if requeue {
            rejoin_waiting_set(tx.db(), &id).await?;
        } else {
            make_due_now(tx.db(), &id).await?;
        }
        append_audit(tx.db(), operator, "operation.retry", &id, &params).await?;
        Ok::<_, ApiError>(())
    })
    .await?;
    if state.executor.try_submit(id.clone()).is_err() {
        tracing::info!(operation_id = %id, "retry recorded; the worker pool is busy, the dispatcher runs it when there is room");
    }
    answer(&db, &id).await
}

/// Gives up on an operation: a request becomes ABANDONED (it may be applied
/// for again), a removal CLOSE_FAILED. Body: `{"reason": string}` (required).
#[utoipa::path(post, path = "/admin/v1/operations/{operationId}/fail", tag = "admin",
    params(("operationId" = String, Path)), request_body = Object,
    responses((status = 200, description = "`{code: OK, operation}`", body = Object),
        (status = 400, description = "No reason given"),
        (status = 404, description = "No such operation"),
        (status = 409, description = "Finished already, or changed meanwhile")))]
pub async fn force_fail(
    AuthUser(caller): AuthUser,
    Database(db): Database,
    Path(operation_id): Path<String>,
    AppJson(body): AppJson<Value>,
) -> ApiResult<Json<Value>> {
    let reason = reason_of(&body, true)?.unwrap_or_default();
    let (id, _, status) = owned(&db, &operation_id).await?;
    let to = operator::force_fail(status).map_err(|why| ApiError::Conflict(why.message()))?;
    let operator = caller.identity.as_str();
    let message = format!("force-failed by {operator}: {reason}");
    let params = audited_params(&body, operator);
    write_tx!(&db, |tx| {
        let change = Change {
            step: StepStatus::ManualAbandoned,
            message: Some(&message),
            actor: operator,
        };
        if flip_in(tx, &id, &[status], to, change)
            .await
            .map_err(store_error)?
            .is_none()
        {
            return Err(changed_meanwhile());
        }
        append_audit(tx.db(), operator, "operation.force_fail", &id, &params).await?;
        Ok::<_, ApiError>(())
    })
    .await?;
    answer(&db, &id).await
}

fn store_error(err: StoreError) -> ApiError {
    match err {
        StoreError::Preempted => changed_meanwhile(),
        StoreError::NotFound => ApiError::NotFound,
        other => ApiError::internal(other),
    }
}
