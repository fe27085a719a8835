//! What a step or a batch round does when a GitLab call fails, by the one
//! classification of errors ([`GitLabError::class`]): a transient failure
//! or a rate-limit pause is waited out; a connection that cannot be made is
//! too, until the outage has lasted `workflow.unreachable_deadline`; what
//! waiting cannot cure fails at once with a step code that says why.

use std::time::Duration;

use super::Workflow;
use super::merge_request::Outcome;
use crate::clients::gitlab::{FailureClass, GitLabError, Permanent};
use crate::clients::health::{Dependencies, System};
use crate::db::Db;
use crate::db::operations::{OperationRow, set_operation_obstacle};
use crate::db::outage::{OutageClock, operation_unreachable_for};
use crate::domain::{BindingStatus, StepStatus};
use crate::store::StoreError;

/// What the failure means for the step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Stay where it is and try again later; `clock` moves the outage clock.
    Wait(OutageClock),
    /// Fail now at `step`.
    Fail {
        /// The step code that says why.
        step: StepStatus,
        /// In words a requester can pass on.
        message: String,
    },
}

/// The verdict on `err`; `refused` is the step's own code for GitLab
/// refusing the request itself. A refusal of changegate itself (its token,
/// the project) is recorded in `health`, which logs it once.
pub(crate) fn verdict(err: &GitLabError, refused: StepStatus, health: &Dependencies) -> Verdict {
    let permanent = match err.class() {
        FailureClass::Transient | FailureClass::Waiting(_) => {
            return Verdict::Wait(OutageClock::Keep);
        }
        FailureClass::Unreachable(_) => return Verdict::Wait(OutageClock::Run),
        FailureClass::Permanent(permanent) => permanent,
    };
    let step = match permanent {
        Permanent::Certificate(_) => StepStatus::GitlabUnreachable,
        Permanent::AccessDenied => StepStatus::GitlabAccessDenied,
        Permanent::ProjectNotFound => StepStatus::GitlabProjectNotFound,
        Permanent::NotConfigured | Permanent::Refused => refused,
    };
    // A certificate failure is logged and counted where the connection failed.
    if let (Some(reason), false) = (
        permanent.reason(),
        matches!(permanent, Permanent::Certificate(_)),
    ) {
        health.refused(System::GitLab, reason, &err.to_string());
    }
    Verdict::Fail {
        step,
        message: err.to_string(),
    }
}

/// The message of a step that stopped trying after an outage of `deadline`.
pub(crate) fn outage_message(err: &GitLabError, deadline: Duration) -> String {
    format!(
        "{err} for longer than {}; changegate stopped trying: please tell the team",
        humantime::format_duration(deadline)
    )
}

impl Workflow {
    /// Handles a failed GitLab call of `operation`'s step: waits (saying
    /// what keeps it), or settles it as failed in `failed` (adapted to its
    /// kind) with the verdict's step, `refused` for a refusal of the request.
    pub(super) async fn interrupted(
        &self,
        db: &Db,
        operation: &OperationRow,
        err: &GitLabError,
        failed: BindingStatus,
        refused: StepStatus,
    ) -> Result<(), StoreError> {
        let (step, message) = match verdict(err, refused, self.gitlab.health()) {
            Verdict::Wait(clock) => {
                tracing::debug!(operation_id = %operation.operation_id, "GitLab call failed, trying again later: {err}");
                self.note_obstacle(db, operation, err.obstacle(), clock)
                    .await?;
                let deadline = self.config.current().unreachable_deadline;
                if clock != OutageClock::Run
                    || !operation_unreachable_for(db, &operation.operation_id, deadline).await?
                {
                    return Ok(());
                }
                (StepStatus::GitlabUnreachable, outage_message(err, deadline))
            }
            Verdict::Fail { step, message } => (step, message),
        };
        tracing::info!(operation_id = %operation.operation_id, %step, "step failed: {message}");
        let outcome = Outcome {
            status: Some(failed),
            step,
            message: Some(message),
        };
        self.settle(db, operation, operation.version, outcome).await
    }

    /// Records what kept this round from an answer (`None`: nothing did)
    /// and moves the outage clock, when either differs from what the
    /// operation says already.
    pub(super) async fn note_obstacle(
        &self,
        db: &Db,
        operation: &OperationRow,
        obstacle: Option<String>,
        clock: OutageClock,
    ) -> Result<(), StoreError> {
        let clock_moves = match clock {
            OutageClock::Stop => operation.unreachable_since.is_some(),
            OutageClock::Keep => false,
            OutageClock::Run => operation.unreachable_since.is_none(),
        };
        if operation.obstacle != obstacle || clock_moves {
            set_operation_obstacle(db, &operation.operation_id, obstacle.as_deref(), clock).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clients::http::Unreachable;
    use reqwest::StatusCode;

    fn status(code: u16, message: &str) -> GitLabError {
        GitLabError::Status {
            status: StatusCode::from_u16(code).unwrap(),
            message: message.to_owned(),
        }
    }

    #[test]
    fn each_failure_is_waited_out_or_fails_with_a_code_that_says_why() {
        let health = Dependencies::default();
        let refused = StepStatus::CreateRefused;
        let wait = |err: GitLabError| verdict(&err, refused, &health);
        assert_eq!(wait(GitLabError::Timeout), Verdict::Wait(OutageClock::Keep));
        assert_eq!(
            wait(status(502, "Bad Gateway")),
            Verdict::Wait(OutageClock::Keep)
        );
        assert_eq!(
            wait(GitLabError::Throttled {
                wait: Duration::from_secs(60)
            }),
            Verdict::Wait(OutageClock::Keep)
        );
        for failure in [Unreachable::Refused, Unreachable::Dns, Unreachable::Tls] {
            assert_eq!(
                wait(GitLabError::Unreachable(failure)),
                Verdict::Wait(OutageClock::Run),
                "{failure:?}"
            );
        }
        let fails_at = |err: GitLabError| match verdict(&err, refused, &health) {
            Verdict::Fail { step, .. } => Some(step),
            Verdict::Wait(_) => None,
        };
        for failure in [
            Unreachable::UntrustedCertificate,
            Unreachable::ExpiredCertificate,
            Unreachable::WrongHostName,
        ] {
            assert_eq!(
                fails_at(GitLabError::Unreachable(failure)),
                Some(StepStatus::GitlabUnreachable)
            );
        }
        assert_eq!(
            fails_at(status(401, "401 Unauthorized")),
            Some(StepStatus::GitlabAccessDenied)
        );
        assert_eq!(
            fails_at(status(403, "403 Forbidden")),
            Some(StepStatus::GitlabAccessDenied)
        );
        assert_eq!(
            fails_at(status(404, "404 Project Not Found")),
            Some(StepStatus::GitlabProjectNotFound)
        );
        assert_eq!(fails_at(status(404, "404 Not found")), Some(refused));
        assert_eq!(
            fails_at(status(400, "A file with this name already exists")),
            Some(refused)
        );
    }
}
