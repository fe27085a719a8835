//! What the merge queue's expected times are measured from: each project's
//! last merged batches (how long their pipelines and merge rounds took, and
//! how long the deploy took to confirm them), its CI history in GitLab, and
//! where a waiting request stands. Each query names the index it uses.

use sqlx::AssertSqlSafe;

use super::{Backend, DbTx, Reader, dialect};
use crate::domain::StepStatus;
use crate::{with_reader, with_tx};
use chrono::NaiveDateTime;

/// How many of a project's last merged batches the medians are taken over.
pub const HISTORY: u32 = 20;

/// One merged batch's run: pipeline from `opened_at` to `passed_at`, merge
/// round from `merging_at` to `merged_at`.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct MergedRun {
    /// Its MR opened.
    pub opened_at: NaiveDateTime,
    /// Its pipeline passed.
    pub passed_at: NaiveDateTime,
    /// Its turn to merge came.
    pub merging_at: NaiveDateTime,
    /// It merged (its last write).
    pub merged_at: NaiveDateTime,
}

/// A successful merge request pipeline of a project in GitLab.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct CiPipeline {
    /// GitLab's id.
    pub pipeline_id: i64,
    /// Seconds from created to finished.
    pub seconds: f64,
    /// When it finished.
    pub finished_at: NaiveDateTime,
}

/// `project`'s CI history as kept, newest first (at most [`HISTORY`]).
/// Served by `ix_ci_pipeline_finished`.
pub async fn ci_history(
    reader: impl Into<Reader<'_>>,
    project: &str,
) -> Result<Vec<CiPipeline>, sqlx::Error> {
    let sql = "SELECT pipeline_id, seconds, finished_at FROM ci_pipeline WHERE project = ? \
               ORDER BY finished_at DESC LIMIT ?";
    with_reader!(reader.into(), |exec| {
        sqlx::query_as(sql)
            .bind(project)
            .bind(HISTORY)
            .fetch_all(exec)
            .await
    })
}

/// Keeps `pipelines` in `project`'s CI history (one read again is kept
/// once, by GitLab's id), then only its newest [`HISTORY`]. Served by the
/// primary key and `ix_ci_pipeline_finished`.
pub async fn record_ci_history(
    tx: &mut DbTx,
    project: &str,
    pipelines: &[CiPipeline],
) -> Result<(), sqlx::Error> {
    let insert = match tx.backend() {
        Backend::MySql => {
            "INSERT INTO ci_pipeline (project, pipeline_id, seconds, finished_at) \
             VALUES (?, ?, ?, ?) ON DUPLICATE KEY UPDATE seconds = seconds"
        }
        Backend::Sqlite => {
            "INSERT INTO ci_pipeline (project, pipeline_id, seconds, finished_at) \
             VALUES (?, ?, ?, ?) ON CONFLICT (project, pipeline_id) DO NOTHING"
        }
    };
    // The derived table lets MySQL read the table a DELETE writes to.
    let prune = "DELETE FROM ci_pipeline WHERE project = ? AND finished_at < \
                 (SELECT oldest FROM (SELECT finished_at AS oldest FROM ci_pipeline \
                 WHERE project = ? ORDER BY finished_at DESC LIMIT 1 OFFSET ?) kept)";
    with_tx!(tx, |conn| {
        for pipeline in pipelines {
            sqlx::query(insert)
                .bind(project)
                .bind(pipeline.pipeline_id)
                .bind(pipeline.seconds)
                .bind(pipeline.finished_at)
                .execute(&mut *conn)
                .await?;
        }
        sqlx::query(prune)
            .bind(project)
            .bind(project)
            .bind(HISTORY - 1)
            .execute(&mut *conn)
            .await
            .map(drop)
    })
}

/// `project`'s last merged batches that recorded their run, newest first.
/// Served by `uk_merge_batch_project_number` (project prefix, newest by
/// number).
pub async fn merged_runs(
    reader: impl Into<Reader<'_>>,
    project: &str,
) -> Result<Vec<MergedRun>, sqlx::Error> {
    let sql = "SELECT opened_at, passed_at, merging_at, updated_at AS merged_at FROM merge_batch \
               WHERE project = ? AND status = 'SUCCEEDED' AND opened_at IS NOT NULL \
               AND passed_at IS NOT NULL AND merging_at IS NOT NULL \
               ORDER BY number DESC LIMIT ?";
    with_reader!(reader.into(), |exec| {
        sqlx::query_as(sql)
            .bind(project)
            .bind(HISTORY)
            .fetch_all(exec)
            .await
    })
}

