//! `GET /api/v1/operations/{operationId}`: where a request is and what to do next.

use axum::Json;
use axum::extract::{Path, State};
use chrono::{NaiveDateTime, Utc};
use serde::Serialize;

use super::queue::QueueView;
use crate::batch::queue_estimate;
use crate::db::Db;
use crate::db::batches::InBatch;
use crate::db::drift::finding_of_binding;
use crate::db::history::last_status;
use crate::db::operations::{
    OperationPage, OperationRow, get_operation_page, get_operation_with_status, reverted_by,
};
use crate::db::train::batches_ahead;
use crate::domain::{
    AWAITING_APPROVAL, BindingStatus, IN_MERGE_QUEUE, Next, OperationId, OperationKind, StepStatus,
    next_action, operator,
};
use crate::http::error::{ApiError, ApiResult};
use crate::http::extract::{AuthUser, Database};
use crate::http::layers::authz::Authorized;
use crate::schedule::{Hold, hold};
use crate::state::AppState;

/// The status of one operation.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OperationView {
    operation_id: String,
    subject_id: String,
    target_key: String,
    /// Binding status (what the requester sees).
    status: String,
    step: StepView,
    /// `WAIT`, `CONTACT_TEAM`, `REAPPLY` or `NONE`.
    next: &'static str,
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    merge_request: Option<MergeRequestView>,
    /// The merge batch it is (or was last) in, when it went through the
    /// merge queue: its id, as `GET /admin/v1/batches/{batchId}` takes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    batch_id: Option<i64>,
    /// That batch's number among its project's batches (1, 2, 3, … without
    /// gaps), as its MR title and the messages name it.
    #[serde(skip_serializing_if = "Option::is_none")]
    batch_number: Option<i64>,
    /// While its batch is in the merge train: how many batches are ahead
    /// of it (0: it is the front, the next to merge).
    #[serde(skip_serializing_if = "Option::is_none")]
    batches_ahead: Option<i64>,
    /// While it waits on the merge queue: its place and expected times.
    #[serde(skip_serializing_if = "Option::is_none")]
    queue: Option<QueueView>,
    /// The earliest time it may land, as its requester asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    not_before: Option<String>,
    /// The same, as stored, to tell what it waits for.
    #[serde(skip)]
    #[schema(ignore)]
    not_before_at: Option<NaiveDateTime>,
    /// While it is `SCHEDULED`: what it waits for, and until when.
    #[serde(skip_serializing_if = "Option::is_none")]
    scheduled: Option<ScheduledView>,
    /// An operator sent it to the merge queue's urgent lane.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    urgent: bool,
    /// The request this one reverts.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<uuid::Uuid>)]
    revert_of: Option<String>,
    /// The newest request that reverts this one.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<uuid::Uuid>)]
    reverted_by: Option<String>,
    /// While it holds its binding and the drift job finds the binding's
    /// file on the target branch other than changegate wrote it.
    #[serde(skip_serializing_if = "Option::is_none")]
    drift: Option<DriftNote>,
    #[schema(value_type = String, format = DateTime)]
    created_at: String,
    #[schema(value_type = String, format = DateTime)]
    updated_at: String,
    /// The newer request for the same subject and target that took the
    /// binding over (a re-apply or a removal): this one's status is its
    /// last, and no longer what is live.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<uuid::Uuid>)]
    superseded_by: Option<String>,
    /// The operator actions that apply now (the operators' list only): the
    /// console offers no button that can only answer 409.
    #[serde(skip_serializing_if = "Option::is_none")]
    actions: Option<Vec<OperatorAction>>,
    /// The operator actions an operator may look for on this request that
    /// cannot succeed now, each with why (the operators' list only): the
    /// console shows them disabled, the reason on hover.
    #[serde(skip_serializing_if = "Option::is_none")]
    withheld_actions: Option<Vec<WithheldAction>>,
}

/// How the binding's file on the target branch differs from what
/// changegate wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftNote {
    /// `CHANGED` or `MISSING` (see `GET /admin/v1/drift`).
    kind: String,
    /// The file.
    path: String,
    /// Since when the drift job finds it so.
    #[schema(value_type = String, format = DateTime)]
    since: String,
    /// The commit that last changed the file then.
    #[serde(skip_serializing_if = "Option::is_none")]
    since_commit: Option<String>,
}

