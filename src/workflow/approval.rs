//! The first step of the approval-first flow: ask for approval (SPEC §6).
//! SENDING is written before the call and SENT after it, so a decision that
//! arrives before the SENT write is still accepted by the callback guard.

use crate::clients::approval::{ApprovalError, ApprovalRequest};
use crate::config::ApprovalProvider;
use crate::config::Settings;
use crate::db::Db;
use crate::db::operations::OperationRow;
use crate::domain::ApprovalDecision;
use crate::domain::{BindingStatus, StepStatus};
use crate::store::{self, Change, StoreError, apply_decision};
use crate::write_tx;

use super::Workflow;

const ACTOR: &str = "workflow";

impl Workflow {
    /// Sends the approval request of `operation` (its binding is APPROVAL_SENDING).
    pub(super) async fn send_approval(
        &self,
        db: &Db,
        operation: &OperationRow,
    ) -> Result<(), StoreError> {
        let settings = self.config.current();
        if let Some(why) = approved_by_configuration(&settings, operation) {
            return approve_without_asking(db, &settings, operation, &why).await;
        }
        let id = operation.operation_id.as_str();
        let sending = Change {
            step: StepStatus::ApprovalSending,
            message: None,
            actor: ACTOR,
        };
        let version = store::transition(db, id, operation.version, None, sending)
            .await?
            .operation_version;

        let (status, step, message) = match settings.approval.provider {
            ApprovalProvider::Builtin => (
                Some(BindingStatus::ApprovalSent),
                StepStatus::ApprovalSent,
                Some("waiting for an operator's decision".to_owned()),
            ),
            ApprovalProvider::Http => {
                let params: serde_json::Value = serde_json::from_str(&operation.params)
                    .unwrap_or_else(|_| serde_json::json!({}));
                let request = ApprovalRequest {
                    operation_id: id,
                    subject_id: &operation.subject_id,
                    target_key: &operation.target_key,
                    requested_by: &operation.requested_by,
                    reason: &operation.reason,
                    params: &params,
                    ext: operation
                        .mr_iid
                        .map(|iid| serde_json::json!({ "mrId": iid })),
                };
                let approval = &settings.approval;
                match self.approvals.request(&approval.url, approval.timeout, approval.retries, &request).await {
                    Ok(()) => (Some(BindingStatus::ApprovalSent), StepStatus::ApprovalSent, None),
                    // Deterministic or persistent: waiting will not help.
                    Err(err @ (ApprovalError::Refused(_) | ApprovalError::Unavailable(_))) => {
                        tracing::warn!(operation_id = id, "approval request failed: {err}");
                        (Some(BindingStatus::CreateFailed), StepStatus::ApprovalSendFailed, Some(err.to_string()))
                    }
                    // It may have arrived: keep waiting for its callback.
                    Err(ApprovalError::Timeout) => (
                        None,
                        StepStatus::ApprovalSendUnknown,
                        Some("the approval system did not answer in time; its decision may still come".to_owned()),
                    ),
                }
            }
        };
        let change = Change {
            step,
            message: message.as_deref(),
            actor: ACTOR,
        };
        match store::transition(db, id, version, status, change).await {
            Ok(_) => Ok(()),
            // The decision's callback got there first (seed 004, 3.3): it wins.
            Err(StoreError::Preempted) => {
                tracing::debug!(
                    operation_id = id,
                    "the approval decision arrived before the SENT write"
                );
                Ok(())
            }
            Err(err) => Err(err),
        }
    }
}

/// Why the configuration approves `operation` without asking, if it does:
/// a revert of a target whose `revert_requires_approval` is false, or an
/// operator's restore of a drifted file with `drift.restore_requires_approval`
/// false.
fn approved_by_configuration(settings: &Settings, operation: &OperationRow) -> Option<String> {
    if operation.revert_of.is_some()
        && settings
            .targets
            .get(&operation.target_key)
            .is_some_and(|target| !target.revert_requires_approval)
    {
        return Some(format!(
            "a revert: approved without asking, as targets.{}.revert_requires_approval is false",
            operation.target_key
        ));
    }
    (operation.restores_drift && !settings.drift.restore_requires_approval).then(|| {
        "an operator's restore of a drifted file: approved without asking, as \
         drift.restore_requires_approval is false"
            .to_owned()
    })
}

/// A request the configuration approves: approved by changegate itself, and
/// on its way as any approved request.
async fn approve_without_asking(
    db: &Db,
    settings: &Settings,
    operation: &OperationRow,
    message: &str,
) -> Result<(), StoreError> {
    write_tx!(db, |tx| {
        apply_decision(
            tx,
            settings,
            operation,
            ApprovalDecision::Approved,
            ACTOR,
            Some(message),
        )
        .await
        .map(drop)
    })
    .await
}
