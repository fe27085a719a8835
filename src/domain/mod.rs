//! The request state model, pure and free of I/O (SPEC §1): binding statuses
//! with their transition table, step codes, and what a requester should do next.

mod binding_status;
mod decision;
mod ids;
pub mod operator;
pub mod render;
mod step;
mod transitions;

pub use binding_status::{AWAITING_APPROVAL, BindingStatus, IN_MERGE_QUEUE, REAPPLIABLE};
pub use decision::ApprovalDecision;
pub use ids::{OperationId, OperationKind};
pub use step::{DETERMINISTIC_FAILURES, Next, Phase, StepStatus, next_action};
pub use transitions::{IllegalTransition, LEGAL_TRANSITIONS, check_transition};

/// A stored value that is not one of the known codes (a newer version wrote it,
/// or the row was edited by hand).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} {value:?}")]
pub struct UnknownCode {
    /// What was being parsed.
    pub kind: &'static str,
    /// The value found.
    pub value: String,
}
