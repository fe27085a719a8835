//! When a train takes a new batch of ordinary requests (SPEC §7): the pace
//! of a train, and what it is measured from.

use std::time::Duration;

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
    /// not new: its requests boarded when it first did.
    pub(super) async fn ordinary_boards(
        &self,
        db: &Db,
        settings: &Settings,
        partition: &str,
    ) -> Result<bool, StoreError> {
        let train = active_train(db, partition).await?;
        let untested_half = train.iter().any(|car| {
            !car.split_group.is_empty() && matches!(car.phase.as_str(), "OPENING" | "PIPELINE")
        });
        if untested_half {
            return Ok(false);
        }
        let Some(newest) = train
            .iter()
            .filter(|car| car.split_group.is_empty() && car.rebuilds == 0)
            .max_by_key(|car| car.created_at)
        else {
            return Ok(true);
        };
        let Some(pipeline) = self.pipeline_seconds(db, settings, &newest.project).await? else {
            return Ok(true);
        };
        let boarded = (chrono::Utc::now().naive_utc() - newest.created_at).as_seconds_f64();
        Ok(boarded >= pipeline / 2.0)
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
