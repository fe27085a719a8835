//! CI pipelines: one per new merge request head, stepping `created → pending → running →`
//! outcome once per poll (or on command), plus the two pipeline endpoints. With merged
//! results pipelines on, a head's pipeline runs on an internal commit merging it into the
//! target (`doc/ci/pipelines/merged_results_pipelines.md`).

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::SimContext;
use super::auth::{Caller, Users};
use super::error::{ApiError, ApiResult};
use super::merge;
use super::params::{PageQuery, paginate};
use super::state::{MergeRequest, Project, Scope, UserId, timestamp, timestamp_opt};
use crate::chance::SeededRng;

/// A pipeline's `status` (the subset the simulator moves through).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PipelineStatus {
    /// `created`
    Created,
    /// `pending`
    Pending,
    /// `running`
    Running,
    /// `success`
    Success,
    /// `failed`
    Failed,
    /// `canceled`
    Canceled,
}

impl PipelineStatus {
    /// The REST spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Success => "success",
            Self::Failed => "failed",
            Self::Canceled => "canceled",
        }
    }

    /// Still in flight: auto-merge can be armed on it.
    pub fn is_active(self) -> bool {
        matches!(self, Self::Created | Self::Pending | Self::Running)
    }
}

/// How a pipeline ends (`snake_case` in the control API, e.g. `stuck_running`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PipelineOutcome {
    /// Ends `success`.
    Success,
    /// Ends `failed`.
    Failed,
    /// Ends `canceled`.
    Canceled,
    /// Reaches `running` and stays there: the timeout scenario.
    StuckRunning,
}

/// One pipeline. Fields carry GitLab's names; only the others are documented.
#[derive(Clone, Debug)]
pub struct Pipeline {
    pub id: u64,
    pub iid: u64,
    pub project_id: u64,
    /// The commit it runs on: the merge request's head, or for a merged results
    /// pipeline the internal commit merging that head into the target.
    pub sha: String,
    /// The merge request head it tests (GitLab's `source_sha` for merged results).
    pub head_sha: String,
    /// The merge request it runs for.
    pub merge_request_iid: u64,
    /// `ref`: `refs/merge-requests/<iid>/head` for a merge request pipeline,
    /// `refs/merge-requests/<iid>/merge` for a merged results one.
    pub git_ref: String,
    pub status: PipelineStatus,
    /// Where the steps lead.
    pub outcome: PipelineOutcome,
    /// Who pushed the head (the pipeline's `user`).
    pub user: UserId,
    /// How long it runs before it may finish (`pipeline_duration`, or a draw within
    /// `pipeline_duration..=pipeline_duration_max`).
    pub duration: Duration,
    /// When its current run started: its creation, or its last retry.
    pub run_from: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub web_url: String,
}

impl Pipeline {
    /// One step towards the outcome; a finished or stuck pipeline stays as it is.
    pub fn step(&mut self) {
        let next = match (self.status, self.outcome) {
            (PipelineStatus::Created, _) => PipelineStatus::Pending,
            (PipelineStatus::Pending, _) => PipelineStatus::Running,
            (PipelineStatus::Running, PipelineOutcome::Success) => PipelineStatus::Success,
            (PipelineStatus::Running, PipelineOutcome::Failed) => PipelineStatus::Failed,
            (PipelineStatus::Running, PipelineOutcome::Canceled) => PipelineStatus::Canceled,
            _ => return,
        };
        self.status = next;
        self.updated_at = Utc::now();
    }

    /// Jumps straight to an outcome (`StuckRunning`: to `running`, never to finish).
    pub fn force(&mut self, outcome: PipelineOutcome) {
        self.outcome = outcome;
        self.status = match outcome {
            PipelineOutcome::Success => PipelineStatus::Success,
            PipelineOutcome::Failed => PipelineStatus::Failed,
            PipelineOutcome::Canceled => PipelineStatus::Canceled,
            PipelineOutcome::StuckRunning => PipelineStatus::Running,
        };
        self.updated_at = Utc::now();
    }

