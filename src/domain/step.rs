//! Fine-grained step codes, grouped by phase in numeric ranges so that a code
//! prefix aggregates a phase in queries and metrics (seed 004, 3.1).

use std::fmt;
use std::time::Duration;

use super::{BindingStatus, UnknownCode};

/// The phase a step belongs to, by code range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// 10001+: from submission until the MR is ready.
    Create,
    /// 10101+: reviewer approvals and merge.
    Handle,
    /// 10201+: removal of a binding.
    Close,
    /// 10301+: results reported by callbacks and reconciliation.
    Callback,
    /// 10501+: waiting on an unknown outcome, or an operator's decision.
    Pending,
}

macro_rules! steps {
    ($($variant:ident = $code:literal, $name:literal, $doc:literal;)+) => {
        /// One step of an operation. Stored as its numeric code.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum StepStatus {
            $(#[doc = $doc] $variant,)+
        }

        impl StepStatus {
            /// Every step, in code order.
            pub const ALL: &'static [StepStatus] = &[$(Self::$variant,)+];

            /// The stored numeric code.
            pub const fn code(self) -> i32 {
                match self {
                    $(Self::$variant => $code,)+
                }
            }

            /// The stable name shown to people and in metrics.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Self::$variant => $name,)+
                }
            }

            /// What the step means, in words for people.
            pub const fn description(self) -> &'static str {
                match self {
                    $(Self::$variant => $doc,)+
                }
            }

            /// The step with this stored code.
            pub fn from_code(code: i32) -> Result<Self, UnknownCode> {
                match code {
                    $($code => Ok(Self::$variant),)+
                    other => Err(UnknownCode { kind: "step code", value: other.to_string() }),
                }
            }
        }
    };
}

steps! {
    Accepted = 10001, "ACCEPTED", "Submitted and validated; waiting for a worker.";
    BusyRejected = 10002, "BUSY_REJECTED", "The worker pool was full; nothing was started.";
    ApprovalSending = 10003, "APPROVAL_SENDING", "Calling the approval system.";
    ApprovalSent = 10004, "APPROVAL_SENT", "The approval system has the request.";
    ApprovalSendUnknown = 10005, "APPROVAL_SEND_UNKNOWN", "The approval call timed out; its outcome is unknown.";
    ApprovalSendFailed = 10006, "APPROVAL_SEND_FAILED", "The approval system refused the request.";
    Queued = 10007, "QUEUED", "Approved; waiting for the next merge round.";
    MrCreating = 10008, "MR_CREATING", "Writing the branch, the files and the MR.";
    MrCreated = 10009, "MR_CREATED", "The MR is open; its pipeline runs.";
    CreateFailed = 10010, "CREATE_FAILED", "Unexpected failure while creating the MR.";
    CreatePipelineFailed = 10011, "CREATE_PIPELINE_FAILED", "The MR pipeline failed.";
    CreateRefused = 10012, "CREATE_REFUSED", "GitLab refused the branch, commit or MR.";
    AlreadyInPlace = 10013, "ALREADY_IN_PLACE", "The target branch already held the file as requested; nothing had to be merged.";
    PipelineRetrying = 10014, "PIPELINE_RETRYING", "An operator asked for the failed pipeline to run again.";
    GitlabUnreachable = 10015, "GITLAB_UNREACHABLE", "GitLab could not be reached for longer than changegate waits, or its certificate is not accepted.";
    GitlabAccessDenied = 10016, "GITLAB_ACCESS_DENIED", "GitLab refused changegate's token, or the token lacks a right the step needs.";
    GitlabProjectNotFound = 10017, "GITLAB_PROJECT_NOT_FOUND", "The GitLab project does not exist, or changegate's token cannot see it.";
    CreateUnrenderable = 10018, "CREATE_UNRENDERABLE", "The file could not be written as the target says (its template failed, the output did not parse, or the shared file could not be edited); nothing was sent to GitLab.";
    Scheduled = 10019, "SCHEDULED", "Waiting for the time the requester chose (notBefore), or for the target's next change window, before it goes on.";
    Withdrawn = 10020, "WITHDRAWN", "Withdrawn by the requester or an operator before it reached the repository; nothing was written.";
    HandleStarted = 10101, "HANDLE_STARTED", "Reviewer bots are approving.";
    HandleApproved = 10102, "HANDLE_APPROVED", "Both reviewer bots approved.";
    HandleMerging = 10103, "HANDLE_MERGING", "Merging the MR.";
    HandleMerged = 10104, "HANDLE_MERGED", "The MR is merged.";
    HandleRebaseConflict = 10105, "HANDLE_REBASE_CONFLICT", "The MR cannot be rebased without conflicts.";
    HandleApproveFailed = 10106, "HANDLE_APPROVE_FAILED", "A reviewer bot could not approve after its retries.";
    HandleMergeRefused = 10107, "HANDLE_MERGE_REFUSED", "GitLab kept refusing the merge.";
    HandleMrClosed = 10108, "HANDLE_MR_CLOSED", "The MR was closed outside changegate.";
    HandleFailed = 10109, "HANDLE_FAILED", "Unexpected failure while approving or merging.";
    HandleBatchRetry = 10110, "HANDLE_BATCH_RETRY", "Its batch failed; it will be merged in a smaller batch.";
    HandleNotLanded = 10111, "HANDLE_NOT_LANDED", "The MR merged, but the file on the target branch is not what was rendered.";
    HandleBatchExhausted = 10112, "HANDLE_BATCH_EXHAUSTED", "Its merge batches were settled batch.max_attempts times without an end; it failed with the last batch's error.";
    CloseRequested = 10201, "CLOSE_REQUESTED", "Removal requested.";
    CloseExpired = 10202, "CLOSE_EXPIRED", "Expired; removal started by changegate.";
    CloseMrCreated = 10203, "CLOSE_MR_CREATED", "The removal MR is open.";
    Closed = 10204, "CLOSED", "The binding's file is removed.";
    CloseFailed = 10205, "CLOSE_FAILED", "Removal failed.";
    CalledBackApproved = 10301, "CALLED_BACK_APPROVED", "The approval system approved.";
    CalledBackRejected = 10302, "CALLED_BACK_REJECTED", "The approval system rejected.";
    CalledBackWithdrawn = 10303, "CALLED_BACK_WITHDRAWN", "The requester withdrew the approval request.";
    DeployConfirmed = 10304, "DEPLOY_CONFIRMED", "The deploy pipeline confirmed the change.";
    DeployReconciled = 10305, "DEPLOY_RECONCILED", "A later deploy confirmed the change (reconciliation).";
    DeployFailed = 10306, "DEPLOY_FAILED", "The deploy pipeline reported a failure.";
    PipelinePending = 10501, "PIPELINE_PENDING", "The pipeline did not finish in time; its outcome is unknown.";
    RebasePending = 10502, "REBASE_PENDING", "The rebase did not finish in time.";
    MergePending = 10503, "MERGE_PENDING", "The merge answer was lost; the MR is re-read.";
    ManualRetry = 10504, "MANUAL_RETRY", "An operator re-ran the step.";
    ManualAbandoned = 10505, "MANUAL_ABANDONED", "An operator gave up on the request.";
    MergeChecksPending = 10506, "MERGE_CHECKS_PENDING", "The MR did not become mergeable in time; its outcome is unknown, and changegate keeps checking.";
}

