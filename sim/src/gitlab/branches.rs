//! Branches API: list, get, create (with `Branches::CreateService`'s checks) and delete.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};

use super::SimContext;
use super::auth::Caller;
use super::error::{ApiError, ApiResult};
use super::params::{JsonBody, PageQuery, paginate};
use super::repo::valid_branch_name;
use super::state::{Project, UserId};

/// The `Branch` entity, relative to the caller's push right.
fn branch_json(project: &Project, name: &str, caller: UserId) -> Value {
    let repo = &project.repo;
    let head = repo.head(name);
    let default_head = repo.head(&project.default_branch);
    let merged = name != project.default_branch
        && matches!((head, default_head), (Some(h), Some(d)) if repo.is_ancestor(&h.id, &d.id));
    json!({
        "name": name,
        "commit": head.map(|commit| commit.json(&project.web_url)),
        "merged": merged,
        // Branch protection is not modelled: every member with write access may push.
        "protected": false,
        "default": name == project.default_branch,
        "developers_can_push": false,
        "developers_can_merge": false,
        "can_push": project.can_write(caller),
        "web_url": format!("{}/-/tree/{name}", project.web_url),
    })
}

/// `GET /projects/:id/repository/branches`
pub async fn list_branches(
    State(ctx): State<SimContext>,
    Caller(user): Caller,
    Path(project): Path<String>,
    page: PageQuery,
) -> ApiResult<Response> {
    let mut state = ctx.lock();
    let scope = state.scope(&project)?;
    let project = &*scope.project;
    let items: Vec<Value> = project
        .repo
        .branches()
        .map(|(name, _)| branch_json(project, name, user))
        .collect();
    Ok(paginate(&items, &page))
}

/// `GET /projects/:id/repository/branches/:branch`
pub async fn get_branch(
    State(ctx): State<SimContext>,
    Caller(user): Caller,
    Path((project, branch)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    let mut state = ctx.lock();
    let scope = state.scope(&project)?;
    if scope.project.repo.head(&branch).is_none() {
        return Err(ApiError::NotFound("Branch"));
    }
    Ok(Json(branch_json(scope.project, &branch, user)))
}

/// Body of `POST /projects/:id/repository/branches`.
#[derive(Debug, Deserialize)]
pub struct CreateParams {
    branch: Option<String>,
    #[serde(rename = "ref")]
    start: Option<String>,
}

/// `POST /projects/:id/repository/branches`
pub async fn create_branch(
    State(ctx): State<SimContext>,
    Caller(user): Caller,
    Path(project): Path<String>,
    JsonBody(params): JsonBody<CreateParams>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let missing = |name: &str| ApiError::InvalidParam(format!("{name} is missing"));
    let branch = params.branch.ok_or_else(|| missing("branch"))?;
    let start = params.start.ok_or_else(|| missing("ref"))?;
    let mut state = ctx.lock();
    let scope = state.scope(&project)?;
    let project = &mut *scope.project;
    if !project.can_write(user) {
        return Err(ApiError::Forbidden);
    }
    if project.repo.head(&branch).is_some() {
        return Err(ApiError::bad_request("Branch already exists"));
    }
    if !valid_branch_name(&branch) {
        return Err(ApiError::bad_request("Branch name is invalid"));
    }
    if start.trim().is_empty() {
        return Err(ApiError::bad_request("Ref is missing"));
    }
    let Some(sha) = project.repo.resolve(&start).map(|c| c.id.clone()) else {
        let message =
            format!("Failed to create branch '{branch}': invalid reference name '{start}'");
        return Err(ApiError::bad_request(message));
    };
    if project.repo.hierarchy_conflict(&branch) {
        let message = format!(
            "Failed to create branch '{branch}': Branch name conflicts with existing branch hierarchy."
        );
        return Err(ApiError::bad_request(message));
    }
    project.repo.set_branch(&branch, &sha);
    Ok((
        StatusCode::CREATED,
        Json(branch_json(project, &branch, user)),
    ))
}

/// `DELETE /projects/:id/repository/branches/:branch`: 204, 404 when missing, 405 for the
/// default branch (`Branches::DeleteService`).
pub async fn delete_branch(
    State(ctx): State<SimContext>,
    Caller(user): Caller,
    Path((project, branch)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let mut state = ctx.lock();
    let scope = state.scope(&project)?;
    let project = &mut *scope.project;
    if !project.can_write(user) {
        return Err(ApiError::Forbidden);
    }
    if project.repo.head(&branch).is_none() {
        return Err(ApiError::NotFound("Branch"));
    }
    if branch == project.default_branch {
        let message = "The default branch of a project cannot be deleted.";
        return Err(ApiError::Message(
            StatusCode::METHOD_NOT_ALLOWED,
            message.to_owned(),
        ));
    }
    project.repo.delete_branch(&branch);
    Ok(StatusCode::NO_CONTENT)
}
