//! Commits API (`POST …/repository/commits` with actions, `Commits::CreateService`'s
//! checks; `GET …/repository/commits` listing them; `GET …/repository/commits/:sha`) and
//! the Files API reads (`GET` and `HEAD …/repository/files/:path`, `GET …/raw`, at a
//! branch or a commit, with GitLab's `X-Gitlab-*` headers).

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::SimContext;
use super::auth::Caller;
use super::error::{ApiError, ApiResult};
use super::merge_requests::on_push;
use super::params::{JsonBody, PageQuery, boolean, paginate_uncounted, required};
use super::pipelines::Pipeline;
use super::repo::{Change, Commit, Repo, apply, line_stats};
use super::state::{Project, Scope, UserId};
use super::tree::blob_id;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use sha2::{Digest, Sha256};

/// Body of `POST /projects/:id/repository/commits`.
#[derive(Debug, Deserialize)]
pub struct CommitParams {
    branch: Option<String>,
    commit_message: Option<String>,
    actions: Option<Value>,
    start_branch: Option<String>,
    start_sha: Option<String>,
    /// With a start point other than `branch`, overwrite the existing `branch` with the
    /// new commit (whose parent is the start point) instead of refusing.
    force: Option<bool>,
}

/// One raw entry of `actions[]`.
#[derive(Debug, Deserialize)]
struct ActionParams {
    action: Option<String>,
    file_path: Option<String>,
    previous_path: Option<String>,
    content: Option<String>,
    encoding: Option<String>,
}

/// Turns `actions[]` into validated changes, with `lib/api/commits.rb`'s messages.
fn parse_actions(actions: Value) -> ApiResult<Vec<Change>> {
    let Value::Array(actions) = actions else {
        return Err(ApiError::bad_request_because("actions must be an array"));
    };
    let mut changes = Vec::with_capacity(actions.len());
    for (i, raw) in actions.into_iter().enumerate() {
        let field = |name: &str| format!("actions[{i}][{name}]");
        let params: ActionParams = serde_json::from_value(raw)
            .map_err(|err| ApiError::bad_request_because(format!("{}: {err}", field("action"))))?;
        let action = params.action.ok_or_else(|| {
            ApiError::bad_request_because(format!("{} is required", field("action")))
        })?;
        let path = params.file_path.ok_or_else(|| {
            ApiError::bad_request_because(format!("{} is required", field("file_path")))
        })?;
        let content = match (params.content, params.encoding.as_deref()) {
            (Some(text), Some("base64")) => Some(
                BASE64
                    .decode(text.split_whitespace().collect::<String>())
                    .ok()
                    .and_then(|bytes| String::from_utf8(bytes).ok())
                    .ok_or_else(|| {
                        ApiError::bad_request_because(format!(
                            "{} is not valid base64",
                            field("content")
                        ))
                    })?,
            ),
            (content, _) => content,
        };
        let required = |what: &str, action: &str| {
            ApiError::bad_request_because(format!(
                "{} is required for {action} action",
                field(what)
            ))
        };
        changes.push(match action.as_str() {
            "create" => Change::Create {
                path,
                content: content.unwrap_or_default(),
            },
            "update" => Change::Update {
                path,
                content: content.ok_or_else(|| required("content", "update"))?,
            },
            "delete" => Change::Delete { path },
            "move" => Change::Move {
                from: params
                    .previous_path
                    .ok_or_else(|| required("previous_path", "move"))?,
                to: path,
                content,
            },
            "chmod" => Change::Chmod { path },
            _ => {
                return Err(ApiError::bad_request_because(format!(
                    "{} must be one of: create, update, move, delete, chmod",
                    field("action")
                )));
            }
        });
    }
    Ok(changes)
}