/// Steps whose failure is deterministic: repeating the same request fails the
/// same way, so the requester is told to contact the team rather than wait.
pub const DETERMINISTIC_FAILURES: &[StepStatus] = &[
    StepStatus::ApprovalSendFailed,
    StepStatus::CreateFailed,
    StepStatus::CreatePipelineFailed,
    StepStatus::CreateRefused,
    StepStatus::GitlabUnreachable,
    StepStatus::GitlabAccessDenied,
    StepStatus::GitlabProjectNotFound,
    StepStatus::CreateUnrenderable,
    StepStatus::HandleRebaseConflict,
    StepStatus::HandleApproveFailed,
    StepStatus::HandleMergeRefused,
    StepStatus::HandleMrClosed,
    StepStatus::HandleFailed,
    StepStatus::HandleNotLanded,
    StepStatus::HandleBatchExhausted,
    StepStatus::CloseFailed,
    StepStatus::DeployFailed,
];

impl StepStatus {
    /// The phase, from the code range.
    pub const fn phase(self) -> Phase {
        match self.code() {
            10001..=10100 => Phase::Create,
            10101..=10200 => Phase::Handle,
            10201..=10300 => Phase::Close,
            10301..=10500 => Phase::Callback,
            _ => Phase::Pending,
        }
    }

    /// Whether this step is a deterministic failure.
    pub fn is_deterministic_failure(self) -> bool {
        DETERMINISTIC_FAILURES.contains(&self)
    }

