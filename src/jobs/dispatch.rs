//! Hands due operations to the workers: waits that ran out (polls) and steps
//! whose owner died (an expired lease). Every instance runs it over the same
//! table; the step lease, taken by compare-and-swap when a worker starts,
//! decides which instance runs each one.

use anyhow::Context;

use super::Outcome;
use crate::db::Db;
use crate::db::leases::list_due;
use crate::workflow::Executor;

/// Most operations listed per round.
const BATCH: usize = 100;

/// One round: queues due operations while the queue has room, keeping a
/// quarter of it for new requests (a backlog must not make them "busy").
/// `owner` is the workers' step lease id: steps it holds but does not run
/// are taken up again at once.
pub async fn run_once(db: &Db, executor: &Executor, owner: &str) -> anyhow::Result<Outcome> {
    let kept_for_requests = executor.max_capacity() / 4;
    let room = executor
        .free_capacity()
        .saturating_sub(kept_for_requests)
        .min(BATCH);
    if room == 0 {
        return Ok(Outcome::Idle);
    }
    let due = list_due(db, owner, u32::try_from(room).unwrap_or(u32::MAX))
        .await
        .context("listing due operations")?;
    let mut queued = 0;
    for operation_id in &due {
        if executor.try_submit(operation_id.clone()).is_err() {
            break;
        }
        queued += 1;
    }
    if queued > 0 {
        tracing::debug!(queued, "due operations handed to the workers");
    }
    Ok(match queued {
        0 => Outcome::Idle,
        done => Outcome::Worked {
            done,
            full: due.len() == room && queued == room as u64,
        },
    })
}
