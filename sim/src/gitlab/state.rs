//! The simulator's in-memory model: projects with their settings and members, merge
//! requests, the id and SHA counters, and the state behind the mutex.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::GitLabSimOptions;
use super::auth::Users;
use super::error::{ApiError, ApiResult};
use super::faults::Faults;
use super::observe::MergeRecord;
use super::pipelines::{Pipeline, PipelineOutcome};
use super::repo::{Commit, Repo};

/// A user's numeric id.
pub type UserId = u64;
/// A project's numeric id.
pub type ProjectId = u64;

/// A project role; the simulated endpoints only tell reading from writing apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AccessLevel {
    /// Reads; cannot push, approve or merge.
    Reporter,
    /// Pushes, approves and merges.
    Developer,
}

/// Which edition's `approvals` body the project answers with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// Free/CE: `MergeRequestApprovals`.
    #[default]
    Ce,
    /// Premium/EE: `ApprovalState`.
    Ee,
}

/// One item of the approval checklist extension.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChecklistItem {
    /// Stable id the approver echoes back.
    pub id: String,
    /// Text shown to the approver.
    pub label: String,
}

impl ChecklistItem {
    /// Builds an item from its id and label.
    pub fn new(id: impl Into<String>, label: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            label: label.into(),
        }
    }
}

/// How a merge lands on the target branch: the project's `merge_method`
/// (`doc/user/project/merge_requests/methods/_index.md`; the REST spelling is
/// `lib/api/entities/project.rb`'s).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MergeMethod {
    /// "Merge commit": a merge commit whose tree is the three-way merge of the target
    /// and the merge request; a target that moved on needs no rebase. GitLab's default
    /// for a new project, so the simulator's too: `Project#merge_method`
    /// (`app/models/project.rb`) is `:merge` unless `merge_requests_ff_only_enabled` or
    /// `merge_requests_rebase_enabled` is set, and both start off.
    #[default]
    Merge,
    /// "Merge commit with semi-linear history": a merge commit, made only once the
    /// source contains the target's head (`need_rebase` until rebased).
    RebaseMerge,
    /// "Fast-forward merge": the target branch moves to the merge request's head; no
    /// merge commit (`merge_commit_sha` stays null), `need_rebase` until rebased.
    Ff,
}

impl MergeMethod {
    /// The REST spelling (`merge`, `rebase_merge`, `ff`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Merge => "merge",
            Self::RebaseMerge => "rebase_merge",
            Self::Ff => "ff",
        }
    }

    /// `ff_merge_must_be_possible?`: the source must contain the target's head, so a
    /// target that moved on is `need_rebase`
    /// (`app/services/merge_requests/mergeability/check_rebase_status_service.rb`).
    pub fn needs_up_to_date_source(self) -> bool {
        self != Self::Merge
    }
}

/// Per-project behaviour, changeable at any time through the control API.
#[derive(Clone, Debug)]
pub struct ProjectSettings {
    /// Approvals the merge gate requires (both tiers). 0 makes approvals optional, as
    /// on GitLab Free, whose merge requests need none.
    pub approvals_required: usize,
    /// The approvers an approval rule names (EE): only their approvals count towards
    /// `approvals_required`, and others may approve only once the rule is met
    /// (`user_can_approve: false`, approve answers 401). `None`: every member with
    /// the approve right counts, as GitLab's "All eligible users" rule.
    pub eligible_approvers: Option<Vec<UserId>>,
    /// Which `approvals` body to answer with.
    pub tier: Tier,
    /// Whether approve requires the checklist extension's `checklist` field.
    pub approval_checklist_required: bool,
    /// The current checklist served by `GET /projects/:id/approval_checklist`.
    pub approval_checklist: Vec<ChecklistItem>,
    /// "Pipelines must succeed" (`only_allow_merge_if_pipeline_succeeds`):
    /// off, an MR is mergeable whatever its pipeline, as on GitLab.
    pub pipelines_must_succeed: bool,
    /// A poisoned change: a pipeline whose commit has a file containing this
    /// text anywhere in its tree fails, whatever the pipeline script says (so a
    /// batch fails while it carries the poisoned file, and passes without it).
    /// The whole tree counts, so a branch stacked on another's head fails for a
    /// file that came from the branch underneath. Read when the pipeline is
    /// created (and when it is retried).
    pub failing_content: Option<String>,
    /// The project's CI publishes a JUnit report (`artifacts:reports:junit`)
    /// with one test case per file of the tree it checks, naming the file,
    /// failed where the file holds `failing_content`. Off, as for a project
    /// without one, a pipeline's test report is empty.
    pub junit_reports: bool,
    /// How merges land.
    pub merge_method: MergeMethod,
    /// "Merged results pipelines" (`doc/ci/pipelines/merged_results_pipelines.md`):
    /// a merge request's pipelines run for `refs/merge-requests/<iid>/merge`, on an
    /// internal commit merging its head into the target, rather than for the head.
    pub merged_results_pipelines: bool,
    /// How long this project's pipelines run, in place of the options'
    /// `pipeline_duration` (and its draws): projects sharing one merge train
    /// whose CI takes different times.
    pub pipeline_duration: Option<std::time::Duration>,
}

