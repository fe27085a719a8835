//! The long-running part of a request, run off the request path by a bounded
//! pool of workers (SPEC §6).

mod approval;
mod executor;
mod merge_request;

pub use executor::{Busy, Executor, Reservation, Steps};

use std::future::Future;
use std::pin::Pin;

use crate::clients::approval::ApprovalClient;
use crate::clients::gitlab::GitLabClient;
use crate::config::LiveConfig;
use crate::db::DbSlot;
use crate::db::operations::get_operation_with_status;
use crate::domain::{BindingStatus, StepStatus};

/// A unit of work for one operation.
pub type StepFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The steps of the workflow, chosen from the operation's state as stored
/// (never from the caller), so re-running a step is safe.
#[derive(Clone)]
pub struct Workflow {
    db: DbSlot,
    config: LiveConfig,
    approvals: ApprovalClient,
    gitlab: GitLabClient,
}

/// The most steps one run takes an operation through (a guard against a
/// step that would not move it).
const MAX_STEPS_PER_RUN: usize = 8;

impl Workflow {
    /// Steps over the shared database, configuration and clients.
    pub fn new(
        db: DbSlot,
        config: LiveConfig,
        approvals: ApprovalClient,
        gitlab: GitLabClient,
    ) -> Self {
        Self {
            db,
            config,
            approvals,
            gitlab,
        }
    }

    /// Runs the operation's steps one after another until it waits for
    /// something outside (a decision, a deploy, an operator) or is finished.
    async fn run_steps(&self, operation_id: &str) {
        for _ in 0..MAX_STEPS_PER_RUN {
            if !self.step(operation_id).await {
                return;
            }
        }
    }

    /// One step; `true` when it moved the operation and another may follow.
    async fn step(&self, operation_id: &str) -> bool {
        let Some(db) = self.db.get() else {
            return false;
        };
        let (operation, status) = match get_operation_with_status(db, operation_id).await {
            Ok(Some((operation, status, _))) => (operation, status),
            Ok(None) => return false,
            Err(err) => {
                tracing::warn!(operation_id, "cannot read the operation: {err}");
                return false;
            }
        };
        let before = (status, operation.step);
        let outcome = match before {
            (
                Some(BindingStatus::ApprovalSending),
                StepStatus::Accepted
                | StepStatus::ApprovalSending
                | StepStatus::ApprovalSendUnknown,
            ) => self.send_approval(db, &operation).await,
            (
                Some(BindingStatus::MrCreating),
                StepStatus::Accepted | StepStatus::CalledBackApproved | StepStatus::MrCreating,
            ) => self.open_merge_request(db, &operation).await,
            (
                Some(BindingStatus::MrCreated),
                StepStatus::MrCreated | StepStatus::PipelinePending,
            ) => self.await_pipeline(db, &operation).await,
            (
                Some(BindingStatus::Merging),
                StepStatus::HandleStarted
                | StepStatus::CalledBackApproved
                | StepStatus::MergePending,
            ) => self.approve_and_merge(db, &operation).await,
            // A close walks the same MR steps while its binding stays CLOSING.
            (
                Some(BindingStatus::Closing),
                StepStatus::CloseRequested | StepStatus::CloseExpired,
            ) => self.open_merge_request(db, &operation).await,
            (
                Some(BindingStatus::Closing),
                StepStatus::CloseMrCreated | StepStatus::PipelinePending,
            ) => self.await_pipeline(db, &operation).await,
            (
                Some(BindingStatus::Closing),
                StepStatus::HandleStarted | StepStatus::MergePending,
            ) => self.approve_and_merge(db, &operation).await,
            // Waiting for a decision, a deploy, or an operator.
            (status, step) => {
                tracing::debug!(operation_id, ?status, %step, "no automatic step from here");
                return false;
            }
        };
        match outcome {
            Ok(()) => {
                // Go on only if the step moved the operation to something
                // other than an unknown outcome, which is waited out (by a
                // callback, or by a later run), not retried in a loop.
                let after = get_operation_with_status(db, operation_id)
                    .await
                    .ok()
                    .flatten();
                after.is_some_and(|(operation, status, _)| {
                    (status, operation.step) != before && !awaits_outcome(operation.step)
                })
            }
            Err(err) => {
                tracing::warn!(operation_id, "workflow step failed: {err}");
                false
            }
        }
    }
}

/// Steps whose outcome is unknown: the operation waits there.
fn awaits_outcome(step: StepStatus) -> bool {
    matches!(
        step,
        StepStatus::ApprovalSendUnknown
            | StepStatus::PipelinePending
            | StepStatus::RebasePending
            | StepStatus::MergePending
    )
}

impl Steps for Workflow {
    fn run(&self, operation_id: String) -> StepFuture {
        let workflow = self.clone();
        Box::pin(async move { workflow.run_steps(&operation_id).await })
    }
}
