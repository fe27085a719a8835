//! The synchronous part of a submission (SPEC §6): validate, check the access
//! mode, resolve idempotency, record the request, hand it to the workers.

use axum::http::HeaderMap;
use chrono::{DateTime, SecondsFormat, SubsecRound, Utc};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::applications::Accepted;
use super::status::current_status;
use super::withdraw::withdraw;
use crate::config::resolve::FlowOrder;
use crate::config::resolve::{access_open, closed_by_configuration};
use crate::config::{Settings, TargetSettings};
use crate::db::bindings::{BindingRow, get_binding};
use crate::db::idempotency::{IdempotencyRow, delete_expired_key, get_idempotency};
use crate::db::operations::get_operation;
use crate::db::{Db, is_retryable_conflict};
use crate::domain::render::{canonical_json, valid_subject};
use crate::domain::{BindingStatus, OperationId, OperationKind, StepStatus, next_action};
use crate::files::params::FieldError;
use crate::files::template::TemplateContext;
use crate::http::error::{ApiError, ApiResult};
use crate::http::layers::authz::Authorized;
use crate::http::reason::{MAX_REQUEST_REASON_CHARS, checked_reason};
use crate::state::AppState;
use crate::store::{self, Controls, IdempotencyClaim, NewRequest, StoreError};
use crate::traces::propagation;
use crate::workflow::Reservation;

/// The idempotency header.
pub(super) const IDEMPOTENCY_KEY: &str = "idempotency-key";
const MAX_KEY_LEN: usize = 191;
const MAX_PARAMS_BYTES: usize = 8 * 1024;

/// A parsed apply or close request.
pub struct Submission {
    /// Apply or close.
    pub kind: OperationKind,
    /// Client-chosen operation id.
    pub operation_id: Option<String>,
    /// Target.
    pub target_key: String,
    /// Subject; default the caller.
    pub subject_id: Option<String>,
    /// Parameters.
    pub params: Option<Value>,
    /// Expiry.
    pub expires_at: Option<DateTime<Utc>>,
    /// The earliest time it may land.
    pub not_before: Option<DateTime<Utc>>,
    /// Reason.
    pub reason: String,
    /// When it reverts another request: which, and whether it is urgent.
    pub revert: Option<Revert>,
    /// An operator's restore of a drifted file (see src/drift).
    pub restores_drift: bool,
}

/// The request a submission reverts.
pub struct Revert {
    /// Its operation id.
    pub of: String,
    /// An operator submitted the revert as urgent.
    pub urgent: bool,
}

fn invalid(message: &str) -> ApiError {
    ApiError::InvalidArgument(message.to_owned())
}

/// Records a submission and starts its work.
pub async fn submit(
    state: &AppState,
    db: &Db,
    caller: &Authorized,
    headers: &HeaderMap,
    submission: Submission,
) -> ApiResult<Accepted> {
    let settings = state.config.current();
    let access = &settings.access;
    if !access_open(access.mode, &access.window, Utc::now()) {
        return Err(ApiError::ServiceClosed(closed_by_configuration(
            access.mode,
            &access.window,
        )));
    }
    let target = settings
        .targets
        .get(&submission.target_key)
        .ok_or_else(|| invalid("field `targetKey`: not in the catalog; see GET /api/v1/targets"))?;
    let request = validate(&settings, target, caller, headers, submission)?;
    let span = Span::current();
    if !span.is_disabled() {
        span.set_attribute("operation.id", request.operation_id.as_string());
    }
    may_use_target(state, &settings, target, caller).await?;
    if request.kind == OperationKind::Close {
        let binding = get_binding(db, &request.subject_id, &request.target_key).await?;
        // Only the binding's requester may remove it; anyone else learns
        // nothing about it.
        if !caller.operator
            && binding
                .as_ref()
                .is_some_and(|b| b.requested_by != caller.identity.as_str())
        {
            return Err(ApiError::NotFound);
        }
        if let Some(binding) = binding
            && let Some(cancelled) = cancel_scheduled(db, caller, &binding, &request.reason).await?
        {
            return Ok(cancelled);
        }
    }

    // A place for the work is taken before the request is recorded: with no
    // room, the request is recorded as busy in the same transaction.
    let reservation = state.executor.reserve();
    let request = NewRequest {
        busy: reservation.is_none(),
        ..request
    };
    // A repeated key is not looked up first: the common request is new, and
    // a repeat loses on the database's unique keys with nothing written.
    let mut outcome = state.submissions.submit(db, request.clone()).await;
    if let Some(claim) = &request.idempotency {
        let requester = &request.requested_by;
        if let Some(winner) = winner_of(db, requester, claim, &outcome).await? {
            return Ok(winner);
        }
        // The key was taken, yet no record holds it for this request: an
        // expired record the cleanup job has not removed yet (remove it), or
        // one removed since. Either way the key is free: try once more.
        if matches!(outcome, Err(StoreError::DuplicateKey)) {
            delete_expired_key(db, requester, &claim.key).await?;
            outcome = store::submit(db, &request).await;
            if let Some(winner) = winner_of(db, requester, claim, &outcome).await? {
                return Ok(winner);
            }
        }
    }
    match outcome {
        Ok(submitted) => Ok(accepted(&request, &submitted, reservation)),
        // The key's holder vanished twice over: nothing exists, the caller
        // may retry. Lost lock races never get here: the store retries them.
        Err(StoreError::DuplicateKey) => Err(ApiError::RetryLater),
        Err(StoreError::InProgress {
            status,
            operation_id,
        }) => Err(ApiError::InProgress {
            status,
            operation_id,
        }),
        Err(StoreError::Preempted) => Err(ApiError::BeingChanged),
        Err(StoreError::NotFound) => Err(ApiError::NotFound),
        Err(StoreError::DuplicateOperation) => Err(ApiError::IdempotencyKeyReused),
        Err(err) => Err(ApiError::internal(err)),
    }
}