impl Default for ProjectSettings {
    fn default() -> Self {
        Self {
            approvals_required: 2,
            eligible_approvers: None,
            tier: Tier::default(),
            approval_checklist_required: false,
            approval_checklist: Vec::new(),
            failing_content: None,
            junit_reports: false,
            pipelines_must_succeed: true,
            merge_method: MergeMethod::default(),
            merged_results_pipelines: false,
            pipeline_duration: None,
        }
    }
}

/// A merge request's `state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MrState {
    /// `opened`
    Opened,
    /// `closed`
    Closed,
    /// `merged`
    Merged,
}

impl MrState {
    /// The REST spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Opened => "opened",
            Self::Closed => "closed",
            Self::Merged => "merged",
        }
    }
}

/// A rebase that has been accepted (202) and finishes after some polls.
#[derive(Clone, Copy, Debug)]
pub struct RebaseJob {
    /// GET polls that still report `rebase_in_progress: true`.
    pub polls_left: u32,
    /// Who asked; the rebased head's pipeline runs as them.
    pub user: UserId,
    /// Set by the rebase-conflict fault: fail even if the trees would replay cleanly.
    pub forced_conflict: bool,
}

/// A merge request and everything GitLab tracks about it. Fields carry GitLab's names;
/// only those whose meaning is not the REST field's are documented.
#[derive(Clone, Debug)]
pub struct MergeRequest {
    pub id: u64,
    pub iid: u64,
    pub title: String,
    pub description: String,
    pub author: UserId,
    pub state: MrState,
    pub source_branch: String,
    pub target_branch: String,
    /// The diff head: the source branch head as of the last push the MR saw.
    pub sha: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub merged_at: Option<DateTime<Utc>>,
    pub closed_at: Option<DateTime<Utc>>,
    pub closed_by: Option<UserId>,
    /// Who merged, or who armed auto-merge.
    pub merge_user: Option<UserId>,
    pub merge_commit_sha: Option<String>,
    /// The target branch's head when it merged: where the changes were merged onto.
    pub target_sha_at_merge: Option<String>,
    /// Approvers in approval order.
    pub approvals: Vec<UserId>,
    /// GET polls left that still report the mergeability check as pending.
    pub checks_pending: u32,
    /// Whether the pending check has been reported once (`unchecked`, then `checking`).
    pub checks_seen: bool,
    /// `rebase_in_progress` is `rebase.is_some()`.
    pub rebase: Option<RebaseJob>,
    pub merge_error: Option<String>,
    /// Auto-merge armed (`merge_when_pipeline_succeeds`).
    pub auto_merge: bool,
    pub should_remove_source_branch: bool,
}

impl MergeRequest {
    /// Restarts the asynchronous mergeability check, as a push or rebase does.
    pub fn recheck(&mut self, polls: u32) {
        self.checks_pending = polls;
        self.checks_seen = false;
    }
}

/// A project: members, settings, repository, merge requests and pipelines. Fields carry
/// GitLab's names; only those whose meaning is not the REST field's are documented.
#[derive(Debug)]
pub struct Project {
    pub id: ProjectId,
    pub path: String,
    pub default_branch: String,
    /// `{base_url}/{path}`; other web URLs extend it.
    pub web_url: String,
    pub created_at: DateTime<Utc>,
    /// Non-members can still read (the projects are "internal").
    pub members: HashMap<UserId, AccessLevel>,
    pub settings: ProjectSettings,
    pub repo: Repo,
    /// Indexed by `iid - 1`.
    pub merge_requests: Vec<MergeRequest>,
    pub pipelines: Vec<Pipeline>,
    /// Outcomes for the next pipelines created, in order; empty means success.
    pub pipeline_script: VecDeque<PipelineOutcome>,
    /// Every merge, in the order they happened.
    pub merge_log: Vec<MergeRecord>,
}

impl Project {
    /// Push, approve and merge right.
    pub fn can_write(&self, user: UserId) -> bool {
        self.members.get(&user) == Some(&AccessLevel::Developer)
    }

