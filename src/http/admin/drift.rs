//! `GET /admin/v1/drift`: where the target branch and changegate disagree,
//! as the drift job's last pass found it (SPEC §13), with the commit that
//! last changed each file, read from GitLab as the answer is made.

use axum::Json;
use axum::extract::State;
use serde::Serialize;

use crate::clients::gitlab::CommitSummary;
use crate::db::drift::list_findings;
use crate::http::api::status::rfc3339;
use crate::http::error::ApiResult;
use crate::http::extract::Database;
use crate::state::AppState;
use crate::workflow::bot;

/// The files that differ, oldest finding first.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DriftReport {
    items: Vec<DriftView>,
}

/// One file that differs.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftView {
    /// `CHANGED` (not the binding's rendering), `MISSING` (a live binding
    /// has no file) or `UNEXPECTED` (no live binding names the file).
    kind: String,
    /// The binding's target, when a binding names the file.
    #[serde(skip_serializing_if = "Option::is_none")]
    target_key: Option<String>,
    /// The binding's subject, when a binding names the file.
    #[serde(skip_serializing_if = "Option::is_none")]
    subject_id: Option<String>,
    /// The GitLab project.
    project: String,
    /// The file.
    path: String,
    /// The git blob id the target branch holds (none: missing).
    #[serde(skip_serializing_if = "Option::is_none")]
    blob_id: Option<String>,
    /// When a pass first found it.
    #[schema(value_type = String, format = DateTime)]
    since: String,
    /// When a pass last found it.
    #[schema(value_type = String, format = DateTime)]
    detected_at: String,
    /// The newest commit on the target branch that changed the file; none
    /// when GitLab could not be asked (see `lastCommitUnknown`).
    #[serde(skip_serializing_if = "Option::is_none")]
    last_commit: Option<LastCommit>,
    /// Why the last commit is not shown.
    #[serde(skip_serializing_if = "Option::is_none")]
    last_commit_unknown: Option<String>,
}

/// A commit that changed a drifted file.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastCommit {
    id: String,
    title: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    author_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    committed_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    web_url: Option<String>,
}

impl From<CommitSummary> for LastCommit {
    fn from(commit: CommitSummary) -> Self {
        Self {
            id: commit.id,
            title: commit.title,
            author_name: commit.author_name,
            committed_at: commit.committed_date,
            web_url: commit.web_url,
        }
    }
}

/// The drift the last pass found.
#[utoipa::path(get, path = "/admin/v1/drift", tag = "admin", operation_id = "list_drift",
    responses((status = 200, description = "Files where the target branch and changegate disagree", body = DriftReport)))]
pub async fn list(
    State(state): State<AppState>,
    Database(db): Database,
) -> ApiResult<Json<DriftReport>> {
    let settings = state.config.current();
    let reference = settings.gitlab.target_branch.as_str();
    let token = bot(&settings).ok();
    let mut items = Vec::new();
    for finding in list_findings(&db).await? {
        let last = match token {
            Some(token) => state
                .gitlab
                .last_commit_of(token, &finding.project, &finding.path, reference)
                .await
                .map_err(|err| err.to_string()),
            None => Err("no bot token is configured".to_owned()),
        };
        let (last_commit, last_commit_unknown) = match last {
            Ok(commit) => (commit.map(LastCommit::from), None),
            Err(reason) => (None, Some(reason)),
        };
        items.push(DriftView {
            kind: finding.kind,
            target_key: finding.target_key,
            subject_id: finding.subject_id,
            project: finding.project,
            path: finding.path,
            blob_id: finding.blob_id,
            since: rfc3339(finding.since),
            detected_at: rfc3339(finding.detected_at),
            last_commit,
            last_commit_unknown,
        });
    }
    Ok(Json(DriftReport { items }))
}
