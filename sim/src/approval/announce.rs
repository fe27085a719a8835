//! Sending decisions: turns one decision into the callbacks a callback fault calls for
//! (duplicated, late, preceded by a stale one, badly signed) and delivers them in order.

use serde_json::{Value, json};
use uuid::Uuid;

use super::faults::ApprovalFaultKind;
use super::{Decision, DecisionPolicy, SimContext};
use crate::callback::CallbackDelivery;

/// Schedules the policy's decision for a new approval (nothing under `Manual`).
pub(super) fn schedule(ctx: &SimContext, operation: Uuid, policy: DecisionPolicy) {
    let DecisionPolicy::Auto { result, delay } = policy else {
        return;
    };
    let task_ctx = ctx.clone();
    ctx.spawn(async move {
        tokio::time::sleep(delay).await;
        announce(&task_ctx, operation, result).await;
    });
}

/// Records `result` for the approval of `operation` and delivers its callback, shaped by the
/// next matching callback fault; returns every delivery attempt made. The approval must
/// exist.
pub(super) async fn announce(
    ctx: &SimContext,
    operation: Uuid,
    result: Decision,
) -> Vec<CallbackDelivery> {
    let (fault, ext) = {
        let mut state = ctx.lock();
        let fault = state.faults.take_callback(operation);
        let ext = state
            .approvals
            .iter()
            .find(|approval| approval.operation_id == operation)
            .and_then(|approval| approval.ext.clone());
        (fault, ext)
    };
    if let Some(fault) = fault {
        tracing::debug!(%operation, ?fault, "approval simulator shapes a callback");
    }
    let mut sends = Vec::new();
    if let Some(ApprovalFaultKind::OutOfOrder { first }) = fault {
        sends.push(first);
    }
    sends.push(result);
    if let Some(ApprovalFaultKind::LateCallback(delay)) = fault {
        tokio::time::sleep(delay).await;
    }
    let copies = if fault == Some(ApprovalFaultKind::DuplicateCallback) {
        2
    } else {
        1
    };
    let bad_signature = fault == Some(ApprovalFaultKind::BadSignature);
    let lost = fault == Some(ApprovalFaultKind::LostCallback);
    let mut attempts = Vec::new();
    for decision in sends {
        let callback_id = Uuid::new_v4();
        let mut body = json!({
            "callbackId": callback_id.to_string(),
            "operationId": operation.to_string(),
            "result": decision,
        });
        if let Some(ext) = &ext {
            body["ext"] = Value::Object(ext.clone());
        }
        let url = {
            let mut state = ctx.lock();
            let approval = state
                .approvals
                .iter_mut()
                .find(|approval| approval.operation_id == operation);
            if let Some(approval) = approval {
                approval.decisions.push(decision);
            }
            state.callback_url.clone()
        };
        if lost {
            tracing::debug!(%operation, "approval simulator loses the callback");
            continue;
        }
        for _ in 0..copies {
            let sent = ctx
                .0
                .sender
                .send(url.as_deref(), callback_id, &body, bad_signature);
            attempts.extend(sent.await);
        }
    }
    attempts
}
