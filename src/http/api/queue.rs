//! A waiting request's place in the merge queue, as the API shows it.

use serde::Serialize;

use crate::batch::QueueEstimate;

/// Where a request stands in the merge queue while it waits there
/// (approved, in a batch whose pipeline runs, or waiting for its turn), and
/// when it is expected to land. It moves as the queue does: read it again.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueView {
    /// Its batch's place: 1 is the next batch to merge.
    position: usize,
    /// Batches in the queue, its own included.
    of: usize,
    /// Its batch's number, once it is in one.
    #[serde(skip_serializing_if = "Option::is_none")]
    batch: Option<i64>,
    /// When its batch is expected to merge; absent while there is no
    /// estimate (see `basis`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    expected_merge_at: Option<String>,
    /// When the deploy is expected to confirm it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    expected_deploy_at: Option<String>,
    /// What the times come from (the medians of the project's last merged
    /// batches) and take for granted (the batches ahead pass CI, but the
    /// halves of a failed batch), or why there are none yet.
    basis: String,
}

impl From<QueueEstimate> for QueueView {
    fn from(estimate: QueueEstimate) -> Self {
        let time = |at: chrono::DateTime<chrono::Utc>| {
            at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        };
        Self {
            position: estimate.position,
            of: estimate.of,
            batch: estimate.batch,
            expected_merge_at: estimate.expected_merge_at.map(time),
            expected_deploy_at: estimate.expected_deploy_at.map(time),
            basis: estimate.basis,
        }
    }
}