/// What a `SCHEDULED` request waits for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduledView {
    /// `NOT_BEFORE` (its requester's time), `WINDOW` (its target's next
    /// change window) or `NO_WINDOW` (none opens within a year).
    waits_for: &'static str,
    /// When it may land, if ever.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    until: Option<String>,
    /// In words.
    description: String,
}

impl ScheduledView {
    fn of(hold: Hold) -> Option<Self> {
        let waits_for = match hold {
            Hold::Free => return None,
            Hold::NotBefore(_) => "NOT_BEFORE",
            Hold::Window(_) => "WINDOW",
            Hold::NoWindow => "NO_WINDOW",
        };
        Some(Self {
            waits_for,
            until: hold.until().map(|at| rfc3339(at.naive_utc())),
            description: hold.describe(),
        })
    }
}

/// An operator action that cannot succeed now, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct WithheldAction {
    action: OperatorAction,
    reason: &'static str,
}

/// Why Approve and Reject are withheld from a request awaiting approval
/// when another system decides.
const DECIDED_OUTSIDE: &str =
    "the approval system decides this request (approval.provider is not \"builtin\")";

/// An operator action on an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum OperatorAction {
    /// `POST /admin/v1/operations/{id}/retry`.
    Retry,
    /// `POST /admin/v1/operations/{id}/fail`.
    Fail,
    /// `POST /admin/v1/approvals/{id}/approve` (built-in approval only).
    Approve,
    /// `POST /admin/v1/approvals/{id}/reject` (built-in approval only).
    Reject,
}

impl OperatorAction {
    /// What an operator may do to an operation of `kind` at `step` whose
    /// binding is `status` (`None`: it no longer owns its binding), with
    /// the built-in approval system deciding when `builtin_approval`.
    pub fn applicable(
        kind: OperationKind,
        status: Option<BindingStatus>,
        step: StepStatus,
        builtin_approval: bool,
    ) -> Vec<Self> {
        let Some(status) = status else {
            return Vec::new();
        };
        let mut actions = Vec::new();
        if operator::retry(kind, status, step).is_ok() {
            actions.push(Self::Retry);
        }
        if operator::force_fail(status).is_ok() {
            actions.push(Self::Fail);
        }
        if builtin_approval && AWAITING_APPROVAL.contains(&status) {
            actions.extend([Self::Approve, Self::Reject]);
        }
        actions
    }

    /// The actions that do not apply to the same request although an
    /// operator may look for them: Retry while it waits for a decision or a
    /// confirmation from outside, and Approve and Reject while it awaits a
    /// decision another system makes. A finished request withholds nothing:
    /// there is nothing left to do to it.
    pub fn withheld(
        kind: OperationKind,
        status: Option<BindingStatus>,
        step: StepStatus,
        builtin_approval: bool,
    ) -> Vec<WithheldAction> {
        let Some(status) = status else {
            return Vec::new();
        };
        let mut withheld = Vec::new();
        if let Err(reason @ operator::NotApplicable::WaitingOutside) =
            operator::retry(kind, status, step)
        {
            withheld.push(WithheldAction {
                action: Self::Retry,
                reason: reason.message(),
            });
        }
        if !builtin_approval && AWAITING_APPROVAL.contains(&status) {
            withheld.extend([Self::Approve, Self::Reject].map(|action| WithheldAction {
                action,
                reason: DECIDED_OUTSIDE,
            }));
        }
        withheld
    }
}

/// A step code and its name.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct StepView {
    code: i32,
    name: &'static str,
}

impl StepView {
    /// The view of `step`.
    pub fn of(step: StepStatus) -> Self {
        Self {
            code: step.code(),
            name: step.name(),
        }
    }
}

/// The Merge Request of an operation.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct MergeRequestView {
    iid: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<String>,
}

