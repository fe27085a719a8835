//! Hands stalled operations back to the workers: an operation at a step the
//! workflow moves by itself that has not changed for a while (its worker
//! died with the process, or the queue was full) is queued again. Steps are
//! re-entrant and every write is version-guarded, so a second run of a step
//! that is in fact still running loses its writes instead of doubling them.

use std::time::Duration;

use anyhow::Context;

use super::Outcome;
use crate::db::Db;
use crate::db::operations::list_stalled;
use crate::domain::StepStatus;
use crate::workflow::Executor;

/// Steps the workflow moves on from by itself.
pub const AUTOMATIC_STEPS: &[StepStatus] = &[
    StepStatus::Accepted,
    StepStatus::ApprovalSending,
    StepStatus::ApprovalSendUnknown,
    StepStatus::CalledBackApproved,
    StepStatus::MrCreating,
    StepStatus::MrCreated,
    StepStatus::PipelinePending,
    StepStatus::HandleStarted,
    StepStatus::MergePending,
    StepStatus::CloseRequested,
    StepStatus::CloseExpired,
    StepStatus::CloseMrCreated,
];

/// How long an operation must be unchanged to count as stalled: longer than
/// any single step takes (the pipeline wait is the longest, about a minute).
pub const STALLED_AFTER: Duration = Duration::from_secs(300);

const BATCH: u32 = 100;

/// One round: queues up to [`BATCH`] stalled operations while the queue has room.
pub async fn run_once(
    db: &Db,
    executor: &Executor,
    stalled_after: Duration,
) -> anyhow::Result<Outcome> {
    let age = i64::try_from(stalled_after.as_millis()).unwrap_or(i64::MAX);
    let stalled = list_stalled(db, AUTOMATIC_STEPS, age, BATCH)
        .await
        .context("listing stalled operations")?;
    let mut queued = 0;
    for operation_id in &stalled {
        if executor.try_submit(operation_id.clone()).is_err() {
            break;
        }
        queued += 1;
    }
    if queued > 0 {
        tracing::info!(queued, "stalled operations handed back to the workers");
    }
    Ok(match queued {
        0 => Outcome::Idle,
        done => Outcome::Worked { done, full: false },
    })
}
