//! When a train takes a new batch of ordinary requests of a project (SPEC
//! §7): the pace of each project's batches, what it is measured from, and
//! the moment it next allows one.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::config::Settings;
use crate::db::Db;
use crate::db::batch_queue::waiting_projects;
use crate::db::batches::BatchRow;
use crate::db::estimates::{CiPipeline, ci_history, merged_runs, record_ci_history};
use crate::db::train::active_train;
use crate::store::StoreError;
use crate::workflow::bot;
use crate::write_tx;

use super::estimate::{MIN_HISTORY, median, pipeline_samples};
use super::runner::MergeQueue;

/// How long a project's recent pipelines in GitLab are trusted once read.
const CI_HISTORY_TTL: Duration = Duration::from_secs(300);

/// Whether a train takes a new batch of a project's ordinary requests now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pace {
    /// It does.
    Boards,
    /// Not for this long yet, unless its requests fill a batch.
    Waits(Duration),
}

/// The soonest moment this instance saw a project's pace let its next batch
/// of ordinary requests board: its claim loop claims then, rather than up
/// to `batch.interval` later (a wait that every request of that batch
/// would add to its own).
#[derive(Default)]
pub(super) struct PaceDue(Mutex<Option<Instant>>);

impl PaceDue {
    /// Keeps `at` unless a sooner moment is kept already.
    fn at(&self, at: Instant) {
        let mut due = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        *due = Some(due.map_or(at, |kept| kept.min(at)));
    }

    /// Whether the kept moment has come; it is forgotten if it has.
    pub(super) fn take_if_due(&self) -> bool {
        let mut due = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let has_come = due.is_some_and(|at| at <= Instant::now());
        if has_come {
            *due = None;
        }
        has_come
    }

    /// How long until the kept moment, if one is kept.
    pub(super) fn until(&self) -> Option<Duration> {
        let due = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        due.map(|at| at.saturating_duration_since(Instant::now()))
    }
}

impl MergeQueue {
    /// The pace of each project whose ordinary requests wait in
    /// `partition`, for the claim that comes next. Each project has its
    /// own: its batches are built on its own, and in a partition shared
    /// by several projects one project's batch does not hold back
    /// another's. While the pace holds a batch back, the moment it lets it
    /// board is kept (see [`PaceDue`]).
    pub(super) async fn paces(
        &self,
        db: &Db,
        settings: &Settings,
        partition: &str,
    ) -> Result<HashMap<String, Pace>, StoreError> {
        let train = active_train(db, partition).await?;
        let mut paces = HashMap::new();
        for project in waiting_projects(db, partition).await? {
            let pace = self.pace(db, settings, &train, &project).await?;
            if let Pace::Waits(wait) = pace {
                self.pace_due.at(Instant::now() + wait);
            }
            paces.insert(project, pace);
        }
        Ok(paces)
    }

    /// Reads the CI history of each project whose requests wait in
    /// `partition`, for a queue that boards without a pace (one batch at a
    /// time, or the urgent lane): their expected times count it as a
    /// paced train's do (see [`Self::read_ci_history`]).
    pub(super) async fn read_ci_histories(
        &self,
        db: &Db,
        settings: &Settings,
        partition: &str,
    ) -> Result<(), StoreError> {
        for project in waiting_projects(db, partition).await? {
            self.read_ci_history(db, settings, &project).await?;
        }
        Ok(())
    }

