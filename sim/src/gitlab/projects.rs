//! `GET /projects/:id` and project creation for the control API.

use std::collections::{HashMap, VecDeque};

use axum::Json;
use axum::extract::{Path, State};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::SimContext;
use super::auth::Caller;
use super::error::ApiResult;
use super::repo::{Repo, Tree};
use super::state::{Project, ProjectId, ProjectSettings, SimState, timestamp};

/// Creates a project whose default branch `main` holds one commit with a README.
pub fn create(state: &mut SimState, path: &str) -> ProjectId {
    let id = state.ids.project();
    let mut repo = Repo::default();
    let name = path.rsplit('/').next().unwrap_or(path);
    let tree = Tree::from([("README.md".to_owned(), format!("# {name}\n"))]);
    let sha = repo.commit_tree(&mut state.ids, Vec::new(), "Initial commit", "root", tree);
    repo.set_branch("main", &sha);
    state.projects.push(Project {
        id,
        path: path.to_owned(),
        default_branch: "main".to_owned(),
        web_url: format!("{}/{path}", state.base_url),
        created_at: Utc::now(),
        members: HashMap::new(),
        settings: ProjectSettings::default(),
        repo,
        merge_requests: Vec::new(),
        pipelines: Vec::new(),
        pipeline_script: VecDeque::new(),
        merge_log: Vec::new(),
    });
    id
}

/// When anything last happened in the project: its newest commit, merge request change
/// or pipeline update.
fn last_activity(project: &Project) -> DateTime<Utc> {
    let commits = project
        .repo
        .branches()
        .filter_map(|(_, sha)| project.repo.commit(sha));
    commits
        .map(|commit| commit.created_at)
        .chain(project.merge_requests.iter().map(|mr| mr.updated_at))
        .chain(project.pipelines.iter().map(|pipeline| pipeline.updated_at))
        .fold(project.created_at, DateTime::max)
}

/// `GET /projects/:id`, by numeric id or URL-encoded full path.
pub async fn get_project(
    State(ctx): State<SimContext>,
    _caller: Caller,
    Path(project): Path<String>,
) -> ApiResult<Json<Value>> {
    let mut state = ctx.lock();
    let base_url = state.base_url.clone();
    let scope = state.scope(&project)?;
    let project = &*scope.project;
    let name = project.path.rsplit('/').next().unwrap_or(&project.path);
    let namespace = project.path.rsplit_once('/').map_or("", |(ns, _)| ns);
    let host = base_url
        .split_once("://")
        .map_or(base_url.as_str(), |(_, rest)| rest);
    let host = host.split(':').next().unwrap_or(host);
    // The fields `spec/fixtures/api/schemas/public_api/v4/projects.json` requires, and
    // the settings of `ProjectDetails` (`lib/api/entities/project.rb`) changegate reads.
    Ok(Json(json!({
        "id": project.id,
        "description": null,
        "name": name,
        "path": name,
        "path_with_namespace": project.path,
        "name_with_namespace": project.path.replace('/', " / "),
        "namespace": { "full_path": namespace, "path": namespace, "kind": "group" },
        "default_branch": project.default_branch,
        "visibility": "internal",
        "web_url": project.web_url,
        "http_url_to_repo": format!("{}.git", project.web_url),
        "ssh_url_to_repo": format!("git@{host}:{}.git", project.path),
        "tag_list": [],
        "topics": [],
        "avatar_url": null,
        "star_count": 0,
        "forks_count": 0,
        "created_at": timestamp(project.created_at),
        "last_activity_at": timestamp(last_activity(project)),
        "merge_method": project.settings.merge_method.as_str(),
        "only_allow_merge_if_pipeline_succeeds": project.settings.pipelines_must_succeed,
        "approvals_before_merge": project.settings.approvals_required,
        "_links": { "self": format!("{base_url}/api/v4/projects/{}", project.id) },
    })))
}