/// Seconds from the merge of each of `project`'s last merged batches to the
/// first deploy confirmation of one of its members, newest first. Served by
/// `uk_merge_batch_project_number`, `ix_merge_batch_request_batch` and
/// `ix_operation_history_operation`.
pub async fn deploy_delays(
    reader: impl Into<Reader<'_>>,
    project: &str,
) -> Result<Vec<f64>, sqlx::Error> {
    let sql = "SELECT b.updated_at, MIN(h.created_at) FROM (SELECT id, updated_at FROM merge_batch \
               WHERE project = ? AND status = 'SUCCEEDED' AND merging_at IS NOT NULL \
               ORDER BY number DESC LIMIT ?) b \
               JOIN merge_batch_request r ON r.batch_id = b.id \
               JOIN operation_history h ON h.operation_id = r.operation_id AND h.to_step = ? \
               GROUP BY b.id, b.updated_at";
    let pairs: Vec<(NaiveDateTime, NaiveDateTime)> = with_reader!(reader.into(), |exec| {
        sqlx::query_as(sql)
            .bind(project)
            .bind(HISTORY)
            .bind(StepStatus::DeployConfirmed.code())
            .fetch_all(exec)
            .await
    })?;
    Ok(pairs
        .into_iter()
        .map(|(merged, deployed)| (deployed - merged).as_seconds_f64().max(0.0))
        .collect())
}

/// Where a request waiting in the merge queue's waiting set stands.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct WaitingPlace {
    /// Its row in the waiting set (the order requests are claimed in).
    pub id: i64,
    /// Its partition (whose train it will board).
    pub partition_key: String,
    /// Its GitLab project.
    pub project: String,
    /// `""`, or the half of a failed batch it waits in.
    pub split_group: String,
}

/// Where `operation_id` stands when it waits in the merge queue's waiting
/// set (approved, in no batch yet, its time come): a scheduled request has
/// no place yet. Served by `uk_merge_batch_request_operation`.
pub async fn waiting_place(
    reader: impl Into<Reader<'_>>,
    operation_id: &str,
) -> Result<Option<WaitingPlace>, sqlx::Error> {
    let reader = reader.into();
    let now = dialect::now_ms(reader.backend());
    let sql = format!(
        "SELECT id, partition_key, project, split_group FROM merge_batch_request \
         WHERE operation_id = ? AND batch_id IS NULL \
         AND (not_before IS NULL OR not_before <= {now})"
    );
    with_reader!(reader, |exec| {
        sqlx::query_as(AssertSqlSafe(sql))
            .bind(operation_id)
            .fetch_optional(exec)
            .await
    })
}

/// The requests of `partition_key` waiting ahead of the waiting row
/// `before` (their time come too), by project and split group in the order
/// they board: `""` for a project's ordinary requests, which board
/// together, and each half of a failed batch, which boards as a batch of
/// its own; with how many each holds. Served by
/// `ix_merge_batch_request_waiting`.
pub async fn waiting_ahead(
    reader: impl Into<Reader<'_>>,
    partition_key: &str,
    before: i64,
) -> Result<Vec<(String, String, i64)>, sqlx::Error> {
    let reader = reader.into();
    let now = dialect::now_ms(reader.backend());
    let sql = format!(
        "SELECT project, split_group, COUNT(*) FROM merge_batch_request \
         WHERE partition_key = ? AND batch_id IS NULL AND id < ? \
         AND (not_before IS NULL OR not_before <= {now}) \
         GROUP BY project, split_group ORDER BY MIN(id)"
    );
    with_reader!(reader, |exec| {
        sqlx::query_as(AssertSqlSafe(sql))
            .bind(partition_key)
            .bind(before)
            .fetch_all(exec)
            .await
    })
}
