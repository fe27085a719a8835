//! The merge request entities: `MergeRequestBasic` for lists and the detailed
//! `MergeRequest` for single reads, relative to the caller (`user.can_merge`).

use serde_json::{Map, Value, json};

use super::auth::Users;
use super::mergeability::{evaluate, is_draft};
use super::pipelines::head_pipeline;
use super::repo::{Commit, diff_len};
use super::state::{MergeRequest, MrState, Project, UserId, timestamp, timestamp_opt};

/// Which variant of the entity to render.
#[derive(Clone, Copy, Debug)]
pub enum View {
    /// `MergeRequestBasic`, as lists show it.
    Basic,
    /// The detailed entity as a GET shows it.
    Detail {
        caller: UserId,
        include_rebase_in_progress: bool,
    },
    /// The create response: asynchronously filled fields (`head_pipeline`, `diff_refs`,
    /// `changes_count`) are still null, as GitLab documents.
    Created { caller: UserId },
}

/// Renders a merge request of `project`.
pub fn render(project: &Project, users: &Users, mr: &MergeRequest, view: View) -> Value {
    let mergeability = evaluate(project, mr);
    let merged = mr.state == MrState::Merged;
    let draft = is_draft(&mr.title);
    let full_path = format!("{}!{}", project.path, mr.iid);
    let mut body = json!({
        "id": mr.id,
        "iid": mr.iid,
        "project_id": project.id,
        "title": mr.title,
        "description": mr.description,
        "state": mr.state.as_str(),
        "created_at": timestamp(mr.created_at),
        "updated_at": timestamp(mr.updated_at),
        "merged_by": users.json(mr.merge_user.filter(|_| merged)),
        "merge_user": users.json(mr.merge_user),
        "merged_at": timestamp_opt(mr.merged_at),
        "closed_by": users.json(mr.closed_by),
        "closed_at": timestamp_opt(mr.closed_at),
        "target_branch": mr.target_branch,
        "source_branch": mr.source_branch,
        "user_notes_count": 0,
        "upvotes": 0,
        "downvotes": 0,
    });
    // Two literals: one would exceed `json!`'s macro recursion limit.
    let more = json!({
        "author": users.json(Some(mr.author)),
        "assignees": [],
        "assignee": null,
        "reviewers": [],
        "source_project_id": project.id,
        "target_project_id": project.id,
        "labels": [],
        "draft": draft,
        "work_in_progress": draft,
        "milestone": null,
        "merge_when_pipeline_succeeds": mr.auto_merge,
        "merge_status": mergeability.merge_status,
        "detailed_merge_status": mergeability.detailed_merge_status,
        "merge_after": null,
        "sha": mr.sha,
        "merge_commit_sha": mr.merge_commit_sha,
        "squash_commit_sha": null,
        "discussion_locked": null,
        "should_remove_source_branch": mr.should_remove_source_branch,
        "force_remove_source_branch": false,
        "prepared_at": timestamp(mr.created_at),
        "reference": format!("!{}", mr.iid),
        "references": {
            "short": format!("!{}", mr.iid),
            "relative": format!("!{}", mr.iid),
            "full": full_path,
        },
        "web_url": format!("{}/-/merge_requests/{}", project.web_url, mr.iid),
        "squash": false,
        "squash_on_merge": false,
        "has_conflicts": mergeability.has_conflicts,
        "blocking_discussions_resolved": true,
        "approvals_before_merge": null,
    });
    let (Value::Object(fields), Value::Object(more)) = (&mut body, more) else {
        return body;
    };
    fields.extend(more);
    match view {
        View::Basic => {}
        View::Created { caller } => {
            detail_fields(project, users, mr, caller, fields);
            for field in ["head_pipeline", "pipeline", "diff_refs", "changes_count"] {
                fields.insert(field.to_owned(), Value::Null);
            }
        }
        View::Detail {
            caller,
            include_rebase_in_progress,
        } => {
            detail_fields(project, users, mr, caller, fields);
            if include_rebase_in_progress {
                fields.insert("rebase_in_progress".into(), mr.rebase.is_some().into());
            }
        }
    }
    body
}

/// The target commit a merge request's diff starts from (`diff_refs.start_sha`): the
/// target branch's head, or for a merged request the head it was merged onto, so its
/// diff stays the one that was merged (GitLab keeps the merge request's last diff,
/// `MergeRequestDiff`, rather than comparing with a target that now contains it).
pub fn diff_start<'a>(project: &'a Project, mr: &MergeRequest) -> Option<&'a Commit> {
    let repo = &project.repo;
    match (mr.state, &mr.target_sha_at_merge) {
        (MrState::Merged, Some(target)) => repo.commit(target),
        _ => repo.head(&mr.target_branch),
    }
}

/// The fields only the single-MR entity has.
fn detail_fields(
    project: &Project,
    users: &Users,
    mr: &MergeRequest,
    caller: UserId,
    fields: &mut Map<String, Value>,
) {
    let pipeline = head_pipeline(project, mr);
    let repo = &project.repo;
    let target = diff_start(project, mr);
    let base = target.and_then(|target| repo.merge_base(&mr.sha, &target.id));
    let changes = match (base, repo.commit(&mr.sha)) {
        (Some(base), Some(head)) => Value::String(diff_len(&base.tree, &head.tree).to_string()),
        _ => Value::Null,
    };
    let can_merge = project.can_write(caller) && mr.state == MrState::Opened;
    let detail = json!({
        "subscribed": false,
        "changes_count": changes,
        "latest_build_started_at": null,
        "latest_build_finished_at": null,
        "first_deployed_to_production_at": null,
        "pipeline": pipeline.map(|p| p.basic_json()),
        "head_pipeline": pipeline.map(|p| p.json(users)),
        "diff_refs": {
            "base_sha": base.map(|c| c.id.as_str()),
            "head_sha": mr.sha,
            "start_sha": target.map(|c| c.id.as_str()),
        },
        "merge_error": mr.merge_error,
        "first_contribution": false,
        "user": { "can_merge": can_merge },
    });
    if let Value::Object(detail) = detail {
        fields.extend(detail);
    }
}
