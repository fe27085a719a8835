//! Read-only observation of merged merge requests, for simulators that react to merges
//! (the deploy pipeline) without owning the GitLab simulator's handle.

use std::sync::{Arc, Mutex, Weak};

use chrono::{DateTime, Utc};

use serde::Serialize;

use super::GitLabControl;
use super::state::{MrState, ProjectId, SimState};

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

/// Collects the merged merge requests, ordered by merge time, then project and iid.
fn merged(state: &Mutex<SimState>) -> Vec<MergedMergeRequest> {
    let state = state.lock().expect("gitlab simulator state poisoned");
    let mut merged: Vec<MergedMergeRequest> = state
        .projects
        .iter()
        .flat_map(|project| {
            project.merge_requests.iter().filter_map(|mr| {
                if mr.state != MrState::Merged {
                    return None;
                }
                Some(MergedMergeRequest {
                    project: project.id,
                    project_path: project.path.clone(),
                    iid: mr.iid,
                    merged_sha: mr.merge_commit_sha.clone().unwrap_or(mr.sha.clone()),
                    description: mr.description.clone(),
                    merged_at: mr.merged_at?,
                })
            })
        })
        .collect();
    merged.sort_by_key(|mr| (mr.merged_at, mr.project, mr.iid));
    merged
}
