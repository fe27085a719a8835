//! Requests shown in a merge batch whose row does not exist go back to wait.
//!
//! A claim inserts its batch and points the members at it in one
//! transaction, so this should never be found. A database that loses part
//! of a transaction it reported committed (a Galera node did once, while a
//! node of its cluster was lost) can leave members pointing at nothing:
//! no round drives a batch that is not there, so they would show "in merge
//! batch" forever. Nothing of theirs reached GitLab (only a batch row's
//! round writes there), so the next round can take them again.

use std::collections::BTreeSet;

use crate::db::Db;
use crate::db::batch_queue::{orphaned_members, rejoin_if_orphaned};
use crate::domain::{BindingStatus, StepStatus};
use crate::store::{Change, StoreError, move_members};
use crate::write_tx;

use super::metrics::Ended;
use super::runner::{ACTOR, MergeQueue};

const REQUEUED: &str = "the merge batch it was put in was lost; it waits for the next round";

impl MergeQueue {
    /// Puts the members of merge batches whose row is gone back in the
    /// waiting set.
    pub(super) async fn requeue_orphans(&self, db: &Db) -> Result<(), StoreError> {
        let orphans = orphaned_members(db).await?;
        let mut lost = BTreeSet::new();
        for (operation_id, batch_id) in &orphans {
            if requeue(db, operation_id).await? {
                tracing::error!(
                    operation_id,
                    batch = batch_id,
                    "a request pointed at a merge batch the database does not hold; it waits again"
                );
                lost.insert(*batch_id);
            }
        }
        for _ in &lost {
            Ended::Lost.count();
        }
        Ok(())
    }
}

/// Moves one orphan back to `QUEUED` and into the waiting set, its
/// operation and binding locked first (as a claim locks them); `false` when
/// it moved on meanwhile.
async fn requeue(db: &Db, operation_id: &str) -> Result<bool, StoreError> {
    let member = [operation_id.to_owned()];
    let requeued = write_tx!(db, |tx| {
        let change = Change {
            step: StepStatus::Queued,
            message: Some(REQUEUED),
            actor: ACTOR,
        };
        let moved = move_members(
            tx,
            &member,
            &[BindingStatus::MrCreating],
            None,
            change,
            None,
        )
        .await?;
        if moved.is_empty() {
            return Ok(false);
        }
        if rejoin_if_orphaned(tx.db(), operation_id).await? != 1 {
            return Err(StoreError::Preempted);
        }
        Ok(true)
    })
    .await;
    match requeued {
        Err(StoreError::Preempted) => Ok(false),
        other => other,
    }
}
