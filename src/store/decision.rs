//! An approval decision, and with it the place in the merge queue: its
//! partition, or that partition's urgent lane, and its time.

use chrono::Utc;

use super::{Change, StoreError, StoreTx, flip_in};
use crate::config::Settings;
use crate::config::resolve::FlowOrder;
use crate::db::batch_queue::enqueue;
use crate::db::operations::OperationRow;
use crate::domain::{AWAITING_APPROVAL, ApprovalDecision, BindingStatus, StepStatus};
use crate::schedule::{Hold, hold};

/// What an urgent lane's partition key starts with (a GitLab project path
/// never holds a colon, so no project's partition does).
const URGENT_LANE: &str = "urgent:";

/// The partition whose slot a request of `project` waits for.
pub fn partition_of<'a>(settings: &Settings, project: &'a str) -> &'a str {
    if settings.batch.partition_by_project {
        project
    } else {
        ""
    }
}

/// The urgent lane of `partition`: a train of its own, built on the target
/// branch as it is, so no ordinary batch ahead (or failing) holds an urgent
/// request back. The ordinary batches it overtakes find the target moved
/// and are built again (src/batch/train.rs): nothing merges untested.
pub fn urgent_lane(partition: &str) -> String {
    if is_urgent_lane(partition) {
        partition.to_owned()
    } else {
        format!("{URGENT_LANE}{partition}")
    }
}

/// Whether `partition` is an urgent lane.
pub fn is_urgent_lane(partition: &str) -> bool {
    partition.starts_with(URGENT_LANE)
}

/// The partition an approved `operation` waits in.
fn lane_of(settings: &Settings, operation: &OperationRow, project: &str) -> String {
    let partition = partition_of(settings, project);
    if operation.urgent {
        urgent_lane(partition)
    } else {
        partition.to_owned()
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
    let (to, mut step) = decision.outcome(mr_first, settings.batch.enabled);
    // An approved request whose time has not come, or whose target's
    // windows are closed, waits in the queue all the same, shown SCHEDULED.
    let held = hold(
        settings,
        &operation.target_key,
        operation.not_before,
        Utc::now(),
    );
    let waits = (step == StepStatus::Queued && held != Hold::Free).then(|| held.describe());
    if waits.is_some() {
        step = StepStatus::Scheduled;
    }
    let change = Change {
        step,
        message: waits.as_deref().or(message),
        actor,
    };
    let flipped = flip_in(tx, &operation.operation_id, AWAITING_APPROVAL, to, change).await?;
    if flipped.is_none() {
        return Ok(None);
    }
    if matches!(step, StepStatus::Queued | StepStatus::Scheduled) {
        let project = settings.project_for(&operation.target_key);
        enqueue(
            tx.db(),
            &operation.operation_id,
            &lane_of(settings, operation, project),
            project,
            operation.not_before,
        )
        .await?;
    }
    Ok(Some(to))
}
