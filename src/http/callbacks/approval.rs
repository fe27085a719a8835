//! `POST /callbacks/approval`: the approval system's decision.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;

use super::signed::{ApprovalSystem, SignedJson};
use super::{Answer, CallbackAnswer, first_receipt, trace_operation, valid_callback_id};
use crate::config::Settings;
use crate::config::resolve::FlowOrder;
use crate::db::callbacks::CallbackSource;
use crate::db::operations::{OperationRow, get_operation};
use crate::db::{Db, retrying};
use crate::domain::{ApprovalDecision, BindingStatus, OperationId};
use crate::http::error::{ApiError, ApiResult};
use crate::http::extract::Database;
use crate::state::AppState;
use crate::store::apply_decision;
use crate::store::{StoreError, StoreTx};

/// The decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
enum Decision {
    Approved,
    Rejected,
    Withdrawn,
}

/// What the approval system sends.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalCallback {
    callback_id: String,
    operation_id: String,
    result: Decision,
    #[serde(default)]
    ext: Option<Ext>,
}

/// Extension fields; `mrId` marks the MR-first flow.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
struct Ext {
    mr_id: Option<i64>,
}

/// Applies a decision only to the binding's current owner while it awaits
/// approval (SENDING counts: the callback may beat the SENT write); anything
/// else is `IGNORED_STALE`, answered 200 so the caller stops retrying.
#[utoipa::path(post, path = "/callbacks/approval", tag = "callbacks",
    request_body = ApprovalCallback,
    params(("webhook-id" = String, Header), ("webhook-timestamp" = String, Header),
        ("webhook-signature" = String, Header, description = "Standard Webhooks `v1,<base64 HMAC-SHA256>`")),
    responses((status = 200, description = "OK (applied), DUPLICATE (applied before) or IGNORED_STALE (no longer applies)", body = CallbackAnswer),
        (status = 401, description = "INVALID_SIGNATURE")))]
pub async fn approval_callback(
    State(state): State<AppState>,
    Database(db): Database,
    SignedJson(callback, _): SignedJson<ApprovalCallback, ApprovalSystem>,
) -> ApiResult<Json<CallbackAnswer>> {
    if !valid_callback_id(&callback.callback_id) {
        return Err(ApiError::InvalidArgument(
            "field `callbackId`: 1 to 191 printable characters".to_owned(),
        ));
    }
    let Ok(operation_id) = OperationId::parse(&callback.operation_id) else {
        return Ok(Answer::IgnoredStale.json());
    };
    let operation_id = operation_id.as_string();
    // The flow an operation follows is fixed when it is created; a callback
    // whose shape says otherwise (ext.mrId for an approval-first request, or
    // none for an MR-first one) is not for this operation's current state.
    let Some(operation) = get_operation(&db, &operation_id).await? else {
        return Ok(Answer::IgnoredStale.json());
    };
    trace_operation(
        &operation_id,
        operation.mr_iid,
        operation.trace_parent.as_deref(),
    );
    let mr_first = operation.flow_order == FlowOrder::MrFirst;
    let has_mr = callback.ext.as_ref().and_then(|ext| ext.mr_id).is_some();
    if callback.result == Decision::Approved && mr_first != has_mr {
        tracing::warn!(%operation_id, mr_first, has_mr, "approval callback does not match the operation's flow");
        return Ok(Answer::IgnoredStale.json());
    }
    let decision = match callback.result {
        Decision::Approved => ApprovalDecision::Approved,
        Decision::Rejected => ApprovalDecision::Rejected,
        Decision::Withdrawn => ApprovalDecision::Withdrawn,
    };
    let settings = state.config.current();
    let decided =
        retrying(|| record_decision(&db, &settings, &operation, decision, &callback.callback_id))
            .await?;
    let to = match decided {
        Ok(to) => to,
        Err(answer) => return Ok(answer.json()),
    };
    if to != BindingStatus::Rejected && state.executor.try_submit(operation_id.clone()).is_err() {
        // The decision is recorded; the workers pick the operation up from
        // the database once they have room (durable execution): nothing
        // for an operator to do.
        tracing::debug!(%operation_id, "approved, but the worker pool is busy");
    }
    Ok(Answer::Ok.json())
}

/// Records the callback's receipt and applies its decision, in one
/// transaction: `Err` with the answer when it is a duplicate or no longer
/// applies, and then nothing is written.
async fn record_decision(
    db: &Db,
    settings: &Settings,
    operation: &OperationRow,
    decision: ApprovalDecision,
    callback_id: &str,
) -> ApiResult<Result<BindingStatus, Answer>> {
    let mut tx = StoreTx::begin(db).await?;
    if !first_receipt(&mut tx, CallbackSource::Approval, callback_id).await? {
        tx.rollback().await?;
        return Ok(Err(Answer::Duplicate));
    }
    let decided = apply_decision(
        &mut tx,
        settings,
        operation,
        decision,
        "approval-callback",
        None,
    )
    .await;
    match decided {
        Ok(Some(to)) => {
            tx.commit().await?;
            Ok(Ok(to))
        }
        Ok(None) | Err(StoreError::NotFound) => {
            tx.rollback().await?;
            Ok(Err(Answer::IgnoredStale))
        }
        Err(err) => {
            tx.rollback().await?;
            Err(ApiError::internal(err))
        }
    }
}
