//! Operators and stuck requests: `GET /admin/v1/operations` (filters by
//! status, step and age), `POST /admin/v1/operations/{id}/retry` (re-runs the
//! current step: safe, because every step is re-entrant) and
//! `POST /admin/v1/operations/{id}/fail` (gives up, with a reason). Both
//! actions are audited with the server-written operator identity.

use axum::Json;
use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};
use utoipa::openapi::schema::{Object, ObjectBuilder, Type};

use super::attempt::Attempt;
use super::bodies::{OptionalReason, RequiredReason, audited};
use crate::config::ApprovalProvider;
use crate::db::Db;
use crate::db::batch_queue::rejoin_waiting_set;
use crate::db::batches::{batch_of, batches_of, get_batch};
use crate::db::history::last_statuses;
use crate::db::leases::make_due_now;
use crate::db::operation_listing::{OperationFilter, StatusFilter, list_operations};
use crate::db::operations::{OperationRow, get_operation_with_status, reverts_of};
use crate::domain::operator::{self, Retry};
use crate::domain::{BindingStatus, OperationId, StepStatus};
use crate::http::api::status::{OperationView, OperatorAction, successor_of};
use crate::http::error::{ApiError, ApiResult};
use crate::http::extract::{AppJson, AppQuery, AuthUser, Database};
use crate::http::page::PageRequest;
use crate::state::AppState;
use crate::store::{Change, StoreError, flip_in, note_in};
use crate::write_tx;

const DEFAULT_PAGE: u32 = 50;
const MAX_PAGE: u32 = 200;
/// Ten years: any older filter means "all", and larger ones would overflow
/// the databases' date arithmetic.
const MAX_OLDER_THAN_SECONDS: u64 = 10 * 365 * 24 * 3600;

/// Filters and page of the operations listing.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OperationQuery {
    /// Binding status of the operations that own their binding, e.g.
    /// `HANDLE_FAILED`; `SUPERSEDED` for those a newer request for the same
    /// subject and target took over.
    #[param(schema_with = binding_status_schema)]
    status: Option<String>,
    /// Step code (e.g. `10106`) or name (e.g. `HANDLE_APPROVE_FAILED`).
    #[param(schema_with = step_schema)]
    step: Option<String>,
    /// Unchanged for at least this many seconds (at most ten years).
    #[param(minimum = 0, maximum = 315_360_000)]
    older_than_seconds: Option<u64>,
    /// Only operations on this catalog key.
    target_key: Option<String>,
    /// Only operations for this subject.
    subject_id: Option<String>,
    /// `nextCursor` of the previous page.
    #[param(pattern = r"^[0-9]{1,18}$")]
    cursor: Option<String>,
    /// Page size, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    limit: Option<u32>,
}

/// The status filter's value for operations a newer one superseded.
const SUPERSEDED: &str = "SUPERSEDED";

/// Every binding status, and `SUPERSEDED`.
fn binding_status_schema() -> Object {
    let statuses = BindingStatus::ALL.iter().map(|s| s.as_str());
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(statuses.chain([SUPERSEDED])))
        .build()
}

/// Every step, by code or name.
fn step_schema() -> Object {
    let codes = StepStatus::ALL.iter().map(|s| s.code().to_string());
    let names = StepStatus::ALL.iter().map(|s| s.name().to_owned());
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(codes.chain(names)))
        .build()
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

/// `SUPERSEDED` lists the operations whose relation a newer one took over,
/// as the list shows them; any other value is a binding status.
fn parse_status(text: &str) -> Result<StatusFilter, ApiError> {
    if text == SUPERSEDED {
        return Ok(StatusFilter::Superseded);
    }
    text.parse()
        .map(StatusFilter::Binding)
        .map_err(|_| invalid("query `status`: not a binding status or SUPERSEDED"))
}

fn parse_step(text: &str) -> Result<StepStatus, ApiError> {
    StepStatus::ALL
        .iter()
        .copied()
        .find(|s| s.code().to_string() == text || s.name() == text)
        .ok_or_else(|| invalid("query `step`: not a step code or name"))
}

/// Operations, newest first, by binding status, step, age, target and subject.
#[utoipa::path(get, path = "/admin/v1/operations", tag = "admin", operation_id = "list_operations",
    params(OperationQuery),
    responses((status = 200, description = "A page of operations; each waiting on the merge queue with its place and expected times (`queue`), as `GET /api/v1/operations/{operationId}` answers them", body = OperationPage),
        (status = 400, description = "INVALID_ARGUMENT: a bad filter, cursor or limit (the message names it)")))]
