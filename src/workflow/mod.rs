//! The long-running part of a request, run off the request path by a bounded
//! pool of workers (SPEC §6).

mod approval;
mod executor;

pub use executor::{Busy, Executor, Reservation, Steps};

use std::future::Future;
use std::pin::Pin;

use crate::clients::approval::ApprovalClient;
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
}

impl Workflow {
    /// Steps over the shared database, configuration and approval client.
    pub fn new(db: DbSlot, config: LiveConfig, approvals: ApprovalClient) -> Self {
        Self {
            db,
            config,
            approvals,
        }
    }

    async fn step(&self, operation_id: &str) {
        let Some(db) = self.db.get() else {
            return;
        };
        let (operation, status) = match get_operation_with_status(db, operation_id).await {
            Ok(Some((operation, status, _))) => (operation, status),
            Ok(None) => return,
            Err(err) => {
                tracing::warn!(operation_id, "cannot read the operation: {err}");
                return;
            }
        };
        let outcome = match (status, operation.step) {
            (
                Some(BindingStatus::ApprovalSending),
                StepStatus::Accepted
                | StepStatus::ApprovalSending
                | StepStatus::ApprovalSendUnknown,
            ) => self.send_approval(db, &operation).await,
            // The Merge Request steps are not automated yet: the operation
            // waits, visibly, at the step it reached.
            (status, step) => {
                tracing::debug!(operation_id, ?status, %step, "no automatic step from here");
                Ok(())
            }
        };
        if let Err(err) = outcome {
            tracing::warn!(operation_id, "workflow step failed: {err}");
        }
    }
}

impl Steps for Workflow {
    fn run(&self, operation_id: String) -> StepFuture {
        let workflow = self.clone();
        Box::pin(async move { workflow.step(&operation_id).await })
    }
}
