//! Mergeability as GitLab computes it: the ordered `mergeable_state` checks, the git checks
//! (conflict, need rebase), and the `merge_status` / `detailed_merge_status` they yield.
//!
//! Whether a merge request whose target branch moved on must be rebased first depends on
//! the project's merge method: under fast-forward and semi-linear merging it is
//! `need_rebase`; under merge commits it merges as it is.

use super::pipelines::{PipelineStatus, head_pipeline};
use super::state::{MergeRequest, MrState, Project};

/// The git-level relation between the source head and the target branch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GitState {
    /// The target head is an ancestor of the source head.
    UpToDate,
    /// The target moved on; a three-way merge (or a rebase) would be clean.
    Behind,
    /// Both sides changed the same file differently.
    Conflict,
    /// The source or target branch is gone.
    BranchMissing,
}

/// Where the source head stands against the target branch.
pub fn git_state(project: &Project, mr: &MergeRequest) -> GitState {
    let repo = &project.repo;
    let (Some(target), Some(_)) = (repo.head(&mr.target_branch), repo.head(&mr.source_branch))
    else {
        return GitState::BranchMissing;
    };
    if repo.is_ancestor(&target.id, &mr.sha) {
        return GitState::UpToDate;
    }
    match repo.merged_tree(&target.id, &mr.sha) {
        Some(_) => GitState::Behind,
        None => GitState::Conflict,
    }
}

/// The approvals that count towards `approvals_required`: all of them, or with an
/// approval rule naming its approvers, only theirs.
pub fn approvals_given(project: &Project, mr: &MergeRequest) -> usize {
    match &project.settings.eligible_approvers {
        None => mr.approvals.len(),
        Some(eligible) => mr
            .approvals
            .iter()
            .filter(|user| eligible.contains(user))
            .count(),
    }
}

/// Approvals still missing (`approvals_left`).
pub fn approvals_left(project: &Project, mr: &MergeRequest) -> usize {
    project
        .settings
        .approvals_required
        .saturating_sub(approvals_given(project, mr))
}

/// Whether the source head brings no commit the target lacks (it is the target's head or
/// one of its ancestors). `CheckCommitsStatusService`
/// (`app/services/merge_requests/mergeability/check_commits_status_service.rb`) fails
/// `commits_status` then, as for a missing branch: "The source branch must exist and
/// contain commits."
fn has_no_commits(project: &Project, mr: &MergeRequest) -> bool {
    let repo = &project.repo;
    repo.head(&mr.target_branch)
        .is_some_and(|target| repo.is_ancestor(&mr.sha, &target.id))
}

/// GitLab's draft markers at the start of a title.
pub fn is_draft(title: &str) -> bool {
    let title = title.trim_start().to_ascii_lowercase();
    ["draft:", "[draft]", "(draft)"]
        .iter()
        .any(|marker| title.starts_with(marker))
}

/// The first failing `mergeable_state` check (open, draft, commits, CI, approvals), named
/// as `detailed_merge_status` names it; `None` when all pass.
pub fn state_failure(project: &Project, mr: &MergeRequest, skip_ci: bool) -> Option<&'static str> {
    if mr.state != MrState::Opened {
        return Some("not_open");
    }
    if is_draft(&mr.title) {
        return Some("draft_status");
    }
    if git_state(project, mr) == GitState::BranchMissing || has_no_commits(project, mr) {
        return Some("commits_status");
    }
    if !skip_ci && project.settings.pipelines_must_succeed {
        match head_pipeline(project, mr).map(|p| p.status) {
            Some(PipelineStatus::Success) => {}
            Some(status) if status.is_active() => return Some("ci_still_running"),
            _ => return Some("ci_must_pass"),
        }
    }
    if approvals_left(project, mr) > 0 {
        return Some("not_approved");
    }
    None
}

/// The failing git check (`conflict`, `need_rebase`), if any; a target that moved on
/// needs a rebase only under a merge method that keeps history linear.
pub fn git_failure(project: &Project, mr: &MergeRequest) -> Option<&'static str> {
    match git_state(project, mr) {
        GitState::Conflict => Some("conflict"),
        GitState::Behind if project.settings.merge_method.needs_up_to_date_source() => {
            Some("need_rebase")
        }
        GitState::Behind | GitState::UpToDate | GitState::BranchMissing => None,
    }
}

/// `mergeable?`: every state check and every git check passes.
pub fn mergeable(project: &Project, mr: &MergeRequest) -> bool {
    state_failure(project, mr, false).is_none() && git_failure(project, mr).is_none()
}

/// The mergeability fields of the merge request entity.
#[derive(Clone, Copy, Debug)]
pub struct Mergeability {
    pub merge_status: &'static str,
    pub detailed_merge_status: &'static str,
    pub has_conflicts: bool,
}

/// What a GET shows now; while the asynchronous check is pending it shows `unchecked`
/// on the first poll and `checking` after that.
pub fn evaluate(project: &Project, mr: &MergeRequest) -> Mergeability {
    if mr.state != MrState::Opened {
        return Mergeability {
            merge_status: "can_be_merged",
            detailed_merge_status: "not_open",
            has_conflicts: false,
        };
    }
    if mr.checks_pending > 0 {
        let pending = if mr.checks_seen {
            "checking"
        } else {
            "unchecked"
        };
        return Mergeability {
            merge_status: pending,
            detailed_merge_status: pending,
            has_conflicts: false,
        };
    }
    let conflict = git_state(project, mr) == GitState::Conflict;
    let detailed = state_failure(project, mr, false).or_else(|| git_failure(project, mr));
    Mergeability {
        merge_status: if conflict {
            "cannot_be_merged"
        } else {
            "can_be_merged"
        },
        detailed_merge_status: detailed.unwrap_or("mergeable"),
        has_conflicts: conflict,
    }
}
