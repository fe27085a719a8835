//! A batch whose pipeline passed waits for its turn: only the front of its
//! train merges, and at most one batch of a partition is MERGING at once
//! (`uk_merge_batch_merging`); a batch behind waits as PASSED until every
//! batch ahead of it has merged.

use crate::clients::gitlab::MergeRequest;
use crate::db::Db;
use crate::db::batches::{BatchChange, BatchRow, Stamp, live_members, update_batch};
use crate::db::train::active_train;
use crate::domain::{BindingStatus, StepStatus};
use crate::store::{Change, StoreError, move_members};
use crate::workflow::head_pipeline_run;
use crate::write_tx;

use super::noted::note_members;
use super::runner::{ACTOR, MergeQueue};

impl MergeQueue {
    /// Its pipeline passed: the front starts merging; a batch behind says
    /// how many are ahead of it and waits.
    pub(super) async fn passed(
        &self,
        db: &Db,
        batch: &BatchRow,
        mr: &MergeRequest,
    ) -> Result<(), StoreError> {
        let noted = head_pipeline_run(mr);
        let ahead = self.ahead_count(db, batch).await?;
        if ahead == 0 {
            return self.start_merging(db, batch, noted.as_slice()).await;
        }
        let message = format!(
            "merge batch #{}: pipeline passed; waiting for {ahead} batch{} ahead to merge first",
            batch.shown_number(),
            if ahead == 1 { "" } else { "es" }
        );
        let ids = live_members(db, batch.id).await?;
        write_tx!(db, |tx| {
            let change = BatchChange {
                phase: Some("PASSED"),
                message: Some(&message),
                stamp: Some(Stamp::Passed),
                ..BatchChange::default()
            };
            if update_batch(tx.db(), batch.id, batch.version, &change).await? != 1 {
                return Ok(());
            }
            note_members(tx, &ids, noted.as_slice()).await?;
            let step = Change {
                step: StepStatus::MrCreated,
                message: Some(&message),
                actor: ACTOR,
            };
            move_members(tx, &ids, &[BindingStatus::MrCreated], None, step, None).await?;
            Ok::<_, StoreError>(())
        })
        .await
    }

    /// A passed batch waiting: merging once it is the front.
    pub(super) async fn take_turn(&self, db: &Db, batch: &BatchRow) -> Result<(), StoreError> {
        if self.ahead_count(db, batch).await? == 0 {
            return self.start_merging(db, batch, &[]).await;
        }
        self.poll(db, batch, None).await
    }

    async fn start_merging(
        &self,
        db: &Db,
        batch: &BatchRow,
        noted: &[crate::db::timeline_events::TimelineEvent],
    ) -> Result<(), StoreError> {
        let change = BatchChange {
            phase: Some("MERGING"),
            stamp: Some(Stamp::Merging),
            ..BatchChange::default()
        };
        let message = format!("merge batch #{}: pipeline passed", batch.shown_number());
        let to = (BindingStatus::Merging, StepStatus::HandleStarted);
        self.advance(db, batch, &change, noted, to, &message).await
    }

    /// How many active batches of its train are ahead of `batch`.
    async fn ahead_count(&self, db: &Db, batch: &BatchRow) -> Result<usize, StoreError> {
        let train = active_train(db, &batch.partition_key).await?;
        Ok(train
            .iter()
            .filter(|car| car.train_position < batch.train_position)
            .count())
    }
}
