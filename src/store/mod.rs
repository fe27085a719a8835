//! The state store: every write to a request's state, guarded so that stale,
//! duplicate or racing writers fail instead of corrupting it (SPEC §5).
//!
//! Each function here owns a transaction that writes `operation` and
//! `binding` together, with the fixed lock order operation → binding, checks
//! every binding move against [`crate::domain::check_transition`], appends the
//! history, and appends one outbox event per real status flip.

mod bulk;
mod decision;
mod first;
mod group;
mod handback;
mod submit;
mod transition;
mod tx;

pub use bulk::{MergeRequestRef, lock_members, move_members};
pub use decision::{apply_decision, is_urgent_lane, partition_of, urgent_lane};
pub use group::SubmissionQueue;
pub use handback::{RemovalWithdrawal, withdraw_removal};
pub use submit::{Controls, IdempotencyClaim, NewRequest, Submitted, may_replace, submit};
pub use transition::{
    Change, Flip, Transitioned, flip, flip_in, note_in, transition, transition_in,
};
pub use tx::StoreTx;

use crate::db::{Conflict, Contended};
use crate::domain::{BindingStatus, IllegalTransition};

/// Why a store write did not happen.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No such operation, or no binding for a close request.
    #[error("not found")]
    NotFound,
    /// Another writer changed the row since it was read; nothing was written.
    #[error("preempted: the row changed since it was read")]
    Preempted,
    /// The relation has a request in progress (or awaiting recovery).
    #[error("the relation is {status}, which cannot be applied for again")]
    InProgress {
        /// Its current status.
        status: BindingStatus,
        /// The operation that owns it.
        operation_id: String,
    },
    /// An operation with this id already exists.
    #[error("operation id already used")]
    DuplicateOperation,
    /// The idempotency key is held by another request (committed or in flight).
    #[error("idempotency key already used")]
    DuplicateKey,
    /// The move is not in the transition table.
    #[error(transparent)]
    Illegal(#[from] IllegalTransition),
    /// The database failed.
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

impl Contended for StoreError {
    fn conflict(&self) -> Option<Conflict> {
        match self {
            Self::Db(err) => Conflict::of(err),
            _ => None,
        }
    }
}

/// A database error anywhere in the chain, as such or inside a
/// [`StoreError`] (whose `Db` variant is transparent, so the chain skips it).
impl Contended for anyhow::Error {
    fn conflict(&self) -> Option<Conflict> {
        self.chain().find_map(|cause| {
            cause
                .downcast_ref::<sqlx::Error>()
                .and_then(Conflict::of)
                .or_else(|| cause.downcast_ref::<StoreError>()?.conflict())
        })
    }
}

/// The outbox payload of a flip: what subscribers receive.
fn event_payload(flip: &Flip, step: crate::domain::StepStatus) -> String {
    serde_json::json!({
        "operationId": flip.operation_id,
        "subjectId": flip.subject_id,
        "targetKey": flip.target_key,
        "from": flip.from.map(BindingStatus::as_str),
        "to": flip.to.as_str(),
        "step": { "code": step.code(), "name": step.name() },
    })
    .to_string()
}

/// Counts a committed flip. Labels are fixed status names: bounded cardinality.
fn count_flip(tx: &mut StoreTx, flip: &Flip) {
    let (from, to) = (flip.from, flip.to);
    tx.after_commit(move || count_committed_flip(from, to));
}

/// Describes the store's metrics and starts the rejection counter at zero,
/// so that an alert on its increase sees the first rejection.
pub fn describe_metrics() {
    metrics::describe_counter!(
        "changegate_binding_transitions_total",
        "Committed binding status changes, by from and to status (NONE: a new binding)."
    );
    metrics::describe_counter!(
        "changegate_executor_rejected_total",
        "Requests refused as BUSY_REJECTED because the executor's queue was full."
    );
    metrics::describe_histogram!(
        "changegate_submission_group_size",
        "First requests recorded together in one transaction (group commit)."
    );
    metrics::counter!("changegate_executor_rejected_total").increment(0);
}

/// Counts a flip whose transaction has committed.
fn count_committed_flip(from: Option<BindingStatus>, to: BindingStatus) {
    let from = from.map_or("NONE", BindingStatus::as_str);
    metrics::counter!("changegate_binding_transitions_total", "from" => from, "to" => to.as_str())
        .increment(1);
}
