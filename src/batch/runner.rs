//! Runs the merge queue: claims new batches and drives each running batch
//! through its phases (OPENING: branch, one commit of every member's file,
//! the MR; PIPELINE; MERGING: both reviewer bots, rebase when needed, merge
//! at the head whose pipeline passed), one re-entrant round at a time under
//! the batch's lease, like an operation's steps. Members move together,
//! with set-based writes.

use std::sync::Arc;

use crate::config::{LiveConfig, Settings};
use crate::db::batch_queue::waiting_partitions;
use crate::db::batches::{
    BatchChange, BatchRow, acquire_batch_lease, frozen_by_operator, get_batch, release_batch_lease,
    runnable, stuck,
};
use crate::db::{Db, DbSlot};
use crate::domain::{BindingStatus, IN_MERGE_QUEUE, StepStatus};
use crate::schedule::windows_open;
use crate::store::StoreError;
use crate::store::is_urgent_lane;
use crate::workflow::{Round, Workflow, bot, head_pipeline_run, rebasing_event};

use super::claim::{Claimed, Ordinary, Room, claim_batch};
use super::pace::PaceDue;
use super::remembered::Remembered;
use super::train::Turn;

pub(super) const ACTOR: &str = "merge-queue";
/// Attempts at a batch's lease before a settle answers "busy".
pub(super) const SETTLE_TRIES: u32 = 10;
/// Where the members of a running batch can be.
pub(super) const IN_FLIGHT: &[BindingStatus] = IN_MERGE_QUEUE;

/// The merge queue of one instance; every instance runs one over the same
/// tables, and the slot and the batch lease keep them from doubling work.
#[derive(Clone)]
pub struct MergeQueue {
    pub(super) db: DbSlot,
    pub(super) config: LiveConfig,
    pub(super) workflow: Workflow,
    pub(super) owner: Arc<str>,
    /// Each project's merge method, as last read.
    pub(super) methods: Arc<Remembered<String>>,
    /// When each project's recent pipelines in GitLab were last read into
    /// its CI history.
    pub(super) ci_read: Arc<Remembered<()>>,
    /// When a project's pace next lets a batch of its ordinary requests board.
    pub(super) pace_due: Arc<PaceDue>,
}

/// Why a round may not start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotNow {
    /// `batch.freeze` is on, or an operator froze the queue.
    #[error("the merge queue is frozen")]
    Frozen,
    /// The database is not ready.
    #[error("the database is not ready")]
    NoDatabase,
}

impl MergeQueue {
    /// A queue over the shared database, configuration and GitLab steps.
    pub fn new(db: DbSlot, config: LiveConfig, workflow: Workflow) -> Self {
        Self {
            db,
            config,
            workflow,
            owner: Arc::from(format!("merge-queue-{}", uuid::Uuid::new_v4())),
            methods: Arc::default(),
            ci_read: Arc::default(),
            pace_due: Arc::default(),
        }
    }

    /// The same queue, holding batch leases as `owner` (an id of this
    /// instance's run, see [`crate::instance::Instance`]).
    #[must_use]
    pub fn owned_by(mut self, owner: &str) -> Self {
        self.owner = Arc::from(owner);
        self
    }

    /// How often a new batch is claimed (`batch.interval`, live).
    pub fn interval(&self) -> std::time::Duration {
        self.config.current().batch.interval
    }

    /// Whether a project's pace lets a batch board now that it held back at
    /// an earlier round: a claim round should run now, not at the next
    /// interval. Answers `true` once per such moment.
    pub fn pace_allows(&self) -> bool {
        self.pace_due.take_if_due()
    }

    /// How long until a project's pace lets a batch board that it holds
    /// back now, if one does.
    pub fn until_pace_allows(&self) -> Option<std::time::Duration> {
        self.pace_due.until()
    }