fn validate(
    settings: &Settings,
    target: &TargetSettings,
    caller: &Authorized,
    headers: &HeaderMap,
    submission: Submission,
) -> ApiResult<NewRequest> {
    let Checked { request, refusals } = check(settings, target, caller, headers, submission);
    match (refusals.into_iter().next(), request) {
        (Some(first), _) => Err(first),
        (None, Some(request)) => Ok(request),
        (None, None) => Err(invalid("field `params`: must be a JSON object")),
    }
}

/// A submission's fields checked one by one: every refusal, in the order a
/// submit meets them (a submit answers the first), and the request as it
/// would be recorded whenever its subject and parameters are good (with a
/// fresh operation id, no expiry and an empty reason where those are not),
/// so a preview can render it.
pub(super) struct Checked {
    /// The request, when its file can be rendered.
    pub request: Option<NewRequest>,
    /// Every refusal, first to last.
    pub refusals: Vec<ApiError>,
}

/// A removal asked while the binding's apply waits for its time cancels
/// that apply (nothing of it is in the repository yet): the answer names
/// it, `WITHDRAWN`.
async fn cancel_scheduled(
    db: &Db,
    caller: &Authorized,
    binding: &BindingRow,
    reason: &str,
) -> ApiResult<Option<Accepted>> {
    if binding.status != BindingStatus::MrCreating {
        return Ok(None);
    }
    let waiting = get_operation(db, &binding.operation_id).await?;
    if waiting.is_none_or(|op| op.step != StepStatus::Scheduled) {
        return Ok(None);
    }
    let message = format!(
        "cancelled before its time by a removal request of {}: {reason}",
        caller.identity.as_str()
    );
    withdraw(
        db,
        &binding.operation_id,
        BindingStatus::MrCreating,
        &message,
        caller.identity.as_str(),
    )
    .await?;
    Ok(Some(Accepted {
        code: "WITHDRAWN",
        operation_id: binding.operation_id.clone(),
        status: BindingStatus::Abandoned.to_string(),
        next: next_action(BindingStatus::Abandoned, StepStatus::Withdrawn).as_str(),
    }))
}