    /// `PipelineBasic`.
    pub fn basic_json(&self) -> Value {
        json!({
            "id": self.id,
            "iid": self.iid,
            "project_id": self.project_id,
            "sha": self.sha,
            "ref": self.git_ref,
            "status": self.status.as_str(),
            "source": "merge_request_event",
            "created_at": timestamp(self.created_at),
            "updated_at": timestamp(self.updated_at),
            "web_url": self.web_url,
        })
    }

    /// The full `Pipeline` entity, as `GET /pipelines/:id` and `head_pipeline` show it.
    pub fn json(&self, users: &Users) -> Value {
        let started = self.status != PipelineStatus::Created;
        let finished = !self.status.is_active();
        let status = self.status.as_str();
        let details_path = url_path(&self.web_url);
        let mut body = self.basic_json();
        let extra = json!({
            "before_sha": "0000000000000000000000000000000000000000",
            "tag": false,
            "yaml_errors": null,
            "user": users.json(Some(self.user)),
            "started_at": timestamp_opt(started.then_some(self.created_at)),
            "finished_at": timestamp_opt(finished.then_some(self.updated_at)),
            "committed_at": null,
            // Whole seconds from start to finish, once finished, as GitLab's
            // `duration` (lib/api/entities/ci/pipeline.rb).
            "duration": finished.then(|| (self.updated_at - self.created_at).num_seconds()),
            "queued_duration": null,
            "coverage": null,
            // `DetailedStatusEntity`, as `status/ci_detailed_status.json` requires it.
            "detailed_status": {
                "icon": format!("status_{status}"),
                "text": status,
                "label": status,
                "group": status,
                "tooltip": status,
                "has_details": true,
                "details_path": details_path,
                "illustration": null,
                "favicon": format!("/assets/ci_favicons/favicon_status_{status}.png"),
            },
        });
        if let (Value::Object(body), Value::Object(extra)) = (&mut body, extra) {
            body.extend(extra);
        }
        body
    }
}

/// The path of an absolute URL (`http://host:port/a/b` → `/a/b`).
fn url_path(url: &str) -> &str {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    after_scheme.find('/').map_or("/", |at| &after_scheme[at..])
}

/// How the next pipeline run for `sha` ends: failed when the commit carries the poisoned
/// content, else the next scripted outcome (success when none is scripted).
fn next_outcome(project: &mut Project, sha: &str) -> PipelineOutcome {
    let scripted = project
        .pipeline_script
        .pop_front()
        .unwrap_or(PipelineOutcome::Success);
    let poisoned = project
        .settings
        .failing_content
        .as_deref()
        .is_some_and(|marker| {
            project
                .repo
                .commit(sha)
                .is_some_and(|commit| commit.tree.values().any(|content| content.contains(marker)))
        });
    if poisoned {
        PipelineOutcome::Failed
    } else {
        scripted
    }
}

/// Starts the pipeline of a new merge request head; its outcome is the next scripted one.
/// With merged results pipelines it runs on a fresh internal commit merging the head into
/// the target, on the merge ref; when the two conflict GitLab cannot make that commit and
/// runs an ordinary merge request pipeline on the head instead.
pub fn create(scope: &mut Scope, head: &str, mr_iid: u64, user: UserId) -> u64 {
    let (sha, git_ref) = match merged_results_commit(scope, head, mr_iid) {
        Some(merge) => (merge, format!("refs/merge-requests/{mr_iid}/merge")),
        None => (
            head.to_owned(),
            format!("refs/merge-requests/{mr_iid}/head"),
        ),
    };
    let project = &mut *scope.project;
    let id = scope.ids.pipeline();
    let now = Utc::now();
    let outcome = next_outcome(project, &sha);
    let duration = match (
        project.settings.pipeline_duration,
        scope.options.pipeline_duration_max,
    ) {
        (Some(own), _) => own,
        (None, Some(max)) => {
            let earlier = project
                .pipelines
                .iter()
                .filter(|pipeline| pipeline.merge_request_iid == mr_iid)
                .count() as u64;
            SeededRng::keyed(scope.options.pipeline_seed, &[project.id, mr_iid, earlier])
                .duration_within(scope.options.pipeline_duration, max)
        }
        (None, None) => scope.options.pipeline_duration,
    };
    project.pipelines.push(Pipeline {
        id,
        iid: project.pipelines.len() as u64 + 1,
        project_id: project.id,
        sha,
        head_sha: head.to_owned(),
        merge_request_iid: mr_iid,
        git_ref,
        status: PipelineStatus::Created,
        outcome,
        user,
        duration,
        run_from: now,
        created_at: now,
        updated_at: now,
        web_url: format!("{}/-/pipelines/{id}", project.web_url),
    });
    id
}

