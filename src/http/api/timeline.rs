//! `GET /api/v1/operations/{operationId}/timeline`: an operation with every
//! step it went through, oldest first, and the other requests of its
//! relation, so a person can see what happened, when, and what is live now.

use axum::Json;
use axum::extract::{Path, State};
use serde::Serialize;

use super::status::{OperationView, StepView, drift_of, rfc3339, successor_of, visible_to};
use crate::db::operation_snapshot::{OperationSnapshot, read_operation_snapshot};
use crate::db::operations::reverted_by;
use crate::domain::{OperationId, StepStatus};
use crate::http::error::{ApiError, ApiResult};
use crate::http::extract::{AuthUser, Database};
use crate::state::AppState;

/// What a timeline entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EntryKind {
    /// A step of the request.
    Step,
    /// A run of its MR's pipeline finished (`detail`: its status; `url`: its page).
    Pipeline,
    /// A reviewer bot approved its MR (`detail`: the bot's number).
    Approval,
    /// Its MR's branch was rebased onto the target.
    Rebase,
    /// Its MR was merged (`detail`: the commit's sha; `url`: its page).
    Merge,
    /// The deploy was confirmed: by the deploy pipeline, or by the
    /// reconciliation that stood in for it (the message says which).
    Deploy,
}

impl EntryKind {
    fn of(event: Option<&str>, step: StepStatus) -> Self {
        match (event, step) {
            (Some("PIPELINE"), _) => Self::Pipeline,
            (Some("APPROVAL"), _) => Self::Approval,
            (Some("REBASE"), _) => Self::Rebase,
            (Some("MERGE"), _) => Self::Merge,
            (_, StepStatus::DeployConfirmed | StepStatus::DeployReconciled) => Self::Deploy,
            _ => Self::Step,
        }
    }
}

/// One recorded step, or an event on the way (a pipeline run, an approval,
/// a rebase, the merge), which leaves the step as it was.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TimelineEntry {
    kind: EntryKind,
    /// The step it moved to, or (for an event) the step it happened at.
    step: StepView,
    /// The binding status it moved to, when it moved.
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<String>,
    /// Who: a person, an operator, or the component for automatic steps.
    actor: String,
    /// What happened, in words.
    message: String,
    /// What an event is about: a pipeline's status, the approving bot's
    /// number, a commit's sha.
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
    /// Its page on GitLab (a pipeline, an MR, a commit).
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<String>,
    #[schema(value_type = String, format = DateTime)]
    at: String,
}

/// Another request for the same subject and target, or this one.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RelatedView {
    #[schema(value_type = uuid::Uuid)]
    operation_id: String,
    /// `APPLY` or `CLOSE`.
    kind: &'static str,
    /// Its binding status: the binding's while it is current, else the last
    /// one it reached.
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<String>,
    step: StepView,
    /// Whether it holds the binding now; the others are superseded.
    current: bool,
    #[schema(value_type = String, format = DateTime)]
    created_at: String,
}

/// The operation as of one moment: its status, its steps so far, its merge
/// batch, and the other requests of its relation. One read, so the status,
/// the step and the history always agree.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Timeline {
    operation: OperationView,
    /// Its steps, oldest first.
    items: Vec<TimelineEntry>,
    /// How many requests its merge batch holds (itself included).
    #[serde(skip_serializing_if = "Option::is_none")]
    batch_members: Option<i64>,
    /// Every request for the same subject and target, newest first (at most
    /// 50), this one included.
    relation: Vec<RelatedView>,
}

/// The operation and its steps, oldest first; 404 for other people's.
#[utoipa::path(get, path = "/api/v1/operations/{operationId}/timeline", tag = "requests",
    params(("operationId" = uuid::Uuid, Path, description = "The operation id")),
    responses((status = 200, description = "The operation, its steps and its relation", body = Timeline),
        (status = 404, description = "NOT_FOUND: unknown, or not yours")))]
pub async fn get_timeline(
    State(state): State<AppState>,
    AuthUser(caller): AuthUser,
    Database(db): Database,
    Path(operation_id): Path<String>,
) -> ApiResult<Json<Timeline>> {
    let id = OperationId::parse(&operation_id)
        .map_err(|_| ApiError::NotFound)?
        .as_string();
    let snapshot = read_operation_snapshot(&db, &id)
        .await?
        .ok_or(ApiError::NotFound)?;
    if !visible_to(
        &caller,
        &snapshot.page.operation,
        snapshot.page.binding_owner.as_deref(),
    ) {
        return Err(ApiError::NotFound);
    }
    let status = snapshot.status();
    let OperationSnapshot {
        page,
        history,
        batch_members,
        relation,
    } = snapshot;
    let items = history
        .into_iter()
        .filter_map(|row| {
            let step = StepStatus::from_code(row.to_step).ok()?;
            Some(TimelineEntry {
                kind: EntryKind::of(row.event.as_deref(), step),
                step: StepView::of(step),
                status: row.to_status,
                actor: row.actor,
                message: row.message.unwrap_or_else(|| step.description().to_owned()),
                detail: row.detail,
                url: row.url,
                at: rfc3339(row.created_at),
            })
        })
        .collect();
    let relation = relation
        .into_iter()
        .map(|related| RelatedView {
            current: related.binding_status.is_some(),
            status: related.binding_status.or(related.last_status),
            operation_id: related.operation_id,
            kind: related.kind.as_str(),
            step: StepView::of(related.step),
            created_at: rfc3339(related.created_at),
        })
        .collect();
    let reverts = reverted_by(&db, &id).await?;
    let drift = drift_of(&state, &db, &page.operation, page.status).await?;
    let successor = successor_of(&page.operation, page.superseded_by);
    let operation = OperationView::of(page.operation, status)
        .drifted(drift)
        .in_batch(page.batch)
        .superseded_by(successor)
        .scheduled(&state)
        .reverted_by(reverts)
        .in_merge_queue(&state, &db, status)
        .await?;
    Ok(Json(Timeline {
        operation,
        items,
        batch_members,
        relation,
    }))
}
