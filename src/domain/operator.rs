//! What an operator's retry or force-fail does to an operation, decided from
//! its stored state alone (SPEC §2.3).

use super::{BindingStatus, OperationKind, Phase, StepStatus};

/// Where a retry puts an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// A failed operation goes back to the step that failed (the binding to
    /// that step's status), and runs it again.
    Rewind(BindingStatus, StepStatus),
    /// An operation in flight (or waiting on an unknown outcome) runs its
    /// current step again now.
    RunAgain,
}

/// Why an operator action does not apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotApplicable {
    /// Waiting for the approval system or the deploy pipeline: nothing of
    /// changegate's to re-run.
    WaitingOutside,
    /// Finished (or already failed, for a force-fail).
    Finished,
}

impl NotApplicable {
    /// The explanation for the operator.
    pub const fn message(self) -> &'static str {
        match self {
            Self::WaitingOutside => {
                "the request is waiting for an outside decision or confirmation; nothing to re-run"
            }
            Self::Finished => "the request is finished; apply again instead",
        }
    }
}

/// The retry of an operation of `kind` whose binding is `status` at `step`.
pub fn retry(
    kind: OperationKind,
    status: BindingStatus,
    step: StepStatus,
) -> Result<Retry, NotApplicable> {
    use BindingStatus as S;
    match status {
        S::CreateFailed if step == StepStatus::ApprovalSendFailed => Ok(Retry::Rewind(
            S::ApprovalSending,
            StepStatus::ApprovalSending,
        )),
        // A failed pipeline fails again when only re-read: it is run again
        // (the MR's pipeline step re-runs it, or opens a new MR when its MR
        // was closed), whichever step found it failed.
        S::CreateFailed | S::HandleFailed if step == StepStatus::CreatePipelineFailed => {
            Ok(Retry::Rewind(S::MrCreated, StepStatus::PipelineRetrying))
        }
        S::CloseFailed if step == StepStatus::CreatePipelineFailed => {
            Ok(Retry::Rewind(S::Closing, StepStatus::PipelineRetrying))
        }
        // The create step finds the branch, commit or MR an earlier run left.
        S::CreateFailed => Ok(Retry::Rewind(S::MrCreating, StepStatus::MrCreating)),
        S::HandleFailed => Ok(Retry::Rewind(S::Merging, StepStatus::HandleStarted)),
        S::CloseFailed if kind == OperationKind::Close && step.phase() == Phase::Handle => {
            Ok(Retry::Rewind(S::Closing, StepStatus::HandleStarted))
        }
        S::CloseFailed => Ok(Retry::Rewind(S::Closing, StepStatus::CloseRequested)),
        S::ApprovalSending | S::MrCreating | S::MrCreated | S::Merging | S::Closing => {
            Ok(Retry::RunAgain)
        }
        S::ApprovalSent | S::Merged => Err(NotApplicable::WaitingOutside),
        S::Validated | S::Rejected | S::BusyRejected | S::Closed | S::Abandoned => {
            Err(NotApplicable::Finished)
        }
    }
}

/// The status a force-fail moves a binding in `status` to: a request is
/// abandoned (and may be applied for again), a removal fails (the binding
/// stays live).
pub fn force_fail(status: BindingStatus) -> Result<BindingStatus, NotApplicable> {
    use BindingStatus as S;
    match status {
        S::ApprovalSending
        | S::ApprovalSent
        | S::MrCreating
        | S::MrCreated
        | S::Merging
        | S::CreateFailed
        | S::HandleFailed => Ok(S::Abandoned),
        S::Closing => Ok(S::CloseFailed),
        // The change is in the repository: only a removal undoes it.
        S::Merged | S::Validated => Err(NotApplicable::Finished),
        S::CloseFailed | S::Rejected | S::BusyRejected | S::Closed | S::Abandoned => {
            Err(NotApplicable::Finished)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::check_transition;

    #[test]
    fn every_rewind_and_force_fail_is_a_legal_transition() {
        for status in BindingStatus::ALL {
            for step in StepStatus::ALL {
                for kind in [OperationKind::Apply, OperationKind::Close] {
                    if let Ok(Retry::Rewind(to, rerun)) = retry(kind, status, *step) {
                        assert_eq!(check_transition(status, to), Ok(()), "{status} {step}");
                        assert_eq!(
                            rerun.resume_after(),
                            Some(std::time::Duration::ZERO),
                            "{rerun} runs at once"
                        );
                    }
                }
            }
            if let Ok(to) = force_fail(status) {
                assert_eq!(check_transition(status, to), Ok(()), "{status}");
            }
        }
    }

    #[test]
    fn a_failed_approval_is_asked_again_and_a_failed_merge_is_merged_again() {
        assert_eq!(
            retry(
                OperationKind::Apply,
                BindingStatus::CreateFailed,
                StepStatus::ApprovalSendFailed
            ),
            Ok(Retry::Rewind(
                BindingStatus::ApprovalSending,
                StepStatus::ApprovalSending
            ))
        );
        assert_eq!(
            retry(
                OperationKind::Apply,
                BindingStatus::HandleFailed,
                StepStatus::HandleApproveFailed
            ),
            Ok(Retry::Rewind(
                BindingStatus::Merging,
                StepStatus::HandleStarted
            ))
        );
        assert_eq!(
            retry(
                OperationKind::Apply,
                BindingStatus::Merged,
                StepStatus::HandleMerged
            ),
            Err(NotApplicable::WaitingOutside)
        );
        assert_eq!(
            force_fail(BindingStatus::Validated),
            Err(NotApplicable::Finished)
        );
        assert_eq!(
            force_fail(BindingStatus::Closing),
            Ok(BindingStatus::CloseFailed)
        );
    }
}
