//! The control API: methods on [`GitLabControl`] that set the simulator up, steer it
//! (settings, faults, pipelines, foreign pushes) and inspect its state. Tests call them on
//! the handle; the `/_sim` HTTP routes call the same methods.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Serialize, Serializer};

use super::commits::{commit, commit_onto};
use super::error::ApiError;
use super::faults::{Endpoint, Fault, RecordedRequest};
use super::merge_requests::on_push;
use super::pipelines::{self, Pipeline, PipelineOutcome, PipelineStatus, head_pipeline};
use super::repo::{Change, Tree};
use super::state::{AccessLevel, MrState, ProjectId, ProjectSettings, Scope, UserId};
use super::{GitLabControl, projects};

/// Why a control call could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// No project with that id.
    #[error("no project {0}")]
    UnknownProject(ProjectId),
    /// No such branch in the project.
    #[error("no branch {0}")]
    UnknownBranch(String),
    /// No such user.
    #[error("no user {0}")]
    UnknownUser(UserId),
    /// No commit by that name (id, prefix, branch or `HEAD`) in the project.
    #[error("no commit {0}")]
    UnknownCommit(String),
    /// No such pipeline in the project.
    #[error("no pipeline {0}")]
    UnknownPipeline(u64),
    /// The repository refused the change (same messages as the Commits API).
    #[error("commit refused: {0}")]
    Refused(String),
}

/// A merge request as the control API reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MergeRequestSnapshot {
    /// The project-scoped number.
    pub iid: u64,
    /// `opened`, `closed` or `merged`.
    pub state: MrState,
    /// Its title.
    pub title: String,
    /// Branch the changes come from.
    pub source_branch: String,
    /// Branch the changes go to.
    pub target_branch: String,
    /// The head the merge request tracks.
    pub sha: String,
    /// Usernames, in approval order.
    pub approved_by: Vec<String>,
    /// Set once merged.
    pub merge_commit_sha: Option<String>,
    /// A rebase was accepted and has not finished yet.
    pub rebase_in_progress: bool,
    /// The last rebase failure, if any.
    pub merge_error: Option<String>,
    /// Auto-merge is armed (`merge_when_pipeline_succeeds`).
    pub auto_merge: bool,
    /// The head pipeline's id and status.
    #[serde(serialize_with = "pipeline_json")]
    pub head_pipeline: Option<(u64, PipelineStatus)>,
}

/// `{"id": 9001, "status": "running"}` rather than serde's `[9001, "running"]`.
fn pipeline_json<S: Serializer>(
    pipeline: &Option<(u64, PipelineStatus)>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct PipelineJson {
        id: u64,
        status: PipelineStatus,
    }
    pipeline
        .map(|(id, status)| PipelineJson { id, status })
        .serialize(serializer)
}

impl GitLabControl {
    /// Registers a user with a personal access token (`PRIVATE-TOKEN`); calling it again
    /// with the same username adds another token for that user.
    pub fn add_user(&self, username: &str, token: &str) -> UserId {
        let mut state = self.lock();
        let state = &mut *state;
        let base_url = state.base_url.clone();
        state.users.add(&mut state.ids, username, token, &base_url)
    }

    /// Revokes a token, as its owner or an administrator can: every call
    /// with it is answered 401 from then on. `add_user` gives it back.
    pub fn revoke_token(&self, token: &str) {
        self.lock().users.revoke(token);
    }

    /// Creates a project at `path` (e.g. `config/repo`, reachable as `config%2Frepo`)
    /// whose default branch `main` holds a README.
    pub fn create_project(&self, path: &str) -> ProjectId {
        projects::create(&mut self.lock(), path)
    }

    /// Deletes a project: every call naming it is answered `404 Project Not
    /// Found` from then on (doc/api/projects.md, "Delete a project").
    pub fn delete_project(&self, project: ProjectId) {
        self.lock().projects.retain(|p| p.id != project);
    }

    /// The numeric id of the project at `path`.
    pub fn project_id(&self, path: &str) -> Option<ProjectId> {
        let mut state = self.lock();
        state.scope(path).ok().map(|scope| scope.project.id)
    }

    /// Gives a user a role in a project (non-members can read, but not write or approve).
    pub fn add_member(
        &self,
        project: ProjectId,
        user: UserId,
        level: AccessLevel,
    ) -> Result<(), SimError> {
        let mut state = self.lock();
        if state.users.get(user).is_none() {
            return Err(SimError::UnknownUser(user));
        }
        with_scope(&mut state, project, |scope| {
            scope.project.members.insert(user, level);
            Ok(())
        })
    }

    /// Changes a project's settings (approvals required, tier, checklist).
    pub fn update_settings(
        &self,
        project: ProjectId,
        change: impl FnOnce(&mut ProjectSettings),
    ) -> Result<(), SimError> {
        with_scope(&mut self.lock(), project, |scope| {
            change(&mut scope.project.settings);
            Ok(())
        })
    }

