//! The web pages behind the `web_url`s the simulator hands out, so that a link changegate
//! logs or reports can be opened: a merge request's page at
//! `{base_url}/{project}/-/merge_requests/{iid}`, a pipeline's at `…/-/pipelines/{id}` and
//! a commit's at `…/-/commit/{sha}`. Reading one is not an API call: it is neither logged
//! nor faulted, and does not count as a poll of the merge request.

use axum::Json;
use axum::extract::{OriginalUri, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::SimContext;
use super::mr_view::diff_start;
use super::pipelines::head_pipeline;
use super::repo::diff;
use super::state::{MergeRequest, Project, SimState};

/// Serves a merge request's, a pipeline's or a commit's page; any other path gets GitLab's
/// answer to an unknown route.
pub async fn page(State(ctx): State<SimContext>, OriginalUri(uri): OriginalUri) -> Response {
    let path = uri.path();
    let Some((project, kind, id)) = ["merge_requests", "pipelines", "commit"]
        .into_iter()
        .find_map(|kind| {
            let (project, id) = path.split_once(&format!("/-/{kind}/"))?;
            Some((project.trim_start_matches('/'), kind, id))
        })
    else {
        return not_found();
    };
    let mut state = ctx.lock();
    let html = match (kind, id.parse::<u64>()) {
        ("merge_requests", Ok(iid)) => merge_request_page(&mut state, project, iid),
        ("pipelines", Ok(id)) => pipeline_page(&mut state, project, id),
        ("commit", _) => commit_page(&mut state, project, id),
        _ => return not_found(),
    };
    match html {
        Some(html) => html_response(StatusCode::OK, html),
        None => html_response(StatusCode::NOT_FOUND, document("Not Found", "<h1>404</h1>")),
    }
}

/// GitLab's answer to an unknown route.
fn not_found() -> Response {
    let body = Json(json!({ "error": "404 Not Found" }));
    (StatusCode::NOT_FOUND, body).into_response()
}

fn html_response(status: StatusCode, html: String) -> Response {
    let content_type = [(header::CONTENT_TYPE, "text/html; charset=utf-8")];
    (status, content_type, html).into_response()
}

/// `text` with the characters HTML gives a meaning to replaced by entities.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A whole page; `title` is escaped here, `body` must already be.
fn document(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\
         <style>body{{font-family:sans-serif;margin:2em}}pre{{background:#f4f4f4;padding:.5em}}\
         dt{{font-weight:bold}}</style></head>\n<body>\n{body}</body></html>\n",
        escape(title)
    )
}

fn merge_request_page(state: &mut SimState, project: &str, iid: u64) -> Option<String> {
    let scope = state.scope(project).ok()?;
    let project = &*scope.project;
    let mr = &project.merge_requests[project.mr_index(iid).ok()?];
    let pipeline = head_pipeline(project, mr).map_or("none", |p| p.status.as_str());
    let approvers: Vec<String> = mr
        .approvals
        .iter()
        .filter_map(|id| scope.users.get(*id))
        .map(|user| escape(&user.username))
        .collect();
    let approvers = if approvers.is_empty() {
        "none".to_owned()
    } else {
        approvers.join(", ")
    };
    let mut body = format!(
        "<h1>{} <span class=\"iid\">!{iid}</span></h1>\n<dl>\n\
         <dt>State</dt><dd class=\"state\">{}</dd>\n\
         <dt>Source branch</dt><dd class=\"source-branch\">{}</dd>\n\
         <dt>Target branch</dt><dd class=\"target-branch\">{}</dd>\n\
         <dt>Head pipeline</dt><dd class=\"pipeline\">{}</dd>\n\
         <dt>Approved by</dt><dd class=\"approved-by\">{approvers}</dd>\n</dl>\n",
        escape(&mr.title),
        mr.state.as_str(),
        escape(&mr.source_branch),
        escape(&mr.target_branch),
        pipeline,
    );
    if !mr.description.is_empty() {
        body.push_str(&format!(
            "<pre class=\"description\">{}</pre>\n",
            escape(&mr.description)
        ));
    }
    body.push_str("<h2>Changes</h2>\n");
    changes_html(project, mr, &mut body);
    Some(document(&format!("{} (!{iid})", mr.title), &body))
}

fn pipeline_page(state: &mut SimState, project: &str, id: u64) -> Option<String> {
    let scope = state.scope(project).ok()?;
    let pipeline = scope.project.pipelines.iter().find(|p| p.id == id)?;
    let body = format!(
        "<h1>Pipeline <span class=\"id\">#{id}</span></h1>\n<dl>\n\
         <dt>Status</dt><dd class=\"status\">{}</dd>\n\
         <dt>Merge request</dt><dd class=\"mr\">!{}</dd>\n\
         <dt>Ref</dt><dd class=\"ref\">{}</dd>\n\
         <dt>Commit</dt><dd class=\"sha\">{}</dd>\n</dl>\n",
        pipeline.status.as_str(),
        pipeline.merge_request_iid,
        escape(&pipeline.git_ref),
        escape(&pipeline.sha),
    );
    Some(document(&format!("Pipeline #{id}"), &body))
}

fn commit_page(state: &mut SimState, project: &str, sha: &str) -> Option<String> {
    let scope = state.scope(project).ok()?;
    let commit = scope.project.repo.commit(sha)?;
    let files: String = commit
        .tree
        .keys()
        .map(|path| format!("<li class=\"file\">{}</li>\n", escape(path)))
        .collect();
    let body = format!(
        "<h1>Commit <code class=\"sha\">{}</code></h1>\n<pre class=\"message\">{}</pre>\n\
         <dl>\n<dt>Author</dt><dd class=\"author\">{}</dd>\n\
         <dt>Parents</dt><dd class=\"parents\">{}</dd>\n</dl>\n<h2>Files</h2>\n<ul>\n{files}</ul>\n",
        escape(&commit.id),
        escape(&commit.message),
        escape(&commit.author_name),
        escape(&commit.parent_ids.join(", ")),
    );
    Some(document(&format!("Commit {}", commit.title()), &body))
}

/// Each file the merge request changes, with its new content. The base is where the
/// source branch left the target; for a merged request, the target as it was before.
fn changes_html(project: &Project, mr: &MergeRequest, out: &mut String) {
    let repo = &project.repo;
    let target = diff_start(project, mr);
    let base = target.and_then(|target| repo.merge_base(&mr.sha, &target.id));
    let (Some(base), Some(head)) = (base, repo.commit(&mr.sha)) else {
        out.push_str("<p>The branches are gone.</p>\n");
        return;
    };
    let changes = diff(&base.tree, &head.tree);
    if changes.is_empty() {
        out.push_str("<p>No changes.</p>\n");
    }
    for (path, content) in changes {
        let path = escape(path);
        match content {
            Some(content) => out.push_str(&format!(
                "<h3 class=\"file\">{path}</h3>\n<pre>{}</pre>\n",
                escape(content)
            )),
            None => out.push_str(&format!("<h3 class=\"file\">{path} (deleted)</h3>\n")),
        }
    }
}