/// Records a commit of `changes` on top of `start` (a commit id) as `user`, on no branch.
/// Returns its id, or GitLab's message when the changes do not apply.
pub fn commit_onto(
    scope: &mut Scope,
    user: UserId,
    start: &str,
    message: &str,
    changes: &[Change],
) -> Result<String, String> {
    let repo = &scope.project.repo;
    let parent = repo.commit(start).ok_or("Invalid start commit")?;
    let tree = apply(&parent.tree, changes)?;
    let parent_id = parent.id.clone();
    let author = scope
        .users
        .get(user)
        .map_or("unknown", |u| u.username.as_str());
    Ok(scope
        .project
        .repo
        .commit_tree(scope.ids, vec![parent_id], message, author, tree))
}

/// Commits `changes` on `branch`, starting from `start` (a commit id) when the branch is
/// new, moves the branch and runs the push hooks. Returns the new commit's id.
pub fn commit(
    scope: &mut Scope,
    user: UserId,
    branch: &str,
    start: &str,
    message: &str,
    changes: &[Change],
) -> Result<String, String> {
    let sha = commit_onto(scope, user, start, message, changes)?;
    scope.project.repo.set_branch(branch, &sha);
    on_push(scope, branch, user);
    Ok(sha)
}

/// `POST /projects/:id/repository/commits`
pub async fn create_commit(
    State(ctx): State<SimContext>,
    Caller(user): Caller,
    Path(project): Path<String>,
    JsonBody(params): JsonBody<CommitParams>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let is_required = |name: &str| ApiError::bad_request_because(format!("{name} is required"));
    let branch = params.branch.ok_or_else(|| is_required("branch"))?;
    let message = params
        .commit_message
        .ok_or_else(|| is_required("commit_message"))?;
    let changes = parse_actions(params.actions.ok_or_else(|| is_required("actions"))?)?;
    if params.start_branch.is_some() && params.start_sha.is_some() {
        let message = "start_branch, start_sha are mutually exclusive";
        return Err(ApiError::bad_request_because(message));
    }
    let mut state = ctx.lock();
    let mut scope = state.scope(&project)?;
    if !scope.project.can_write(user) {
        return Err(ApiError::ForbiddenBecause(
            "You are not allowed to push into this branch",
        ));
    }
    let repo = &scope.project.repo;
    let start_branch = params.start_branch.as_deref().unwrap_or(&branch);
    let start = match params.start_sha.as_deref() {
        Some(sha) => repo
            .commit(sha)
            .ok_or_else(|| ApiError::bad_request(format!("Cannot find start_sha '{sha}'")))?,
        None => repo.head(start_branch).ok_or_else(|| {
            ApiError::bad_request("You can only create or edit files when you are on a branch")
        })?,
    };
    // `Commits::CreateService#validate_branch_existence!`: `force` overwrites the branch
    // (app/services/commits/create_service.rb), as a push with `--force` would; the merge
    // requests from it then take the new head, with a new pipeline.
    let different_branch = params.start_sha.is_some() || start_branch != branch;
    let force = params.force.unwrap_or(false);
    if different_branch && !force && repo.head(&branch).is_some() {
        return Err(ApiError::bad_request(format!(
            "A branch called '{branch}' already exists. Switch to that branch in order to make changes"
        )));
    }
    let start = start.id.clone();
    let sha = commit(&mut scope, user, &branch, &start, &message, &changes)
        .map_err(ApiError::bad_request)?;
    let body = detail_json(scope.project, &sha, true).expect("the commit was just stored");
    Ok((StatusCode::CREATED, Json(body)))
}

/// The `CommitStats` entity: line additions and deletions against the first parent (the
/// empty tree for a root commit), as Gitaly's `CommitStats` counts them.
fn stats_json(repo: &Repo, commit: &Commit) -> Value {
    let parent = commit.parent_ids.first().and_then(|id| repo.commit(id));
    let before = parent.map(|parent| parent.tree.clone()).unwrap_or_default();
    let (additions, deletions) = line_stats(&before, &commit.tree);
    json!({ "additions": additions, "deletions": deletions, "total": additions + deletions })
}