    /// One claim per partition with waiting requests (the scheduler and
    /// `POST /admin/v1/batches/run` both call this; overlapping is safe).
    pub async fn claim_round(&self) -> Result<Vec<Claimed>, ClaimError> {
        let db = self
            .db
            .get()
            .ok_or(ClaimError::NotNow(NotNow::NoDatabase))?;
        let settings = self.config.current();
        if settings.batch.freeze || frozen_by_operator(db).await.map_err(StoreError::from)? {
            return Err(ClaimError::NotNow(NotNow::Frozen));
        }
        let (members, in_flight) = (settings.batch.max_requests, settings.batch.max_in_flight);
        let now = chrono::Utc::now();
        let open = |target_key: &str| windows_open(&settings, target_key, now);
        let mut claimed = Vec::new();
        // The lock-free pre-check: no waiting request, no transaction.
        for partition in waiting_partitions(db).await.map_err(StoreError::from)? {
            // One batch at a time has no pace, and an urgent lane is never
            // held: it goes in the next round.
            let unpaced = in_flight <= 1 || is_urgent_lane(&partition);
            if unpaced {
                self.read_ci_histories(db, &settings, &partition).await?;
            }
            // A train takes as many new batches as it has room for (halves
            // of a failed batch are groups of their own, so each is one).
            for _ in 0..in_flight.max(1) {
                // Read again after each claim: the batch just claimed paces
                // its project's next, so a request that arrived meanwhile
                // waits for it rather than boarding alone.
                let paces = if unpaced {
                    None
                } else {
                    Some(self.paces(db, &settings, &partition).await?)
                };
                let room = Room {
                    members,
                    in_flight,
                    ordinary: paces.as_ref().map_or(Ordinary::Unpaced, Ordinary::Paced),
                };
                let claim = claim_batch(db, &partition, room, &open).await?;
                let more = matches!(claim, Claimed::Batch { .. });
                claimed.push(claim);
                if !more {
                    break;
                }
            }
        }
        Ok(claimed)
    }

    /// Drives every running batch one round (those whose lease is free),
    /// settles the ones running past `batch.timeout`, and puts requests
    /// shown in a batch that does not exist back to wait.
    pub async fn drive_round(&self) -> Result<usize, StoreError> {
        let Some(db) = self.db.get() else {
            return Ok(0);
        };
        let settings = self.config.current();
        for batch_id in stuck(db, settings.batch.timeout).await? {
            if !self.overdue(db, batch_id, settings.batch.timeout).await? {
                continue;
            }
            tracing::warn!(
                batch = batch_id,
                "merge batch ran past batch.timeout; settling it"
            );
            self.settle(batch_id, "ran past batch.timeout").await?;
        }
        self.requeue_orphans(db).await?;
        // While GitLab's rate limiter asks for quiet, no round calls it.
        if self.workflow.gitlab.quiet_for().is_some() {
            return Ok(0);
        }
        let mut driven = 0;
        for batch_id in runnable(db, &self.owner).await? {
            let lease = settings.executor.lease;
            if !acquire_batch_lease(db, batch_id, &self.owner, lease).await? {
                continue;
            }
            let outcome = self.drive_leased(db, &settings, batch_id).await;
            release_batch_lease(db, batch_id, &self.owner).await?;
            outcome?;
            driven += 1;
        }
        Ok(driven)
    }

    /// One round of running batch `batch_id`, whose lease this instance
    /// holds; a batch whose turn to merge came in that round merges in a
    /// second one at once, not a tick later: every member waits for it.
    async fn drive_leased(
        &self,
        db: &Db,
        settings: &Settings,
        batch_id: i64,
    ) -> Result<(), StoreError> {
        let running = |batch: &BatchRow| batch.status == "RUNNING";
        let Some(batch) = get_batch(db, batch_id).await?.filter(running) else {
            return Ok(());
        };
        let was_merging = batch.phase == "MERGING";
        self.drive_traced(db, settings, batch).await?;
        if was_merging {
            return Ok(());
        }
        match get_batch(db, batch_id).await?.filter(running) {
            Some(batch) if batch.phase == "MERGING" => self.drive_traced(db, settings, batch).await,
            _ => Ok(()),
        }
    }

