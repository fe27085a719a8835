//! When a train takes a new batch of ordinary requests (SPEC §7): the pace
//! of a train, what it is measured from, and the moment it next allows one.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::config::Settings;
use crate::db::Db;
use crate::db::estimates::merged_runs;
use crate::db::train::active_train;
use crate::store::StoreError;
use crate::workflow::bot;

use super::estimate::{MIN_HISTORY, Medians, median};
use super::runner::MergeQueue;

/// How long a project's recent pipelines in GitLab are trusted once read.
const CI_HISTORY_TTL: Duration = Duration::from_secs(300);

/// Whether a train takes a new batch of ordinary requests now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Pace {
    /// It does.
    Boards,
    /// Not while a half of a failed batch is untested.
    Held,
    /// Not for this long yet.
    Waits(Duration),
}

/// The soonest moment this instance saw a train's pace let the next batch
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
    /// Whether the train of `partition` takes a new batch of ordinary
    /// requests now. Not while a half of a failed batch is untested: a
    /// batch built on it is built again if it fails, which one of each
    /// pair is expected to do (the halves board first, and the ordinary
    /// batch boards with the next level of halves, or after the last).
    /// Nor less than half a pipeline (see [`Self::pipeline_seconds`])
    /// after the newest ordinary batch boarded: a batch
    /// every half pipeline keeps the wait to board under half a pipeline;
    /// more batches would each carry fewer requests for little less
    /// waiting, and every one is a pipeline more. A batch built again is
    /// not new: its requests boarded when it first did. While the pace
    /// holds a batch back, the moment it lets it board is kept (see
    /// [`PaceDue`]), though never sooner than `batch.interval` after the
    /// newest: a long interval is how a team asks for bigger batches.
    pub(super) async fn ordinary_boards(
        &self,
        db: &Db,
        settings: &Settings,
        partition: &str,
    ) -> Result<bool, StoreError> {
        Ok(match self.pace(db, settings, partition).await? {
            Pace::Boards => true,
            Pace::Held => false,
            Pace::Waits(wait) => {
                self.pace_due.at(Instant::now() + wait);
                false
            }
        })
    }

    /// The pace of `partition`'s train now.
    async fn pace(
        &self,
        db: &Db,
        settings: &Settings,
        partition: &str,
    ) -> Result<Pace, StoreError> {
        let train = active_train(db, partition).await?;
        let untested_half = train
            .iter()
            .any(|car| !car.split_group.is_empty() && car.untested());
        if untested_half {
            return Ok(Pace::Held);
        }
        let Some(newest) = train
            .iter()
            .filter(|car| car.split_group.is_empty() && car.rebuilds == 0)
            .max_by_key(|car| car.created_at)
        else {
            return Ok(Pace::Boards);
        };
        let Some(pipeline) = self.pipeline_seconds(db, settings, &newest.project).await? else {
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
    /// its last merged batches; while it has too few, of its recent
    /// successful merge request pipelines in GitLab (a project new to
    /// changegate has run CI before), read at most every five minutes;
    /// `None` when neither is known, and a train then boards without a
    /// pace until it has measured its own.
    async fn pipeline_seconds(
        &self,
        db: &Db,
        settings: &Settings,
        project: &str,
    ) -> Result<Option<f64>, StoreError> {
        let runs = merged_runs(db, project).await?;
        if let Some(medians) = Medians::of(&runs, &[]) {
            return Ok(Some(medians.pipeline));
        }
        if let Some(known) = self.ci_pipelines.fresh(project, CI_HISTORY_TTL) {
            return Ok(known);
        }
        let read = match bot(settings) {
            Ok(token) => {
                self.workflow
                    .gitlab
                    .recent_pipeline_seconds(token, project)
                    .await
            }
            Err(err) => Err(err),
        };
        let measured = match read {
            Ok(seconds) if seconds.len() >= MIN_HISTORY => Some(median(seconds)),
            Ok(_) => None,
            Err(err) => {
                tracing::warn!(
                    project,
                    error = %err,
                    "the project's recent pipelines could not be read: its train boards without a pace until changegate has measured its own"
                );
                None
            }
        };
        self.ci_pipelines.remember(project, measured);
        Ok(measured)
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
