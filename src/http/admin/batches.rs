//! Operators and the merge queue: `GET /admin/v1/batches` (newest first),
//! `GET /admin/v1/batches/{id}` (members and their history, the split tree
//! included), `POST /admin/v1/batches/run` (a claim round now, the same code
//! as the scheduler) and `POST /admin/v1/batches/{id}/settle` (a stuck batch
//! gives its slot back; its members wait for the next round). Actions are
//! audited.

use axum::Json;
use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};

use super::attempt::Attempt;
use super::batch_views::{BatchView, batch_view, batch_views};
use super::bodies::{FreezeBody, OptionalReason, RequiredReason, audited};
use super::ok::OkCode;
use crate::batch::{ClaimError, Claimed, NotNow, Settled};
use crate::db::Db;
use crate::db::audit::append_audit;
use crate::db::batches::{get_batch, list_batches, members, membership_history, set_frozen};
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

/// One page of batches, newest first.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BatchPage {
    items: Vec<BatchView>,
    /// Pass as `cursor` for the next page; null on the last page.
    next_cursor: Option<String>,
}

/// A batch with its members and their membership history.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BatchDetail {
    batch: BatchView,
    /// The operation ids claimed into it, in id order.
    members: Vec<String>,
    /// Every change of its membership, oldest first.
    history: Vec<MembershipEvent>,
}

/// One change of a batch's membership.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MembershipEvent {
    operation_id: String,
    /// What happened to the member, e.g. `CLAIMED`, `MERGED`, `RELEASED`,
    /// `SPLIT`, `FAILED`, `REMOVED`: the history is append-only and keeps
    /// the events of earlier releases, so the set is left open.
    event: String,
    /// The split group (`SPLIT`), the merged head (`MERGED`) or a reason.
    detail: Option<String>,
    #[schema(value_type = String, format = DateTime)]
    at: String,
}

/// What a claim round did.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MergeRound {
    code: OkCode,
    /// The batches it opened.
    claimed: Vec<ClaimedBatch>,
    /// Partitions skipped because they have an active batch.
    slot_occupied: usize,
    /// Partitions whose claim lost a race with another claimer.
    raced: usize,
}

/// A batch a round opened.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimedBatch {
    batch_id: i64,
    /// Its number among its project's batches (as a batch view's `number`).
    batch_number: i64,
    /// How many requests it took.
    members: usize,
}

/// A settled batch, as it is now.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SettledBatch {
    code: OkCode,
    batch: BatchView,
}

/// The merge queue's freeze, as it is now.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FreezeState {
    code: OkCode,
    /// Frozen by an operator.
    frozen: bool,
    /// Frozen by `batch.freeze` in the configuration (which an operator's
    /// thaw does not lift).
    by_configuration: bool,
}

/// Batches, newest first.
#[utoipa::path(get, path = "/admin/v1/batches", tag = "admin", operation_id = "list_batches",
    params(BatchQuery),
    responses((status = 200, description = "A page of batches", body = BatchPage),
        (status = 400, description = "INVALID_ARGUMENT: a bad cursor or limit")))]
pub async fn list(
    Database(db): Database,
    AppQuery(query): AppQuery<BatchQuery>,
) -> ApiResult<Json<BatchPage>> {
    let page = PageRequest::parse(query.cursor.as_deref(), query.limit, DEFAULT_PAGE, MAX_PAGE)?;
    let mut rows = list_batches(&db, page.before, page.fetch_limit()).await?;
    let next_cursor = page.finish(&mut rows, |b| b.id);
    let items = batch_views(&db, rows).await?;
    Ok(Json(BatchPage { items, next_cursor }))
}

/// One batch with its members and their membership history.
#[utoipa::path(get, path = "/admin/v1/batches/{batchId}", tag = "admin", operation_id = "get_batch",
    params(("batchId" = i64, Path, description = "The batch id")),
    responses((status = 200, description = "The batch, its members and their history", body = BatchDetail),
        (status = 404, description = "NOT_FOUND: no such batch")))]
pub async fn get_one(
    Database(db): Database,
    Path(batch_id): Path<String>,
) -> ApiResult<Json<BatchDetail>> {
    let batch_id: i64 = batch_id.parse().map_err(|_| ApiError::NotFound)?;
    let batch = get_batch(&db, batch_id).await?.ok_or(ApiError::NotFound)?;
    let members = members(&db, batch_id).await?;
    let history = membership_history(&db, batch_id)
        .await?
        .into_iter()
        .map(|h| MembershipEvent {
            operation_id: h.operation_id,
            event: h.event,
            detail: h.detail,
            at: rfc3339(h.created_at),
        })
        .collect();
    Ok(Json(BatchDetail {
        batch: batch_view(&db, batch).await?,
        members,
        history,
    }))
}

