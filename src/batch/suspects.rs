//! Which members of a batch whose pipeline failed its test report points
//! at: those whose file a failed test case names. A project whose CI
//! publishes a JUnit report with each case's `file` then has its failing
//! change split off at the first level of the bisection, and the rest of
//! the batch passes one pipeline later; without such a report (or when it
//! cannot be read) the batch is halved in queue order.

use crate::config::Settings;
use crate::db::Db;
use crate::db::batches::BatchRow;
use crate::db::operations::operations_by_ids;
use crate::store::StoreError;
use crate::workflow::{bot, file_path_of};

use super::runner::MergeQueue;

impl MergeQueue {
    /// The members of `batch` (`ids`) whose files the failed pipeline
    /// `pipeline_id`'s test report names. The report is a hint for the
    /// split, never a verdict (every half is tested again), so a report
    /// that cannot be read names none.
    pub(super) async fn suspects(
        &self,
        db: &Db,
        settings: &Settings,
        batch: &BatchRow,
        ids: &[String],
        pipeline_id: i64,
    ) -> Result<Vec<String>, StoreError> {
        let Ok(token) = bot(settings) else {
            return Ok(Vec::new());
        };
        let gitlab = &self.workflow.gitlab;
        let files = match gitlab
            .failed_test_files(token, &batch.project, pipeline_id)
            .await
        {
            Ok(files) if !files.is_empty() => files,
            Ok(_) => return Ok(Vec::new()),
            Err(err) => {
                tracing::warn!(
                    batch = batch.id,
                    pipeline = pipeline_id,
                    error = %err,
                    "the failed pipeline's test report could not be read; the batch is halved in queue order"
                );
                return Ok(Vec::new());
            }
        };
        let operations = operations_by_ids(db, ids).await?;
        Ok(operations
            .iter()
            .filter(|operation| files.contains(&file_path_of(settings, operation)))
            .map(|operation| operation.operation_id.clone())
            .collect())
    }
}
