//! Settling a batch that must not keep its slot: the timeout sweep or an
//! operator; merged wins, otherwise its members wait for the next round.

use crate::db::Db;
use crate::db::batch_queue::release_members;
use crate::db::batches::{
    BatchChange, acquire_batch_lease, append_membership, get_batch, live_members,
    release_batch_lease, update_batch,
};
use crate::db::settle_counts::{count_settle, exhausted_members};
use crate::domain::{BindingStatus, StepStatus};
use crate::store::{Change, StoreError, move_members};
use crate::write_tx;

use super::metrics::Ended;
use super::outcome::fail_members;
use super::runner::{ACTOR, IN_FLIGHT, MergeQueue, SETTLE_TRIES};
use super::train::{Behind, Rebuild};

impl MergeQueue {
    /// Settles a batch that must not keep its slot (the timeout sweep, or an
    /// operator): merged wins; otherwise FAILED, and its members wait again
    /// for the next round, as they were (they did nothing wrong). It takes
    /// the batch's lease first, so it never interleaves with a round of the
    /// batch in progress.
    pub async fn settle(&self, batch_id: i64, reason: &str) -> Result<Settled, StoreError> {
        let Some(db) = self.db.get() else {
            return Ok(Settled::NotRunning);
        };
        // Its own lease holder: two settles never run at once, not even two
        // of this instance's (the guarded writes would then race on locks).
        let settler = format!("settle-{}", uuid::Uuid::new_v4());
        let lease = self.config.current().executor.lease;
        // A round holds the lease for moments: wait a little for it.
        let mut tries = 0;
        while !acquire_batch_lease(db, batch_id, &settler, lease).await? {
            let running = get_batch(db, batch_id)
                .await?
                .is_some_and(|b| b.status == "RUNNING");
            if !running {
                return Ok(Settled::NotRunning);
            }
            tries += 1;
            if tries == SETTLE_TRIES {
                return Ok(Settled::Busy);
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        let outcome = self.settle_held(db, batch_id, reason).await;
        release_batch_lease(db, batch_id, &settler).await?;
        outcome
    }

    async fn settle_held(
        &self,
        db: &Db,
        batch_id: i64,
        reason: &str,
    ) -> Result<Settled, StoreError> {
        let Some(batch) = get_batch(db, batch_id)
            .await?
            .filter(|b| b.status == "RUNNING")
        else {
            return Ok(Settled::NotRunning);
        };
        if self.merged_meanwhile(db, &batch).await? {
            return Ok(Settled::Merged);
        }
        let Some(batch) = get_batch(db, batch_id)
            .await?
            .filter(|b| b.status == "RUNNING")
        else {
            return Ok(Settled::NotRunning);
        };
        let ids = live_members(db, batch.id).await?;
        let message = format!("settled: {reason}");
        let max_attempts = self.config.current().batch.max_attempts;
        let retry = format!(
            "batch #{} was settled ({reason}); waiting for the next round",
            batch.shown_number()
        );
        let last_error = batch.obstacle.as_deref().unwrap_or(reason);
        let failed_message = format!(
            "batch #{} was settled ({reason}), the {max_attempts}th batch of this request without an end; last error: {last_error}",
            batch.shown_number()
        );
        let behind = Behind::of(db, &batch).await?;
        let behind_message = format!(
            "merge batch #{} ahead was settled: built again without it",
            batch.shown_number()
        );
        // A claim racing for the slot may make InnoDB pick this transaction
        // as a deadlock victim: it is then written again, whole.
        let written = write_tx!(db, |tx| {
            let failed = BatchChange {
                status: Some("FAILED"),
                message: Some(&message),
                ..BatchChange::default()
            };
            if update_batch(tx.db(), batch.id, batch.version, &failed).await? != 1 {
                return Ok(None);
            }
            behind
                .send_back(tx, Rebuild::AheadFailed, &behind_message)
                .await?;
            let exhausted = exhausted_members(tx.db(), batch.id, max_attempts).await?;
            let (exhausted, again): (Vec<String>, Vec<String>) =
                ids.iter().cloned().partition(|id| exhausted.contains(id));
            let change = Change {
                step: StepStatus::Queued,
                message: Some(&retry),
                actor: ACTOR,
            };
            move_members(
                tx,
                &again,
                IN_FLIGHT,
                Some(BindingStatus::MrCreating),
                change,
                None,
            )
            .await?;
            release_members(tx.db(), &[(batch.split_group.as_str(), &again)]).await?;
            count_settle(tx.db(), &again).await?;
            append_membership(tx.db(), batch.id, &again, "RELEASED", Some(reason)).await?;
            if !exhausted.is_empty() {
                fail_members(
                    tx,
                    &exhausted,
                    StepStatus::HandleBatchExhausted,
                    &failed_message,
                )
                .await?;
                append_membership(
                    tx.db(),
                    batch.id,
                    &exhausted,
                    "FAILED",
                    Some("max_attempts"),
                )
                .await?;
            }
            Ok::<_, StoreError>(Some(exhausted.len()))
        })
        .await?;
        let Some(exhausted) = written else {
            return Ok(Settled::NotRunning);
        };
        Ended::Settled.count();
        if exhausted > 0 {
            tracing::warn!(
                batch = batch.id,
                members = exhausted,
                "merge batch settled; its members reached batch.max_attempts and failed: {last_error}"
            );
        }
        Ok(Settled::Released)
    }
}

/// What a settle did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// Its MR had merged: the batch SUCCEEDED after all.
    Merged,
    /// FAILED; its members wait for the next round.
    Released,
    /// It was not running (settled already, or finished).
    NotRunning,
    /// A round of it is in progress right now; try again in a moment.
    Busy,
}
