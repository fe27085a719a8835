//! The state store on every backend: guarded writes, re-apply in place,
//! flip-once, history, outbox events, after-commit effects and lookups.

mod concurrency;
mod group;
mod property;
mod queries;
mod retries;
mod script;
mod writes;

use changegate::config::resolve::FlowOrder;
use changegate::db::Db;
use changegate::domain::{BindingStatus, OperationId, OperationKind, StepStatus};
use changegate::store::{self, Change, Controls, NewRequest};

/// An apply request for `subject` on `target` by `subject` itself.
pub fn apply(subject: &str, target: &str) -> NewRequest {
    NewRequest {
        operation_id: OperationId::new(),
        kind: OperationKind::Apply,
        subject_id: subject.to_owned(),
        target_key: target.to_owned(),
        requested_by: subject.to_owned(),
        flow_order: FlowOrder::ApprovalFirst,
        params: serde_json::json!({ "enabled": true }),
        reason: "testing".to_owned(),
        expires_at: None,
        idempotency: None,
        busy: false,
        expired: false,
        trace_parent: None,
        controls: Controls::default(),
    }
}

/// A change by the test actor.
pub fn change(step: StepStatus) -> Change<'static> {
    Change {
        step,
        message: None,
        actor: "test",
    }
}

/// Submits and then walks the new operation through `path` with guarded
/// transitions; returns the operation id and its final version.
pub async fn drive(
    db: &Db,
    request: &NewRequest,
    path: &[(StepStatus, BindingStatus)],
) -> (String, i64) {
    store::submit(db, request).await.unwrap();
    let id = request.operation_id.as_string();
    let mut version = 1;
    for (step, status) in path {
        version = store::transition(db, &id, version, Some(*status), change(*step))
            .await
            .unwrap_or_else(|err| panic!("{step} / {status}: {err}"))
            .operation_version;
    }
    (id, version)
}

/// The steps from a new approval-first request to MERGED.
pub const TO_MERGED: &[(StepStatus, BindingStatus)] = &[
    (StepStatus::ApprovalSent, BindingStatus::ApprovalSent),
    (StepStatus::CalledBackApproved, BindingStatus::MrCreating),
    (StepStatus::MrCreated, BindingStatus::MrCreated),
    (StepStatus::HandleStarted, BindingStatus::Merging),
    (StepStatus::HandleMerged, BindingStatus::Merged),
];

/// The steps from a new request to REJECTED.
pub const TO_REJECTED: &[(StepStatus, BindingStatus)] = &[
    (StepStatus::ApprovalSent, BindingStatus::ApprovalSent),
    (StepStatus::CalledBackRejected, BindingStatus::Rejected),
];