/// The internal commit a merged results pipeline runs on (parents: the target's head and
/// `head`), when the project has them and the two merge cleanly; on no branch.
fn merged_results_commit(scope: &mut Scope, head: &str, mr_iid: u64) -> Option<String> {
    let project = &mut *scope.project;
    if !project.settings.merged_results_pipelines {
        return None;
    }
    let mr = &project.merge_requests[project.mr_index(mr_iid).ok()?];
    let target = project.repo.head(&mr.target_branch)?.id.clone();
    let tree = project.repo.merged_tree(&target, head)?;
    let message = format!("Merge {head} into {target}");
    let author = scope
        .users
        .get(mr.author)
        .map_or("unknown", |user| user.username.as_str())
        .to_owned();
    let parents = vec![target, head.to_owned()];
    Some(
        project
            .repo
            .commit_tree(scope.ids, parents, &message, &author, tree),
    )
}

/// The latest pipeline of the merge request's head: its `head_pipeline`.
pub fn head_pipeline<'a>(project: &'a Project, mr: &MergeRequest) -> Option<&'a Pipeline> {
    project.pipelines.iter().rev().find(|p| tests_head(p, mr))
}

/// Whether `pipeline` is one of `mr`'s, for its current head.
fn tests_head(pipeline: &Pipeline, mr: &MergeRequest) -> bool {
    pipeline.merge_request_iid == mr.iid && pipeline.head_sha == mr.sha
}

/// Runs `change` on pipeline `id`, then lets merge requests react if it finished.
pub fn update(scope: &mut Scope, id: u64, change: impl FnOnce(&mut Pipeline)) -> ApiResult<()> {
    let index = scope.project.pipelines.iter().position(|p| p.id == id);
    let index = index.ok_or(ApiError::NotFound("Pipeline"))?;
    update_at(scope, index, change);
    Ok(())
}

/// `update` for a pipeline already found at `index`.
fn update_at(scope: &mut Scope, index: usize, change: impl FnOnce(&mut Pipeline)) {
    let pipeline = &mut scope.project.pipelines[index];
    let was_active = pipeline.status.is_active();
    change(pipeline);
    if was_active && !pipeline.status.is_active() {
        let (sha, status) = (pipeline.head_sha.clone(), pipeline.status);
        merge::pipeline_finished(scope, &sha, status);
    }
}

/// `steps` steps of a polled pipeline; a running one finishes only once it has run for
/// its own duration (a pipeline that takes time, not polls). Pipelines of different
/// merge requests therefore run at the same time, each on its own clock.
fn poll_step(steps: u32) -> impl FnOnce(&mut Pipeline) {
    move |pipeline| {
        for _ in 0..steps {
            let ran = (Utc::now() - pipeline.run_from)
                .to_std()
                .unwrap_or_default();
            if pipeline.status == PipelineStatus::Running && ran < pipeline.duration {
                return;
            }
            pipeline.step();
        }
    }
}

/// A poll of a merge request's head pipeline, if it has one.
pub fn poll_head(scope: &mut Scope, mr_index: usize) {
    let mr = &scope.project.merge_requests[mr_index];
    let head = scope
        .project
        .pipelines
        .iter()
        .rposition(|p| tests_head(p, mr));
    if let Some(index) = head {
        let steps = poll_step(scope.options.pipeline_steps_per_poll);
        update_at(scope, index, steps);
    }
}