/// Runs a claim round now (the scheduler's code; overlapping it is safe).
#[utoipa::path(post, path = "/admin/v1/batches/run", tag = "admin", operation_id = "run_merge_round",
    request_body = OptionalReason,
    responses((status = 200, description = "What the round did", body = MergeRound),
        (status = 409, description = "CONFLICT: the queue is frozen (batch.freeze)")))]
pub async fn run(
    State(state): State<AppState>,
    AuthUser(caller): AuthUser,
    Database(db): Database,
    AppJson(body): AppJson<OptionalReason>,
) -> ApiResult<Json<MergeRound>> {
    body.reason()?;
    let operator = caller.identity.as_str();
    let attempt = Attempt::new(
        operator,
        "batch.run",
        "merge-queue",
        audited(&body, operator),
    );
    let round = attempt_round(&state, &db, &attempt).await;
    attempt.refusal_audited(&db, round).await
}

async fn attempt_round(
    state: &AppState,
    db: &Db,
    attempt: &Attempt<'_>,
) -> ApiResult<Json<MergeRound>> {
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
    write_tx!(db, |tx| {
        attempt.done(tx.db()).await?;
        Ok::<_, ApiError>(())
    })
    .await?;
    let claimed = outcomes
        .iter()
        .filter_map(|outcome| match outcome {
            Claimed::Batch {
                id,
                number,
                members,
            } => Some(ClaimedBatch {
                batch_id: *id,
                batch_number: *number,
                members: members.len(),
            }),
            _ => None,
        })
        .collect();
    let count = |wanted: &Claimed| outcomes.iter().filter(|o| *o == wanted).count();
    Ok(Json(MergeRound {
        code: OkCode::Ok,
        claimed,
        slot_occupied: count(&Claimed::SlotOccupied),
        raced: count(&Claimed::Raced),
    }))
}

/// Settles a running batch: merged wins; otherwise FAILED, and its members
/// wait for the next round.
#[utoipa::path(post, path = "/admin/v1/batches/{batchId}/settle", tag = "admin", operation_id = "settle_batch",
    params(("batchId" = i64, Path, description = "The batch id")), request_body = RequiredReason,
    responses((status = 200, description = "The batch as it is now", body = SettledBatch),
        (status = 400, description = "INVALID_ARGUMENT: no usable reason"),
        (status = 404, description = "NOT_FOUND: no such batch"),
        (status = 409, description = "CONFLICT: not running (settled already), or a round of it is in progress")))]
pub async fn settle(
    State(state): State<AppState>,
    AuthUser(caller): AuthUser,
    Database(db): Database,
    Path(batch_id): Path<String>,
    AppJson(body): AppJson<RequiredReason>,
) -> ApiResult<Json<SettledBatch>> {
    let batch_id: i64 = batch_id.parse().map_err(|_| ApiError::NotFound)?;
    let reason = body.reason()?;
    let operator = caller.identity.as_str();
    let attempt = Attempt::new(
        operator,
        "batch.settle",
        batch_id.to_string(),
        audited(&body, operator),
    );
    let settled = attempt_settle(&state, &db, &attempt, batch_id, &reason).await;
    attempt.refusal_audited(&db, settled).await
}

async fn attempt_settle(
    state: &AppState,
    db: &Db,
    attempt: &Attempt<'_>,
    batch_id: i64,
    reason: &str,
) -> ApiResult<Json<SettledBatch>> {
    get_batch(db, batch_id).await?.ok_or(ApiError::NotFound)?;
    let operator = attempt.operator();
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
    write_tx!(db, |tx| {
        attempt.done(tx.db()).await?;
        Ok::<_, ApiError>(())
    })
    .await?;
    let batch = get_batch(db, batch_id).await?.ok_or(ApiError::NotFound)?;
    Ok(Json(SettledBatch {
        code: OkCode::Ok,
        batch: batch_view(db, batch).await?,
    }))
}

/// Freezes or thaws the merge queue for every instance (merge windows,
/// embargoes): frozen, no new round starts; nothing waiting or running
/// fails. `batch.freeze` in the configuration freezes it too.
#[utoipa::path(put, path = "/admin/v1/batches/freeze", tag = "admin", operation_id = "freeze_merge_queue",
    request_body = FreezeBody,
    responses((status = 200, description = "The freeze as it is now", body = FreezeState)))]
pub async fn freeze(
    State(state): State<AppState>,
    AuthUser(caller): AuthUser,
    Database(db): Database,
    AppJson(body): AppJson<FreezeBody>,
) -> ApiResult<Json<FreezeState>> {
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
    Ok(Json(FreezeState {
        code: OkCode::Ok,
        frozen,
        by_configuration: state.config.current().batch.freeze,
    }))
}
