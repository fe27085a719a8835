//! What a batch's rounds saw on GitLab (its pipeline runs, the reviewer
//! bots' approvals, rebases, the merge commit), recorded on the timeline of
//! every member, set-based, with the batch write it belongs to.

use crate::db::Db;
use crate::db::batches::{BatchRow, live_members};
use crate::db::timeline_events::{TimelineEvent, record_events};
use crate::store::{StoreError, StoreTx, lock_members};
use crate::write_tx;

use super::runner::MergeQueue;

/// Records `noted` for `ids` in `tx`, their rows locked first in the
/// store's order (a members' move that follows locks them again, in the
/// same order).
pub(super) async fn note_members(
    tx: &mut StoreTx,
    ids: &[String],
    noted: &[TimelineEvent],
) -> Result<(), StoreError> {
    if noted.is_empty() || ids.is_empty() {
        return Ok(());
    }
    lock_members(tx, ids).await?;
    record_events(tx.db(), ids, noted).await?;
    Ok(())
}

impl MergeQueue {
    /// Records `noted` for the batch's members when a round moved nothing
    /// (an approval while the MR is not mergeable yet): one transaction,
    /// and none when the round saw nothing new.
    pub(super) async fn note(
        &self,
        db: &Db,
        batch: &BatchRow,
        noted: &[TimelineEvent],
    ) -> Result<(), StoreError> {
        if noted.is_empty() {
            return Ok(());
        }
        let ids = live_members(db, batch.id).await?;
        write_tx!(db, |tx| note_members(tx, &ids, noted).await).await
    }
}