    /// Commits on `branch` as `user`, as someone pushing outside the API would (e.g. to move
    /// `main` so an MR needs a rebase). Each change is `(path, Some(content))` to write or
    /// `(path, None)` to delete. Returns the new head.
    pub fn push(
        &self,
        project: ProjectId,
        user: UserId,
        branch: &str,
        changes: &[(&str, Option<&str>)],
    ) -> Result<String, SimError> {
        with_scope(&mut self.lock(), project, |scope| {
            let head = scope.project.repo.head(branch);
            let head = head.ok_or_else(|| SimError::UnknownBranch(branch.to_owned()))?;
            let changes = changes_on(&head.tree, changes);
            let start = head.id.clone();
            commit(scope, user, branch, &start, "External push", &changes)
                .map_err(SimError::Refused)
        })
    }

    /// Commits `changes` (as [`push`](Self::push) takes them) as `user` on top of `base`, a
    /// branch, a commit id (or a unique prefix of one) or `HEAD`, without moving any
    /// branch and so without push hooks: a commit no branch holds yet, as someone
    /// rewriting history prepares locally. [`force_push`](Self::force_push) then puts it
    /// on a branch, e.g. a new commit built off an older one of `main`. Returns its id.
    pub fn push_onto(
        &self,
        project: ProjectId,
        user: UserId,
        base: &str,
        changes: &[(&str, Option<&str>)],
    ) -> Result<String, SimError> {
        with_scope(&mut self.lock(), project, |scope| {
            let start = scope.project.resolve(base);
            let start = start.ok_or_else(|| SimError::UnknownCommit(base.to_owned()))?;
            let changes = changes_on(&start.tree, changes);
            let start = start.id.clone();
            commit_onto(scope, user, &start, "External push", &changes).map_err(SimError::Refused)
        })
    }

    /// Points the existing `branch` at `sha` (any commit: a full id, a unique prefix, a
    /// branch or `HEAD`), as `git push --force` by `user` would, whatever the two histories
    /// share: back to an older commit, or to one [`push_onto`](Self::push_onto) built. The
    /// push hooks run as for any push: open merge requests from the branch take the new
    /// head with a new pipeline in `user`'s name, open merge requests into it are
    /// rechecked. Pointing a branch at its own head changes nothing, as git reports
    /// "Everything up-to-date".
    pub fn force_push(
        &self,
        project: ProjectId,
        user: UserId,
        branch: &str,
        sha: &str,
    ) -> Result<(), SimError> {
        with_scope(&mut self.lock(), project, |scope| {
            let repo = &scope.project.repo;
            let head = repo.head(branch).map(|c| c.id.clone());
            let head = head.ok_or_else(|| SimError::UnknownBranch(branch.to_owned()))?;
            let target = scope.project.resolve(sha).map(|c| c.id.clone());
            let target = target.ok_or_else(|| SimError::UnknownCommit(sha.to_owned()))?;
            if target != head {
                scope.project.repo.set_branch(branch, &target);
                on_push(scope, branch, user);
            }
            Ok(())
        })
    }

    /// Every file on a branch, path → content.
    pub fn files(&self, project: ProjectId, branch: &str) -> Option<BTreeMap<String, String>> {
        let mut state = self.lock();
        let scope = find(&mut state, project).ok()?;
        scope.project.repo.head(branch).map(|c| c.tree.clone())
    }

    /// One file on a branch.
    pub fn file(&self, project: ProjectId, branch: &str, path: &str) -> Option<String> {
        self.files(project, branch)?.remove(path)
    }

    /// A branch's head commit id.
    pub fn branch_head(&self, project: ProjectId, branch: &str) -> Option<String> {
        let mut state = self.lock();
        let scope = find(&mut state, project).ok()?;
        scope.project.repo.head(branch).map(|c| c.id.clone())
    }

    /// A commit's parents, in order (for a merge commit: the target's head,
    /// then the merged head).
    pub fn commit_parents(&self, project: ProjectId, sha: &str) -> Option<Vec<String>> {
        let mut state = self.lock();
        let scope = find(&mut state, project).ok()?;
        scope.project.repo.commit(sha).map(|c| c.parent_ids.clone())
    }

    /// A merge request's current state, without counting as a poll.
    pub fn merge_request(&self, project: ProjectId, iid: u64) -> Option<MergeRequestSnapshot> {
        let mut state = self.lock();
        let scope = find(&mut state, project).ok()?;
        let project = &*scope.project;
        let mr = &project.merge_requests[project.mr_index(iid).ok()?];
        let approved_by = mr.approvals.iter().filter_map(|id| scope.users.get(*id));
        Some(MergeRequestSnapshot {
            iid,
            state: mr.state,
            title: mr.title.clone(),
            source_branch: mr.source_branch.clone(),
            target_branch: mr.target_branch.clone(),
            sha: mr.sha.clone(),
            approved_by: approved_by.map(|user| user.username.clone()).collect(),
            merge_commit_sha: mr.merge_commit_sha.clone(),
            rebase_in_progress: mr.rebase.is_some(),
            merge_error: mr.merge_error.clone(),
            auto_merge: mr.auto_merge,
            head_pipeline: head_pipeline(project, mr).map(|p| (p.id, p.status)),
        })
    }

