//! What the requester sees: one coarse status per (subject, target).

use std::fmt;
use std::str::FromStr;

use super::UnknownCode;

/// The external state of a binding (seed 004, 3.1). Stored as its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BindingStatus {
    /// Written before the approval system is called.
    ApprovalSending,
    /// The approval system has the request.
    ApprovalSent,
    /// Approved; waiting for a merge round or the MR is being written.
    MrCreating,
    /// The MR is open and its pipeline runs.
    MrCreated,
    /// Reviewer approvals and merge are in progress.
    Merging,
    /// Merged; waiting for the deploy confirmation.
    Merged,
    /// Deployed: the binding is live.
    Validated,
    /// Failed before the MR was ready; waits for an operator.
    CreateFailed,
    /// Failed while approving or merging; waits for an operator.
    HandleFailed,
    /// The approval system rejected or the requester withdrew.
    Rejected,
    /// The worker pool was full when the request arrived; nothing was started.
    BusyRejected,
    /// Removal of the binding is in progress (requested or expired).
    Closing,
    /// Removal failed; waits for an operator.
    CloseFailed,
    /// Removed.
    Closed,
    /// An operator gave up on the request, with a reason.
    Abandoned,
}

/// Statuses from which the requester may apply again for the same relation;
/// the row is then reset in place. The one source of truth for storage and API.
/// Failed rows are not here: they wait for an operator, and resetting them
/// would orphan the recovery attached to their operation id.
pub const REAPPLIABLE: &[BindingStatus] = &[
    BindingStatus::Rejected,
    BindingStatus::BusyRejected,
    BindingStatus::Closed,
    BindingStatus::Abandoned,
];

/// Where a request in the merge queue can be: waiting for a round or in a
/// running batch (from claimed to merging).
pub const IN_MERGE_QUEUE: &[BindingStatus] = &[
    BindingStatus::MrCreating,
    BindingStatus::MrCreated,
    BindingStatus::Merging,
];

/// Statuses in which an approval callback is accepted. SENDING is included
/// because the callback may arrive before the SENT write (seed 004, 3.3).
pub const AWAITING_APPROVAL: &[BindingStatus] =
    &[BindingStatus::ApprovalSending, BindingStatus::ApprovalSent];

impl BindingStatus {
    /// Every status, for tables and tests.
    pub const ALL: [BindingStatus; 15] = [
        Self::ApprovalSending,
        Self::ApprovalSent,
        Self::MrCreating,
        Self::MrCreated,
        Self::Merging,
        Self::Merged,
        Self::Validated,
        Self::CreateFailed,
        Self::HandleFailed,
        Self::Rejected,
        Self::BusyRejected,
        Self::Closing,
        Self::CloseFailed,
        Self::Closed,
        Self::Abandoned,
    ];

    /// The stored and displayed name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::ApprovalSending => "APPROVAL_SENDING",
            Self::ApprovalSent => "APPROVAL_SENT",
            Self::MrCreating => "MR_CREATING",
            Self::MrCreated => "MR_CREATED",
            Self::Merging => "MERGING",
            Self::Merged => "MERGED",
            Self::Validated => "VALIDATED",
            Self::CreateFailed => "CREATE_FAILED",
            Self::HandleFailed => "HANDLE_FAILED",
            Self::Rejected => "REJECTED",
            Self::BusyRejected => "BUSY_REJECTED",
            Self::Closing => "CLOSING",
            Self::CloseFailed => "CLOSE_FAILED",
            Self::Closed => "CLOSED",
            Self::Abandoned => "ABANDONED",
        }
    }

    /// Whether the requester may apply again from this status.
    pub fn is_reappliable(self) -> bool {
        REAPPLIABLE.contains(&self)
    }
}

impl fmt::Display for BindingStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for BindingStatus {
    type Err = UnknownCode;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|status| status.as_str() == value)
            .ok_or_else(|| UnknownCode {
                kind: "binding status",
                value: value.to_owned(),
            })
    }
}

/// For decoding stored rows.
impl TryFrom<String> for BindingStatus {
    type Error = UnknownCode;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        value.parse()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for status in BindingStatus::ALL {
            assert_eq!(status.as_str().parse::<BindingStatus>(), Ok(status));
        }
        assert!("APPROVED".parse::<BindingStatus>().is_err());
    }

    #[test]
    fn failed_rows_awaiting_recovery_are_not_reappliable() {
        assert!(BindingStatus::Rejected.is_reappliable());
        assert!(BindingStatus::Closed.is_reappliable());
        for failed in [
            BindingStatus::CreateFailed,
            BindingStatus::HandleFailed,
            BindingStatus::CloseFailed,
        ] {
            assert!(!failed.is_reappliable(), "{failed}");
        }
    }
}