    /// One round of a running batch's current phase.
    pub(super) async fn drive(
        &self,
        db: &Db,
        settings: &Settings,
        batch: BatchRow,
    ) -> Result<(), StoreError> {
        let token = match bot(settings) {
            Ok(token) => token,
            // A mistake the team has to fix: the members say so.
            Err(err) => {
                let message = err.to_string();
                return self
                    .fail(db, &batch, StepStatus::CreateRefused, &message, &[])
                    .await;
            }
        };
        if batch.mr_iid.is_some() && self.take_out_departed(db, settings, &batch).await? {
            return Ok(());
        }
        let gitlab = &self.workflow.gitlab;
        match (batch.phase.as_str(), batch.mr_iid) {
            ("OPENING", _) => match self.footing(db, settings, token, &batch).await? {
                Turn::Go(batch) => self.open(db, settings, &batch).await,
                Turn::Wait => Ok(()),
            },
            ("PASSED", Some(_)) => self.take_turn(db, &batch).await,
            ("PIPELINE", Some(iid)) => match gitlab.merge_request(token, &batch.project, iid).await
            {
                Ok(mr) if mr.state == "merged" => self.succeed(db, &batch, Some(&mr), &[]).await,
                Ok(mr) => match mr.head_pipeline.as_ref().map(|p| p.status.as_str()) {
                    Some("success") => self.passed(db, &batch, &mr).await,
                    Some("failed" | "canceled") => {
                        if let Some(ahead) = self.unproven_ahead(db, &batch).await? {
                            let why = format!(
                                "its pipeline failed; waiting for the pipeline of batch #{} ahead, on which it was built, before deciding whose change failed it",
                                ahead.shown_number()
                            );
                            return self.poll(db, &batch, Some(why)).await;
                        }
                        let message = format!("the pipeline of batch MR !{iid} failed");
                        let step = StepStatus::CreatePipelineFailed;
                        let noted = head_pipeline_run(&mr);
                        let pipeline = mr.head_pipeline.as_ref().map(|pipeline| pipeline.id);
                        let noted = noted.as_slice();
                        self.fail_with_test_report(db, &batch, step, &message, noted, pipeline)
                            .await
                    }
                    _ if settings.polling.deadline_reached(batch.polls + 1)
                        && !settings.polling.deadline_reached(batch.polls) =>
                    {
                        self.pipeline_pending(db, &batch, iid).await
                    }
                    _ => self.poll(db, &batch, None).await,
                },
                Err(err) => {
                    self.interrupted(db, &batch, &err, StepStatus::CreateFailed)
                        .await
                }
            },
            ("MERGING", Some(iid)) => {
                if !self.on_its_footing(db, settings, token, &batch).await? {
                    return Ok(());
                }
                let mut noted = Vec::new();
                let project = &batch.project;
                let round = self
                    .workflow
                    .merge_round(settings, token, project, iid, batch.polls, &mut noted)
                    .await;
                // What the round saw is recorded with the batch's state change
                // where there is one; else on its own, only when there is some.
                match &round {
                    Ok(Round::Merged(_)) => {}
                    Ok(Round::Finished(outcome)) if outcome.status.is_some() => {}
                    Ok(Round::Rebasing(mr)) => noted.push(rebasing_event(mr, ACTOR)),
                    _ => self.note(db, &batch, &noted).await?,
                }
                match round {
                    Ok(Round::Merged(mr)) => self.succeed(db, &batch, Some(&mr), &noted).await,
                    // The merge's answer was lost: the next round reads the
                    // MR again (merged → done), as for an unanswered write.
                    Ok(Round::Finished(outcome)) if outcome.step == StepStatus::MergePending => {
                        self.poll(db, &batch, None).await
                    }
                    // Not mergeable by the deadline: unknown, not failed; the
                    // batch goes on being checked until batch.timeout settles it.
                    Ok(Round::Finished(outcome)) if outcome.status.is_none() => {
                        self.write(
                            db,
                            &batch,
                            &BatchChange {
                                polled: true,
                                message: outcome.message.as_deref(),
                                ..BatchChange::default()
                            },
                        )
                        .await
                    }
                    Ok(Round::Finished(outcome)) => {
                        let message = outcome
                            .message
                            .unwrap_or_else(|| outcome.step.description().to_owned());
                        self.fail(db, &batch, outcome.step, &message, &noted).await
                    }
                    Ok(Round::Rebasing(_)) => {
                        let message =
                            format!("batch MR !{iid} is behind its target branch: rebasing it");
                        let change = BatchChange {
                            message: Some(&message),
                            ..BatchChange::default()
                        };
                        self.write_noting(db, &batch, &change, &noted).await
                    }
                    Ok(Round::NotYet) => self.poll(db, &batch, None).await,
                    Err(err) => {
                        self.interrupted(db, &batch, &err, StepStatus::HandleMergeRefused)
                            .await
                    }
                }
            }
            _ => Ok(()),
        }
    }
}

