//! `POST /api/v1/operations/{operationId}/withdraw`: the requester (or an
//! operator) takes back a request before it reaches the repository: while
//! it awaits approval, or waits in the merge queue (scheduled, or queued for
//! the next round). Nothing was written to GitLab, so nothing is undone
//! there; the binding is `ABANDONED` and may be applied for again. A
//! removal waiting for its time hands the binding back instead, to the
//! request it took it from (src/store/handback.rs).

use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;

use super::status::{OperationView, operation_view};
use crate::config::resolve::FlowOrder;
use crate::db::Db;
use crate::db::operations::{get_operation_with_status, lock_operation};
use crate::domain::{AWAITING_APPROVAL, BindingStatus, OperationId, StepStatus};
use crate::http::error::{ApiError, ApiResult};
use crate::http::extract::{AppJson, AuthUser, Database};
use crate::http::reason::{MAX_REQUEST_REASON_CHARS, checked_reason};
use crate::state::AppState;
use crate::store::{Change, RemovalWithdrawal, StoreError, flip_in, withdraw_removal};
use crate::write_tx;

/// Body of a withdrawal.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WithdrawBody {
    /// Why it is withdrawn.
    #[schema(schema_with = crate::http::reason::request_reason_schema)]
    reason: String,
}

/// The steps of a request waiting in the merge queue, not yet in a batch.
const WAITING_STEPS: [StepStatus; 2] = [StepStatus::Queued, StepStatus::Scheduled];

const NOT_NOW: &str = "only a request that has not reached the repository can be withdrawn: \
    one awaiting approval (approval first), or waiting in the merge queue, scheduled or queued; \
    once in a merge batch it lands or fails with it, and a landed change is reverted instead";

const EXPIRED: &str = "the binding has expired: its removal goes ahead at its time";

const NO_PREDECESSOR: &str = "this removal cannot be withdrawn: the request it took the binding \
    from cannot be told; once it has landed, revert it to apply the binding again";

/// Withdraws a request before it reaches the repository.
#[utoipa::path(post, path = "/api/v1/operations/{operationId}/withdraw", tag = "requests",
    operation_id = "withdraw_operation",
    request_body = WithdrawBody,
    params(("operationId" = uuid::Uuid, Path, description = "The request to withdraw")),
    responses((status = 200, description = "Withdrawn: the request, now ABANDONED; a scheduled removal WITHDRAWN, its binding handed back to the request before it", body = OperationView),
        (status = 400, description = "INVALID_ARGUMENT: no usable reason"),
        (status = 404, description = "NOT_FOUND: no such request of yours"),
        (status = 409, description = "CONFLICT: it is in a merge batch, or further on, or a removal of an expired binding")))]
pub async fn withdraw_operation(
    State(state): State<AppState>,
    AuthUser(caller): AuthUser,
    Database(db): Database,
    Path(operation_id): Path<String>,
    AppJson(body): AppJson<WithdrawBody>,
) -> ApiResult<Json<OperationView>> {
    let reason = checked_reason(&body.reason, MAX_REQUEST_REASON_CHARS)?;
    let id = OperationId::parse(&operation_id)
        .map_err(|_| ApiError::NotFound)?
        .as_string();
    let Some((operation, status, _)) = get_operation_with_status(&db, &id).await? else {
        return Err(ApiError::NotFound);
    };
    if operation.requested_by != caller.identity.as_str() && !caller.operator {
        return Err(ApiError::NotFound);
    }
    let from = match status {
        Some(status)
            if AWAITING_APPROVAL.contains(&status)
                && operation.flow_order == FlowOrder::ApprovalFirst =>
        {
            status
        }
        Some(BindingStatus::MrCreating) if WAITING_STEPS.contains(&operation.step) => {
            BindingStatus::MrCreating
        }
        Some(BindingStatus::Closing) if operation.step == StepStatus::Scheduled => {
            withdraw_scheduled_removal(&db, &id, caller.identity.as_str(), &reason).await?;
            return operation_view(&state, &db, &id).await.map(Json);
        }
        _ => return Err(ApiError::Conflict(NOT_NOW)),
    };
    let message = format!("withdrawn by {}: {reason}", caller.identity.as_str());
    withdraw(&db, &id, from, &message, caller.identity.as_str()).await?;
    operation_view(&state, &db, &id).await.map(Json)
}

/// Withdraws a removal waiting for its time: the binding goes back to the
/// request the removal took it from, as that request left it.
async fn withdraw_scheduled_removal(db: &Db, id: &str, actor: &str, reason: &str) -> ApiResult<()> {
    let message = |owner: &str, status: BindingStatus| {
        format!(
            "withdrawn by {actor}: {reason}; the binding is back as request {owner} left it ({status})"
        )
    };
    match withdraw_removal(db, id, actor, &message).await {
        Ok(RemovalWithdrawal::HandedBack { owner, status }) => {
            tracing::info!(operation_id = id, %owner, %status, "scheduled removal withdrawn; binding handed back");
            Ok(())
        }
        Ok(RemovalWithdrawal::NotScheduled) | Err(StoreError::Preempted) => {
            Err(ApiError::Conflict(NOT_NOW))
        }
        Ok(RemovalWithdrawal::Expired) => Err(ApiError::Conflict(EXPIRED)),
        Ok(RemovalWithdrawal::NoPredecessor) => Err(ApiError::Conflict(NO_PREDECESSOR)),
        Err(err) => Err(ApiError::internal(err)),
    }
}

/// Moves the request to `ABANDONED` (step `WITHDRAWN`) if it is still
/// where it was read: a round's claim locks the same operation first, so
/// a request claimed meanwhile is refused, never withdrawn from its batch.
/// Leaving `MR_CREATING` takes it out of the waiting set in the same
/// transaction (src/store/transition.rs).
pub(super) async fn withdraw(
    db: &Db,
    id: &str,
    from: BindingStatus,
    message: &str,
    actor: &str,
) -> ApiResult<()> {
    write_tx!(db, |tx| {
        let still = lock_operation(tx.db(), id).await?.is_some_and(|operation| {
            from != BindingStatus::MrCreating || WAITING_STEPS.contains(&operation.step)
        });
        if !still {
            return Err(ApiError::Conflict(NOT_NOW));
        }
        let change = Change {
            step: StepStatus::Withdrawn,
            message: Some(message),
            actor,
        };
        match flip_in(tx, id, &[from], BindingStatus::Abandoned, change).await {
            Ok(Some(_)) => Ok(()),
            Ok(None) | Err(StoreError::Preempted) => Err(ApiError::Conflict(NOT_NOW)),
            Err(err) => Err(ApiError::internal(err)),
        }
    })
    .await
}
