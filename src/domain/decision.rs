//! What an approval decision does to a request awaiting it.

use super::{BindingStatus, StepStatus};

/// A decision of the approval system, or of an operator with the built-in one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalDecision {
    /// Go ahead.
    Approved,
    /// Refused.
    Rejected,
    /// The requester withdrew.
    Withdrawn,
}

impl ApprovalDecision {
    /// Where the binding and the operation go: approval first continues with
    /// the MR (its own, or with `batched` a place in the next merge round),
    /// MR first (the MR exists) with approve-and-merge.
    pub fn outcome(self, mr_first: bool, batched: bool) -> (BindingStatus, StepStatus) {
        match self {
            Self::Approved if mr_first => (BindingStatus::Merging, StepStatus::CalledBackApproved),
            Self::Approved if batched => (BindingStatus::MrCreating, StepStatus::Queued),
            Self::Approved => (BindingStatus::MrCreating, StepStatus::CalledBackApproved),
            Self::Rejected => (BindingStatus::Rejected, StepStatus::CalledBackRejected),
            Self::Withdrawn => (BindingStatus::Rejected, StepStatus::CalledBackWithdrawn),
        }
    }
}
