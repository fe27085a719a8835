//! Withdrawing a scheduled removal (SPEC §12). A removal takes its binding
//! over when it is recorded, so withdrawing it before its time hands the
//! binding back to the request it took it from, in the status that request
//! left it (`VALIDATED`, `MERGED` or `CLOSE_FAILED`): one transaction of
//! guarded writes over both rows, in the fixed lock order operation →
//! binding.

use chrono::Utc;

use super::transition::write;
use super::{Change, StoreError, StoreTx};
use crate::db::Db;
use crate::db::bindings::lock_binding_of;
use crate::db::handback::{hand_back, replaced_request, status_replaced};
use crate::db::history::last_status;
use crate::db::operations::lock_operation;
use crate::domain::{BindingStatus, OperationKind, StepStatus, check_transition};
use crate::write_tx;

/// What withdrawing a removal came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemovalWithdrawal {
    /// Withdrawn: the binding is `owner`'s again, in `status`.
    HandedBack {
        /// The request that holds the binding again.
        owner: String,
        /// The status it left the binding in, and has again.
        status: BindingStatus,
    },
    /// It is not a removal waiting for its time (any more).
    NotScheduled,
    /// The binding's expiry has passed: it would only be removed again.
    Expired,
    /// The request it took the binding from cannot be told: none is
    /// recorded before it, or that request's last status is not the one the
    /// removal found.
    NoPredecessor,
}

/// Withdraws scheduled removal `removal_id` and hands its binding back, by
/// `actor`; its step message is `message(owner, status)`, of the request
/// that holds the binding again and its status.
pub async fn withdraw_removal(
    db: &Db,
    removal_id: &str,
    actor: &str,
    message: &(dyn Fn(&str, BindingStatus) -> String + Sync),
) -> Result<RemovalWithdrawal, StoreError> {
    write_tx!(db, |tx| withdraw_in(tx, removal_id, actor, message).await).await
}

async fn withdraw_in(
    tx: &mut StoreTx,
    removal_id: &str,
    actor: &str,
    message: &(dyn Fn(&str, BindingStatus) -> String + Sync),
) -> Result<RemovalWithdrawal, StoreError> {
    let removal = lock_operation(tx.db(), removal_id)
        .await?
        .ok_or(StoreError::NotFound)?;
    if removal.kind != OperationKind::Close || removal.step != StepStatus::Scheduled {
        return Ok(RemovalWithdrawal::NotScheduled);
    }
    let Some(binding) = lock_binding_of(tx.db(), removal_id)
        .await?
        .filter(|binding| binding.status == BindingStatus::Closing)
    else {
        return Ok(RemovalWithdrawal::NotScheduled);
    };
    if binding
        .expires_at
        .is_some_and(|at| at.and_utc() <= Utc::now())
    {
        return Ok(RemovalWithdrawal::Expired);
    }
    let Some((owner, status)) = predecessor(tx, removal_id).await? else {
        return Ok(RemovalWithdrawal::NoPredecessor);
    };
    check_transition(BindingStatus::Closing, status)?;
    let message = message(&owner, status);
    let change = Change {
        step: StepStatus::Withdrawn,
        message: Some(&message),
        actor,
    };
    // The removal's own move (its step, the binding's status, history and
    // event, as every change writes them), then the binding's owner.
    write(tx, &removal, Some((&binding, status)), change).await?;
    if hand_back(tx.db(), binding.id, binding.version + 1, removal_id, &owner).await? != 1 {
        return Err(StoreError::Preempted);
    }
    Ok(RemovalWithdrawal::HandedBack { owner, status })
}

/// The request `removal_id` took its binding from and the status it had
/// then, when the two agree (that request's last status is the one the
/// removal found); `None` otherwise.
async fn predecessor(
    tx: &mut StoreTx,
    removal_id: &str,
) -> Result<Option<(String, BindingStatus)>, StoreError> {
    let Some(owner) = replaced_request(tx.db(), removal_id).await? else {
        return Ok(None);
    };
    let found = status_replaced(tx.db(), removal_id).await?;
    let left = last_status(tx.db(), &owner).await?;
    let status = match (found, left) {
        (Some(found), Some(left)) if found == left => found.parse::<BindingStatus>().ok(),
        _ => None,
    };
    Ok(status
        .filter(|status| {
            matches!(
                status,
                BindingStatus::Validated | BindingStatus::Merged | BindingStatus::CloseFailed
            )
        })
        .map(|status| (owner, status)))
}
