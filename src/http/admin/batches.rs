//! Operators and the merge queue: `GET /admin/v1/batches` (newest first),
//! `GET /admin/v1/batches/{id}` (members and their history, the split tree
//! included), `POST /admin/v1/batches/run` (a claim round now, the same code
//! as the scheduler) and `POST /admin/v1/batches/{id}/settle` (a stuck batch
//! gives its slot back; its members wait for the next round). Actions are
//! audited.

use axum::Json;
use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::bodies::{FreezeBody, OptionalReason, RequiredReason, audited};
use crate::batch::{ClaimError, Claimed, NotNow, Settled};
use crate::db::audit::append_audit;
use crate::db::batches::{
    BatchRow, get_batch, list_batches, members, membership_history, set_frozen,
};
use crate::http::api::status::rfc3339;
use crate::http::error::{ApiError, ApiResult};
use crate::http::extract::{AppJson, AppQuery, AuthUser, Database};
use crate::http::page::PageRequest;
use crate::state::AppState;
use crate::write_tx;

const DEFAULT_PAGE: u32 = 50;
const MAX_PAGE: u32 = 200;

/// Page selection.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct BatchQuery {
    /// `nextCursor` of the previous page.
    #[param(pattern = r"^[0-9]{1,18}$")]
    cursor: Option<String>,
    /// Page size, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    limit: Option<u32>,
}

/// One batch.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BatchView {
    id: i64,
    /// `RUNNING`, `SUCCEEDED`, `FAILED` or `BLOCKED`.
    status: String,
    /// `OPENING`, `PIPELINE` or `MERGING` (meaningful while RUNNING).
    phase: String,
    project: String,
    /// The half of a failed batch it retries (`a`/`b` path), empty for a first try.
    split_group: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    merge_request: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    merge_sha: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    created_at: String,
    updated_at: String,
}

impl From<BatchRow> for BatchView {
    fn from(row: BatchRow) -> Self {
        Self {
            id: row.id,
            status: row.status,
            phase: row.phase,
            project: row.project,
            split_group: row.split_group,
            merge_request: row
                .mr_iid
                .map(|iid| json!({ "iid": iid, "url": row.mr_url })),
            merge_sha: row.merge_sha,
            message: row.message,
            created_at: rfc3339(row.created_at),
            updated_at: rfc3339(row.updated_at),
        }
    }
}

/// Batches, newest first.
#[utoipa::path(get, path = "/admin/v1/batches", tag = "admin", operation_id = "list_batches",
    params(BatchQuery),
    responses((status = 200, description = "`{items: [batch], nextCursor}`", body = Object),
        (status = 400, description = "INVALID_ARGUMENT: a bad cursor or limit")))]
pub async fn list(
    Database(db): Database,
    AppQuery(query): AppQuery<BatchQuery>,
) -> ApiResult<Json<Value>> {
    let page = PageRequest::parse(query.cursor.as_deref(), query.limit, DEFAULT_PAGE, MAX_PAGE)?;
    let mut rows = list_batches(&db, page.before, page.fetch_limit()).await?;
    let next_cursor = page.finish(&mut rows, |b| b.id);
    let items: Vec<BatchView> = rows.into_iter().map(BatchView::from).collect();
    Ok(Json(json!({ "items": items, "nextCursor": next_cursor })))
}

/// One batch with its members and their membership history.
#[utoipa::path(get, path = "/admin/v1/batches/{batchId}", tag = "admin", operation_id = "get_batch",
    params(("batchId" = i64, Path, description = "The batch id")),
    responses((status = 200, description = "`{batch, members, history}`", body = Object),
        (status = 404, description = "NOT_FOUND: no such batch")))]
pub async fn get_one(
    Database(db): Database,
    Path(batch_id): Path<String>,
) -> ApiResult<Json<Value>> {
    let batch_id: i64 = batch_id.parse().map_err(|_| ApiError::NotFound)?;
    let batch = get_batch(&db, batch_id).await?.ok_or(ApiError::NotFound)?;
    let current = members(&db, batch_id).await?;
    let history: Vec<Value> = membership_history(&db, batch_id)
        .await?
        .into_iter()
        .map(|h| {
            json!({ "operationId": h.operation_id, "event": h.event, "detail": h.detail,
                    "at": rfc3339(h.created_at) })
        })
        .collect();
    Ok(Json(json!({
        "batch": BatchView::from(batch),
        "members": current,
        "history": history,
    })))
}

/// Runs a claim round now (the scheduler's code; overlapping it is safe).
#[utoipa::path(post, path = "/admin/v1/batches/run", tag = "admin", operation_id = "run_merge_round",
    request_body = OptionalReason,
    responses((status = 200, description = "`{code: OK, claimed: [{batchId, members}], slotOccupied, raced}`", body = Object),
        (status = 409, description = "CONFLICT: the queue is frozen (batch.freeze)")))]