/// Database times are UTC; the API speaks RFC 3339 with milliseconds.
pub fn rfc3339(at: NaiveDateTime) -> String {
    at.and_utc()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The binding status of an operation (live, or the last one recorded once
/// a newer operation took the binding over) and the advice that follows.
pub async fn current_status(
    db: &Db,
    operation_id: &str,
) -> ApiResult<(Option<BindingStatus>, Next)> {
    let Some((operation, live, _)) = get_operation_with_status(db, operation_id).await? else {
        return Ok((None, Next::Wait));
    };
    let status = status_of(db, &operation, live).await?;
    Ok((
        status,
        status.map_or(Next::Wait, |s| next_action(s, operation.step)),
    ))
}

async fn status_of(
    db: &Db,
    operation: &OperationRow,
    live: Option<BindingStatus>,
) -> ApiResult<Option<BindingStatus>> {
    if live.is_some() {
        return Ok(live);
    }
    Ok(last_status(db, &operation.operation_id)
        .await?
        .and_then(|s| s.parse().ok()))
}

/// Whether `caller` may see `operation`: its requester, the owner of the
/// binding it acts on (an operator may have closed it), or an operator.
pub fn visible_to(
    caller: &Authorized,
    operation: &OperationRow,
    binding_owner: Option<&str>,
) -> bool {
    let me = caller.identity.as_str();
    operation.requested_by == me || binding_owner == Some(me) || caller.operator
}

/// Status of an operation. Another person's operation answers 404, as if it
/// did not exist; operators see every operation.
#[utoipa::path(get, path = "/api/v1/operations/{operationId}", tag = "requests",
    params(("operationId" = uuid::Uuid, Path, description = "The operation id")),
    responses((status = 200, description = "Where the operation is", body = OperationView),
        (status = 404, description = "NOT_FOUND: unknown, or not yours")))]
pub async fn get_operation_status(
    State(state): State<AppState>,
    AuthUser(caller): AuthUser,
    Database(db): Database,
    Path(operation_id): Path<String>,
) -> ApiResult<Json<OperationView>> {
    let id = OperationId::parse(&operation_id).map_err(|_| ApiError::NotFound)?;
    let page = get_operation_page(&db, &id.as_string())
        .await?
        .ok_or(ApiError::NotFound)?;
    if !visible_to(&caller, &page.operation, page.binding_owner.as_deref()) {
        return Err(ApiError::NotFound);
    }
    Ok(Json(view_of(&state, &db, page).await?))
}

/// Everything the status answer shows of `page`.
async fn view_of(state: &AppState, db: &Db, page: OperationPage) -> ApiResult<OperationView> {
    let status = status_of(db, &page.operation, page.status).await?;
    let successor = successor_of(&page.operation, page.superseded_by);
    let reverted_by = reverted_by(db, &page.operation.operation_id).await?;
    let drift = drift_of(state, db, &page.operation, page.status).await?;
    let view = OperationView::of(page.operation, status)
        .drifted(drift)
        .in_batch(page.batch)
        .superseded_by(successor)
        .scheduled(state)
        .reverted_by(reverted_by);
    Ok(view.in_merge_queue(state, db, status).await?)
}

/// The request that took `operation`'s binding over, of `holder` (the one
/// holding it now, when another): none for a withdrawn removal, which
/// handed the binding back to the request before it.
pub fn successor_of(operation: &OperationRow, holder: Option<String>) -> Option<String> {
    let handed_back =
        operation.kind == OperationKind::Close && operation.step == StepStatus::Withdrawn;
    holder.filter(|_| !handed_back)
}

/// The drift finding of the binding `operation` holds (`live`: its status),
/// if any.
pub(super) async fn drift_of(
    state: &AppState,
    db: &Db,
    operation: &OperationRow,
    live: Option<BindingStatus>,
) -> Result<Option<DriftNote>, sqlx::Error> {
    if live.is_none() {
        return Ok(None);
    }
    let finding = finding_of_binding(db, &operation.subject_id, &operation.target_key).await?;
    let Some(finding) = finding else {
        return Ok(None);
    };
    let settings = state.config.current();
    let since_commit = crate::drift::since_commit(db, &settings, &state.gitlab, &finding).await;
    Ok(Some(DriftNote {
        kind: finding.kind,
        path: finding.path,
        since: rfc3339(finding.since),
        since_commit,
    }))
}

/// The status answer of `operation_id`, for the caller that just acted on it.
pub(super) async fn operation_view(
    state: &AppState,
    db: &Db,
    operation_id: &str,
) -> ApiResult<OperationView> {
    let page = get_operation_page(db, operation_id)
        .await?
        .ok_or(ApiError::NotFound)?;
    view_of(state, db, page).await
}

