//! The control API over HTTP, under `/_sim`: the methods of [`GitLabControl`] as JSON
//! routes, for the demo and for tests written in other languages. A `{project}` segment is
//! a numeric id or a URL-encoded path (`config%2Frepo`), as in GitLab's own API.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::{Deserialize, Deserializer};
use serde_json::{Value, json};

use super::faults::{Endpoint, Fault, FaultKind, RecordedRequest};
use super::pipelines::PipelineOutcome;
use super::state::{AccessLevel, ChecklistItem, MergeMethod, ProjectId, Tier, UserId};
use super::{GitLabControl, MergeRecord, MergeRequestSnapshot, MergedMergeRequest, SimError};
use crate::control::{Body, ControlError, ControlResult, Param, Strikes};

/// The `/_sim` routes.
pub fn router(control: GitLabControl) -> Router {
    Router::new()
        .route("/faults", post(inject_fault).delete(clear_faults))
        .route("/requests", get(list_requests))
        .route("/calls/{endpoint}", get(count_calls))
        .route("/users", post(add_user))
        .route("/projects", post(create_project))
        .route("/projects/{project}/members/{user}", put(add_member))
        .route("/projects/{project}/settings", put(update_settings))
        .route("/projects/{project}/pushes", post(push))
        .route("/projects/{project}/commits", post(push_onto))
        .route(
            "/projects/{project}/branches/{branch}",
            get(get_branch).put(force_push),
        )
        .route("/projects/{project}/merge_requests/{iid}", get(get_mr))
        .route("/projects/{project}/pipelines/{id}", get(get_pipeline))
        .route("/projects/{project}/pipelines/{id}/advance", post(advance))
        .route("/projects/{project}/pipelines/{id}/force", post(force))
        .route("/projects/{project}/pipeline_script", post(script))
        .route("/projects/{project}/merges", get(list_merges))
        .route("/pipeline_durations", put(set_pipeline_durations))
        .route("/merged_merge_requests", get(list_merged))
        .with_state(control)
}

impl From<SimError> for ControlError {
    fn from(err: SimError) -> Self {
        match err {
            SimError::Refused(_) => Self::bad_request(err.to_string()),
            _ => Self::not_found(err.to_string()),
        }
    }
}

/// The project a `{project}` segment names.
fn project(control: &GitLabControl, project: &str) -> ControlResult<ProjectId> {
    control
        .project_id(project)
        .ok_or_else(|| ControlError::not_found(format!("no project {project}")))
}

/// Body of `POST /_sim/faults`: `{"endpoint": "approve", "kind": "status", "status": 503,
/// "times": 2, "probability": 0.5}`; without `endpoint` the fault hits any endpoint.
#[derive(Debug, Deserialize)]
struct InjectFault {
    endpoint: Option<Endpoint>,
    #[serde(flatten)]
    kind: FaultKind,
    #[serde(flatten)]
    strikes: Strikes,
}

