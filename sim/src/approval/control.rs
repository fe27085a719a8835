//! The control API: methods on [`ApprovalControl`] that steer the simulator (callback URL,
//! policy, manual decisions, faults) and inspect what it received and sent. Tests call them
//! on the handle; the `/_sim` HTTP routes call the same methods.

use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};
use uuid::Uuid;

use super::announce::announce;
use super::faults::{ApprovalFault, ApprovalFaultKind};
use super::{ApprovalControl, Decision, DecisionPolicy};
use crate::callback::CallbackDelivery;

/// Why a control call could not be carried out.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ApprovalSimError {
    /// No approval was ever requested for this operation.
    #[error("no approval for operation {0}")]
    UnknownOperation(Uuid),
}

/// One `POST /approvals` as received, whatever became of it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReceivedRequest {
    /// The body, or `Null` when it was not JSON.
    pub body: Value,
    /// The status answered (for a lost response: the one withheld).
    pub status: u16,
    /// The request fault that hit it.
    pub fault: Option<ApprovalFaultKind>,
    /// The `traceparent` header it came with, if any (left out of the
    /// JSON when none, as before calls were traced).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// An approval as the control API reports it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ApprovalSnapshot {
    /// The id answered to the requester.
    pub approval_id: Uuid,
    /// changegate's operation id, the idempotency key.
    pub operation_id: Uuid,
    /// From the first request.
    pub subject_id: String,
    /// From the first request.
    pub target_key: String,
    /// From the first request.
    pub requested_by: String,
    /// From the first request.
    pub reason: String,
    /// From the first request.
    pub params: Map<String, Value>,
    /// From the first request; echoed in callbacks.
    pub ext: Option<Map<String, Value>>,
    /// Decisions sent so far, in order (an out-of-order fault's early one included).
    pub decisions: Vec<Decision>,
}

impl ApprovalControl {
    /// The `whsec_` secret callbacks are signed with.
    pub fn secret(&self) -> &str {
        self.ctx.0.sender.secret()
    }

    /// Sets where callbacks go, e.g. `http://127.0.0.1:PORT/callbacks/approval`.
    pub fn set_callback_url(&self, url: impl Into<String>) {
        self.ctx.lock().callback_url = Some(url.into());
    }

    /// Changes how approvals created from now on are decided.
    pub fn set_policy(&self, policy: DecisionPolicy) {
        self.ctx.lock().policy = policy;
    }

    /// Decides the approval of `operation` and delivers the callback (shaped by the next
    /// matching callback fault); returns once every attempt is answered, with the attempts.
    /// An approval may be decided more than once, as a withdrawal after an approval is.
    pub async fn decide(
        &self,
        operation: Uuid,
        result: Decision,
    ) -> Result<Vec<CallbackDelivery>, ApprovalSimError> {
        if self.approval(operation).is_none() {
            return Err(ApprovalSimError::UnknownOperation(operation));
        }
        Ok(announce(&self.ctx, operation, result).await)
    }

    /// Queues a fault (see [`ApprovalFaultKind`]).
    pub fn inject(&self, fault: ApprovalFault) {
        self.ctx.lock().faults.inject(fault);
    }

    /// Drops every queued fault.
    pub fn clear_faults(&self) {
        self.ctx.lock().faults.clear();
    }

    /// Every `POST /approvals` received, in order.
    pub fn requests(&self) -> Vec<ReceivedRequest> {
        self.ctx.lock().requests.clone()
    }

    /// Every approval requested, in creation order.
    pub fn approvals(&self) -> Vec<ApprovalSnapshot> {
        self.ctx.lock().approvals.clone()
    }

    /// The approval of `operation`, if one was requested.
    pub fn approval(&self, operation: Uuid) -> Option<ApprovalSnapshot> {
        let state = self.ctx.lock();
        let mut approvals = state.approvals.iter();
        approvals
            .find(|approval| approval.operation_id == operation)
            .cloned()
    }

    /// Every callback attempt so far, in order, with the status changegate answered.
    pub fn callbacks(&self) -> Vec<CallbackDelivery> {
        self.ctx.0.sender.log().snapshot()
    }

    /// Waits until at least `count` callback attempts were made or `timeout` passed, and
    /// returns them all.
    pub async fn wait_for_callbacks(
        &self,
        count: usize,
        timeout: Duration,
    ) -> Vec<CallbackDelivery> {
        self.ctx.0.sender.log().wait_for(count, timeout).await
    }
}
