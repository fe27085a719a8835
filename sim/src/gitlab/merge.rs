//! `PUT /merge_requests/:iid/merge` with GitLab's gate order (401 → 405 → 422/406 → 409),
//! the merge itself (a real merge commit, or a fast-forward, on the target branch), and
//! auto-merge.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use chrono::Utc;
use serde::Deserialize;
use serde_json::Value;

use super::auth::Caller;
use super::error::{ApiError, ApiResult};
use super::mergeability::{mergeable, state_failure};
use super::mr_view::{View, render};
use super::observe::MergeRecord;
use super::params::JsonBody;
use super::pipelines::{PipelineStatus, head_pipeline};
use super::state::{MergeMethod, MrState, Scope, UserId};
use super::{CannotMergeStatus, SimContext, merge_requests};

/// Body of the merge endpoint.
#[derive(Debug, Deserialize)]
pub struct MergeParams {
    sha: Option<String>,
    should_remove_source_branch: Option<bool>,
    merge_when_pipeline_succeeds: Option<bool>,
    auto_merge: Option<bool>,
}

/// `PUT /projects/:id/merge_requests/:iid/merge`, following `lib/api/merge_requests.rb`:
/// 401 without merge right; 405 unless mergeable now (or auto-mergeable); 422 (406 on old
/// versions) on the git checks; only then 409 for a stale `sha`. The checks run
/// synchronously, as GitLab's `mergeable?` does, so a mergeability check still shown as
/// pending to GET polls does not block a merge.
pub async fn merge_mr(
    State(ctx): State<SimContext>,
    Caller(user): Caller,
    Path((project, iid)): Path<(String, u64)>,
    JsonBody(params): JsonBody<MergeParams>,
) -> ApiResult<Json<Value>> {
    let mut state = ctx.lock();
    let mut scope = state.scope(&project)?;
    let index = scope.project.mr_index(iid)?;
    if !scope.project.can_write(user) {
        return Err(ApiError::Unauthorized);
    }
    let project = &*scope.project;
    let mr = &project.merge_requests[index];
    let auto =
        params.merge_when_pipeline_succeeds.unwrap_or(false) || params.auto_merge.unwrap_or(false);
    let pipeline = head_pipeline(project, mr).map(|p| p.status);
    let immediately = if auto {
        pipeline == Some(PipelineStatus::Success)
    } else {
        state_failure(project, mr, false).is_none()
    };
    let automatically =
        auto && mr.state == MrState::Opened && pipeline.is_some_and(PipelineStatus::is_active);
    if !immediately && !automatically {
        return Err(ApiError::MethodNotAllowed);
    }
    if !automatically && !mergeable(project, mr) {
        return Err(cannot_be_merged(scope.options.cannot_merge_status));
    }
    if let Some(sha) = params.sha.as_deref()
        && sha != mr.sha
    {
        return Err(ApiError::sha_mismatch(&mr.sha));
    }
    let remove_source = params.should_remove_source_branch.unwrap_or(false);
    let mr = &mut scope.project.merge_requests[index];
    mr.should_remove_source_branch |= remove_source;
    if automatically {
        mr.auto_merge = true;
        mr.merge_user = Some(user);
        try_auto_merge(&mut scope, index);
    } else if !perform(&mut scope, index, user, params.sha.is_some()) {
        // Step 6: GitLab re-reads the MR and answers 422 when the merge did not happen.
        return Err(cannot_be_merged(scope.options.cannot_merge_status));
    }
    let view = View::Detail {
        caller: user,
        include_rebase_in_progress: false,
    };
    let mr = &scope.project.merge_requests[index];
    Ok(Json(render(scope.project, scope.users, mr, view)))
}

/// "Branch cannot be merged" with the configured status.
fn cannot_be_merged(status: CannotMergeStatus) -> ApiError {
    ApiError::CannotBeMerged(match status {
        CannotMergeStatus::Unprocessable => StatusCode::UNPROCESSABLE_ENTITY,
        CannotMergeStatus::NotAcceptable => StatusCode::NOT_ACCEPTABLE,
    })
}

/// Merges a mergeable merge request as the project's merge method says
/// (`app/services/merge_requests/merge_strategies/from_source_branch.rb`): a merge commit
/// (parents: target head, source head; tree: the three-way merge of the two, which is the
/// source's own tree once it contains the target) sets `merge_commit_sha`; a fast-forward
/// moves the target to the source head and leaves `merge_commit_sha` null. False when a
/// branch or the head commit is gone, or the trees conflict, so nothing could be merged.
/// `pinned`: the merge call named the head with `sha` (recorded in the merge log).
fn perform(scope: &mut Scope, index: usize, user: UserId, pinned: bool) -> bool {
    let project = &mut *scope.project;
    let mr = &project.merge_requests[index];
    let (Some(target), Some(source)) = (
        project.repo.head(&mr.target_branch),
        project.repo.commit(&mr.sha),
    ) else {
        return false;
    };
    let (target_sha, source_sha) = (target.id.clone(), source.id.clone());
    let merge_sha = if project.settings.merge_method == MergeMethod::Ff {
        None
    } else {
        let Some(tree) = project.repo.merged_tree(&target_sha, &source_sha) else {
            return false;
        };
        let message = format!(
            "Merge branch '{}' into '{}'\n\n{}\n\nSee merge request {}!{}",
            mr.source_branch, mr.target_branch, mr.title, project.path, mr.iid
        );
        let author = scope
            .users
            .get(user)
            .map_or("unknown", |u| u.username.as_str());
        let parents = vec![target_sha.clone(), source_sha.clone()];
        Some(
            project
                .repo
                .commit_tree(scope.ids, parents, &message, author, tree),
        )
    };
    let mr = &mut project.merge_requests[index];
    let target_after = merge_sha.clone().unwrap_or_else(|| source_sha.clone());
    project.repo.set_branch(&mr.target_branch, &target_after);
    let now = Utc::now();
    project.merge_log.push(MergeRecord {
        seq: scope.ids.merge(),
        iid: mr.iid,
        source_branch: mr.source_branch.clone(),
        target_branch: mr.target_branch.clone(),
        head_sha: source_sha,
        pinned,
        target_before: target_sha.clone(),
        target_after,
        merge_method: project.settings.merge_method,
        merged_at: now,
        carried_by: None,
    });
    mr.state = MrState::Merged;
    mr.merged_at = Some(now);
    mr.updated_at = now;
    mr.merge_user = Some(user);
    mr.merge_commit_sha = merge_sha;
    mr.target_sha_at_merge = Some(target_sha.clone());
    mr.auto_merge = false;
    if mr.should_remove_source_branch {
        project.repo.delete_branch(&mr.source_branch);
    }
    let (target, iid) = (mr.target_branch.clone(), mr.iid);
    merged_by_push(scope, iid, &target_sha, user);
    merge_requests::on_push(scope, &target, user);
    true
}