/// The `CommitDetail` entity (`lib/api/entities/commit_detail.rb`): the commit, its line
/// stats against its first parent (with `stats`), the status and basic entity of its
/// latest pipeline, and the project id. `None` for an unknown commit.
fn detail_json(project: &Project, sha: &str, stats: bool) -> Option<Value> {
    let repo = &project.repo;
    let commit = repo.commit(sha)?;
    let pipeline = project.pipelines.iter().rev().find(|p| p.sha == sha);
    let mut body = commit.json(&project.web_url);
    let mut detail = json!({
        "status": pipeline.map(|p| p.status.as_str()),
        "last_pipeline": pipeline.map(Pipeline::basic_json),
        "project_id": project.id,
    });
    if stats {
        detail["stats"] = stats_json(repo, commit);
    }
    if let (Value::Object(fields), Value::Object(detail)) = (&mut body, detail) {
        fields.extend(detail);
    }
    Some(body)
}

/// Query of `GET …/repository/commits/:sha`.
#[derive(Debug, Deserialize)]
pub struct CommitQuery {
    stats: Option<bool>,
}

/// `GET /projects/:id/repository/commits/:sha` ("Get a single commit" in
/// `doc/api/commits.md`): a commit named by its id (full, or a unique prefix) or by a
/// branch or `HEAD`, whose head it answers; 404 `Commit Not Found` otherwise.
pub async fn get_commit(
    State(ctx): State<SimContext>,
    _caller: Caller,
    Path((project, reference)): Path<(String, String)>,
    Query(query): Query<CommitQuery>,
) -> ApiResult<Json<Value>> {
    let mut state = ctx.lock();
    let scope = state.scope(&project)?;
    let project = &*scope.project;
    let sha = project.resolve(&reference).map(|c| c.id.clone());
    sha.and_then(|sha| detail_json(project, &sha, query.stats.unwrap_or(true)))
        .map(Json)
        .ok_or(ApiError::NotFound("Commit"))
}

/// Query of `GET …/repository/commits`, besides pagination.
#[derive(Debug, Deserialize)]
pub struct ListQuery {
    ref_name: Option<String>,
    path: Option<String>,
    first_parent: Option<String>,
    with_stats: Option<String>,
    all: Option<String>,
    order: Option<String>,
    trailers: Option<String>,
    since: Option<String>,
    until: Option<String>,
    author: Option<String>,
}

/// Whether Gitaly takes `revision` (`git.ValidateRevision` with empty revisions allowed,
/// which `FindCommits` runs): no leading `-`, no whitespace, NUL, `:` or `\`. GitLab
/// answers a refused one `400 ref_name is invalid`.
fn valid_revision(revision: &str) -> bool {
    !revision.starts_with('-')
        && !revision
            .chars()
            .any(|c| matches!(c, ' ' | '\t' | '\n' | '\r' | '\0' | ':' | '\\'))
}

/// A 400 for a parameter GitLab takes and the simulator does not model: refusing it
/// loudly beats answering as if it had been applied.
fn not_simulated(name: &str) -> ApiError {
    ApiError::InvalidParam(format!("{name} is not supported by the simulator"))
}