/// Why a claim round failed.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// The round may not run now.
    #[error(transparent)]
    NotNow(NotNow),
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The source branch a batch's MR is opened from, derived from what is
/// stored, so that every round of the batch, on any instance and after any
/// crash, looks for the same branch and adopts what an earlier round made.
/// A numbered batch's branch has its own prefix: an earlier release named
/// branches by batch id (`changegate/batch-<id>`), and such a branch may
/// still exist (its deletion failed, or it was being opened during the
/// upgrade); a batch whose number equalled that id would adopt it, and its
/// open MR. A batch without a number was claimed by that earlier release,
/// and keeps the branch it named by id. Once the MR is open, its own
/// `source_branch` says which branch it is.
pub(super) fn batch_branch(batch: &BatchRow) -> String {
    build_branch(batch, batch.rebuilds)
}

/// The branch of a batch's build `rebuilds` (0: its first): each build of
/// a train's batch has a branch of its own, so an MR of an earlier build
/// is never adopted by a later one.
pub(super) fn build_branch(batch: &BatchRow, rebuilds: i32) -> String {
    let first = match batch.number {
        Some(number) => format!("changegate/merge-batch-{number}"),
        None => format!("changegate/batch-{}", batch.id),
    };
    if rebuilds > 0 {
        format!("{first}-r{rebuilds}")
    } else {
        first
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(id: i64, number: Option<i64>) -> BatchRow {
        BatchRow {
            id,
            number,
            status: "RUNNING".to_owned(),
            partition_key: String::new(),
            train_position: 1,
            ahead_batch_id: None,
            base_sha: None,
            head_sha: None,
            rebuilds: 0,
            opened_at: None,
            passed_at: None,
            merging_at: None,
            project: "config/repo".to_owned(),
            split_group: String::new(),
            phase: "OPENING".to_owned(),
            mr_iid: None,
            mr_url: None,
            merge_sha: None,
            merge_commit_sha: None,
            polls: 0,
            message: None,
            obstacle: None,
            version: 1,
            created_at: chrono::NaiveDateTime::default(),
            updated_at: chrono::NaiveDateTime::default(),
        }
    }

    #[test]
    fn a_batch_branch_is_named_by_its_number_and_an_earlier_releases_by_its_id() {
        assert_eq!(
            batch_branch(&batch(30, Some(7))),
            "changegate/merge-batch-7"
        );
        assert_eq!(batch_branch(&batch(30, None)), "changegate/batch-30");
        assert_eq!(
            build_branch(&batch(30, Some(7)), 2),
            "changegate/merge-batch-7-r2"
        );
        assert_eq!(batch(30, None).shown_number(), 30);
    }
}