/// Every check a submit makes of a submission's own fields.
pub(super) fn check(
    settings: &Settings,
    target: &TargetSettings,
    caller: &Authorized,
    headers: &HeaderMap,
    submission: Submission,
) -> Checked {
    let mut refusals = Vec::new();
    let subject = submission
        .subject_id
        .unwrap_or_else(|| caller.identity.as_str().to_owned());
    let subject_valid = valid_subject(&subject);
    if !subject_valid {
        refusals.push(invalid(
            "field `subjectId`: 1 to 128 letters, digits or . _ - @ +, not starting with a dot",
        ));
    }
    if target.self_only && subject != caller.identity.as_str() && !caller.operator {
        refusals.push(ApiError::Forbidden);
    }
    let submitted = canonical_json(&submission.params.unwrap_or_else(|| json!({})));
    // What is stored, and rendered on every re-run, has the defaults the
    // schema gave when the request was made.
    let params = if !submitted.is_object() {
        refusals.push(invalid("field `params`: must be a JSON object"));
        None
    } else if submitted.to_string().len() > MAX_PARAMS_BYTES {
        refusals.push(invalid("field `params`: larger than 8 KiB"));
        None
    } else {
        match submission.kind {
            OperationKind::Apply => match target.params.check(&submitted) {
                Ok(filled) => Some(canonical_json(&filled)),
                Err(fields) => {
                    refusals.push(ApiError::InvalidFields(fields));
                    None
                }
            },
            OperationKind::Close => Some(submitted.clone()),
        }
    };
    let reason = checked_reason(&submission.reason, MAX_REQUEST_REASON_CHARS)
        .map_err(|err| refusals.push(err))
        .unwrap_or_default();
    let expires_at = match submission.expires_at {
        Some(at) if at <= Utc::now() => {
            refusals.push(invalid("field `expiresAt`: must be in the future"));
            None
        }
        other => other,
    };
    let not_before = scheduled_time(settings, submission.kind, submission.not_before)
        .map_err(|err| refusals.push(err))
        .unwrap_or_default();
    let client_id = match submission.operation_id.as_deref().map(OperationId::parse) {
        Some(Err(_)) => {
            refusals.push(invalid("field `operationId`: must be a UUID"));
            None
        }
        Some(Ok(id)) => Some(id),
        None => None,
    };
    let operation_id = client_id.unwrap_or_default();
    let key = match headers.get(IDEMPOTENCY_KEY) {
        Some(value) => {
            let key = value.to_str().ok().map(str::trim).filter(|key| {
                !key.is_empty()
                    && key.len() <= MAX_KEY_LEN
                    && key.bytes().all(|b| (b' '..=b'~').contains(&b))
            });
            if key.is_none() {
                refusals.push(invalid(
                    "header `Idempotency-Key`: 1 to 191 visible ASCII characters",
                ));
            }
            key.map(str::to_owned)
        }
        None => client_id.map(|id| format!("operation:{id}")),
    };
    let Some(params) = params.filter(|_| subject_valid) else {
        return Checked {
            request: None,
            refusals,
        };
    };
    // Milliseconds, as both databases store it, so files render alike.
    let expires_at_utc = expires_at.map(|at| at.trunc_subsecs(3));
    let request_hash = hex_sha256(&json!({
        "kind": submission.kind.as_str(),
        "operationId": client_id.map(|id| id.as_string()),
        "targetKey": submission.target_key,
        "subjectId": subject,
        "params": submitted,
        "expiresAt": expires_at_utc.map(|at| at.to_rfc3339()),
        "notBefore": not_before.map(|at| at.to_rfc3339()),
        "revertOf": submission.revert.as_ref().map(|revert| revert.of.as_str()),
        "urgent": submission.revert.as_ref().is_some_and(|revert| revert.urgent),
        "restoresDrift": submission.restores_drift,
        "reason": reason,
    }));
    if submission.kind == OperationKind::Apply {
        let expires_at = expires_at_utc.map(|at| at.to_rfc3339_opts(SecondsFormat::Millis, true));
        if let Err(err) = writable(
            target,
            &TemplateContext {
                subject: &subject,
                target: &submission.target_key,
                params: &params,
                expires_at: expires_at.as_deref(),
                operation_id: &operation_id.as_string(),
                requested_by: caller.identity.as_str(),
            },
        ) {
            refusals.push(err);
        }
    }
    let ttl_ms = i64::try_from(settings.idempotency.ttl.as_millis()).unwrap_or(i64::MAX);
    let request = NewRequest {
        operation_id,
        kind: submission.kind,
        subject_id: subject,
        target_key: submission.target_key,
        requested_by: caller.identity.as_str().to_owned(),
        flow_order: settings.flow_order,
        params,
        reason,
        expires_at: expires_at_utc.map(|at| at.naive_utc()),
        idempotency: key.map(|key| IdempotencyClaim {
            key,
            request_hash,
            ttl_ms,
        }),
        busy: false,
        expired: false,
        trace_parent: propagation::current_trace_parent(),
        controls: Controls {
            not_before: not_before.map(|at| at.naive_utc()),
            urgent: submission
                .revert
                .as_ref()
                .is_some_and(|revert| revert.urgent),
            revert_of: submission.revert.map(|revert| revert.of),
            restores_drift: submission.restores_drift,
        },
    };
    Checked {
        request: Some(request),
        refusals,
    }
}

