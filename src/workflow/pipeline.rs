//! The MR's pipeline: waited for (pass, fail, or an outcome still unknown
//! at the deadline), and run again when an operator retries a failed one.

use super::merge_request::{Outcome, bot, project_of};
use super::{Workflow, events};
use crate::config::resolve::FlowOrder;
use crate::db::Db;
use crate::db::operations::OperationRow;
use crate::db::outage::OutageClock;
use crate::domain::{BindingStatus, OperationKind, StepStatus};
use crate::store::StoreError;

impl Workflow {
    /// Reads the MR's pipeline once: pass → merging, fail → failed (contact
    /// the team); still running → polled again later (the operation stays
    /// where it is), until the deadline → pending (its outcome is unknown,
    /// keep waiting; it is still re-read now and then).
    pub(super) async fn await_pipeline(
        &self,
        db: &Db,
        operation: &OperationRow,
    ) -> Result<(), StoreError> {
        let settings = self.config.current();
        let (Ok(token), Some(iid)) = (bot(&settings), operation.mr_iid) else {
            return Ok(());
        };
        let project = project_of(&settings, operation);
        // The run that decided the step, recorded with it.
        let mut noted = Vec::new();
        let answer = self.gitlab.merge_request(token, project, iid).await;
        if let Ok(mr) = &answer {
            noted.extend(events::head_pipeline_run(mr));
        }
        let outcome = match answer {
            Ok(mr) if mr.state == "merged" => {
                Outcome::to(BindingStatus::Merging, StepStatus::HandleStarted)
            }
            Ok(mr) => match mr.head_pipeline.as_ref().map(|p| p.status.as_str()) {
                // MR first: the approval is asked for now, carrying the MR.
                Some("success") if operation.flow_order == FlowOrder::MrFirst => {
                    Outcome::to(BindingStatus::ApprovalSending, StepStatus::ApprovalSending)
                }
                Some("success") => Outcome::to(BindingStatus::Merging, StepStatus::HandleStarted),
                Some("failed" | "canceled") => Outcome {
                    status: Some(BindingStatus::CreateFailed),
                    step: StepStatus::CreatePipelineFailed,
                    message: Some(format!("the pipeline of MR !{iid} failed")),
                },
                _ if operation.step == StepStatus::PipelinePending
                    || !settings.polling.deadline_reached(operation.attempts) =>
                {
                    return self
                        .note_obstacle(db, operation, None, OutageClock::Stop)
                        .await;
                }
                _ => Outcome {
                    status: None,
                    step: StepStatus::PipelinePending,
                    message: Some(format!(
                        "the pipeline of MR !{iid} has not finished; its outcome is unknown"
                    )),
                },
            },
            Err(err) => {
                return self
                    .interrupted(
                        db,
                        operation,
                        &err,
                        BindingStatus::CreateFailed,
                        StepStatus::CreateFailed,
                    )
                    .await;
            }
        };
        self.settle_noting(db, operation, operation.version, outcome, &noted)
            .await
    }

    /// An operator's retry of a failed pipeline (SPEC §6, step 8 of the
    /// GitLab rules): the MR is read first. An open MR whose head pipeline
    /// failed or was canceled has it run again (`POST
    /// pipelines/:id/retry`, doc/api/pipelines.md), and the pipeline is
    /// waited for as before; one already running again (an earlier retry's
    /// answer was lost) is only waited for. A closed MR gets a new one; a
    /// merged one goes on to the merge step, which checks what landed.
    pub(super) async fn rerun_pipeline(
        &self,
        db: &Db,
        operation: &OperationRow,
    ) -> Result<(), StoreError> {
        let settings = self.config.current();
        let (Ok(token), Some(iid)) = (bot(&settings), operation.mr_iid) else {
            return Ok(());
        };
        let project = project_of(&settings, operation);
        let waiting_step = match operation.kind {
            OperationKind::Apply => StepStatus::MrCreated,
            OperationKind::Close => StepStatus::CloseMrCreated,
        };
        let mr = match self.gitlab.merge_request(token, project, iid).await {
            Ok(mr) => mr,
            Err(err) => {
                return self
                    .interrupted(
                        db,
                        operation,
                        &err,
                        BindingStatus::CreateFailed,
                        StepStatus::CreateFailed,
                    )
                    .await;
            }
        };
        let outcome = match (mr.state.as_str(), mr.head_pipeline.as_ref()) {
            ("merged", _) => Outcome::to(BindingStatus::Merging, StepStatus::HandleStarted),
            ("closed", _) => Outcome {
                status: match operation.kind {
                    OperationKind::Apply => Some(BindingStatus::MrCreating),
                    OperationKind::Close => None,
                },
                step: match operation.kind {
                    OperationKind::Apply => StepStatus::MrCreating,
                    OperationKind::Close => StepStatus::CloseRequested,
                },
                message: Some(format!("MR !{iid} was closed: opening a new one")),
            },
            (_, Some(pipeline)) if matches!(pipeline.status.as_str(), "failed" | "canceled") => {
                match self
                    .gitlab
                    .retry_pipeline(token, project, pipeline.id)
                    .await
                {
                    Ok(_) => Outcome {
                        status: None,
                        step: waiting_step,
                        message: Some(format!("pipeline #{} of MR !{iid} runs again", pipeline.id)),
                    },
                    // Whether it runs again is read from the MR next time.
                    Err(err) => {
                        return self
                            .interrupted(
                                db,
                                operation,
                                &err,
                                BindingStatus::CreateFailed,
                                StepStatus::CreatePipelineFailed,
                            )
                            .await;
                    }
                }
            }
            _ => Outcome {
                status: None,
                step: waiting_step,
                message: None,
            },
        };
        self.settle(db, operation, operation.version, outcome).await
    }
}
