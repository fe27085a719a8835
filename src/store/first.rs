//! The rows of first applies for relations, the common request: one
//! multi-row INSERT per table, written by a request alone
//! ([`submit`](super::submit::submit)) or by a group
//! ([`SubmissionQueue`](super::SubmissionQueue)).

use super::submit::{NewRequest, Submitted};
use super::{Flip, StoreError, event_payload};
use crate::db::Backend;
use crate::db::bindings::{BindingOwner, insert_bindings_statement};
use crate::db::events::{BINDING_STATUS_CHANGED, NewEvent, append_events_statement};
use crate::db::history::{NewHistory, append_history_statement};
use crate::db::idempotency::{NewIdempotency, insert_idempotency_statement};
use crate::db::is_unique_violation;
use crate::db::operations::{NewOperation, insert_operations_statement};
use crate::db::statement::Statement;
use crate::domain::{BindingStatus, StepStatus};

/// Which unique key a write claims, so that losing it is told apart from a
/// failure.
#[derive(Clone, Copy)]
pub(super) enum Claim {
    /// The relation's row: it exists, or another request just took it.
    Relation,
    /// The idempotency key.
    Key,
    /// The operation id.
    Operation,
    /// Nothing unique.
    Nothing,
}

impl Claim {
    /// What losing the key answers, or the failure as it is.
    pub(super) fn failed(self, err: sqlx::Error) -> StoreError {
        let lost = match self {
            Self::Relation => StoreError::Preempted,
            Self::Key => StoreError::DuplicateKey,
            Self::Operation => StoreError::DuplicateOperation,
            Self::Nothing => return StoreError::Db(err),
        };
        if is_unique_violation(&err) {
            lost
        } else {
            StoreError::Db(err)
        }
    }
}

/// What the rows of first applies are made of, owned, for the statements
/// to borrow.
pub(super) struct FirstApplies {
    operation_ids: Vec<String>,
    params: Vec<String>,
    starts: Vec<(BindingStatus, StepStatus)>,
    /// One flip per request, in order.
    pub(super) flips: Vec<Flip>,
    payloads: Vec<String>,
}

impl FirstApplies {
    pub(super) fn new(requests: &[&NewRequest]) -> Self {
        let operation_ids: Vec<String> = requests
            .iter()
            .map(|request| request.operation_id.as_string())
            .collect();
        let params = requests
            .iter()
            .map(|request| request.params.to_string())
            .collect();
        let starts: Vec<_> = requests.iter().map(|request| request.start()).collect();
        let flips: Vec<Flip> = requests
            .iter()
            .zip(&operation_ids)
            .zip(&starts)
            .map(|((request, operation_id), (status, _))| Flip {
                operation_id: operation_id.clone(),
                subject_id: request.subject_id.clone(),
                target_key: request.target_key.clone(),
                from: None,
                to: *status,
            })
            .collect();
        let payloads = flips
            .iter()
            .zip(&starts)
            .map(|(flip, (_, step))| event_payload(flip, *step))
            .collect();
        Self {
            operation_ids,
            params,
            starts,
            flips,
            payloads,
        }
    }

    /// One multi-row INSERT per table, each with the key it claims; the
    /// relations' rows first, so that when one exists only that statement
    /// runs before the rollback.
    pub(super) fn statements<'a>(
        &'a self,
        backend: Backend,
        requests: &[&'a NewRequest],
    ) -> Vec<(Claim, Statement<'a>)> {
        let rows = || requests.iter().zip(&self.operation_ids).zip(&self.starts);
        let mut statements = Vec::with_capacity(5);
        let bindings: Vec<(&str, &str, BindingOwner)> = rows()
            .zip(&self.params)
            .map(|(((request, operation_id), (status, _)), params)| {
                (
                    request.subject_id.as_str(),
                    request.target_key.as_str(),
                    BindingOwner {
                        operation_id,
                        status: *status,
                        requested_by: &request.requested_by,
                        params,
                        expires_at: request.expires_at,
                    },
                )
            })
            .collect();
        statements.push((Claim::Relation, insert_bindings_statement(&bindings)));
        let keys: Vec<NewIdempotency> = rows()
            .filter_map(|((request, operation_id), _)| {
                let claim = request.idempotency.as_ref()?;
                Some(NewIdempotency {
                    requester: &request.requested_by,
                    key: &claim.key,
                    request_hash: &claim.request_hash,
                    operation_id,
                    ttl_ms: claim.ttl_ms,
                })
            })
            .collect();
        if !keys.is_empty() {
            statements.push((Claim::Key, insert_idempotency_statement(backend, &keys)));
        }
        let operations: Vec<NewOperation> = rows()
            .zip(&self.params)
            .map(
                |(((request, operation_id), (_, step)), params)| NewOperation {
                    operation_id,
                    kind: request.kind,
                    subject_id: &request.subject_id,
                    target_key: &request.target_key,
                    requested_by: &request.requested_by,
                    flow_order: request.flow_order,
                    step: *step,
                    params,
                    reason: &request.reason,
                    expires_at: request.expires_at,
                    trace_parent: request.trace_parent.as_deref(),
                    not_before: request.controls.not_before,
                    urgent: request.controls.urgent,
                    revert_of: request.controls.revert_of.as_deref(),
                    restores_drift: request.controls.restores_drift,
                },
            )
            .collect();
        statements.push((
            Claim::Operation,
            insert_operations_statement(backend, &operations),
        ));
        let events: Vec<NewEvent> = rows()
            .zip(&self.payloads)
            .map(
                |(((request, operation_id), (status, _)), payload)| NewEvent {
                    event_type: BINDING_STATUS_CHANGED,
                    operation_id,
                    subject_id: &request.subject_id,
                    target_key: &request.target_key,
                    from_status: None,
                    to_status: *status,
                    payload,
                },
            )
            .collect();
        statements.push((Claim::Nothing, append_events_statement(&events)));
        let history: Vec<NewHistory> = rows()
            .map(|((request, operation_id), (status, step))| NewHistory {
                operation_id,
                from_step: None,
                to_step: *step,
                from_status: None,
                to_status: Some(*status),
                operation_version: 1,
                actor: &request.requested_by,
                message: None,
            })
            .collect();
        statements.push((Claim::Nothing, append_history_statement(&history)));
        statements
    }

    /// The answers, in order, once the statements committed.
    pub(super) fn submitted(&self) -> Vec<Submitted> {
        self.starts
            .iter()
            .map(|&(status, step)| Submitted {
                status,
                step,
                replaced: None,
            })
            .collect()
    }
}
