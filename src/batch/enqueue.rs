//! An approval decision, and with it the place in the merge queue.

use crate::config::Settings;
use crate::config::resolve::FlowOrder;
use crate::db::batch_queue::enqueue;
use crate::db::operations::OperationRow;
use crate::domain::{AWAITING_APPROVAL, ApprovalDecision, BindingStatus, StepStatus};
use crate::store::{Change, StoreError, StoreTx, flip_in};

/// The partition whose slot a request of `project` waits for.
pub fn partition_of<'a>(settings: &Settings, project: &'a str) -> &'a str {
    if settings.batch.partition_by_project {
        project
    } else {
        ""
    }
}

/// Applies `decision` to an operation awaiting approval (flip-once). An
/// approval of the approval-first flow, with `batch.enabled`, joins the
/// waiting set in the same transaction (a duplicate is "already queued",
/// I4); otherwise the request goes on by itself. Returns the new status
/// when this call made the move, `None` when the operation was not awaiting
/// approval any more.
pub async fn apply_decision(
    tx: &mut StoreTx,
    settings: &Settings,
    operation: &OperationRow,
    decision: ApprovalDecision,
    actor: &str,
    message: Option<&str>,
) -> Result<Option<BindingStatus>, StoreError> {
    let mr_first = operation.flow_order == FlowOrder::MrFirst;
    let (to, step) = decision.outcome(mr_first, settings.batch.enabled);
    let change = Change {
        step,
        message,
        actor,
    };
    let flipped = flip_in(tx, &operation.operation_id, AWAITING_APPROVAL, to, change).await?;
    if flipped.is_none() {
        return Ok(None);
    }
    if step == StepStatus::Queued {
        let project = settings.project_for(&operation.target_key);
        enqueue(
            tx.db(),
            &operation.operation_id,
            partition_of(settings, project),
            project,
        )
        .await?;
    }
    Ok(Some(to))
}
