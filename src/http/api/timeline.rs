//! `GET /api/v1/operations/{operationId}/timeline`: every step an operation
//! went through, oldest first, so a person can see what happened and when.

use axum::Json;
use axum::extract::Path;
use serde::Serialize;

use super::status::{StepView, rfc3339, visible_to};
use crate::db::history::list_history;
use crate::db::operations::get_operation_with_status;
use crate::domain::{OperationId, StepStatus};
use crate::http::error::{ApiError, ApiResult};
use crate::http::extract::{AuthUser, Database};

/// One recorded step.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TimelineEntry {
    step: StepView,
    /// The binding status it moved to, when it moved.
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<String>,
    /// Who: a person, an operator, or the component for automatic steps.
    actor: String,
    /// What happened, in words.
    message: String,
    #[schema(value_type = String, format = DateTime)]
    at: String,
}

/// The operation's steps.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Timeline {
    items: Vec<TimelineEntry>,
}

/// The steps of an operation, oldest first; 404 for other people's.
#[utoipa::path(get, path = "/api/v1/operations/{operationId}/timeline", tag = "requests",
    params(("operationId" = uuid::Uuid, Path, description = "The operation id")),
    responses((status = 200, description = "The operation's steps", body = Timeline),
        (status = 404, description = "NOT_FOUND: unknown, or not yours")))]
pub async fn get_timeline(
    AuthUser(caller): AuthUser,
    Database(db): Database,
    Path(operation_id): Path<String>,
) -> ApiResult<Json<Timeline>> {
    let id = OperationId::parse(&operation_id)
        .map_err(|_| ApiError::NotFound)?
        .as_string();
    let (operation, _, binding_owner) = get_operation_with_status(&db, &id)
        .await?
        .ok_or(ApiError::NotFound)?;
    if !visible_to(&caller, &operation, binding_owner.as_deref()) {
        return Err(ApiError::NotFound);
    }
    let items = list_history(&db, &id)
        .await?
        .into_iter()
        .filter_map(|row| {
            let step = StepStatus::from_code(row.to_step).ok()?;
            Some(TimelineEntry {
                step: StepView::of(step),
                status: row.to_status,
                actor: row.actor,
                message: row.message.unwrap_or_else(|| step.description().to_owned()),
                at: rfc3339(row.created_at),
            })
        })
        .collect();
    Ok(Json(Timeline { items }))
}
