//! Recording a new request: a new relation, a re-apply that resets the
//! relation's row in place (I5), or a close of a live binding.

use chrono::NaiveDateTime;

use super::first::{Claim, FirstApplies};
use super::{
    Change, Flip, StoreError, StoreTx, count_committed_flip, count_flip, event_payload,
    transition_in,
};
use crate::config::resolve::FlowOrder;
use crate::db::bindings::{BindingOwner, BindingRow, get_binding, insert_binding, reset_binding};
use crate::db::events::{BINDING_STATUS_CHANGED, NewEvent, append_event};
use crate::db::history::{NewHistory, append_history};
use crate::db::idempotency::{NewIdempotency, insert_idempotency};
use crate::db::operations::{NewOperation, insert_operation};
use crate::db::{Db, is_unique_violation, retrying, script};
use crate::domain::{BindingStatus, OperationId, OperationKind, StepStatus, check_transition};

/// A validated request to record.
#[derive(Debug, Clone)]
pub struct NewRequest {
    /// The new operation's id.
    pub operation_id: OperationId,
    /// Apply or close.
    pub kind: OperationKind,
    /// Subject.
    pub subject_id: String,
    /// Target.
    pub target_key: String,
    /// Canonical identity of the requester.
    pub requested_by: String,
    /// The order this request will follow to the end.
    pub flow_order: FlowOrder,
    /// Parameters.
    pub params: serde_json::Value,
    /// Reason.
    pub reason: String,
    /// Expiry of the binding.
    pub expires_at: Option<NaiveDateTime>,
    /// The idempotency key to claim with the operation, if the caller sent one.
    pub idempotency: Option<IdempotencyClaim>,
    /// The workers had no room: the request is recorded and, in the same
    /// transaction, refused as busy (re-appliable), never left "processing".
    pub busy: bool,
    /// A close that changegate opens itself because the binding expired.
    pub expired: bool,
    /// The W3C traceparent of the request that submits it, kept with the
    /// operation so that its later work joins that trace.
    pub trace_parent: Option<String>,
    /// What the requester (or an operator) asked beyond the file.
    pub controls: Controls,
}

/// When a request may land, whether it jumps the queue, and what it
/// reverts (SPEC §12).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Controls {
    /// The earliest time it may land (UTC).
    pub not_before: Option<NaiveDateTime>,
    /// Goes in the urgent lane (an operator's revert).
    pub urgent: bool,
    /// The request it reverts.
    pub revert_of: Option<String>,
    /// An operator's restore of a drifted file: it takes over the live
    /// binding it writes again.
    pub restores_drift: bool,
}

/// An idempotency key, claimed in the same transaction as the operation so
/// that the key exists exactly when the operation does.
#[derive(Debug, Clone)]
pub struct IdempotencyClaim {
    /// The key (owned by the requester).
    pub key: String,
    /// SHA-256 (hex) of the canonical request.
    pub request_hash: String,
    /// Lifetime in milliseconds.
    pub ttl_ms: i64,
}

/// A recorded request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submitted {
    /// The binding's first status for this operation.
    pub status: BindingStatus,
    /// The operation's first step.
    pub step: StepStatus,
    /// The relation's status before, when an existing row was taken over.
    pub replaced: Option<BindingStatus>,
}

impl NewRequest {
    /// Where the binding and the operation start.
    pub(super) fn start(&self) -> (BindingStatus, StepStatus) {
        match (self.kind, self.flow_order) {
            (OperationKind::Close, _) if self.expired => {
                (BindingStatus::Closing, StepStatus::CloseExpired)
            }
            (OperationKind::Close, _) => (BindingStatus::Closing, StepStatus::CloseRequested),
            (OperationKind::Apply, FlowOrder::ApprovalFirst) => {
                (BindingStatus::ApprovalSending, StepStatus::Accepted)
            }
            (OperationKind::Apply, FlowOrder::MrFirst) => {
                (BindingStatus::MrCreating, StepStatus::Accepted)
            }
        }
    }

    /// Whether a row in `status` may be taken over by this request: a
    /// restore of a drifted file takes over the live binding it writes again.
    fn may_replace(&self, status: BindingStatus) -> bool {
        may_replace(self.kind, status)
            || (self.controls.restores_drift && status == BindingStatus::Validated)
    }
}

/// Whether a request of `kind` may take over a binding in `status` (a
/// preview asks the same question as the submit).
pub fn may_replace(kind: OperationKind, status: BindingStatus) -> bool {
    match kind {
        OperationKind::Apply => status.is_reappliable(),
        // A close that failed may be requested again.
        OperationKind::Close => matches!(
            status,
            BindingStatus::Merged | BindingStatus::Validated | BindingStatus::CloseFailed
        ),
    }
}