pub async fn list(
    State(state): State<AppState>,
    Database(db): Database,
    AppQuery(query): AppQuery<OperationQuery>,
) -> ApiResult<Json<OperationPage>> {
    let builtin_approval = state.config.current().approval.provider == ApprovalProvider::Builtin;
    let page = PageRequest::parse(query.cursor.as_deref(), query.limit, DEFAULT_PAGE, MAX_PAGE)?;
    let filter = OperationFilter {
        status: query.status.as_deref().map(parse_status).transpose()?,
        step: query.step.as_deref().map(parse_step).transpose()?,
        unchanged_for_ms: query
            .older_than_seconds
            .map(|seconds| {
                if seconds > MAX_OLDER_THAN_SECONDS {
                    return Err(ApiError::InvalidArgument(format!(
                        "query `olderThanSeconds`: 0 to {MAX_OLDER_THAN_SECONDS} (ten years)"
                    )));
                }
                Ok(i64::try_from(seconds * 1000).unwrap_or(i64::MAX))
            })
            .transpose()?,
        target_key: query.target_key,
        subject_id: query.subject_id,
        before_id: page.before,
        limit: page.fetch_limit(),
    };
    let mut rows = list_operations(&db, &filter).await?;
    let next_cursor = page.finish(&mut rows, |row| row.operation.id);
    // Operations that handed their binding to a newer one show their last status.
    let superseded: Vec<&str> = rows
        .iter()
        .filter(|row| row.status.is_none())
        .map(|row| row.operation.operation_id.as_str())
        .collect();
    let last = last_statuses(&db, &superseded).await?;
    let listed: Vec<&str> = rows
        .iter()
        .map(|row| row.operation.operation_id.as_str())
        .collect();
    let mut batches = batches_of(&db, &listed).await?;
    let mut reverts = reverts_of(&db, &listed).await?;
    let mut items = Vec::with_capacity(rows.len());
    for row in rows {
        let view = {
            let operation = row.operation;
            let successor = successor_of(&operation, row.superseded_by);
            let actions = OperatorAction::applicable(
                operation.kind,
                row.status,
                operation.step,
                builtin_approval,
            );
            let withheld = OperatorAction::withheld(
                operation.kind,
                row.status,
                operation.step,
                builtin_approval,
            );
            let status = row
                .status
                .or_else(|| last.get(&operation.operation_id)?.parse().ok());
            let batch = batches.remove(&operation.operation_id);
            let reverted_by = reverts.remove(&operation.operation_id);
            OperationView::of(operation, status)
                .in_batch(batch)
                .superseded_by(successor)
                .reverted_by(reverted_by)
                .with_actions(actions, withheld)
        };
        // Where each request waiting on the merge queue stands, as its
        // own page shows it.
        items.push(view.in_merge_queue(&state, &db, row.status).await?);
    }
    Ok(Json(OperationPage { items, next_cursor }))
}

/// The operation id in a path, in its canonical form.
pub(super) fn parse_operation_id(operation_id: &str) -> ApiResult<String> {
    OperationId::parse(operation_id)
        .map(|id| id.as_string())
        .map_err(|_| ApiError::NotFound)
}

/// The operation and the status of its binding, which it must still own.
pub(super) async fn owned(db: &Db, id: &str) -> ApiResult<(OperationRow, BindingStatus)> {
    let (operation, status, _) = get_operation_with_status(db, id)
        .await?
        .ok_or(ApiError::NotFound)?;
    let status = status.ok_or(ApiError::Conflict(
        "a newer request for the same target replaced this one",
    ))?;
    Ok((operation, status))
}

pub(super) fn changed_meanwhile() -> ApiError {
    ApiError::Conflict("the request changed meanwhile; reload it and try again")
}

/// The answer to an operator action: the operation as it is now.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ActedOn {
    /// `OK`.
    code: &'static str,
    operation: OperationView,
}

pub(super) async fn answer(db: &Db, id: &str) -> ApiResult<Json<ActedOn>> {
    let (operation, status, _) = get_operation_with_status(db, id)
        .await?
        .ok_or(ApiError::NotFound)?;
    Ok(Json(ActedOn {
        code: "OK",
        operation: OperationView::of(operation, status),
    }))
}