/// `GET /projects/:id/repository/commits` ("List repository commits" in
/// `doc/api/commits.md`, `lib/api/commits.rb`): the commits of `ref_name` (a branch, a
/// commit id, `HEAD`, or a range `a..b`; the default branch when absent or empty), newest
/// first as `git log` lists them ([`Repo::log`]), as `Commit` entities, with `stats` when
/// `with_stats` is true (`CommitWithStats`). `path` keeps the commits that changed that
/// file or directory, following it across renames; `first_parent` walks first parents
/// only.
///
/// An unknown ref lists nothing, `200 []`, as GitLab answers it
/// (`Gitlab::Git::Repository#log` rescues Gitaly's `CommitNotFound`;
/// `spec/requests/api/commits_spec.rb`, "when ref_name does not exist"); a ref Gitaly
/// refuses is `400 ref_name is invalid`. Pagination is offset pagination without a
/// count ([`paginate_uncounted`]).
///
/// `since`, `until`, a non-empty `author`, `all=true`, `order=topo`, `trailers=true` and a
/// symmetric range `a...b` are refused with a 400 naming them: the simulator does not
/// model them.
pub async fn list_commits(
    State(ctx): State<SimContext>,
    _caller: Caller,
    Path(project): Path<String>,
    Query(query): Query<ListQuery>,
    page: PageQuery,
) -> ApiResult<Response> {
    let all = boolean(query.all.as_deref(), "all")?;
    let with_stats = boolean(query.with_stats.as_deref(), "with_stats")?.unwrap_or(false);
    let first_parent = boolean(query.first_parent.as_deref(), "first_parent")?.unwrap_or(false);
    let trailers = boolean(query.trailers.as_deref(), "trailers")?;
    let order = query.order.as_deref().unwrap_or("default");
    if order != "default" && order != "topo" {
        let message = "order does not have a valid value";
        return Err(ApiError::InvalidParam(message.to_owned()));
    }
    let unmodelled = [
        ("since", query.since.is_some()),
        ("until", query.until.is_some()),
        (
            "author",
            query.author.as_deref().is_some_and(|a| !a.is_empty()),
        ),
        ("all", all == Some(true)),
        ("order", order == "topo"),
        ("trailers", trailers == Some(true)),
    ];
    if let Some((name, _)) = unmodelled.iter().find(|(_, given)| *given) {
        return Err(not_simulated(name));
    }
    let mut state = ctx.lock();
    let scope = state.scope(&project)?;
    let project = &*scope.project;
    // `params[:ref_name].presence || user_project.default_branch`
    let reference = query
        .ref_name
        .as_deref()
        .filter(|name| !name.trim().is_empty())
        .unwrap_or(&project.default_branch);
    if !valid_revision(reference) {
        return Err(ApiError::bad_request("ref_name is invalid"));
    }
    // Either side of a range left out is `HEAD`, as git reads `..b` and `a..`.
    fn side(side: &str) -> &str {
        if side.is_empty() { "HEAD" } else { side }
    }
    let (hidden, from) = match reference.split_once("..") {
        Some((_, right)) if right.starts_with('.') => {
            return Err(not_simulated("ref_name a...b"));
        }
        Some((left, right)) => (Some(side(left)), side(right)),
        None => (None, reference),
    };
    let path = query.path.as_deref().filter(|path| !path.trim().is_empty());
    let path = path.map(|path| path.trim_end_matches('/'));
    // A side git cannot resolve is Gitaly's `CommitNotFound`, which GitLab lists as nothing.
    let resolve = |name: &str| project.resolve(name).map(|commit| commit.id.as_str());
    let commits = match (resolve(from), hidden.map(resolve)) {
        (Some(from), None) => project.repo.log(from, None, path, first_parent),
        (Some(from), Some(Some(hidden))) => {
            project.repo.log(from, Some(hidden), path, first_parent)
        }
        _ => Vec::new(),
    };
    let items = commits
        .into_iter()
        .map(|commit| {
            let mut body = commit.json(&project.web_url);
            if with_stats {
                body["stats"] = stats_json(&project.repo, commit);
            }
            body
        })
        .collect();
    Ok(paginate_uncounted(items, &page))
}

/// Query of the Files API.
#[derive(Debug, Deserialize)]
pub struct FileQuery {
    #[serde(rename = "ref")]
    reference: Option<String>,
}

/// The file at `path` as `blob_data` in `lib/api/files.rb` describes it (without the
/// content): 404 `Commit` for an unknown ref, 404 `File` for a missing file.
/// `reference` is `ref` as the client gave it, echoed in `ref` (empty when absent).
fn blob_data(
    ctx: &SimContext,
    project: &str,
    path: &str,
    reference: &str,
) -> ApiResult<(Value, String)> {
    let mut state = ctx.lock();
    let scope = state.scope(project)?;
    let project = &*scope.project;
    // No `ref` (the raw endpoint's is optional) is `Project#commit(nil)`: the default branch.
    let commit = match reference {
        "" => project.resolve("HEAD"),
        _ => project.resolve(reference),
    };
    let commit = commit.ok_or(ApiError::NotFound("Commit"))?;
    let content = commit.tree.get(path).ok_or(ApiError::NotFound("File"))?;
    // The last commit that changed the file, not the ref's
    // (`@repo.last_commit_id_for_path(@commit.sha, params[:file_path])`).
    let last = project.repo.last_commit_for_path(&commit.id, path);
    let last = last.map_or(&commit.id, |c| &c.id);
    let data = json!({
        "file_name": path.rsplit('/').next().unwrap_or(path),
        "file_path": path,
        "size": content.len(),
        "encoding": "base64",
        "content_sha256": sha256_hex(content),
        "ref": reference,
        "blob_id": blob_id(content),
        "commit_id": commit.id,
        "last_commit_id": last,
        // File modes are not modelled: no file is executable.
        "execute_filemode": false,
    });
    Ok((data, content.clone()))
}