/// `GET /projects/:id/pipelines/:pipeline_id`
pub async fn get_pipeline(
    State(ctx): State<SimContext>,
    _caller: Caller,
    Path((project, id)): Path<(String, u64)>,
) -> ApiResult<Json<Value>> {
    let mut state = ctx.lock();
    let mut scope = state.scope(&project)?;
    let steps = poll_step(scope.options.pipeline_steps_per_poll);
    update(&mut scope, id, steps)?;
    let pipeline = scope.project.pipelines.iter().find(|p| p.id == id);
    let pipeline = pipeline.ok_or(ApiError::NotFound("Pipeline"))?;
    Ok(Json(pipeline.json(scope.users)))
}

/// `GET /projects/:id/merge_requests/:iid/pipelines`, newest first.
pub async fn list_mr_pipelines(
    State(ctx): State<SimContext>,
    _caller: Caller,
    Path((project, iid)): Path<(String, u64)>,
    page: PageQuery,
) -> ApiResult<Response> {
    let mut state = ctx.lock();
    let mut scope = state.scope(&project)?;
    let index = scope.project.mr_index(iid)?;
    poll_head(&mut scope, index);
    let pipelines = scope.project.pipelines.iter().rev();
    let items: Vec<Value> = pipelines
        .filter(|p| p.merge_request_iid == iid)
        .map(Pipeline::basic_json)
        .collect();
    Ok(paginate(&items, &page))
}

/// `POST /projects/:id/pipelines/:pipeline_id/retry`: "Retries failed or canceled jobs in a
/// pipeline. If there are no failed or canceled jobs in the pipeline, calling this endpoint
/// has no effect" (doc/api/pipelines.md); the same pipeline runs again (pending), ending as
/// the next scripted outcome. Answers 201 with the pipeline either way; a caller who may not
/// push gets 403 (`authorize! :update_pipeline`, lib/api/ci/pipelines.rb).
pub async fn retry_pipeline(
    State(ctx): State<SimContext>,
    Caller(user): Caller,
    Path((project, id)): Path<(String, u64)>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let mut state = ctx.lock();
    let scope = state.scope(&project)?;
    if !scope.project.can_write(user) {
        return Err(ApiError::Forbidden);
    }
    let index = scope.project.pipelines.iter().position(|p| p.id == id);
    let index = index.ok_or(ApiError::NotFound("Pipeline"))?;
    let pipeline = &scope.project.pipelines[index];
    if matches!(
        pipeline.status,
        PipelineStatus::Failed | PipelineStatus::Canceled
    ) {
        let sha = pipeline.sha.clone();
        let outcome = next_outcome(scope.project, &sha);
        let pipeline = &mut scope.project.pipelines[index];
        pipeline.outcome = outcome;
        pipeline.status = PipelineStatus::Pending;
        pipeline.updated_at = Utc::now();
        pipeline.run_from = pipeline.updated_at;
    }
    let pipeline = &scope.project.pipelines[index];
    Ok((StatusCode::CREATED, Json(pipeline.json(scope.users))))
}

/// `POST /projects/:id/pipelines/:pipeline_id/cancel`: a pipeline still in flight is
/// canceled; a finished one is left as it is, and the answer is 200 with the pipeline either
/// way ("inconsistent behavior: when pipeline is not cancelable we should return an error",
/// lib/api/ci/pipelines.rb, gitlab-org/gitlab#519143). A caller who may not push gets 403
/// (`authorize! :cancel_pipeline`, which `update_pipeline` grants).
pub async fn cancel_pipeline(
    State(ctx): State<SimContext>,
    Caller(user): Caller,
    Path((project, id)): Path<(String, u64)>,
) -> ApiResult<Json<Value>> {
    let mut state = ctx.lock();
    let scope = state.scope(&project)?;
    if !scope.project.can_write(user) {
        return Err(ApiError::Forbidden);
    }
    let pipeline = scope.project.pipelines.iter_mut().find(|p| p.id == id);
    let pipeline = pipeline.ok_or(ApiError::NotFound("Pipeline"))?;
    if pipeline.status.is_active() {
        pipeline.force(PipelineOutcome::Canceled);
    }
    Ok(Json(pipeline.json(scope.users)))
}

