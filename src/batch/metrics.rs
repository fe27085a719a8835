//! What the merge queue counts: the size of each batch claimed, how each
//! batch ended, and the rounds of the queue that failed.

/// How a batch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ended {
    /// Its MR merged.
    Merged,
    /// The target branch held every file already: nothing to merge.
    InPlace,
    /// It failed and its members were split in halves for later rounds.
    Split,
    /// It failed and so did its members (`CONTACT_TEAM`).
    Failed,
    /// Settled (the timeout sweep or an operator): its members wait again.
    Settled,
    /// Its row is gone and its members were found pointing at it: they
    /// wait again (see `orphans.rs`).
    Lost,
}

impl Ended {
    const ALL: [Self; 6] = [
        Self::Merged,
        Self::InPlace,
        Self::Split,
        Self::Failed,
        Self::Settled,
        Self::Lost,
    ];

    fn label(self) -> &'static str {
        match self {
            Self::Merged => "merged",
            Self::InPlace => "in_place",
            Self::Split => "split",
            Self::Failed => "failed",
            Self::Settled => "settled",
            Self::Lost => "lost",
        }
    }

    /// Counts one batch that ended so.
    pub(super) fn count(self) {
        metrics::counter!("changegate_batches_finished_total", "outcome" => self.label())
            .increment(1);
    }
}

/// Records the size of a batch just claimed.
pub(super) fn record_claimed(members: usize) {
    metrics::histogram!("changegate_batch_size").record(members as f64);
}

/// A round of the merge queue failed (`round`: `claim` or `drive`); what
/// failed is logged by the caller.
pub fn count_round_failure(round: &'static str) {
    metrics::counter!("changegate_merge_queue_round_failures_total", "round" => round).increment(1);
}

/// A request went to the urgent lane: marked urgent by an operator, or an
/// operator's revert submitted urgent.
pub fn count_urgent() {
    metrics::counter!("changegate_urgent_requests_total").increment(1);
}

/// Describes the merge queue's metrics and starts its counters at zero, so
/// that rates and ratios over them work before the first batch ends.
pub fn describe_metrics() {
    metrics::describe_histogram!(
        "changegate_batch_size",
        "Requests in each merge batch claimed."
    );
    metrics::describe_counter!(
        "changegate_batches_finished_total",
        "Merge batches that ended, by outcome: merged, in_place, split, failed, settled, lost."
    );
    metrics::describe_counter!(
        "changegate_merge_queue_round_failures_total",
        "Merge queue rounds (claim, drive) that failed, mostly on the database."
    );
    metrics::describe_counter!(
        "changegate_urgent_requests_total",
        "Requests sent to the merge queue's urgent lane (marked urgent, or an urgent revert)."
    );
    metrics::counter!("changegate_urgent_requests_total").increment(0);
    for ended in Ended::ALL {
        metrics::counter!("changegate_batches_finished_total", "outcome" => ended.label())
            .increment(0);
    }
    super::train::describe_train_metrics();
    for round in ["claim", "drive"] {
        metrics::counter!("changegate_merge_queue_round_failures_total", "round" => round)
            .increment(0);
    }
}