pub async fn run(
    State(state): State<AppState>,
    AuthUser(caller): AuthUser,
    Database(db): Database,
    AppJson(body): AppJson<OptionalReason>,
) -> ApiResult<Json<Value>> {
    body.reason()?;
    let outcomes = match state.merge_queue.claim_round().await {
        Ok(outcomes) => outcomes,
        Err(ClaimError::NotNow(NotNow::Frozen)) => {
            return Err(ApiError::Conflict(
                "the merge queue is frozen (batch.freeze)",
            ));
        }
        Err(ClaimError::NotNow(NotNow::NoDatabase)) => return Err(ApiError::NotReady),
        Err(ClaimError::Store(err)) => return Err(ApiError::internal(err)),
    };
    let operator = caller.identity.as_str();
    write_tx!(&db, |tx| {
        append_audit(
            tx.db(),
            operator,
            "batch.run",
            "merge-queue",
            &audited(&body, operator),
        )
        .await?;
        Ok::<_, ApiError>(())
    })
    .await?;
    let claimed: Vec<Value> = outcomes
        .iter()
        .filter_map(|outcome| match outcome {
            Claimed::Batch { id, members } => {
                Some(json!({ "batchId": id, "members": members.len() }))
            }
            _ => None,
        })
        .collect();
    let count = |wanted: &Claimed| outcomes.iter().filter(|o| *o == wanted).count();
    Ok(Json(json!({
        "code": "OK",
        "claimed": claimed,
        "slotOccupied": count(&Claimed::SlotOccupied),
        "raced": count(&Claimed::Raced),
    })))
}

/// Settles a running batch: merged wins; otherwise FAILED, and its members
/// wait for the next round.
#[utoipa::path(post, path = "/admin/v1/batches/{batchId}/settle", tag = "admin", operation_id = "settle_batch",
    params(("batchId" = i64, Path, description = "The batch id")), request_body = RequiredReason,
    responses((status = 200, description = "`{code: OK, batch}`", body = Object),
        (status = 400, description = "INVALID_ARGUMENT: no usable reason"),
        (status = 404, description = "NOT_FOUND: no such batch"),
        (status = 409, description = "CONFLICT: not running (settled already), or a round of it is in progress")))]
pub async fn settle(
    State(state): State<AppState>,
    AuthUser(caller): AuthUser,
    Database(db): Database,
    Path(batch_id): Path<String>,
    AppJson(body): AppJson<RequiredReason>,
) -> ApiResult<Json<Value>> {
    let batch_id: i64 = batch_id.parse().map_err(|_| ApiError::NotFound)?;
    let reason = body.reason()?;
    get_batch(&db, batch_id).await?.ok_or(ApiError::NotFound)?;
    let operator = caller.identity.as_str();
    let settled = state
        .merge_queue
        .settle(batch_id, &format!("by {operator}: {reason}"))
        .await
        .map_err(ApiError::internal)?;
    match settled {
        Settled::Merged | Settled::Released => {}
        Settled::NotRunning => {
            return Err(ApiError::Conflict(
                "the batch is not running (settled already)",
            ));
        }
        Settled::Busy => {
            return Err(ApiError::Conflict(
                "a round of this batch is in progress; try again in a moment",
            ));
        }
    }
    write_tx!(&db, |tx| {
        append_audit(
            tx.db(),
            operator,
            "batch.settle",
            &batch_id.to_string(),
            &audited(&body, operator),
        )
        .await?;
        Ok::<_, ApiError>(())
    })
    .await?;
    let batch = get_batch(&db, batch_id).await?.ok_or(ApiError::NotFound)?;
    Ok(Json(
        json!({ "code": "OK", "batch": BatchView::from(batch) }),
    ))
}

/// Freezes or thaws the merge queue for every instance (merge windows,
/// embargoes): frozen, no new round starts; nothing waiting or running
/// fails. `batch.freeze` in the configuration freezes it too.
#[utoipa::path(put, path = "/admin/v1/batches/freeze", tag = "admin", operation_id = "freeze_merge_queue",
    request_body = FreezeBody,
    responses((status = 200, description = "`{code: OK, frozen, byConfiguration}`", body = Object)))]
pub async fn freeze(
    State(state): State<AppState>,
    AuthUser(caller): AuthUser,
    Database(db): Database,
    AppJson(body): AppJson<FreezeBody>,
) -> ApiResult<Json<Value>> {
    let frozen = body.frozen;
    let reason = body.reason()?;
    let operator = caller.identity.as_str();
    write_tx!(&db, |tx| {
        set_frozen(tx.db(), frozen, reason.as_deref(), operator).await?;
        let action = if frozen { "batch.freeze" } else { "batch.thaw" };
        append_audit(
            tx.db(),
            operator,
            action,
            "merge-queue",
            &audited(&body, operator),
        )
        .await?;
        Ok::<_, ApiError>(())
    })
    .await?;
    Ok(Json(json!({
        "code": "OK",
        "frozen": frozen,
        "byConfiguration": state.config.current().batch.freeze,
    })))
}
