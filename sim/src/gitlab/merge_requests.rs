//! Merge request create, get (the polling read), list and update/close, and what a push
//! does to the merge requests of a branch.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use chrono::Utc;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::SimContext;
use super::auth::Caller;
use super::error::{ApiError, ApiResult};
use super::mr_view::{View, render};
use super::params::{JsonBody, PageQuery, paginate, required};
use super::pipelines;
use super::rebase;
use super::state::{MergeRequest, MrState, Project, Scope, UserId};

/// What a push to `branch` sets off: open merge requests from it take the new head, get a
/// pipeline and a fresh mergeability check; open merge requests into it are rechecked.
pub fn on_push(scope: &mut Scope, branch: &str, pusher: UserId) {
    let Some(head) = scope.project.repo.head(branch).map(|c| c.id.clone()) else {
        return;
    };
    let polls = scope.options.mergeability_polls;
    let mut moved = Vec::new();
    let open = scope.project.merge_requests.iter_mut();
    for mr in open.filter(|mr| mr.state == MrState::Opened) {
        if mr.source_branch == branch && mr.sha != head {
            mr.sha.clone_from(&head);
            mr.updated_at = Utc::now();
            mr.recheck(polls);
            moved.push(mr.iid);
        } else if mr.target_branch == branch {
            mr.recheck(polls);
        }
    }
    for iid in moved {
        pipelines::create(scope, &head, iid, pusher);
    }
}

/// The 409 of `validate_branches`: another open merge request (other than `iid`) for
/// the same branches.
fn open_duplicate(project: &Project, iid: u64, source: &str, target: &str) -> ApiResult<()> {
    let duplicate = project.merge_requests.iter().find(|other| {
        other.iid != iid
            && other.state == MrState::Opened
            && other.source_branch == source
            && other.target_branch == target
    });
    match duplicate {
        Some(other) => Err(ApiError::MessageList(
            StatusCode::CONFLICT,
            vec![format!(
                "Another open merge request already exists for this source branch: !{}",
                other.iid
            )],
        )),
        None => Ok(()),
    }
}

/// Body of `POST /projects/:id/merge_requests`.
#[derive(Debug, Deserialize)]
pub struct CreateParams {
    source_branch: Option<String>,
    target_branch: Option<String>,
    title: Option<String>,
    description: Option<String>,
    remove_source_branch: Option<bool>,
}

/// `POST /projects/:id/merge_requests`
pub async fn create_mr(
    State(ctx): State<SimContext>,
    Caller(user): Caller,
    Path(project): Path<String>,
    JsonBody(params): JsonBody<CreateParams>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let source = required(&params.source_branch, "source_branch")?;
    let target = required(&params.target_branch, "target_branch")?;
    let title = required(&params.title, "title")?;
    check_title(title)?;
    check_description(params.description.as_deref())?;
    let mut state = ctx.lock();
    let mut scope = state.scope(&project)?;
    if !scope.project.can_write(user) {
        return Err(ApiError::Forbidden);
    }
    if source == target {
        let message = "You can't use same project/branch for source and target";
        return Err(ApiError::MessageList(
            StatusCode::UNPROCESSABLE_ENTITY,
            vec![message.to_owned()],
        ));
    }
    let iid = scope.project.merge_requests.len() as u64 + 1;
    open_duplicate(scope.project, iid, source, target)?;
    let missing: Vec<String> = [("Source", source), ("Target", target)]
        .into_iter()
        .filter(|(_, branch)| scope.project.repo.head(branch).is_none())
        .map(|(side, branch)| format!("{side} branch \"{branch}\" does not exist"))
        .collect();
    let Some(head) = scope
        .project
        .repo
        .head(source)
        .filter(|_| missing.is_empty())
    else {
        return Err(ApiError::MessageList(
            StatusCode::UNPROCESSABLE_ENTITY,
            missing,
        ));
    };
    let sha = head.id.clone();
    let now = Utc::now();
    let mr = MergeRequest {
        id: scope.ids.merge_request(),
        iid,
        title: title.to_owned(),
        description: params.description.unwrap_or_default(),
        author: user,
        state: MrState::Opened,
        source_branch: source.to_owned(),
        target_branch: target.to_owned(),
        sha: sha.clone(),
        created_at: now,
        updated_at: now,
        merged_at: None,
        closed_at: None,
        closed_by: None,
        merge_user: None,
        merge_commit_sha: None,
        target_sha_at_merge: None,
        approvals: Vec::new(),
        checks_pending: scope.options.mergeability_polls,
        checks_seen: false,
        rebase: None,
        merge_error: None,
        auto_merge: false,
        should_remove_source_branch: params.remove_source_branch.unwrap_or(false),
    };
    scope.project.merge_requests.push(mr);
    pipelines::create(&mut scope, &sha, iid, user);
    let mr = &scope.project.merge_requests[scope.project.mr_index(iid)?];
    let body = render(
        scope.project,
        scope.users,
        mr,
        View::Created { caller: user },
    );
    Ok((StatusCode::CREATED, Json(body)))
}

