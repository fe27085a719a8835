//! Where a step's writes go: the operation's transition, with the timeline
//! events that led to it recorded first in the same transaction, or those
//! events alone when the step moved nothing.

use super::Workflow;
use super::merge_request::{ACTOR, Outcome};
use crate::db::Db;
use crate::db::operations::{OperationRow, lock_operation};
use crate::db::timeline_events::{TimelineEvent, record_events};
use crate::store::{self, Change, StoreError, StoreTx};
use crate::write_tx;

impl Workflow {
    /// Writes `outcome` (adapted to the operation's kind) if the operation is
    /// still at `version`.
    pub(super) async fn settle(
        &self,
        db: &Db,
        operation: &OperationRow,
        version: i64,
        outcome: Outcome,
    ) -> Result<(), StoreError> {
        self.settle_noting(db, operation, version, outcome, &[])
            .await
    }

    /// [`Self::settle`], with the events that led to it recorded first, in
    /// the same transaction.
    pub(super) async fn settle_noting(
        &self,
        db: &Db,
        operation: &OperationRow,
        version: i64,
        outcome: Outcome,
        noted: &[TimelineEvent],
    ) -> Result<(), StoreError> {
        let outcome = outcome.for_kind(operation.kind);
        let change = Change {
            step: outcome.step,
            message: outcome.message.as_deref(),
            actor: ACTOR,
        };
        let id = operation.operation_id.as_str();
        write_tx!(db, |tx| {
            record_locked(tx, id, noted).await?;
            store::transition_in(tx, id, version, outcome.status, change).await
        })
        .await
        .map(|_| ())
    }

    /// Records `noted` alone: what a round saw that moved nothing (an
    /// approval while the MR is not mergeable yet). Nothing is written when
    /// there is nothing new.
    pub(super) async fn note(
        &self,
        db: &Db,
        operation: &OperationRow,
        noted: &[TimelineEvent],
    ) -> Result<(), StoreError> {
        if noted.is_empty() {
            return Ok(());
        }
        let id = operation.operation_id.as_str();
        write_tx!(db, |tx| record_locked(tx, id, noted).await).await
    }
}

/// Records `noted` for one operation, its row locked first, as the
/// transition that may follow locks it (the store's lock order).
async fn record_locked(
    tx: &mut StoreTx,
    operation_id: &str,
    noted: &[TimelineEvent],
) -> Result<(), StoreError> {
    if noted.is_empty() {
        return Ok(());
    }
    lock_operation(tx.db(), operation_id).await?;
    record_events(tx.db(), &[operation_id.to_owned()], noted).await?;
    Ok(())
}
