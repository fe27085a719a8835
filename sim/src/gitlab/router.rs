//! The route table: every simulated endpoint under `/api/v4`, each wrapped in the fault
//! middleware under its [`Endpoint`] name, the control API under `/_sim`, outside it, and
//! the web pages of `web_url`s for everything else.

use axum::Router;
use axum::middleware::from_fn_with_state;
use axum::routing::{MethodRouter, delete, get, head, post, put};

use super::faults::Endpoint;
use super::intercept::intercept;
use super::{
    GitLabControl, SimContext, approvals, branches, checklist, commits, control_http, merge,
    merge_requests, pipelines, projects, rebase, test_reports, tree, web,
};

/// Builds the application for one simulator instance.
pub fn build(ctx: SimContext, control: GitLabControl) -> Router {
    let routes = [
        (
            "/projects/{id}",
            Endpoint::GetProject,
            get(projects::get_project),
        ),
        (
            "/projects/{id}/repository/branches",
            Endpoint::ListBranches,
            get(branches::list_branches),
        ),
        (
            "/projects/{id}/repository/branches",
            Endpoint::CreateBranch,
            post(branches::create_branch),
        ),
        (
            "/projects/{id}/repository/branches/{branch}",
            Endpoint::GetBranch,
            get(branches::get_branch),
        ),
        (
            "/projects/{id}/repository/branches/{branch}",
            Endpoint::DeleteBranch,
            delete(branches::delete_branch),
        ),
        (
            "/projects/{id}/repository/tree",
            Endpoint::GetTree,
            get(tree::list_tree),
        ),
        (
            "/projects/{id}/repository/files/{path}",
            Endpoint::GetFile,
            get(commits::get_file),
        ),
        (
            "/projects/{id}/repository/files/{path}",
            Endpoint::GetFileMetadata,
            head(commits::head_file),
        ),
        (
            "/projects/{id}/repository/files/{path}/raw",
            Endpoint::GetRawFile,
            get(commits::get_raw_file),
        ),
        (
            "/projects/{id}/repository/commits",
            Endpoint::ListCommits,
            get(commits::list_commits),
        ),
        (
            "/projects/{id}/repository/commits",
            Endpoint::CreateCommit,
            post(commits::create_commit),
        ),
        (
            "/projects/{id}/repository/commits/{sha}",
            Endpoint::GetCommit,
            get(commits::get_commit),
        ),
        (
            "/projects/{id}/merge_requests",
            Endpoint::ListMergeRequests,
            get(merge_requests::list_mrs),
        ),
        (
            "/projects/{id}/merge_requests",
            Endpoint::CreateMergeRequest,
            post(merge_requests::create_mr),
        ),
        (
            "/projects/{id}/merge_requests/{iid}",
            Endpoint::GetMergeRequest,
            get(merge_requests::get_mr),
        ),
        (
            "/projects/{id}/merge_requests/{iid}",
            Endpoint::UpdateMergeRequest,
            put(merge_requests::update_mr),
        ),
        (
            "/projects/{id}/merge_requests/{iid}/merge",
            Endpoint::Merge,
            put(merge::merge_mr),
        ),
        (
            "/projects/{id}/merge_requests/{iid}/rebase",
            Endpoint::Rebase,
            put(rebase::rebase_mr),
        ),
        (
            "/projects/{id}/merge_requests/{iid}/approvals",
            Endpoint::GetApprovals,
            get(approvals::get_approvals),
        ),
        (
            "/projects/{id}/merge_requests/{iid}/approve",
            Endpoint::Approve,
            post(approvals::approve),
        ),
        (
            "/projects/{id}/merge_requests/{iid}/unapprove",
            Endpoint::Unapprove,
            post(approvals::unapprove),
        ),
        (
            "/projects/{id}/merge_requests/{iid}/pipelines",
            Endpoint::ListMergeRequestPipelines,
            get(pipelines::list_mr_pipelines),
        ),
        (
            "/projects/{id}/pipelines",
            Endpoint::ListProjectPipelines,
            get(pipelines::list_project_pipelines),
        ),
        (
            "/projects/{id}/pipelines/{pipeline_id}",
            Endpoint::GetPipeline,
            get(pipelines::get_pipeline),
        ),
        (
            "/projects/{id}/pipelines/{pipeline_id}/test_report",
            Endpoint::GetPipelineTestReport,
            get(test_reports::get_test_report),
        ),
        (
            "/projects/{id}/pipelines/{pipeline_id}/retry",
            Endpoint::RetryPipeline,
            post(pipelines::retry_pipeline),
        ),
        (
            "/projects/{id}/pipelines/{pipeline_id}/cancel",
            Endpoint::CancelPipeline,
            post(pipelines::cancel_pipeline),
        ),
        (
            "/projects/{id}/approval_checklist",
            Endpoint::GetApprovalChecklist,
            get(checklist::get_checklist),
        ),
    ];
    let api = routes.into_iter().fold(
        Router::new(),
        |router, (path, endpoint, handler): (&str, Endpoint, MethodRouter<SimContext>)| {
            let layer = from_fn_with_state((ctx.clone(), endpoint), intercept);
            router.route(path, handler.layer(layer))
        },
    );
    Router::new()
        .nest("/api/v4", api)
        .nest_service("/_sim", control_http::router(control))
        .fallback(web::page)
        .with_state(ctx)
}