/// Query of `GET /projects/:id/merge_requests/:iid`.
#[derive(Debug, Deserialize)]
pub struct GetQuery {
    include_rebase_in_progress: Option<bool>,
}

/// `GET /projects/:id/merge_requests/:iid`: the polling read. Each call is a unit of
/// simulated time: a pending rebase, the head pipeline and the mergeability check advance.
pub async fn get_mr(
    State(ctx): State<SimContext>,
    Caller(user): Caller,
    Path((project, iid)): Path<(String, u64)>,
    Query(query): Query<GetQuery>,
) -> ApiResult<Json<Value>> {
    let mut state = ctx.lock();
    let mut scope = state.scope(&project)?;
    let index = scope.project.mr_index(iid)?;
    rebase::poll(&mut scope, index);
    pipelines::poll_head(&mut scope, index);
    let view = View::Detail {
        caller: user,
        include_rebase_in_progress: query.include_rebase_in_progress.unwrap_or(false),
    };
    let body = render(
        scope.project,
        scope.users,
        &scope.project.merge_requests[index],
        view,
    );
    let mr = &mut scope.project.merge_requests[index];
    mr.checks_pending = mr.checks_pending.saturating_sub(1);
    mr.checks_seen = true;
    Ok(Json(body))
}

/// Query of `GET /projects/:id/merge_requests`.
#[derive(Debug, Deserialize)]
pub struct ListQuery {
    state: Option<String>,
    source_branch: Option<String>,
    target_branch: Option<String>,
}

/// `GET /projects/:id/merge_requests`, newest first.
pub async fn list_mrs(
    State(ctx): State<SimContext>,
    _caller: Caller,
    Path(project): Path<String>,
    Query(query): Query<ListQuery>,
    page: PageQuery,
) -> ApiResult<Response> {
    let wanted = match query.state.as_deref().unwrap_or("all") {
        "all" => None,
        "opened" => Some(MrState::Opened),
        "closed" => Some(MrState::Closed),
        "merged" => Some(MrState::Merged),
        _ => {
            let message = "state does not have a valid value";
            return Err(ApiError::InvalidParam(message.to_owned()));
        }
    };
    let mut state = ctx.lock();
    let scope = state.scope(&project)?;
    let matches = |mr: &&MergeRequest| {
        wanted.is_none_or(|state| mr.state == state)
            && query
                .source_branch
                .as_ref()
                .is_none_or(|b| *b == mr.source_branch)
            && query
                .target_branch
                .as_ref()
                .is_none_or(|b| *b == mr.target_branch)
    };
    let items = scope.project.merge_requests.iter().rev().filter(matches);
    let items: Vec<Value> = items
        .map(|mr| render(scope.project, scope.users, mr, View::Basic))
        .collect();
    Ok(paginate(&items, &page))
}

/// The attributes of which `PUT /merge_requests/:iid` requires at least one (Grape's
/// `at_least_one_of`); those besides title, description and state_event are accepted and
/// not modelled.
const UPDATABLE: [&str; 17] = [
    "assignee_id",
    "assignee_ids",
    "reviewer_ids",
    "description",
    "labels",
    "add_labels",
    "remove_labels",
    "milestone_id",
    "remove_source_branch",
    "allow_collaboration",
    "allow_maintainer_to_push",
    "squash",
    "discussion_locked",
    "state_event",
    "target_branch",
    "title",
    "merge_after",
];

/// The modelled part of the update body.
#[derive(Debug, Deserialize)]
struct UpdateParams {
    title: Option<String>,
    description: Option<String>,
    state_event: Option<String>,
}