    /// A pipeline's status, without counting as a poll.
    pub fn pipeline_status(&self, project: ProjectId, id: u64) -> Option<PipelineStatus> {
        let mut state = self.lock();
        let scope = find(&mut state, project).ok()?;
        let pipeline = scope.project.pipelines.iter().find(|p| p.id == id);
        pipeline.map(|p| p.status)
    }

    /// How long a pipeline runs before it may finish (its drawn duration).
    pub fn pipeline_duration(&self, project: ProjectId, id: u64) -> Option<Duration> {
        let mut state = self.lock();
        let scope = find(&mut state, project).ok()?;
        let pipeline = scope.project.pipelines.iter().find(|p| p.id == id);
        pipeline.map(|p| p.duration)
    }

    /// Moves a pipeline one step (`created → pending → running →` outcome); the way to
    /// drive pipelines when `pipeline_steps_per_poll` is 0.
    pub fn advance_pipeline(&self, project: ProjectId, id: u64) -> Result<(), SimError> {
        with_scope(&mut self.lock(), project, |scope| {
            pipelines::update(scope, id, Pipeline::step).map_err(|_| SimError::UnknownPipeline(id))
        })
    }

    /// Forces a pipeline to `failed`, `canceled`, `success`, or stuck in `running`.
    pub fn force_pipeline(
        &self,
        project: ProjectId,
        id: u64,
        outcome: PipelineOutcome,
    ) -> Result<(), SimError> {
        with_scope(&mut self.lock(), project, |scope| {
            pipelines::update(scope, id, |pipeline| pipeline.force(outcome))
                .map_err(|_| SimError::UnknownPipeline(id))
        })
    }

    /// Gives the project a CI history: one past successful merge request pipeline for
    /// each of `durations`, on the target branch's head, the last ended a minute ago.
    pub fn record_past_pipelines(
        &self,
        project: ProjectId,
        durations: &[Duration],
    ) -> Result<(), SimError> {
        with_scope(&mut self.lock(), project, |scope| {
            let sha = scope
                .project
                .repo
                .head(&scope.project.default_branch)
                .map(|commit| commit.id.clone())
                .unwrap_or_default();
            for (index, duration) in durations.iter().enumerate() {
                let ago = Duration::from_secs(60 * (durations.len() - index) as u64);
                pipelines::record_past(scope, &sha, *duration, ago);
            }
            Ok(())
        })
    }

    /// Sets how the next pipelines created in the project end, in order (the pipeline
    /// failure and timeout faults); after the script runs out pipelines succeed.
    pub fn script_pipelines(
        &self,
        project: ProjectId,
        outcomes: impl IntoIterator<Item = PipelineOutcome>,
    ) -> Result<(), SimError> {
        with_scope(&mut self.lock(), project, |scope| {
            scope.project.pipeline_script.extend(outcomes);
            Ok(())
        })
    }

    /// How long pipelines created from now on run: `min`, or with `max` a draw within
    /// `min..=max` (the options' `pipeline_duration` and `pipeline_duration_max`, drawn
    /// as [`GitLabSimOptions::pipeline_seed`](super::GitLabSimOptions::pipeline_seed) says).
    pub fn set_pipeline_durations(&self, min: Duration, max: Option<Duration>) {
        let mut state = self.lock();
        state.options.pipeline_duration = min;
        state.options.pipeline_duration_max = max;
    }

    /// Queues an HTTP-level fault (see [`Fault`] and [`FaultKind`](super::FaultKind)).
    pub fn inject(&self, fault: Fault) {
        self.lock().faults.inject(fault);
    }

    /// Drops every queued fault.
    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// How many calls an endpoint has received, faulted and refused ones included.
    pub fn calls(&self, endpoint: Endpoint) -> usize {
        self.lock().faults.calls(endpoint)
    }

    /// Every call to the simulated API answered so far, in the order answered.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.lock().faults.requests().to_vec()
    }
}

/// `push`'s changes as commit actions on `tree`: a write updates a file `tree` has and
/// creates one it lacks.
fn changes_on(tree: &Tree, changes: &[(&str, Option<&str>)]) -> Vec<Change> {
    changes
        .iter()
        .map(|(path, content)| {
            let path = (*path).to_owned();
            match content {
                None => Change::Delete { path },
                Some(content) if tree.contains_key(&path) => Change::Update {
                    path,
                    content: (*content).to_owned(),
                },
                Some(content) => Change::Create {
                    path,
                    content: (*content).to_owned(),
                },
            }
        })
        .collect()
}

/// The project with numeric id `project`.
fn find(state: &mut super::state::SimState, project: ProjectId) -> Result<Scope<'_>, SimError> {
    state
        .scope(&project.to_string())
        .map_err(|_: ApiError| SimError::UnknownProject(project))
}

/// Runs `f` on the project with numeric id `project`.
fn with_scope<T>(
    state: &mut super::state::SimState,
    project: ProjectId,
    f: impl FnOnce(&mut Scope<'_>) -> Result<T, SimError>,
) -> Result<T, SimError> {
    f(&mut find(state, project)?)
}