    /// When the workflow runs an operation at this step again by itself:
    /// `None` while it waits for something outside (a decision, a deploy, an
    /// operator) or is finished; zero for "at once"; otherwise after a pause,
    /// because an unknown outcome is re-read now and then, not retried in a loop.
    pub const fn resume_after(self) -> Option<Duration> {
        match self {
            Self::Accepted
            | Self::ApprovalSending
            | Self::CalledBackApproved
            | Self::MrCreating
            | Self::MrCreated
            | Self::HandleStarted
            | Self::CloseRequested
            | Self::CloseExpired
            | Self::CloseMrCreated
            | Self::PipelineRetrying
            | Self::MergeChecksPending => Some(Duration::ZERO),
            // Asking twice may open a second ticket: give the callback time.
            Self::ApprovalSendUnknown => Some(Duration::from_secs(300)),
            Self::PipelinePending => Some(Duration::from_secs(60)),
            Self::RebasePending => Some(Duration::from_secs(30)),
            Self::MergePending => Some(Duration::from_secs(10)),
            _ => None,
        }
    }
}

/// For decoding stored rows.
impl TryFrom<i32> for StepStatus {
    type Error = UnknownCode;

    fn try_from(code: i32) -> Result<Self, Self::Error> {
        Self::from_code(code)
    }
}

impl fmt::Display for StepStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What the requester should do now (the `next` field of the status API).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// In progress, or the outcome is not known yet: keep waiting.
    Wait,
    /// A deterministic external failure: waiting will not help.
    ContactTeam,
    /// Finished without effect: the requester may apply again.
    Reapply,
    /// Finished: nothing to do.
    None,
}

impl Next {
    /// The API name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Wait => "WAIT",
            Self::ContactTeam => "CONTACT_TEAM",
            Self::Reapply => "REAPPLY",
            Self::None => "NONE",
        }
    }
}

/// The advice for a binding in `status` whose operation is at `step`.
pub fn next_action(status: BindingStatus, step: StepStatus) -> Next {
    // A request refused for lack of capacity may always be sent again, also
    // a close (whose binding then stays live).
    if status.is_reappliable() || step == StepStatus::BusyRejected {
        Next::Reapply
    } else if status == BindingStatus::Validated || step == StepStatus::Withdrawn {
        // A withdrawn removal handed its binding back, live: nothing is
        // left for it to do.
        Next::None
    } else if step.is_deterministic_failure() {
        Next::ContactTeam
    } else {
        Next::Wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_sit_in_their_phase_range() {
        let mut codes: Vec<i32> = StepStatus::ALL.iter().map(|s| s.code()).collect();
        codes.dedup();
        assert_eq!(
            codes.len(),
            StepStatus::ALL.len(),
            "codes are sorted and unique"
        );
        for step in StepStatus::ALL {
            assert_eq!(StepStatus::from_code(step.code()), Ok(*step));
            let expected = match step.name() {
                n if n.starts_with("CALLED_BACK") || n.starts_with("DEPLOY") => Phase::Callback,
                n if n.starts_with("CLOSE") => Phase::Close,
                n if n.starts_with("HANDLE") => Phase::Handle,
                n if n.ends_with("PENDING") || n.starts_with("MANUAL") => Phase::Pending,
                _ => Phase::Create,
            };
            assert_eq!(step.phase(), expected, "{step}");
        }
        assert!(StepStatus::from_code(10999).is_err());
    }

    #[test]
    fn next_tells_waiting_from_contacting_from_reapplying() {
        use BindingStatus as B;
        use StepStatus as S;
        let rows = [
            (B::ApprovalSent, S::ApprovalSent, Next::Wait),
            (B::Merging, S::PipelinePending, Next::Wait),
            (B::ApprovalSent, S::ApprovalSendUnknown, Next::Wait),
            (B::Merging, S::HandleBatchRetry, Next::Wait),
            (B::CreateFailed, S::CreatePipelineFailed, Next::ContactTeam),
            (B::HandleFailed, S::HandleRebaseConflict, Next::ContactTeam),
            (B::Merged, S::DeployFailed, Next::ContactTeam),
            (B::Rejected, S::CalledBackRejected, Next::Reapply),
            (B::BusyRejected, S::BusyRejected, Next::Reapply),
            (B::CloseFailed, S::BusyRejected, Next::Reapply),
            (B::CloseFailed, S::CloseFailed, Next::ContactTeam),
            (B::Closed, S::Closed, Next::Reapply),
            (B::Abandoned, S::ManualAbandoned, Next::Reapply),
            (B::Validated, S::DeployConfirmed, Next::None),
            // A withdrawn apply may be applied again; a withdrawn removal
            // handed its binding back, live, whatever its status.
            (B::Abandoned, S::Withdrawn, Next::Reapply),
            (B::Merged, S::Withdrawn, Next::None),
            (B::CloseFailed, S::Withdrawn, Next::None),
        ];
        for (status, step, expected) in rows {
            assert_eq!(next_action(status, step), expected, "{status} at {step}");
        }
    }
}