/// A request's `notBefore`, checked: in the future, at most
/// `scheduling.max_ahead` ahead, and, for an apply, only where it waits in
/// the merge queue (approval first, `batch.enabled`), the one place an
/// approved apply waits for its time. Kept to the millisecond, as both
/// databases store it.
fn scheduled_time(
    settings: &Settings,
    kind: OperationKind,
    not_before: Option<DateTime<Utc>>,
) -> ApiResult<Option<DateTime<Utc>>> {
    let Some(at) = not_before.map(|at| at.trunc_subsecs(3)) else {
        return Ok(None);
    };
    let now = Utc::now();
    if at <= now {
        return Err(invalid("field `notBefore`: must be in the future"));
    }
    let max_ahead =
        chrono::Duration::from_std(settings.scheduling.max_ahead).unwrap_or(chrono::Duration::MAX);
    if at - now > max_ahead {
        return Err(ApiError::InvalidArgument(format!(
            "field `notBefore`: at most {} ahead (scheduling.max_ahead)",
            humantime::format_duration(settings.scheduling.max_ahead)
        )));
    }
    let queued = settings.batch.enabled && settings.flow_order == FlowOrder::ApprovalFirst;
    if kind == OperationKind::Apply && !queued {
        return Err(invalid(
            "field `notBefore`: an apply can wait for its time only in the merge queue \
             (workflow.flow_order = \"APPROVAL_FIRST\" with batch.enabled)",
        ));
    }
    Ok(Some(at))
}

/// The request's file rendered once as the commit will render it: a
/// template that fails, or output that does not parse as the target's
/// format, refuses the request now, before approval, never a file GitLab
/// would receive broken.
fn writable(target: &TargetSettings, binding: &TemplateContext<'_>) -> ApiResult<()> {
    target.layout.write(binding).map(drop).map_err(|reason| {
        ApiError::InvalidFields(vec![FieldError {
            field: "params".to_owned(),
            message: format!("the file cannot be written with these parameters: {reason}"),
        }])
    })
}

/// A target with rule codes needs one of them (operators need none).
pub async fn may_use_target(
    state: &AppState,
    settings: &Settings,
    target: &TargetSettings,
    caller: &Authorized,
) -> ApiResult<()> {
    if target.rule_codes.is_empty() || caller.operator {
        return Ok(());
    }
    match state
        .permissions
        .granted(&settings.authz, &caller.identity, &target.rule_codes)
        .await
    {
        Ok(granted) if !granted.is_empty() => Ok(()),
        Ok(_) => Err(ApiError::Forbidden),
        Err(err) => {
            tracing::warn!("permission check failed; denying: {err}");
            Err(ApiError::Forbidden)
        }
    }
}

fn hex_sha256(value: &Value) -> String {
    Sha256::digest(value.to_string().as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// The answer of the request that holds the key, when `outcome` lost to it:
/// a concurrent duplicate may lose on the key, on the relation (its winner
/// already holds the row) or in a lock race.
async fn winner_of(
    db: &Db,
    requester: &str,
    claim: &IdempotencyClaim,
    outcome: &Result<store::Submitted, StoreError>,
) -> ApiResult<Option<Accepted>> {
    let lost_race = match outcome {
        Err(StoreError::DuplicateKey | StoreError::InProgress { .. } | StoreError::Preempted) => {
            true
        }
        Err(StoreError::Db(err)) => is_retryable_conflict(err),
        _ => false,
    };
    if !lost_race {
        return Ok(None);
    }
    match get_idempotency(db, requester, &claim.key).await? {
        Some(found) => replay(db, &found, &claim.request_hash).await.map(Some),
        None => Ok(None),
    }
}

/// The answer to a repeated key: the original operation, or 422 when the
/// key was used for a different request.
async fn replay(db: &Db, found: &IdempotencyRow, request_hash: &str) -> ApiResult<Accepted> {
    if found.request_hash != request_hash {
        return Err(ApiError::IdempotencyKeyReused);
    }
    duplicate_of(db, &found.operation_id).await
}

/// The `DUPLICATE_SUBMIT` answer naming `operation_id`, the request a
/// repeated key made, as it is now.
pub(super) async fn duplicate_of(db: &Db, operation_id: &str) -> ApiResult<Accepted> {
    let (status, next) = current_status(db, operation_id).await?;
    Ok(Accepted {
        code: "DUPLICATE_SUBMIT",
        operation_id: operation_id.to_owned(),
        status: status.map_or_else(|| "UNKNOWN".to_owned(), |s| s.to_string()),
        next: next.as_str(),
    })
}

/// The 202 answer, and the hand-off to the workers in the place reserved
/// before the request was recorded.
fn accepted(
    request: &NewRequest,
    submitted: &store::Submitted,
    reservation: Option<Reservation>,
) -> Accepted {
    let operation_id = request.operation_id.as_string();
    if let Some(reservation) = reservation {
        reservation.send(operation_id.clone());
    }
    Accepted {
        code: "ACCEPTED",
        operation_id,
        status: submitted.status.to_string(),
        next: next_action(submitted.status, submitted.step).as_str(),
    }
}
