//! Approvals: the tier-dependent `GET …/approvals` body (relative to the caller's token),
//! `POST …/approve` with GitLab's check order and its 401 on a repeat, and `…/unapprove`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{Value, json};

use super::SimContext;
use super::auth::{Caller, Users};
use super::checklist::{ChecklistAnswer, verify};
use super::error::{ApiError, ApiResult};
use super::intercept::InjectedChecklistMismatch;
use super::merge::try_auto_merge;
use super::mergeability::{approvals_left, evaluate};
use super::params::JsonBody;
use super::state::{MergeRequest, MrState, Project, Tier, UserId, timestamp};

/// `eligible_for_approval_by?`: an open merge request, a member with the approve ability,
/// not approved by this user yet; under an approval rule naming its approvers, one of them,
/// or anyone once the rule is met (EE's `any_approver_allowed?`).
fn can_approve(project: &Project, mr: &MergeRequest, user: UserId) -> bool {
    let eligible = project
        .settings
        .eligible_approvers
        .as_ref()
        .is_none_or(|eligible| eligible.contains(&user) || approvals_left(project, mr) == 0);
    mr.state == MrState::Opened
        && project.can_write(user)
        && !mr.approvals.contains(&user)
        && eligible
}

/// The project's one approval rule as `ApprovalRuleShort` (`id`, `name`, `rule_type`): a
/// rule naming its approvers, or GitLab's rule for any eligible user.
fn rule_short(project: &Project) -> Value {
    match project.settings.eligible_approvers {
        Some(_) => json!({ "id": 1, "name": "Approvers", "rule_type": "regular" }),
        None => json!({ "id": 1, "name": "All Members", "rule_type": "any_approver" }),
    }
}

/// The approvals body in the project's tier, with `user_*` relative to `caller`.
fn body(project: &Project, users: &Users, mr: &MergeRequest, caller: UserId) -> Value {
    let approved_by: Vec<Value> = mr
        .approvals
        .iter()
        .map(|id| json!({ "user": users.json(Some(*id)) }))
        .collect();
    let user_has_approved = mr.approvals.contains(&caller);
    let user_can_approve = can_approve(project, mr, caller);
    let required = project.settings.approvals_required;
    let left = approvals_left(project, mr);
    let rules_left: Vec<Value> = (left > 0)
        .then(|| rule_short(project))
        .into_iter()
        .collect();
    let approvers: Vec<Value> = project
        .settings
        .eligible_approvers
        .iter()
        .flatten()
        .map(|id| json!({ "user": users.json(Some(*id)) }))
        .collect();
    match project.settings.tier {
        // `MergeRequestApprovals` (`lib/api/entities/merge_request_approvals.rb`).
        Tier::Ce => json!({
            "user_has_approved": user_has_approved,
            "user_can_approve": user_can_approve,
            "approved": !mr.approvals.is_empty(),
            "approved_by": approved_by,
        }),
        // `ApprovalState` (`ee/lib/api/entities/approval_state.rb`).
        Tier::Ee => json!({
            "id": mr.id,
            "iid": mr.iid,
            "project_id": project.id,
            "title": mr.title,
            "description": mr.description,
            "state": mr.state.as_str(),
            "created_at": timestamp(mr.created_at),
            "updated_at": timestamp(mr.updated_at),
            "merge_status": evaluate(project, mr).merge_status,
            "approved": left == 0,
            "approvals_required": required,
            "approvals_left": left,
            "require_password_to_approve": false,
            "approved_by": approved_by,
            "suggested_approvers": [],
            "approvers": approvers,
            "approver_groups": [],
            "user_has_approved": user_has_approved,
            "user_can_approve": user_can_approve,
            "approval_rules_left": rules_left,
            "has_approval_rules": required > 0,
            "merge_request_approvers_available": true,
            "multiple_approval_rules_available": false,
            "invalid_approvers_rules": [],
        }),
    }
}

/// `GET /projects/:id/merge_requests/:iid/approvals`
pub async fn get_approvals(
    State(ctx): State<SimContext>,
    Caller(user): Caller,
    Path((project, iid)): Path<(String, u64)>,
) -> ApiResult<Json<Value>> {
    let mut state = ctx.lock();
    let scope = state.scope(&project)?;
    let mr = &scope.project.merge_requests[scope.project.mr_index(iid)?];
    Ok(Json(body(scope.project, scope.users, mr, user)))
}

/// Body of `POST …/approve`.
#[derive(Debug, Deserialize)]
pub struct ApproveParams {
    sha: Option<String>,
    checklist: Option<Vec<ChecklistAnswer>>,
}

/// `POST /projects/:id/merge_requests/:iid/approve`, checking in GitLab's order: 404, 403
/// (no approve ability), 409 (stale `sha`), then the checklist extension's 422, then 401
/// when `ApprovalService` refuses (already approved by this user, or not open).
pub async fn approve(
    State(ctx): State<SimContext>,
    Caller(user): Caller,
    Path((project, iid)): Path<(String, u64)>,
    fault: Option<Extension<InjectedChecklistMismatch>>,
    JsonBody(params): JsonBody<ApproveParams>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let mut state = ctx.lock();
    let mut scope = state.scope(&project)?;
    let index = scope.project.mr_index(iid)?;
    let project = &*scope.project;
    let mr = &project.merge_requests[index];
    if !project.can_write(user) {
        return Err(ApiError::Forbidden);
    }
    if let Some(sha) = params.sha.as_deref()
        && sha != mr.sha
    {
        return Err(ApiError::sha_mismatch(&mr.sha));
    }
    verify(
        &project.settings,
        params.checklist.as_deref(),
        fault.is_some(),
    )?;
    if !can_approve(project, mr, user) {
        return Err(ApiError::Unauthorized);
    }
    scope.project.merge_requests[index].approvals.push(user);
    try_auto_merge(&mut scope, index);
    let mr = &scope.project.merge_requests[index];
    let body = body(scope.project, scope.users, mr, user);
    Ok((StatusCode::CREATED, Json(body)))
}

/// `POST /projects/:id/merge_requests/:iid/unapprove`: 404 when the caller had not approved.
pub async fn unapprove(
    State(ctx): State<SimContext>,
    Caller(user): Caller,
    Path((project, iid)): Path<(String, u64)>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let mut state = ctx.lock();
    let scope = state.scope(&project)?;
    let index = scope.project.mr_index(iid)?;
    if !scope.project.can_write(user) {
        return Err(ApiError::Forbidden);
    }
    let approvals = &mut scope.project.merge_requests[index].approvals;
    let position = approvals.iter().position(|id| *id == user);
    let position = position.ok_or(ApiError::Message(
        StatusCode::NOT_FOUND,
        "404 Not Found".to_owned(),
    ))?;
    approvals.remove(position);
    let mr = &scope.project.merge_requests[index];
    let body = body(scope.project, scope.users, mr, user);
    Ok((StatusCode::CREATED, Json(body)))
}