/// The merge of `carrier` moved its target branch from `before`: every other open merge
/// request into that branch whose head the branch now holds is merged with it, as
/// GitLab's `MergeRequests::RefreshService#post_merge_manually_merged`
/// (`app/services/merge_requests/refresh_service.rb`) marks merge requests whose head a
/// push brought into their target. Its `merge_commit_sha` is the commit that brought the
/// head in (`Gitlab::BranchPushMergeCommitAnalyzer`): the head itself on the branch's
/// first-parent line (a fast-forward), else the merge commit of that line above it. So a
/// branch stacked on another's head, merged first, merges the one underneath too; the
/// merge log records that as a merge carried by `carrier`.
fn merged_by_push(scope: &mut Scope, carrier: u64, before: &str, user: UserId) {
    let project = &mut *scope.project;
    let Some(carrier_mr) = project.merge_requests.iter().find(|mr| mr.iid == carrier) else {
        return;
    };
    let target = carrier_mr.target_branch.clone();
    let Some(after) = project.repo.head(&target).map(|c| c.id.clone()) else {
        return;
    };
    // The branch's first-parent line from `after` down to `before`, newest first.
    let mut line = Vec::new();
    let mut at = Some(after.clone());
    while let Some(sha) = at.filter(|sha| *sha != before) {
        at = project
            .repo
            .commit(&sha)
            .and_then(|c| c.parent_ids.first().cloned());
        line.push(sha);
    }
    let repo = &project.repo;
    let carried: Vec<(usize, String)> = project
        .merge_requests
        .iter()
        .enumerate()
        .filter(|(_, mr)| {
            mr.state == MrState::Opened
                && mr.target_branch == target
                && repo.is_ancestor(&mr.sha, &after)
                && !repo.is_ancestor(&mr.sha, before)
        })
        .filter_map(|(index, mr)| {
            let brought_in = line
                .iter()
                .rev()
                .find(|commit| repo.is_ancestor(&mr.sha, commit))?;
            Some((index, brought_in.clone()))
        })
        .collect();
    let now = Utc::now();
    for (index, merge_commit) in carried {
        let mr = &mut project.merge_requests[index];
        project.merge_log.push(MergeRecord {
            seq: scope.ids.merge(),
            iid: mr.iid,
            source_branch: mr.source_branch.clone(),
            target_branch: mr.target_branch.clone(),
            head_sha: mr.sha.clone(),
            pinned: false,
            target_before: before.to_owned(),
            target_after: after.clone(),
            merge_method: project.settings.merge_method,
            merged_at: now,
            carried_by: Some(carrier),
        });
        mr.state = MrState::Merged;
        mr.merged_at = Some(now);
        mr.updated_at = now;
        mr.merge_user = Some(user);
        mr.merge_commit_sha = Some(merge_commit);
        mr.target_sha_at_merge = Some(before.to_owned());
        mr.auto_merge = false;
    }
}

/// Merges an armed merge request once everything passes (pipeline, approvals, git state);
/// otherwise it stays armed, as GitLab's auto-merge waits.
pub fn try_auto_merge(scope: &mut Scope, index: usize) {
    let mr = &scope.project.merge_requests[index];
    if !mr.auto_merge || !mergeable(scope.project, mr) {
        return;
    }
    if let Some(user) = mr.merge_user {
        // A failed attempt leaves it armed for the next pipeline or approval event.
        perform(scope, index, user, false);
    }
}

/// A pipeline of head `sha` finished: armed merge requests at that head merge on success and
/// are disarmed on failure or cancelation.
pub fn pipeline_finished(scope: &mut Scope, sha: &str, status: PipelineStatus) {
    let armed: Vec<usize> = (0..scope.project.merge_requests.len())
        .filter(|i| {
            let mr = &scope.project.merge_requests[*i];
            mr.auto_merge && mr.sha == sha
        })
        .collect();
    for index in armed {
        if status == PipelineStatus::Success {
            try_auto_merge(scope, index);
        } else {
            let mr = &mut scope.project.merge_requests[index];
            mr.auto_merge = false;
            mr.merge_user = None;
        }
    }
}
