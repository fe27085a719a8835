//! The approve-with-checklist extension (our upstream's planned addition, GITLAB.md): a
//! per-project checklist served by `GET /projects/:id/approval_checklist`, which approve
//! must confirm item by item when the project requires it.

use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::{Value, json};

use super::SimContext;
use super::auth::Caller;
use super::error::{ApiError, ApiResult};
use super::state::ProjectSettings;

/// One confirmed item in an approve body: `{"id": "...", "checked": true}`.
#[derive(Clone, Debug, Deserialize)]
pub struct ChecklistAnswer {
    id: String,
    #[serde(default)]
    checked: bool,
}

/// `{"items": [{"id", "label"}, ...]}` for the current checklist.
fn items(settings: &ProjectSettings) -> Value {
    json!({ "items": settings.approval_checklist })
}

/// `GET /projects/:id/approval_checklist`
pub async fn get_checklist(
    State(ctx): State<SimContext>,
    _caller: Caller,
    Path(project): Path<String>,
) -> ApiResult<Json<Value>> {
    let mut state = ctx.lock();
    let scope = state.scope(&project)?;
    Ok(Json(items(&scope.project.settings)))
}

/// When the project requires it, the answers must check exactly the current items; a
/// missing or stale list answers 422 with the current checklist so the client can rebuild.
/// `forced` (the checklist fault) answers the 422 whatever the answers.
pub fn verify(
    settings: &ProjectSettings,
    answers: Option<&[ChecklistAnswer]>,
    forced: bool,
) -> ApiResult<()> {
    if forced {
        return Err(ApiError::ChecklistMismatch(items(settings)));
    }
    if !settings.approval_checklist_required {
        return Ok(());
    }
    let current = &settings.approval_checklist;
    let matches = answers.is_some_and(|answers| {
        answers.len() == current.len()
            && answers.iter().all(|answer| answer.checked)
            && current
                .iter()
                .all(|item| answers.iter().any(|answer| answer.id == item.id))
    });
    if matches {
        Ok(())
    } else {
        Err(ApiError::ChecklistMismatch(items(settings)))
    }
}