    /// The commit a ref names: `HEAD` is the default branch's head (the symbolic ref a
    /// GitLab repository's `HEAD` is, which the Files API documents as "Use `HEAD` to
    /// automatically use the default branch", doc/api/repository_files.md); anything else
    /// as [`Repo::resolve`] finds it.
    pub fn resolve(&self, reference: &str) -> Option<&Commit> {
        match reference {
            "HEAD" => self.repo.head(&self.default_branch),
            _ => self.repo.resolve(reference),
        }
    }

    /// The index of merge request `iid`, or GitLab's 404.
    pub fn mr_index(&self, iid: u64) -> ApiResult<usize> {
        let index = usize::try_from(iid)
            .ok()
            .and_then(|iid| iid.checked_sub(1))
            .filter(|index| *index < self.merge_requests.len());
        index.ok_or(ApiError::NotFound("Merge Request"))
    }
}

/// Id counters and the fake SHA generator.
#[derive(Debug)]
pub struct Ids {
    users: u64,
    projects: u64,
    merge_requests: u64,
    pipelines: u64,
    merges: u64,
    shas: u64,
}

impl Ids {
    fn new() -> Self {
        // Each kind starts in its own range so a client mixing up ids fails loudly.
        Self {
            users: 10,
            projects: 100,
            merge_requests: 5000,
            pipelines: 9000,
            merges: 0,
            shas: 0,
        }
    }

    /// The next user id.
    pub fn user(&mut self) -> UserId {
        self.users += 1;
        self.users
    }

    /// The next project id.
    pub fn project(&mut self) -> ProjectId {
        self.projects += 1;
        self.projects
    }

    /// The next (instance-wide) merge request id.
    pub fn merge_request(&mut self) -> u64 {
        self.merge_requests += 1;
        self.merge_requests
    }

    /// The next (instance-wide) pipeline id.
    pub fn pipeline(&mut self) -> u64 {
        self.pipelines += 1;
        self.pipelines
    }

    /// The next merge's place in the order of every merge (1 for the first).
    pub fn merge(&mut self) -> u64 {
        self.merges += 1;
        self.merges
    }

    /// A fresh commit id: a [`hex_id`] of the content whose last 8 digits are a counter, so
    /// every commit is unique even when two have identical content.
    pub fn sha(&mut self, content: impl Hash) -> String {
        self.shas += 1;
        let digest = hex_id((self.shas, content));
        format!("{}{:08x}", &digest[..32], self.shas)
    }
}

/// 40 hex digits derived from `content`, shaped like a git object id. Commit ids need not
/// be git's (no client recomputes one), so chained `DefaultHasher` digests do: deterministic
/// within a run and spread well enough. Blob and tree ids are git's own (`tree.rs`).
pub fn hex_id(content: impl Hash) -> String {
    let mut digits = String::with_capacity(48);
    let mut seed = 0u64;
    for _ in 0..3 {
        let mut hasher = DefaultHasher::new();
        (seed, &content).hash(&mut hasher);
        seed = hasher.finish();
        digits.push_str(&format!("{seed:016x}"));
    }
    digits.truncate(40);
    digits
}

/// Everything behind the simulator's mutex.
#[derive(Debug)]
pub struct SimState {
    pub options: GitLabSimOptions,
    pub base_url: String,
    pub users: Users,
    pub ids: Ids,
    pub projects: Vec<Project>,
    pub faults: Faults,
}

/// One project plus the shared pieces a handler needs next to it, borrowed together.
pub struct Scope<'a> {
    pub project: &'a mut Project,
    pub ids: &'a mut Ids,
    pub users: &'a Users,
    pub options: &'a GitLabSimOptions,
}

impl SimState {
    /// An empty simulator answering at `base_url`.
    pub fn new(options: GitLabSimOptions, base_url: String) -> Self {
        Self {
            faults: Faults::new(options.fault_seed),
            options,
            base_url,
            users: Users::default(),
            ids: Ids::new(),
            projects: Vec::new(),
        }
    }

    /// The project named by a numeric id or a (decoded) full path, or GitLab's 404.
    pub fn scope(&mut self, id: &str) -> ApiResult<Scope<'_>> {
        let numeric = id.parse::<ProjectId>().ok();
        let project = self
            .projects
            .iter_mut()
            .find(|project| Some(project.id) == numeric || project.path == id)
            .ok_or(ApiError::NotFound("Project"))?;
        Ok(Scope {
            project,
            ids: &mut self.ids,
            users: &self.users,
            options: &self.options,
        })
    }
}

/// GitLab's timestamp format, e.g. `2024-05-01T10:00:00.000Z`.
pub fn timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A timestamp or `null`.
pub fn timestamp_opt(at: Option<DateTime<Utc>>) -> Value {
    at.map_or(Value::Null, |at| Value::String(timestamp(at)))
}