/// Records `request`. A first apply for a relation, the common case, is
/// written without reading the relation first (`write_first_apply`).
/// Otherwise the row is read without a lock and the write names exactly the
/// status and version read, so of several concurrent submissions for one
/// relation exactly one wins and the others get [`StoreError::Preempted`]
/// with nothing written.
///
/// A submission that lost a lock race is recorded again from the start,
/// reading the relation anew ([`retrying`]): the caller never sees one.
pub async fn submit(db: &Db, request: &NewRequest) -> Result<Submitted, StoreError> {
    retrying(|| submit_once(db, request)).await
}

async fn submit_once(db: &Db, request: &NewRequest) -> Result<Submitted, StoreError> {
    let (status, step) = request.start();
    if request.kind == OperationKind::Apply {
        match write_first_apply(db, request, status, step).await {
            Err(StoreError::Preempted) => {}
            other => return other,
        }
    }

    let existing = get_binding(db, &request.subject_id, &request.target_key).await?;
    match &existing {
        None if request.kind == OperationKind::Close => return Err(StoreError::NotFound),
        Some(row) if !request.may_replace(row.status) => {
            return Err(StoreError::InProgress {
                status: row.status,
                operation_id: row.operation_id.clone(),
            });
        }
        Some(row) => check_transition(row.status, status)?,
        None => {}
    }

    let mut tx = StoreTx::begin(db).await?;
    let outcome = record(&mut tx, request, existing.as_ref(), status, step).await;
    tx.finish(outcome).await
}

/// Writes a first apply for a relation, expecting it has no row. The
/// binding INSERT comes first, so when the row exists only that statement
/// ran before the rollback ([`StoreError::Preempted`]). On MySQL (not a
/// Galera node: [`Db::script_pool`]) the writes go as one [`script`] (one
/// round trip instead of seven).
async fn write_first_apply(
    db: &Db,
    request: &NewRequest,
    status: BindingStatus,
    step: StepStatus,
) -> Result<Submitted, StoreError> {
    let rows = FirstApplies::new(&[request]);
    let writes = rows.statements(db.backend(), &[request]);
    let flip = &rows.flips[0];

    if let Some(pool) = db.script_pool()
        && !request.busy
    {
        let (claims, statements): (Vec<Claim>, Vec<_>) = writes.into_iter().unzip();
        script::run_transaction(pool, &statements)
            .await
            .map_err(|failure| {
                let claim = failure
                    .statement
                    .and_then(|index| claims.get(index).copied());
                claim.unwrap_or(Claim::Nothing).failed(failure.error)
            })?;
        count_committed_flip(flip.from, flip.to);
        return Ok(Submitted {
            status,
            step,
            replaced: None,
        });
    }

    let mut tx = StoreTx::begin(db).await?;
    let outcome = async {
        for (claim, statement) in writes {
            statement
                .execute(tx.db())
                .await
                .map_err(|err| claim.failed(err))?;
        }
        count_flip(&mut tx, flip);
        refuse_if_busy(&mut tx, request, flip, status, step).await
    }
    .await;
    tx.finish(outcome).await
}

