//! Read-only observation of merged merge requests, for simulators that react to merges
//! (the deploy pipeline) without owning the GitLab simulator's handle.

use std::sync::{Arc, Mutex, Weak};

use chrono::{DateTime, Utc};

use serde::Serialize;

use super::GitLabControl;
use super::state::{MergeMethod, MrState, ProjectId, SimState};

/// A merged merge request, as a deploy pipeline sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MergedMergeRequest {
    /// The project's numeric id.
    pub project: ProjectId,
    /// The project's full path (`group/repo`).
    pub project_path: String,
    /// The project-scoped number.
    pub iid: u64,
    /// The commit the merge put on the target branch: the merge commit, or the merge
    /// request's head after a fast-forward merge (which makes none).
    pub merged_sha: String,
    /// The description as of the merge (where changegate writes its trailers).
    pub description: String,
    /// When it was merged.
    pub merged_at: DateTime<Utc>,
}

/// A cloneable, read-only view of a simulator that does not keep it alive: once the
/// [`GitLabSimHandle`](super::GitLabSimHandle) is dropped and its last connection has
/// closed, reads answer `None`.
#[derive(Clone, Debug)]
pub struct GitLabObserver {
    state: Weak<Mutex<SimState>>,
}

impl GitLabObserver {
    /// Every merged merge request of every project, oldest merge first; `None` once the
    /// simulator is gone.
    pub fn merged_merge_requests(&self) -> Option<Vec<MergedMergeRequest>> {
        self.state.upgrade().map(|state| merged(&state))
    }
}

impl GitLabControl {
    /// Every merged merge request of every project, oldest merge first.
    pub fn merged_merge_requests(&self) -> Vec<MergedMergeRequest> {
        merged(&self.state)
    }

    /// A view for background observers that must not outlive the simulator.
    pub fn observer(&self) -> GitLabObserver {
        GitLabObserver {
            state: Arc::downgrade(&self.state),
        }
    }
}

/// Collects the merged merge requests in the order they merged (the merge log's), then
/// by project and iid for a merged request the log does not hold.
fn merged(state: &Mutex<SimState>) -> Vec<MergedMergeRequest> {
    let state = state.lock().expect("gitlab simulator state poisoned");
    let mut merged: Vec<(Option<u64>, MergedMergeRequest)> = state
        .projects
        .iter()
        .flat_map(|project| {
            project.merge_requests.iter().filter_map(|mr| {
                if mr.state != MrState::Merged {
                    return None;
                }
                let seq = project
                    .merge_log
                    .iter()
                    .rfind(|merge| merge.iid == mr.iid)
                    .map(|merge| merge.seq);
                let noticed = MergedMergeRequest {
                    project: project.id,
                    project_path: project.path.clone(),
                    iid: mr.iid,
                    merged_sha: mr.merge_commit_sha.clone().unwrap_or(mr.sha.clone()),
                    description: mr.description.clone(),
                    merged_at: mr.merged_at?,
                };
                Some((seq, noticed))
            })
        })
        .collect();
    merged.sort_by_key(|(seq, mr)| (seq.is_none(), *seq, mr.merged_at, mr.project, mr.iid));
    merged.into_iter().map(|(_, mr)| mr).collect()
}

/// One merge, as the merge log records it: which merge request merged, the head it merged
/// and what the target branch was before and after. A merge train's test reads the log to
/// check that merges happened in train order, each onto the one before it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MergeRecord {
    /// The merge's place among every merge of the simulator (1 for the first), across
    /// projects: a total order, unlike timestamps.
    pub seq: u64,
    /// The merge request's project-scoped number.
    pub iid: u64,
    /// Its source branch.
    pub source_branch: String,
    /// The branch it merged into.
    pub target_branch: String,
    /// The merge request's head that merged (its `sha`).
    pub head_sha: String,
    /// Whether the merge call pinned that head with `sha`; false for a merge without
    /// `sha` and for an auto-merge.
    pub pinned: bool,
    /// The target branch's head just before the merge: what it was merged onto.
    pub target_before: String,
    /// The target branch's head just after: the merge commit, or `head_sha` after a
    /// fast-forward.
    pub target_after: String,
    /// The project's merge method at the time.
    pub merge_method: MergeMethod,
    /// When it merged.
    pub merged_at: DateTime<Utc>,
    /// Set when this merge request was not merged itself: the merge of the one named
    /// (a branch stacked on its head) brought its head into the target, and GitLab marks
    /// it merged then. `pinned` is false, and the targets are the carrier's.
    pub carried_by: Option<u64>,
}

impl GitLabControl {
    /// Every merge in the project, in the order they happened (see [`MergeRecord`]);
    /// empty for an unknown project.
    pub fn merge_log(&self, project: ProjectId) -> Vec<MergeRecord> {
        let state = self.state.lock().expect("gitlab simulator state poisoned");
        state
            .projects
            .iter()
            .find(|p| p.id == project)
            .map(|p| p.merge_log.clone())
            .unwrap_or_default()
    }
}