/// The filters of `GET /projects/:id/pipelines` the simulator answers.
#[derive(Debug, Deserialize)]
pub struct ProjectPipelinesQuery {
    status: Option<String>,
    source: Option<String>,
    #[serde(rename = "ref")]
    git_ref: Option<String>,
    scope: Option<String>,
}

/// `GET /projects/:id/pipelines`, newest first (`order_by=id`, `sort=desc`, GitLab's
/// defaults), filtered by `status`, `source`, `ref` and `scope=finished`; a value outside
/// those GitLab allows is a 400, as Grape's `values:` makes it (lib/api/ci/pipelines.rb).
/// Every pipeline polled first, so its status is as of now.
pub async fn list_project_pipelines(
    State(ctx): State<SimContext>,
    _caller: Caller,
    Path(project): Path<String>,
    Query(query): Query<ProjectPipelinesQuery>,
    page: PageQuery,
) -> ApiResult<Response> {
    const STATUSES: [&str; 6] = [
        "created", "pending", "running", "success", "failed", "canceled",
    ];
    const SCOPES: [&str; 5] = ["running", "pending", "finished", "branches", "tags"];
    let invalid =
        |name: &str| ApiError::InvalidParam(format!("{name} does not have a valid value"));
    if query
        .status
        .as_deref()
        .is_some_and(|s| !STATUSES.contains(&s))
    {
        return Err(invalid("status"));
    }
    if query.scope.as_deref().is_some_and(|s| !SCOPES.contains(&s)) {
        return Err(invalid("scope"));
    }
    let mut state = ctx.lock();
    let mut scope = state.scope(&project)?;
    for index in 0..scope.project.pipelines.len() {
        let steps = poll_step(scope.options.pipeline_steps_per_poll);
        update_at(&mut scope, index, steps);
    }
    // Every simulated pipeline runs for a merge request.
    let source_matches = query
        .source
        .as_deref()
        .is_none_or(|source| source == "merge_request_event");
    let items: Vec<Value> = scope
        .project
        .pipelines
        .iter()
        .rev()
        .filter(|_| source_matches)
        .filter(|p| {
            query
                .status
                .as_deref()
                .is_none_or(|s| p.status.as_str() == s)
        })
        .filter(|p| query.git_ref.as_deref().is_none_or(|r| p.git_ref == r))
        .filter(|p| query.scope.as_deref() != Some("finished") || !p.status.is_active())
        .map(Pipeline::basic_json)
        .collect();
    Ok(paginate(&items, &page))
}

/// A merge request pipeline that ran before the simulation started: `success`, on
/// `sha`, ended `ago` and ran for `duration`, for no merge request still known (a
/// project's CI history).
pub fn record_past(scope: &mut Scope, sha: &str, duration: Duration, ago: Duration) {
    let project = &mut *scope.project;
    let id = scope.ids.pipeline();
    let ended = Utc::now() - ago;
    let started = ended - duration;
    let iid = project.pipelines.len() as u64 + 1;
    let user = project.members.keys().min().copied().unwrap_or_default();
    project.pipelines.push(Pipeline {
        id,
        iid,
        project_id: project.id,
        sha: sha.to_owned(),
        head_sha: sha.to_owned(),
        merge_request_iid: 0,
        git_ref: "refs/merge-requests/0/head".to_owned(),
        status: PipelineStatus::Success,
        outcome: PipelineOutcome::Success,
        user,
        duration,
        run_from: started,
        created_at: started,
        updated_at: ended,
        web_url: format!("{}/-/pipelines/{id}", project.web_url),
    });
}
