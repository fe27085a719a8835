//! `PUT /merge_requests/:iid/rebase`: accepted with 202, then finished asynchronously after
//! some polls, either with a new head (and pipeline) or with GitLab's `merge_error`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde_json::{Value, json};

use super::SimContext;
use super::auth::Caller;
use super::error::{ApiError, ApiResult};
use super::intercept::InjectedRebaseConflict;
use super::merge_requests::on_push;
use super::repo::{Tree, replay};
use super::state::{MergeRequest, MrState, Project, RebaseJob, Scope};

/// The `merge_error` of a failed rebase in current GitLab.
pub const REBASE_FAILED: &str =
    "Rebase failed: Rebase locally, resolve all conflicts, then push the branch.";

/// GitLab's only 409 text on this endpoint (`RebaseLockTimeout`). GitLab.md leaves the
/// answer to "already rebasing / not open" open and asks the fake for a 409; this text
/// keeps the body one a real GitLab can send.
const ENQUEUE_FAILED: &str = "Failed to enqueue the rebase operation, possibly due to a long-lived transaction. Try again later.";

/// `PUT /projects/:id/merge_requests/:iid/rebase`
pub async fn rebase_mr(
    State(ctx): State<SimContext>,
    Caller(user): Caller,
    Path((project, iid)): Path<(String, u64)>,
    fault: Option<Extension<InjectedRebaseConflict>>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let mut state = ctx.lock();
    let scope = state.scope(&project)?;
    let index = scope.project.mr_index(iid)?;
    let project = &mut *scope.project;
    let mr = &project.merge_requests[index];
    // RebaseService#validate checks the branch before the caller's push right.
    if project.repo.head(&mr.source_branch).is_none() {
        return Err(ApiError::ForbiddenBecause("Source branch does not exist"));
    }
    if !project.can_write(user) {
        return Err(ApiError::ForbiddenBecause("Cannot push to source branch"));
    }
    if mr.state != MrState::Opened || mr.rebase.is_some() {
        return Err(ApiError::conflict(ENQUEUE_FAILED));
    }
    let mr = &mut project.merge_requests[index];
    mr.rebase = Some(RebaseJob {
        polls_left: scope.options.rebase_polls,
        forced_conflict: fault.is_some(),
        user,
    });
    mr.merge_error = None;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({ "rebase_in_progress": true })),
    ))
}

/// A poll of the merge request: a pending rebase counts down, then finishes.
pub fn poll(scope: &mut Scope, index: usize) {
    let mr = &mut scope.project.merge_requests[index];
    let Some(job) = mr.rebase.as_mut() else {
        return;
    };
    if job.polls_left > 0 {
        job.polls_left -= 1;
        return;
    }
    let job = *job;
    mr.rebase = None;
    finish(scope, index, job);
}

/// The commit a successful rebase makes.
struct Rebased {
    parent: String,
    message: String,
    author: String,
    tree: Tree,
}

/// Plans the rebase: the source branch's changes replayed onto the target head as one new
/// commit; `Ok(None)` when already up to date; `Err` when both sides changed the same file
/// differently, a branch is gone, or the conflict fault is set.
fn replayed(project: &Project, mr: &MergeRequest, job: RebaseJob) -> Result<Option<Rebased>, ()> {
    let repo = &project.repo;
    let source = repo.head(&mr.source_branch).ok_or(())?;
    let target = repo.head(&mr.target_branch).ok_or(())?;
    if job.forced_conflict {
        return Err(());
    }
    if repo.is_ancestor(&target.id, &source.id) {
        return Ok(None);
    }
    let base = repo.base_tree(&source.id, &target.id).ok_or(())?;
    let tree = replay(&base, &source.tree, &target.tree).ok_or(())?;
    Ok(Some(Rebased {
        parent: target.id.clone(),
        message: source.message.clone(),
        author: source.author_name.clone(),
        tree,
    }))
}

/// Finishes a rebase: moves the source branch (a push, with its new pipeline and recheck)
/// or records GitLab's `merge_error`.
fn finish(scope: &mut Scope, index: usize, job: RebaseJob) {
    let mr = &scope.project.merge_requests[index];
    match replayed(scope.project, mr, job) {
        Err(()) => {
            scope.project.merge_requests[index].merge_error = Some(REBASE_FAILED.to_owned());
        }
        Ok(None) => {}
        Ok(Some(rebased)) => {
            let branch = mr.source_branch.clone();
            let Rebased {
                parent,
                message,
                author,
                tree,
            } = rebased;
            let repo = &mut scope.project.repo;
            let sha = repo.commit_tree(scope.ids, vec![parent], &message, &author, tree);
            repo.set_branch(&branch, &sha);
            on_push(scope, &branch, job.user);
        }
    }
}