/// The writes of [`submit`] for a relation whose row was read, inside its
/// transaction: keys first, so that a reused key or operation id is
/// answered as such, not as a lost race for the relation.
async fn record(
    tx: &mut StoreTx,
    request: &NewRequest,
    existing: Option<&BindingRow>,
    status: BindingStatus,
    step: StepStatus,
) -> Result<Submitted, StoreError> {
    let operation_id = request.operation_id.as_string();
    let params = request.params.to_string();
    // A close keeps the applicant as the binding's requester, so the binding
    // stays in the applicant's list; the closer is on the operation.
    let (requested_by, binding_params, expires_at) = match (existing, request.kind) {
        (Some(row), OperationKind::Close) => (
            row.requested_by.as_str(),
            row.params.as_str(),
            row.expires_at,
        ),
        _ => (
            request.requested_by.as_str(),
            params.as_str(),
            request.expires_at,
        ),
    };
    let owner = BindingOwner {
        operation_id: &operation_id,
        status,
        requested_by,
        params: binding_params,
        expires_at,
    };
    let new_operation = NewOperation {
        operation_id: &operation_id,
        kind: request.kind,
        subject_id: &request.subject_id,
        target_key: &request.target_key,
        requested_by: &request.requested_by,
        flow_order: request.flow_order,
        step,
        params: &params,
        reason: &request.reason,
        expires_at: request.expires_at,
        trace_parent: request.trace_parent.as_deref(),
        not_before: request.controls.not_before,
        urgent: request.controls.urgent,
        revert_of: request.controls.revert_of.as_deref(),
        restores_drift: request.controls.restores_drift,
    };
    claim_ids(tx, request, &new_operation).await?;
    claim_relation(tx, request, existing, &owner).await?;

    let flip = Flip {
        operation_id: operation_id.clone(),
        subject_id: request.subject_id.clone(),
        target_key: request.target_key.clone(),
        from: existing.map(|row| row.status),
        to: status,
    };
    append_event(
        tx.db(),
        &NewEvent {
            event_type: BINDING_STATUS_CHANGED,
            operation_id: &operation_id,
            subject_id: &request.subject_id,
            target_key: &request.target_key,
            from_status: flip.from,
            to_status: status,
            payload: &event_payload(&flip, step),
        },
    )
    .await?;
    append_history(
        tx.db(),
        &first_history(request, &operation_id, flip.from, status, step),
    )
    .await?;
    count_flip(tx, &flip);
    refuse_if_busy(tx, request, &flip, status, step).await
}

/// The operation's first history entry.
fn first_history<'a>(
    request: &'a NewRequest,
    operation_id: &'a str,
    from: Option<BindingStatus>,
    status: BindingStatus,
    step: StepStatus,
) -> NewHistory<'a> {
    NewHistory {
        operation_id,
        from_step: None,
        to_step: step,
        from_status: from,
        to_status: Some(status),
        operation_version: 1,
        actor: &request.requested_by,
        message: None,
    }
}

/// A request the workers had no room for is refused in its own
/// transaction, re-appliable, never left "processing".
async fn refuse_if_busy(
    tx: &mut StoreTx,
    request: &NewRequest,
    flip: &Flip,
    status: BindingStatus,
    step: StepStatus,
) -> Result<Submitted, StoreError> {
    if !request.busy {
        return Ok(Submitted {
            status,
            step,
            replaced: flip.from,
        });
    }
    let refused = match request.kind {
        OperationKind::Apply => BindingStatus::BusyRejected,
        OperationKind::Close => BindingStatus::CloseFailed,
    };
    let change = Change {
        step: StepStatus::BusyRejected,
        message: Some("changegate was too busy to start this request; submit it again"),
        actor: "executor",
    };
    transition_in(tx, &flip.operation_id, 1, Some(refused), change).await?;
    metrics::counter!("changegate_executor_rejected_total").increment(1);
    Ok(Submitted {
        status: refused,
        step: StepStatus::BusyRejected,
        replaced: flip.from,
    })
}

/// Inserts the relation's row, or takes over the row read.
async fn claim_relation(
    tx: &mut StoreTx,
    request: &NewRequest,
    existing: Option<&BindingRow>,
    owner: &BindingOwner<'_>,
) -> Result<(), StoreError> {
    match existing {
        None => {
            let inserted =
                insert_binding(tx.db(), &request.subject_id, &request.target_key, owner).await;
            match inserted {
                Err(err) if is_unique_violation(&err) => Err(StoreError::Preempted),
                other => Ok(other?),
            }
        }
        Some(BindingRow {
            id,
            status: read_status,
            version,
            ..
        }) => {
            if reset_binding(tx.db(), *id, *read_status, *version, owner).await? != 1 {
                return Err(StoreError::Preempted);
            }
            Ok(())
        }
    }
}

/// Inserts the idempotency record, if any, and the operation: either taken
/// already is an answer of its own.
async fn claim_ids(
    tx: &mut StoreTx,
    request: &NewRequest,
    operation: &NewOperation<'_>,
) -> Result<(), StoreError> {
    if let Some(claim) = &request.idempotency {
        let claimed = insert_idempotency(
            tx.db(),
            &NewIdempotency {
                requester: &request.requested_by,
                key: &claim.key,
                request_hash: &claim.request_hash,
                operation_id: operation.operation_id,
                ttl_ms: claim.ttl_ms,
            },
        )
        .await;
        match claimed {
            Err(err) if is_unique_violation(&err) => return Err(StoreError::DuplicateKey),
            other => other?,
        }
    }
    match insert_operation(tx.db(), operation).await {
        Err(err) if is_unique_violation(&err) => Err(StoreError::DuplicateOperation),
        other => Ok(other?),
    }
}