/// `POST /_sim/faults`
async fn inject_fault(
    State(control): State<GitLabControl>,
    Body(body): Body<InjectFault>,
) -> ControlResult<StatusCode> {
    let (times, probability) = body.strikes.checked()?;
    let fault = match body.endpoint {
        Some(endpoint) => Fault::new(endpoint, body.kind),
        None => Fault::any(body.kind),
    };
    let fault = fault.times(times);
    control.inject(match probability {
        Some(probability) => fault.probability(probability),
        None => fault,
    });
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE /_sim/faults`
async fn clear_faults(State(control): State<GitLabControl>) -> StatusCode {
    control.clear_faults();
    StatusCode::NO_CONTENT
}

/// `GET /_sim/requests`
async fn list_requests(State(control): State<GitLabControl>) -> Json<Vec<RecordedRequest>> {
    Json(control.requests())
}

/// `GET /_sim/calls/{endpoint}`
async fn count_calls(
    State(control): State<GitLabControl>,
    Param(endpoint): Param<Endpoint>,
) -> Json<Value> {
    let calls = control.calls(endpoint);
    Json(json!({ "endpoint": endpoint, "calls": calls }))
}

/// Body of `POST /_sim/users`.
#[derive(Debug, Deserialize)]
struct AddUser {
    username: String,
    token: String,
}

/// `POST /_sim/users`: a new user, or another token for an existing one.
async fn add_user(
    State(control): State<GitLabControl>,
    Body(body): Body<AddUser>,
) -> (StatusCode, Json<Value>) {
    let id = control.add_user(&body.username, &body.token);
    (StatusCode::CREATED, Json(json!({ "id": id })))
}

/// Body of `POST /_sim/projects`.
#[derive(Debug, Deserialize)]
struct CreateProject {
    path: String,
}

/// `POST /_sim/projects`
async fn create_project(
    State(control): State<GitLabControl>,
    Body(body): Body<CreateProject>,
) -> (StatusCode, Json<Value>) {
    let id = control.create_project(&body.path);
    (StatusCode::CREATED, Json(json!({ "id": id })))
}

/// Body of `PUT /_sim/projects/{project}/members/{user}`.
#[derive(Debug, Deserialize)]
struct AddMember {
    access_level: AccessLevel,
}

/// `PUT /_sim/projects/{project}/members/{user}`
async fn add_member(
    State(control): State<GitLabControl>,
    Param((path, user)): Param<(String, UserId)>,
    Body(body): Body<AddMember>,
) -> ControlResult<StatusCode> {
    control.add_member(project(&control, &path)?, user, body.access_level)?;
    Ok(StatusCode::NO_CONTENT)
}

/// Body of `PUT /_sim/projects/{project}/settings`: the settings to change.
#[derive(Debug, Deserialize)]
struct UpdateSettings {
    approvals_required: Option<usize>,
    tier: Option<Tier>,
    approval_checklist_required: Option<bool>,
    approval_checklist: Option<Vec<ChecklistItem>>,
    merge_method: Option<MergeMethod>,
    merged_results_pipelines: Option<bool>,
    /// Absent leaves the setting, `null` drops the rule, a list of user ids sets it.
    #[serde(default, deserialize_with = "present")]
    eligible_approvers: Option<Option<Vec<UserId>>>,
}

/// Tells a field sent as `null` (`Some(None)`) from one left out (`None`, by `default`).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(deserializer).map(Some)
}

/// `PUT /_sim/projects/{project}/settings`
async fn update_settings(
    State(control): State<GitLabControl>,
    Param(path): Param<String>,
    Body(body): Body<UpdateSettings>,
) -> ControlResult<StatusCode> {
    control.update_settings(project(&control, &path)?, |settings| {
        if let Some(required) = body.approvals_required {
            settings.approvals_required = required;
        }
        if let Some(tier) = body.tier {
            settings.tier = tier;
        }
        if let Some(required) = body.approval_checklist_required {
            settings.approval_checklist_required = required;
        }
        if let Some(checklist) = body.approval_checklist {
            settings.approval_checklist = checklist;
        }
        if let Some(method) = body.merge_method {
            settings.merge_method = method;
        }
        if let Some(merged_results) = body.merged_results_pipelines {
            settings.merged_results_pipelines = merged_results;
        }
        if let Some(eligible) = body.eligible_approvers {
            settings.eligible_approvers = eligible;
        }
    })?;
    Ok(StatusCode::NO_CONTENT)
}

/// One file of a push: new content, or `null` to delete it.
#[derive(Debug, Deserialize)]
struct PushedFile {
    path: String,
    content: Option<String>,
}

/// Body of `POST /_sim/projects/{project}/pushes`.
#[derive(Debug, Deserialize)]
struct Push {
    user_id: UserId,
    branch: String,
    changes: Vec<PushedFile>,
}

/// `POST /_sim/projects/{project}/pushes`: a commit from outside the API.
async fn push(
    State(control): State<GitLabControl>,
    Param(path): Param<String>,
    Body(body): Body<Push>,
) -> ControlResult<(StatusCode, Json<Value>)> {
    let changes: Vec<(&str, Option<&str>)> = body
        .changes
        .iter()
        .map(|file| (file.path.as_str(), file.content.as_deref()))
        .collect();
    let project = project(&control, &path)?;
    let sha = control.push(project, body.user_id, &body.branch, &changes)?;
    Ok((StatusCode::CREATED, Json(json!({ "sha": sha }))))
}

/// Body of `POST /_sim/projects/{project}/commits`.
#[derive(Debug, Deserialize)]
struct PushOnto {
    user_id: UserId,
    base: String,
    changes: Vec<PushedFile>,
}

/// `POST /_sim/projects/{project}/commits`: a commit on top of `base`, on no branch.
async fn push_onto(
    State(control): State<GitLabControl>,
    Param(path): Param<String>,
    Body(body): Body<PushOnto>,
) -> ControlResult<(StatusCode, Json<Value>)> {
    let changes: Vec<(&str, Option<&str>)> = body
        .changes
        .iter()
        .map(|file| (file.path.as_str(), file.content.as_deref()))
        .collect();
    let project = project(&control, &path)?;
    let sha = control.push_onto(project, body.user_id, &body.base, &changes)?;
    Ok((StatusCode::CREATED, Json(json!({ "sha": sha }))))
}

/// Body of `PUT /_sim/projects/{project}/branches/{branch}`.
#[derive(Debug, Deserialize)]
struct ForcePush {
    user_id: UserId,
    sha: String,
}

/// `PUT /_sim/projects/{project}/branches/{branch}`: a forced push of `sha` to the branch.
async fn force_push(
    State(control): State<GitLabControl>,
    Param((path, branch)): Param<(String, String)>,
    Body(body): Body<ForcePush>,
) -> ControlResult<StatusCode> {
    let project = project(&control, &path)?;
    control.force_push(project, body.user_id, &branch, &body.sha)?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /_sim/projects/{project}/branches/{branch}`: the head and every file.
async fn get_branch(
    State(control): State<GitLabControl>,
    Param((path, branch)): Param<(String, String)>,
) -> ControlResult<Json<Value>> {
    let project = project(&control, &path)?;
    let head = control.branch_head(project, &branch);
    let files: Option<BTreeMap<String, String>> = control.files(project, &branch);
    match (head, files) {
        (Some(head), Some(files)) => Ok(Json(
            json!({ "name": branch, "head": head, "files": files }),
        )),
        _ => Err(SimError::UnknownBranch(branch).into()),
    }
}

/// `GET /_sim/projects/{project}/merge_requests/{iid}`; not a poll, so nothing advances.
async fn get_mr(
    State(control): State<GitLabControl>,
    Param((path, iid)): Param<(String, u64)>,
) -> ControlResult<Json<MergeRequestSnapshot>> {
    control
        .merge_request(project(&control, &path)?, iid)
        .map(Json)
        .ok_or_else(|| ControlError::not_found(format!("no merge request !{iid}")))
}

/// `{"id", "status", "duration_ms"}` of a pipeline (`duration_ms`: how long it runs
/// before it may finish).
fn pipeline_json(control: &GitLabControl, project: ProjectId, id: u64) -> ControlResult<Value> {
    let status = control.pipeline_status(project, id);
    let status = status.ok_or(SimError::UnknownPipeline(id))?;
    let duration = control.pipeline_duration(project, id).unwrap_or_default();
    Ok(json!({ "id": id, "status": status, "duration_ms": duration.as_millis() }))
}

/// `GET /_sim/projects/{project}/pipelines/{id}`; not a poll, so nothing advances.
async fn get_pipeline(
    State(control): State<GitLabControl>,
    Param((path, id)): Param<(String, u64)>,
) -> ControlResult<Json<Value>> {
    pipeline_json(&control, project(&control, &path)?, id).map(Json)
}

/// `POST /_sim/projects/{project}/pipelines/{id}/advance`: one step; answers the new status.
async fn advance(
    State(control): State<GitLabControl>,
    Param((path, id)): Param<(String, u64)>,
) -> ControlResult<Json<Value>> {
    let project = project(&control, &path)?;
    control.advance_pipeline(project, id)?;
    pipeline_json(&control, project, id).map(Json)
}

/// Body of `POST .../force`.
#[derive(Debug, Deserialize)]
struct Force {
    outcome: PipelineOutcome,
}

/// `POST /_sim/projects/{project}/pipelines/{id}/force`: jumps to an outcome; answers the
/// new status.
async fn force(
    State(control): State<GitLabControl>,
    Param((path, id)): Param<(String, u64)>,
    Body(body): Body<Force>,
) -> ControlResult<Json<Value>> {
    let project = project(&control, &path)?;
    control.force_pipeline(project, id, body.outcome)?;
    pipeline_json(&control, project, id).map(Json)
}

/// Body of `POST /_sim/projects/{project}/pipeline_script`.
#[derive(Debug, Deserialize)]
struct Script {
    outcomes: Vec<PipelineOutcome>,
}

/// `POST /_sim/projects/{project}/pipeline_script`: how the next pipelines end.
async fn script(
    State(control): State<GitLabControl>,
    Param(path): Param<String>,
    Body(body): Body<Script>,
) -> ControlResult<StatusCode> {
    control.script_pipelines(project(&control, &path)?, body.outcomes)?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /_sim/merged_merge_requests`
async fn list_merged(State(control): State<GitLabControl>) -> Json<Vec<MergedMergeRequest>> {
    Json(control.merged_merge_requests())
}

/// `GET /_sim/projects/{project}/merges`: the merge log, oldest merge first.
async fn list_merges(
    State(control): State<GitLabControl>,
    Param(path): Param<String>,
) -> ControlResult<Json<Vec<MergeRecord>>> {
    Ok(Json(control.merge_log(project(&control, &path)?)))
}

/// Body of `PUT /_sim/pipeline_durations`.
#[derive(Debug, Deserialize)]
struct PipelineDurations {
    min_ms: u64,
    max_ms: Option<u64>,
}

/// `PUT /_sim/pipeline_durations`: how long pipelines created from now on run.
async fn set_pipeline_durations(
    State(control): State<GitLabControl>,
    Body(body): Body<PipelineDurations>,
) -> ControlResult<StatusCode> {
    if body.max_ms.is_some_and(|max| max < body.min_ms) {
        return Err(ControlError::bad_request("max_ms is below min_ms"));
    }
    control.set_pipeline_durations(
        Duration::from_millis(body.min_ms),
        body.max_ms.map(Duration::from_millis),
    );
    Ok(StatusCode::NO_CONTENT)
}