/// `PUT /projects/:id/merge_requests/:iid`: edit, close or reopen.
pub async fn update_mr(
    State(ctx): State<SimContext>,
    Caller(user): Caller,
    Path((project, iid)): Path<(String, u64)>,
    JsonBody(body): JsonBody<Map<String, Value>>,
) -> ApiResult<Json<Value>> {
    if !UPDATABLE.iter().any(|key| body.contains_key(*key)) {
        let message = format!(
            "{} are missing, at least one parameter must be provided",
            UPDATABLE.join(", ")
        );
        return Err(ApiError::InvalidParam(message));
    }
    let params: UpdateParams = serde_json::from_value(Value::Object(body))
        .map_err(|err| ApiError::InvalidParam(err.to_string()))?;
    if let Some(event) = params.state_event.as_deref()
        && event != "close"
        && event != "reopen"
    {
        let message = "state_event does not have a valid value";
        return Err(ApiError::InvalidParam(message.to_owned()));
    }
    let mut state = ctx.lock();
    let mut scope = state.scope(&project)?;
    let index = scope.project.mr_index(iid)?;
    if !scope.project.can_write(user) {
        return Err(ApiError::Forbidden);
    }
    match params.state_event.as_deref() {
        Some("close") => close(&mut scope.project.merge_requests[index], user),
        Some("reopen") => reopen(&mut scope, index, user)?,
        _ => {}
    }
    let mr = &mut scope.project.merge_requests[index];
    if let Some(title) = params.title {
        check_title(&title)?;
        mr.title = title;
    }
    if let Some(description) = params.description {
        check_description(Some(&description))?;
        mr.description = description;
    }
    mr.updated_at = Utc::now();
    let view = View::Detail {
        caller: user,
        include_rebase_in_progress: false,
    };
    let mr = &scope.project.merge_requests[index];
    Ok(Json(render(scope.project, scope.users, mr, view)))
}

/// Closes an open merge request; closing a closed or merged one changes nothing.
fn close(mr: &mut MergeRequest, user: UserId) {
    if mr.state == MrState::Opened {
        mr.state = MrState::Closed;
        mr.closed_at = Some(Utc::now());
        mr.closed_by = Some(user);
        mr.auto_merge = false;
        mr.merge_user = None;
    }
}

/// Reopens a closed merge request whose source branch still exists (`reopenable?`); any
/// other state is left as it is. Picks up pushes made while it was closed.
fn reopen(scope: &mut Scope, index: usize, user: UserId) -> ApiResult<()> {
    let mr = &scope.project.merge_requests[index];
    let Some(head) = scope.project.repo.head(&mr.source_branch) else {
        return Ok(());
    };
    if mr.state != MrState::Closed {
        return Ok(());
    }
    open_duplicate(scope.project, mr.iid, &mr.source_branch, &mr.target_branch)?;
    let head = head.id.clone();
    let polls = scope.options.mergeability_polls;
    let mr = &mut scope.project.merge_requests[index];
    mr.state = MrState::Opened;
    mr.closed_at = None;
    mr.closed_by = None;
    mr.recheck(polls);
    if mr.sha != head {
        mr.sha.clone_from(&head);
        let iid = mr.iid;
        pipelines::create(scope, &head, iid, user);
    }
    Ok(())
}

/// GitLab's limit on issuable titles (`validates :title, length: { maximum:
/// 255 }` in app/models/concerns/issuable.rb), counted in characters.
fn check_title(title: &str) -> Result<(), ApiError> {
    if title.chars().count() > 255 {
        return Err(ApiError::FieldError(
            "title",
            "is too long (maximum is 255 characters)".to_owned(),
        ));
    }
    Ok(())
}

/// GitLab's limit on issuable descriptions (`DESCRIPTION_LENGTH_MAX =
/// 1.megabyte`, validated as a length in app/models/concerns/issuable.rb),
/// counted in characters.
fn check_description(description: Option<&str>) -> Result<(), ApiError> {
    const MAX: usize = 1 << 20;
    if description.is_some_and(|text| text.chars().count() > MAX) {
        return Err(ApiError::FieldError(
            "description",
            format!("is too long (maximum is {MAX} characters)"),
        ));
    }
    Ok(())
}
