//! How a merge-queue round records what it learned: each write is guarded
//! by the batch's version (a round that lost its lease writes nothing) and
//! moves the members, with the timeline events that led there, in the same
//! transaction.

use crate::clients::gitlab::GitLabError;
use crate::db::Db;
use crate::db::batches::{BatchChange, BatchRow, live_members, update_batch};
use crate::db::outage::{OutageClock, batch_unreachable_for};
use crate::db::timeline_events::TimelineEvent;
use crate::domain::{BindingStatus, StepStatus};
use crate::store::{Change, StoreError, move_members};
use crate::workflow::{Verdict, outage_message, verdict};
use crate::write_tx;

use super::noted::note_members;
use super::runner::{ACTOR, MergeQueue};

impl MergeQueue {
    /// A guarded batch write with the MR_CREATED members' move `to` a
    /// status and step, and the events that led to it, in one transaction.
    pub(super) async fn advance(
        &self,
        db: &Db,
        batch: &BatchRow,
        change: &BatchChange<'_>,
        noted: &[TimelineEvent],
        (to, step): (BindingStatus, StepStatus),
        message: &str,
    ) -> Result<(), StoreError> {
        let ids = live_members(db, batch.id).await?;
        write_tx!(db, |tx| {
            if update_batch(tx.db(), batch.id, batch.version, change).await? != 1 {
                return Ok(());
            }
            note_members(tx, &ids, noted).await?;
            let member_change = Change {
                step,
                message: Some(message),
                actor: ACTOR,
            };
            let from = [BindingStatus::MrCreated];
            move_members(tx, &ids, &from, Some(to), member_change, None).await?;
            Ok::<_, StoreError>(())
        })
        .await
    }

    /// A guarded batch write.
    pub(super) async fn write(
        &self,
        db: &Db,
        batch: &BatchRow,
        change: &BatchChange<'_>,
    ) -> Result<(), StoreError> {
        self.write_noting(db, batch, change, &[]).await
    }

    /// A guarded batch write, with `noted` recorded for its members.
    pub(super) async fn write_noting(
        &self,
        db: &Db,
        batch: &BatchRow,
        change: &BatchChange<'_>,
        noted: &[TimelineEvent],
    ) -> Result<(), StoreError> {
        let ids = if noted.is_empty() {
            Vec::new()
        } else {
            live_members(db, batch.id).await?
        };
        write_tx!(db, |tx| {
            if update_batch(tx.db(), batch.id, batch.version, change).await? == 1 {
                note_members(tx, &ids, noted).await?;
            }
            Ok::<_, StoreError>(())
        })
        .await
    }

    /// The pipeline passed its deadline: its outcome is unknown, and the
    /// members say so (keep waiting); the batch goes on polling until the
    /// pipeline ends or the timeout sweep settles it.
    pub(super) async fn pipeline_pending(
        &self,
        db: &Db,
        batch: &BatchRow,
        iid: i64,
    ) -> Result<(), StoreError> {
        let ids = live_members(db, batch.id).await?;
        let message =
            format!("the pipeline of batch MR !{iid} has not finished; its outcome is unknown");
        write_tx!(db, |tx| {
            let polled = BatchChange {
                polled: true,
                message: Some(&message),
                ..BatchChange::default()
            };
            if update_batch(tx.db(), batch.id, batch.version, &polled).await? != 1 {
                return Ok(());
            }
            let change = Change {
                step: StepStatus::PipelinePending,
                message: Some(&message),
                actor: ACTOR,
            };
            move_members(tx, &ids, &[BindingStatus::MrCreated], None, change, None).await?;
            Ok::<_, StoreError>(())
        })
        .await
    }

    /// A round whose GitLab call failed, by the one classification of
    /// errors ([`verdict`]): waited out (counted as a poll, except a pause
    /// GitLab's rate limiter asked for, which is not the batch's own
    /// slowness) until an outage outlasts `workflow.unreachable_deadline`;
    /// what waiting cannot cure fails the batch (`refused` for GitLab
    /// refusing the request itself).
    pub(super) async fn interrupted(
        &self,
        db: &Db,
        batch: &BatchRow,
        err: &GitLabError,
        refused: StepStatus,
    ) -> Result<(), StoreError> {
        let (step, message) = match verdict(err, refused, self.workflow.gitlab.health()) {
            Verdict::Wait(outage) => {
                self.write(
                    db,
                    batch,
                    &BatchChange {
                        polled: err.throttled_for().is_none(),
                        obstacle: err.obstacle().as_deref(),
                        outage,
                        ..BatchChange::default()
                    },
                )
                .await?;
                let deadline = self.config.current().unreachable_deadline;
                if outage != OutageClock::Run
                    || !batch_unreachable_for(db, batch.id, deadline).await?
                {
                    return Ok(());
                }
                (StepStatus::GitlabUnreachable, outage_message(err, deadline))
            }
            Verdict::Fail { step, message } => (step, message),
        };
        self.fail(db, batch, step, &message, &[]).await
    }

    /// Not ready yet: counts one more poll, so the deadline can be told; `obstacle` says what kept this round from
    /// getting an answer, and none clears what an earlier round said.
    pub(super) async fn poll(
        &self,
        db: &Db,
        batch: &BatchRow,
        obstacle: Option<String>,
    ) -> Result<(), StoreError> {
        self.write(
            db,
            batch,
            &BatchChange {
                polled: true,
                obstacle: obstacle.as_deref(),
                ..BatchChange::default()
            },
        )
        .await
    }
}
