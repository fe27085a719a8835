//! Moving an operation (and the binding it owns) forward.

use super::{StoreError, StoreTx, count_flip, event_payload};
use crate::db::Db;
use crate::db::batch_queue::leave_waiting_set;
use crate::db::bindings::{BindingRow, lock_binding_of, update_binding_status};
use crate::db::events::{BINDING_STATUS_CHANGED, NewEvent, append_event};
use crate::db::history::{NewHistory, append_history};
use crate::db::operations::{OperationRow, lock_operation, update_operation_step};
use crate::domain::{BindingStatus, IN_MERGE_QUEUE, StepStatus, check_transition};
use crate::write_tx;

/// The operation side of a change: its new step, why, and who.
#[derive(Debug, Clone, Copy)]
pub struct Change<'a> {
    /// The operation's new step.
    pub step: StepStatus,
    /// Explanation shown to operators and requesters.
    pub message: Option<&'a str>,
    /// Who made the change (an identity, or the component for automatic steps).
    pub actor: &'a str,
}

/// A binding status that really changed, reported only to the caller that changed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flip {
    /// The operation that owns the binding.
    pub operation_id: String,
    /// Subject of the relation.
    pub subject_id: String,
    /// Target of the relation.
    pub target_key: String,
    /// Status before; `None` for a new relation.
    pub from: Option<BindingStatus>,
    /// Status after.
    pub to: BindingStatus,
}

/// Result of a [`transition`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transitioned {
    /// The operation's version after the write (the next expected version).
    pub operation_version: i64,
    /// The binding flip, when the status changed.
    pub flip: Option<Flip>,
}

/// Writes `change`, and moves the binding to `status` when given, if the
/// operation is still at `expected_version` (I6): one transaction over both
/// tables. A writer that read an older version gets [`StoreError::Preempted`]
/// and nothing is written. A transaction that lost a lock race is retried
/// ([`write_tx!`]).
pub async fn transition(
    db: &Db,
    operation_id: &str,
    expected_version: i64,
    status: Option<BindingStatus>,
    change: Change<'_>,
) -> Result<Transitioned, StoreError> {
    write_tx!(db, |tx| {
        transition_in(tx, operation_id, expected_version, status, change).await
    })
    .await
}

/// [`transition`] inside the caller's transaction.
pub async fn transition_in(
    tx: &mut StoreTx,
    operation_id: &str,
    expected_version: i64,
    status: Option<BindingStatus>,
    change: Change<'_>,
) -> Result<Transitioned, StoreError> {
    let operation = lock_operation(tx.db(), operation_id)
        .await?
        .ok_or(StoreError::NotFound)?;
    if operation.version != expected_version {
        return Err(StoreError::Preempted);
    }
    let binding = lock_binding_of(tx.db(), operation_id).await?;
    let moving = match (status, &binding) {
        (None, _) => None,
        // The operation no longer owns a binding: it was superseded by a re-apply.
        (Some(_), None) => return Err(StoreError::Preempted),
        (Some(to), Some(binding)) if binding.status == to => None,
        (Some(to), Some(binding)) => {
            check_transition(binding.status, to)?;
            Some((binding, to))
        }
    };
    let flip = write(tx, &operation, moving, change).await?;
    Ok(Transitioned {
        operation_version: expected_version + 1,
        flip,
    })
}

/// Flips the binding owned by `operation_id` from any status in `from` to
/// `to` exactly once among racing callers (I7): it locks operation then
/// binding, re-checks under the lock, and returns `Some` only to the caller
/// whose write changed the status. Everyone else gets `None` and must not
/// emit effects.
pub async fn flip(
    db: &Db,
    operation_id: &str,
    from: &[BindingStatus],
    to: BindingStatus,
    change: Change<'_>,
) -> Result<Option<Flip>, StoreError> {
    write_tx!(db, |tx| flip_in(tx, operation_id, from, to, change).await).await
}

/// [`flip`] inside the caller's transaction.
pub async fn flip_in(
    tx: &mut StoreTx,
    operation_id: &str,
    from: &[BindingStatus],
    to: BindingStatus,
    change: Change<'_>,
) -> Result<Option<Flip>, StoreError> {
    for status in from {
        check_transition(*status, to)?;
    }
    let operation = lock_operation(tx.db(), operation_id)
        .await?
        .ok_or(StoreError::NotFound)?;
    match lock_binding_of(tx.db(), operation_id).await? {
        Some(binding) if from.contains(&binding.status) => {
            write(tx, &operation, Some((&binding, to)), change).await
        }
        _ => Ok(None),
    }
}

/// Records `change` (a step, no status move) on the operation if the binding
/// it owns is in one of `when`; `false` when it is not (stale or superseded).
pub async fn note_in(
    tx: &mut StoreTx,
    operation_id: &str,
    when: &[BindingStatus],
    change: Change<'_>,
) -> Result<bool, StoreError> {
    let operation = lock_operation(tx.db(), operation_id)
        .await?
        .ok_or(StoreError::NotFound)?;
    match lock_binding_of(tx.db(), operation_id).await? {
        Some(binding) if when.contains(&binding.status) => {
            write(tx, &operation, None, change).await?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// The guarded writes of one change; the rows are locked by the caller.
pub(super) async fn write(
    tx: &mut StoreTx,
    operation: &OperationRow,
    moving: Option<(&BindingRow, BindingStatus)>,
    change: Change<'_>,
) -> Result<Option<Flip>, StoreError> {
    let id = operation.operation_id.as_str();
    let updated =
        update_operation_step(tx.db(), id, operation.version, change.step, change.message).await?;
    if updated != 1 {
        return Err(StoreError::Preempted);
    }
    let flip = match moving {
        None => None,
        Some((binding, to)) => {
            if update_binding_status(tx.db(), binding.id, binding.version, to).await? != 1 {
                return Err(StoreError::Preempted);
            }
            // A request leaving the merge queue's live set (force-failed,
            // abandoned) while it waits for a round leaves the waiting set
            // with it, so no later round claims and merges it.
            if binding.status == BindingStatus::MrCreating && !IN_MERGE_QUEUE.contains(&to) {
                leave_waiting_set(tx.db(), id).await?;
            }
            let flip = Flip {
                operation_id: id.to_owned(),
                subject_id: binding.subject_id.clone(),
                target_key: binding.target_key.clone(),
                from: Some(binding.status),
                to,
            };
            append_event(
                tx.db(),
                &NewEvent {
                    event_type: BINDING_STATUS_CHANGED,
                    operation_id: id,
                    subject_id: &flip.subject_id,
                    target_key: &flip.target_key,
                    from_status: flip.from,
                    to_status: to,
                    payload: &event_payload(&flip, change.step),
                },
            )
            .await?;
            count_flip(tx, &flip);
            Some(flip)
        }
    };
    append_history(
        tx.db(),
        &NewHistory {
            operation_id: id,
            from_step: Some(operation.step),
            to_step: change.step,
            from_status: flip.as_ref().and_then(|f| f.from),
            to_status: flip.as_ref().map(|f| f.to),
            operation_version: operation.version + 1,
            actor: change.actor,
            message: change.message,
        },
    )
    .await?;
    Ok(flip)
}