/// `set_http_headers` (`lib/api/helpers/headers_helpers.rb`): each field of `data` as an
/// `X-Gitlab-*` header, its name capitalised word by word (`last_commit_id` →
/// `X-Gitlab-Last-Commit-Id`), its value as text (`false`, `1476`).
fn with_blob_headers(mut response: Response, data: &Value) -> Response {
    for (key, value) in data.as_object().into_iter().flatten() {
        let words: Vec<String> = key
            .split('_')
            .map(|word| {
                let mut chars = word.chars();
                chars.next().map_or_else(String::new, |first| {
                    first.to_uppercase().chain(chars).collect()
                })
            })
            .collect();
        let name = HeaderName::try_from(format!("X-Gitlab-{}", words.join("-")));
        let text = match value {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        // A value HTTP cannot carry (a control character) is left out.
        if let (Ok(name), Ok(value)) = (name, HeaderValue::from_bytes(text.as_bytes())) {
            response.headers_mut().insert(name, value);
        }
    }
    response
}

/// The SHA-256 of `content` in hex, the Files API's `content_sha256`.
fn sha256_hex(content: &str) -> String {
    Sha256::digest(content.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// `GET /projects/:id/repository/files/:file_path?ref=` ("Get file from repository" in
/// `doc/api/repository_files.md`): the file's metadata with its content in base64, and
/// the metadata again as `X-Gitlab-*` headers, as `lib/api/files.rb` answers; `ref` (a
/// branch, a commit id or `HEAD`) is required and not blank.
pub async fn get_file(
    State(ctx): State<SimContext>,
    _caller: Caller,
    Path((project, path)): Path<(String, String)>,
    Query(query): Query<FileQuery>,
) -> ApiResult<Response> {
    let reference = required(&query.reference, "ref")?;
    let (data, content) = blob_data(&ctx, &project, &path, reference)?;
    let mut body = data.clone();
    body["content"] = BASE64.encode(content.as_bytes()).into();
    Ok(with_blob_headers(Json(body).into_response(), &data))
}

/// `HEAD /projects/:id/repository/files/:file_path?ref=` ("Get file metadata only"): the
/// `X-Gitlab-*` headers of [`get_file`] without a body, from GitLab's own `head` route.
pub async fn head_file(
    State(ctx): State<SimContext>,
    _caller: Caller,
    Path((project, path)): Path<(String, String)>,
    Query(query): Query<FileQuery>,
) -> ApiResult<Response> {
    let reference = required(&query.reference, "ref")?;
    let (data, _) = blob_data(&ctx, &project, &path, reference)?;
    // `after_validation { content_type "application/json" }` covers this route too.
    let response = ([(CONTENT_TYPE, "application/json")], ()).into_response();
    Ok(with_blob_headers(response, &data))
}

/// `GET /projects/:id/repository/files/:file_path/raw[?ref=]`: the content as it is, with
/// the `X-Gitlab-*` headers of [`get_file`]. `ref` is optional here (the default branch)
/// but not blank.
pub async fn get_raw_file(
    State(ctx): State<SimContext>,
    _caller: Caller,
    Path((project, path)): Path<(String, String)>,
    Query(query): Query<FileQuery>,
) -> ApiResult<Response> {
    let reference = match &query.reference {
        None => "",
        given => required(given, "ref")?,
    };
    let (data, content) = blob_data(&ctx, &project, &path, reference)?;
    Ok(with_blob_headers(content.into_response(), &data))
}
