//! `GET /projects/:id/pipelines/:pipeline_id/test_report`: the JUnit results a
//! pipeline's jobs published (`lib/api/ci/pipelines.rb`, `TestReportEntity`,
//! `TestSuiteEntity`, `TestCaseEntity`). A pipeline without reports answers an
//! empty report (200, `total_count: 0`, as GitLab's own API spec expects).
//! A project with `junit_reports` on checks every file of the pipeline's tree
//! in one job, one test case per file with its path in `file`. Simplified:
//! that one job's report appears when the pipeline ends `success` or
//! `failed`; while it runs, or once canceled, the report is empty (GitLab
//! shows the reports of whichever jobs finished), and suites carry no
//! `build_ids`.

use axum::Json;
use axum::extract::{Path, State};
use serde_json::{Value, json};

use super::SimContext;
use super::auth::Caller;
use super::error::{ApiError, ApiResult};
use super::pipelines::{Pipeline, PipelineStatus};
use super::state::Project;

/// The suite the simulated CI job publishes.
const SUITE: &str = "config-check";

/// `GET /projects/:id/pipelines/:pipeline_id/test_report`
pub async fn get_test_report(
    State(ctx): State<SimContext>,
    _caller: Caller,
    Path((project, id)): Path<(String, u64)>,
) -> ApiResult<Json<Value>> {
    let mut state = ctx.lock();
    let scope = state.scope(&project)?;
    let project = &*scope.project;
    let pipeline = project.pipelines.iter().find(|p| p.id == id);
    let pipeline = pipeline.ok_or(ApiError::NotFound("Pipeline"))?;
    let ended = matches!(
        pipeline.status,
        PipelineStatus::Success | PipelineStatus::Failed
    );
    let cases = if project.settings.junit_reports && ended {
        test_cases(project, pipeline)
    } else {
        Vec::new()
    };
    Ok(Json(report(&cases)))
}

/// The check job's cases: one per file of the pipeline's tree.
fn test_cases(project: &Project, pipeline: &Pipeline) -> Vec<Value> {
    let Some(commit) = project.repo.commit(&pipeline.sha) else {
        return Vec::new();
    };
    let marker = project.settings.failing_content.as_deref();
    commit
        .tree
        .iter()
        .map(|(path, content)| {
            let fails = marker.is_some_and(|marker| content.contains(marker));
            json!({
                "status": if fails { "failed" } else { "success" },
                "name": format!("{path} is valid"),
                "classname": SUITE,
                "file": format!("./{path}"),
                "execution_time": 0.01,
                "system_output": fails.then(|| format!("{path}: rejected by the check")),
                "stack_trace": null,
                "recent_failures": null,
            })
        })
        .collect()
}

/// `TestReportEntity` with `details: true`: the totals, and the one suite
/// with its cases when there are any. A suite counts as the report does
/// (`TestSuiteEntity` and `TestReportEntity` share these fields), so both
/// carry the same totals: there is only one suite.
fn report(cases: &[Value]) -> Value {
    let failed = cases.iter().filter(|c| c["status"] == "failed").count();
    let total = cases.len();
    let totals = json!({
        "total_time": 0.01 * total as f64,
        "total_count": total,
        "success_count": total - failed,
        "failed_count": failed,
        "skipped_count": 0,
        "error_count": 0,
    });
    let with = |extra: Value| {
        let mut body = totals.clone();
        if let (Value::Object(body), Value::Object(extra)) = (&mut body, extra) {
            body.extend(extra);
        }
        body
    };
    let suites: Vec<Value> = if cases.is_empty() {
        Vec::new()
    } else {
        vec![with(json!({
            "name": SUITE,
            "suite_error": null,
            "test_cases": cases,
        }))]
    };
    with(json!({ "test_suites": suites }))
}