impl OperationView {
    /// The same view, naming the merge batch the operation is in; what
    /// keeps that batch from progressing, if anything, is the message.
    pub fn in_batch(self, batch: Option<InBatch>) -> Self {
        let Some(batch) = batch else {
            return self;
        };
        Self {
            batch_id: Some(batch.id),
            batch_number: Some(batch.number),
            message: batch.obstacle.unwrap_or(self.message),
            ..self
        }
    }

    /// The same view, with how many batches are ahead of its batch in the
    /// merge train, and its place and expected times in the merge queue,
    /// while it waits there (`status` is its binding's).
    pub async fn in_merge_queue(
        self,
        state: &AppState,
        db: &Db,
        status: Option<BindingStatus>,
    ) -> Result<Self, sqlx::Error> {
        // A scheduled request has no place yet: its page says when it may.
        if !status.is_some_and(|s| IN_MERGE_QUEUE.contains(&s))
            || self.step.code == StepStatus::Scheduled.code()
        {
            return Ok(self);
        }
        // One snapshot, so that the batches ahead and the place agree.
        let mut snapshot = db.begin_read().await?;
        let batches_ahead = match self.batch_id {
            Some(batch) => batches_ahead(&mut snapshot, batch).await?,
            None => None,
        };
        let settings = state.config.current();
        let queue = queue_estimate(&mut snapshot, &settings, &self.operation_id)
            .await?
            .map(QueueView::from);
        snapshot.commit().await?;
        Ok(Self {
            batches_ahead,
            queue,
            ..self
        })
    }

    /// The same view for an operation whose relation `successor` took
    /// over: nothing is left to do about it (`next` is `NONE`), and its
    /// message says so.
    pub fn superseded_by(self, successor: Option<String>) -> Self {
        let Some(successor) = successor else {
            return self;
        };
        Self {
            next: Next::None.as_str(),
            message: format!(
                "superseded by request {successor}: a newer request for the same subject and target took the binding over"
            ),
            superseded_by: Some(successor),
            ..self
        }
    }

    /// The same view, saying what a `SCHEDULED` request waits for now.
    pub(super) fn scheduled(self, state: &AppState) -> Self {
        if self.step.code != StepStatus::Scheduled.code() {
            return self;
        }
        let settings = state.config.current();
        let not_before = self.not_before_at;
        let held = hold(&settings, &self.target_key, not_before, Utc::now());
        Self {
            scheduled: ScheduledView::of(held),
            ..self
        }
    }

    /// The same view, saying how its binding's file drifted, if it did.
    pub(super) fn drifted(self, drift: Option<DriftNote>) -> Self {
        Self { drift, ..self }
    }

    /// The same view, naming the newest request that reverts it.
    pub fn reverted_by(self, reverted_by: Option<String>) -> Self {
        Self {
            reverted_by,
            ..self
        }
    }

    /// The same view, listing the operator actions that apply.
    pub fn with_actions(self, actions: Vec<OperatorAction>, withheld: Vec<WithheldAction>) -> Self {
        Self {
            actions: Some(actions),
            withheld_actions: Some(withheld),
            ..self
        }
    }

    /// The view of `operation`, whose relation is (or was last) in `status`.
    pub fn of(operation: OperationRow, status: Option<BindingStatus>) -> Self {
        let next = status.map_or(Next::Wait, |s| next_action(s, operation.step));
        Self {
            operation_id: operation.operation_id,
            subject_id: operation.subject_id,
            target_key: operation.target_key,
            status: status.map_or_else(|| "UNKNOWN".to_owned(), |s| s.to_string()),
            step: StepView::of(operation.step),
            next: next.as_str(),
            message: operation
                .obstacle
                .or(operation.message)
                .unwrap_or_else(|| operation.step.description().to_owned()),
            merge_request: operation.mr_iid.map(|iid| MergeRequestView {
                iid,
                url: operation.mr_url,
            }),
            batch_id: None,
            batch_number: None,
            batches_ahead: None,
            queue: None,
            not_before: operation.not_before.map(rfc3339),
            not_before_at: operation.not_before,
            scheduled: None,
            urgent: operation.urgent,
            revert_of: operation.revert_of,
            reverted_by: None,
            drift: None,
            created_at: rfc3339(operation.created_at),
            updated_at: rfc3339(operation.updated_at),
            superseded_by: None,
            actions: None,
            withheld_actions: None,
        }
    }
}