    /// The pace of `project` in `train`: no sooner than half a pipeline
    /// (see [`Self::pipeline_seconds`]) after its newest ordinary batch
    /// boarded. A batch every half pipeline keeps the wait to board under
    /// half a pipeline; more batches would each carry fewer requests for
    /// little less waiting, and every one is a pipeline more. A batch
    /// built again is not new: its requests boarded when it first did. Nor
    /// sooner than `batch.interval` after it: a long interval is how a
    /// team asks for bigger batches. A bisection does not hold it: a batch
    /// built on an untested half is built again only if that half fails
    /// (one of each pair is expected to), and then no later than it would
    /// have boarded had it waited for the half (measured in BENCHMARKS.md,
    /// "Ordinary requests beside a bisection").
    async fn pace(
        &self,
        db: &Db,
        settings: &Settings,
        train: &[BatchRow],
        project: &str,
    ) -> Result<Pace, StoreError> {
        let Some(newest) = train
            .iter()
            .filter(|car| car.project == project)
            .filter(|car| car.split_group.is_empty() && car.rebuilds == 0)
            .max_by_key(|car| car.created_at)
        else {
            // None of its batches to pace from: the next boards now. A
            // project new to changegate has its CI history read then,
            // before its requests are first shown an expected time.
            self.read_ci_history(db, settings, project).await?;
            return Ok(Pace::Boards);
        };
        let Some(pipeline) = self.pipeline_seconds(db, settings, project).await? else {
            return Ok(Pace::Boards);
        };
        let boarded = (chrono::Utc::now().naive_utc() - newest.created_at).as_seconds_f64();
        let pace = pipeline / 2.0;
        if boarded >= pace {
            return Ok(Pace::Boards);
        }
        let due = pace.max(settings.batch.interval.as_secs_f64());
        Ok(Pace::Waits(Duration::from_secs_f64(due - boarded)))
    }

    /// How long a pipeline of `project` takes, in seconds: the median of
    /// its last merged batches' pipelines and, older than those, of its CI
    /// history (see [`pipeline_samples`]); `None` while they are too few,
    /// and a train then boards without a pace until it has measured its
    /// own. While the project has fewer than [`MIN_HISTORY`] merged batches
    /// (new to changegate: it has run CI before), its recent successful
    /// merge request pipelines in GitLab are read into its CI history (see
    /// [`Self::read_ci_history`]).
    async fn pipeline_seconds(
        &self,
        db: &Db,
        settings: &Settings,
        project: &str,
    ) -> Result<Option<f64>, StoreError> {
        self.read_ci_history(db, settings, project).await?;
        let runs = merged_runs(db, project).await?;
        let samples = pipeline_samples(&runs, &ci_history(db, project).await?);
        Ok((samples.len() >= MIN_HISTORY).then(|| median(samples)))
    }

    /// Keeps `project`'s recent successful merge request pipelines in
    /// GitLab in its CI history while it has merged fewer than
    /// [`MIN_HISTORY`] batches, looked at most every five minutes (in
    /// between, a claim asks nothing of the database or GitLab for it).
    /// GitLab not answering is no reason to hold a claim: it is said, and
    /// the history stays as it was.
    async fn read_ci_history(
        &self,
        db: &Db,
        settings: &Settings,
        project: &str,
    ) -> Result<(), StoreError> {
        if self.ci_read.fresh(project, CI_HISTORY_TTL).is_some() {
            return Ok(());
        }
        self.ci_read.remember(project, ());
        if merged_runs(db, project).await?.len() >= MIN_HISTORY {
            return Ok(());
        }
        let read = match bot(settings) {
            Ok(token) => self.workflow.gitlab.recent_pipelines(token, project).await,
            Err(err) => Err(err),
        };
        let pipelines: Vec<CiPipeline> = match read {
            Ok(pipelines) => pipelines
                .into_iter()
                .map(|pipeline| CiPipeline {
                    pipeline_id: pipeline.id,
                    seconds: pipeline.seconds,
                    finished_at: pipeline.finished_at.naive_utc(),
                })
                .collect(),
            Err(err) => {
                tracing::warn!(
                    project,
                    error = %err,
                    "the project's recent pipelines could not be read: its pace and expected times wait for changegate to measure its own"
                );
                return Ok(());
            }
        };
        write_tx!(db, |tx| {
            record_ci_history(tx.db(), project, &pipelines)
                .await
                .map_err(StoreError::from)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soonest_moment_is_kept_and_answered_once_it_has_come() {
        let due = PaceDue::default();
        assert!(!due.take_if_due());
        assert_eq!(due.until(), None);
        due.at(Instant::now() + Duration::from_secs(60));
        due.at(Instant::now() + Duration::from_secs(3600));
        assert!(
            due.until()
                .is_some_and(|until| until <= Duration::from_secs(60))
        );
        assert!(!due.take_if_due());
        due.at(Instant::now());
        assert!(due.take_if_due());
        assert!(!due.take_if_due());
        assert_eq!(due.until(), None);
    }
}