/// Re-runs the operation's current step (a failed one goes back to the step
/// that failed).
#[utoipa::path(post, path = "/admin/v1/operations/{operationId}/retry", tag = "admin",
    operation_id = "retry_operation",
    params(("operationId" = uuid::Uuid, Path, description = "The operation id")),
    request_body = OptionalReason,
    responses((status = 200, description = "Retried", body = ActedOn),
        (status = 404, description = "NOT_FOUND: no such operation"),
        (status = 409, description = "CONFLICT: finished, waiting for an outside decision, in a running batch, or changed meanwhile")))]
pub async fn retry(
    State(state): State<AppState>,
    AuthUser(caller): AuthUser,
    Database(db): Database,
    Path(operation_id): Path<String>,
    AppJson(body): AppJson<OptionalReason>,
) -> ApiResult<Json<ActedOn>> {
    let reason = body.reason()?;
    let id = parse_operation_id(&operation_id)?;
    let operator = caller.identity.as_str();
    let attempt = Attempt::new(
        operator,
        "operation.retry",
        id.clone(),
        audited(&body, operator),
    );
    let retried = attempt_retry(&state, &db, &attempt, id, reason).await;
    attempt.refusal_audited(&db, retried).await
}

async fn attempt_retry(
    state: &AppState,
    db: &Db,
    attempt: &Attempt<'_>,
    id: String,
    reason: Option<String>,
) -> ApiResult<Json<ActedOn>> {
    let (operation, status) = owned(db, &id).await?;
    let mut plan = operator::retry(operation.kind, status, operation.step)
        .map_err(|why| ApiError::Conflict(why.message()))?;
    // A member of a running batch moves with its batch, never on its own;
    // one whose batch is over (its MR closed) goes back to wait for the next
    // round, or, with batching off now, opens an MR of its own: re-running
    // its step against the closed batch MR could only fail again.
    let mut requeue = false;
    if let Some(batch_id) = batch_of(db, &id).await? {
        match get_batch(db, batch_id).await? {
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
    let operator = attempt.operator();
    let message = format!(
        "retried by {operator}{}",
        reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default()
    );
    write_tx!(db, |tx| {
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
        attempt.done(tx.db()).await?;
        Ok::<_, ApiError>(())
    })
    .await?;
    if state.executor.try_submit(id.clone()).is_err() {
        tracing::info!(operation_id = %id, "retry recorded; the worker pool is busy, the dispatcher runs it when there is room");
    }
    answer(db, &id).await
}

/// Gives up on an operation: a request becomes ABANDONED (it may be applied
/// for again), a removal CLOSE_FAILED.
#[utoipa::path(post, path = "/admin/v1/operations/{operationId}/fail", tag = "admin",
    operation_id = "fail_operation",
    params(("operationId" = uuid::Uuid, Path, description = "The operation id")),
    request_body = RequiredReason,
    responses((status = 200, description = "Failed for good", body = ActedOn),
        (status = 400, description = "INVALID_ARGUMENT: no usable reason"),
        (status = 404, description = "NOT_FOUND: no such operation"),
        (status = 409, description = "CONFLICT: finished already, or changed meanwhile")))]
pub async fn force_fail(
    AuthUser(caller): AuthUser,
    Database(db): Database,
    Path(operation_id): Path<String>,
    AppJson(body): AppJson<RequiredReason>,
) -> ApiResult<Json<ActedOn>> {
    let reason = body.reason()?;
    let id = parse_operation_id(&operation_id)?;
    let operator = caller.identity.as_str();
    let attempt = Attempt::new(
        operator,
        "operation.force_fail",
        id.clone(),
        audited(&body, operator),
    );
    let failed = attempt_force_fail(&db, &attempt, id, &reason).await;
    attempt.refusal_audited(&db, failed).await
}

async fn attempt_force_fail(
    db: &Db,
    attempt: &Attempt<'_>,
    id: String,
    reason: &str,
) -> ApiResult<Json<ActedOn>> {
    let (_, status) = owned(db, &id).await?;
    let to = operator::force_fail(status).map_err(|why| ApiError::Conflict(why.message()))?;
    let operator = attempt.operator();
    let message = format!("force-failed by {operator}: {reason}");
    write_tx!(db, |tx| {
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
        attempt.done(tx.db()).await?;
        Ok::<_, ApiError>(())
    })
    .await?;
    answer(db, &id).await
}

pub(super) fn store_error(err: StoreError) -> ApiError {
    match err {
        StoreError::Preempted => changed_meanwhile(),
        StoreError::NotFound => ApiError::NotFound,
        other => ApiError::internal(other),
    }
}
