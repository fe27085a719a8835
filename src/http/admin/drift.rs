//! `GET /admin/v1/drift`: where the target branch and changegate disagree,
//! as the drift job's last pass found it (SPEC §13), with the commit that
//! last changed each file, read from GitLab as the answer is made; and
//! `POST /admin/v1/drift/repair`, an operator's acceptance of a file as the
//! repository holds it (adopt, ignore), audited.

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::attempt::Attempt;
use super::bodies::audited;
use crate::clients::gitlab::CommitSummary;
use crate::db::Db;
use crate::db::bindings::{BindingRow, adopt_binding_params, get_binding};
use crate::db::drift::{
    FindingRow, accept, delete_finding, finding_at, list_findings, live_operation,
};
use crate::db::events::{BINDING_DRIFT_RESOLVED, append_drift_event};
use crate::domain::{BindingStatus, OperationKind};
use crate::drift::{adoptable_params, place_of};
use crate::files::layout::FileChange;
use crate::http::api::applications::Accepted;
use crate::http::api::preview::unified_diff;
use crate::http::api::status::rfc3339;
use crate::http::api::submission::{Submission, submit};
use crate::http::error::{ApiError, ApiResult};
use crate::http::extract::{AppJson, AppQuery, AuthUser, Database};
use crate::http::layers::authz::Authorized;
use crate::http::reason::{MAX_OPERATOR_REASON_CHARS, checked_reason};
use crate::state::AppState;
use crate::workflow::{bot, file_change, shared_action};
use crate::write_tx;

/// How many findings' last commits are read from GitLab at once.
const LAST_COMMIT_READS: usize = 8;

/// The files that differ, oldest finding first.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DriftReport {
    items: Vec<DriftView>,
    /// In the answer to an adoption whose file gave its parameters back:
    /// what the binding took.
    #[serde(skip_serializing_if = "Option::is_none")]
    adopted: Option<Adopted>,
}

/// The parameters a binding took from its file on the target branch.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Adopted {
    target_key: String,
    subject_id: String,
    /// The binding's parameters now, checked against its target's schema.
    #[schema(value_type = Object)]
    params: serde_json::Value,
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
    /// Where it differs: the file, or for an entry of a shared file
    /// `<file>#<dotted key>`. Names the finding in the diff and repairs.
    path: String,
    /// The file.
    file: String,
    /// For an entry of a shared file: its key, one segment per level.
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<Vec<String>>,
    /// The git blob id the target branch holds (none: missing); for a
    /// shared file's entry, the git blob id of its value's JSON.
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
    // Each finding's last commit is one GitLab read; a few at a time, so
    // a long report does not wait for them one after another.
    let findings = list_findings(&db).await?;
    let items = stream::iter(findings)
        .map(|finding| {
            let place = place_of(&settings, binding_of(&finding), &finding.path);
            let gitlab = &state.gitlab;
            async move {
                let last = match token {
                    Some(token) => gitlab
                        .last_commit_of(token, &finding.project, &place.file, reference)
                        .await
                        .map_err(|err| err.to_string()),
                    None => Err("no bot token is configured".to_owned()),
                };
                let (last_commit, last_commit_unknown) = match last {
                    Ok(commit) => (commit.map(LastCommit::from), None),
                    Err(reason) => (None, Some(reason)),
                };
                DriftView {
                    kind: finding.kind,
                    target_key: finding.target_key,
                    subject_id: finding.subject_id,
                    project: finding.project,
                    path: finding.path,
                    file: place.file,
                    key: place.key,
                    blob_id: finding.blob_id,
                    since: rfc3339(finding.since),
                    detected_at: rfc3339(finding.detected_at),
                    last_commit,
                    last_commit_unknown,
                }
            }
        })
        .buffered(LAST_COMMIT_READS)
        .collect::<Vec<_>>()
        .await;
    Ok(Json(DriftReport {
        items,
        adopted: None,
    }))
}

/// `file` of `project` on the target branch now (none: no such file), or
/// why it cannot be read.
async fn branch_file(
    state: &AppState,
    project: &str,
    file: &str,
) -> Result<Option<String>, String> {
    let settings = state.config.current();
    let token = bot(&settings).map_err(|err| err.to_string())?;
    state
        .gitlab
        .file_content(token, project, file, &settings.gitlab.target_branch)
        .await
        .map_err(|err| err.to_string())
}

/// The binding a finding names, as `(target, subject)`.
fn binding_of(finding: &FindingRow) -> (Option<&str>, Option<&str>) {
    (finding.target_key.as_deref(), finding.subject_id.as_deref())
}

/// An operator's repair of one drifted file.
#[derive(Debug, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RepairBody {
    /// The GitLab project of the finding.
    project: String,
    /// The finding's file.
    path: String,
    /// `adopt`: accept the file as the repository holds it (or its
    /// absence) until it changes again or the binding's next change lands;
    /// `ignore`: leave a file no live binding names out of every report.
    action: RepairAction,
    #[schema(schema_with = crate::http::reason::operator_reason_schema)]
    reason: String,
    #[serde(rename = "__authenticatedOperator", default, skip_serializing)]
    #[schema(ignore)]
    _operator: Option<serde::de::IgnoredAny>,
}

/// A repair that accepts the repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RepairAction {
    /// Accept the file as it is.
    Adopt,
    /// Never report the path.
    Ignore,
}

/// Repairs a drifted file by accepting the repository (audited, with a
/// reason): the finding goes at once, with its `binding.drift_resolved`
/// event. Nothing is written to the repository. An adopted file that
/// parses as its target's format (changegate's own document, or a shared
/// file's entry) and whose parameters pass the target's schema gives the
/// binding those parameters; a templated file is accepted as it is.
#[utoipa::path(post, path = "/admin/v1/drift/repair", tag = "admin", operation_id = "repair_drift",
    request_body = RepairBody,
    responses((status = 200, description = "Repaired: the drift report as it is now", body = DriftReport),
        (status = 400, description = "INVALID_ARGUMENT: no usable reason"),
        (status = 409, description = "CONFLICT: no such finding now, or `ignore` of a file a live binding names")))]
pub async fn repair(
    State(state): State<AppState>,
    AuthUser(caller): AuthUser,
    Database(db): Database,
    AppJson(body): AppJson<RepairBody>,
) -> ApiResult<Json<DriftReport>> {
    let reason = checked_reason(&body.reason, MAX_OPERATOR_REASON_CHARS)?;
    let operator = caller.identity.as_str();
    let attempt = Attempt::new(
        operator,
        "drift.repair",
        format!("{}:{}", body.project, body.path),
        audited(&body, operator),
    );
    let readable = match body.action {
        RepairAction::Adopt => readable_params(&state, &db, &body).await?,
        RepairAction::Ignore => None,
    };
    let repaired = accept_finding(&db, &attempt, &body, &reason, readable).await;
    let adopted = attempt.refusal_audited(&db, repaired).await?;
    let Json(report) = list(State(state), Database(db)).await?;
    Ok(Json(DriftReport { adopted, ..report }))
}

/// The parameters an adoption would give the finding's binding, read from
/// the target branch now, with the binding row they are for; none when the
/// file cannot give them back (see [`adoptable_params`]) or cannot be read.
async fn readable_params(
    state: &AppState,
    db: &Db,
    body: &RepairBody,
) -> ApiResult<Option<(BindingRow, serde_json::Value)>> {
    let Some(finding) = finding_at(db, &body.project, &body.path).await? else {
        return Ok(None);
    };
    let (Some(target), Some(subject), "CHANGED") = (
        finding.target_key.as_deref(),
        finding.subject_id.as_deref(),
        finding.kind.as_str(),
    ) else {
        return Ok(None);
    };
    let Some(binding) = get_binding(db, subject, target)
        .await?
        .filter(|binding| binding.status == BindingStatus::Validated)
    else {
        return Ok(None);
    };
    let settings = state.config.current();
    let place = place_of(&settings, binding_of(&finding), &finding.path);
    let text = match branch_file(state, &finding.project, &place.file).await {
        Ok(Some(text)) => text,
        Ok(None) => return Ok(None),
        Err(reason) => {
            tracing::info!(
                path = finding.path,
                "drift: adopted as it is, its parameters unread: {reason}"
            );
            return Ok(None);
        }
    };
    let recorded = finding.blob_id.as_deref();
    Ok(
        adoptable_params(&settings, target, &place, &text, recorded)
            .map(|params| (binding, params)),
    )
}

async fn accept_finding(
    db: &Db,
    attempt: &Attempt<'_>,
    body: &RepairBody,
    reason: &str,
    readable: Option<(BindingRow, serde_json::Value)>,
) -> ApiResult<Option<Adopted>> {
    let (action, label) = match body.action {
        RepairAction::Adopt => ("ADOPT", "adopted"),
        RepairAction::Ignore => ("IGNORE", "ignored"),
    };
    write_tx!(db, |tx| {
        let Some(finding) = finding_at(tx.db(), &body.project, &body.path).await? else {
            return Err(ApiError::Conflict(
                "no drift of this file now: the last pass did not find it (see GET /admin/v1/drift)",
            ));
        };
        if body.action == RepairAction::Ignore && finding.kind != "UNEXPECTED" {
            return Err(ApiError::Conflict(
                "only a file no live binding names (UNEXPECTED) can be ignored; adopt or restore a binding's file",
            ));
        }
        accept(
            tx.db(),
            &body.project,
            &body.path,
            action,
            finding.blob_id.as_deref(),
            attempt.operator(),
            reason,
        )
        .await?;
        delete_finding(tx.db(), finding.id).await?;
        let adopted = match &readable {
            Some((binding, params))
                if adopt_binding_params(tx.db(), binding.id, binding.version, &params.to_string())
                    .await?
                    == 1 =>
            {
                Some(Adopted {
                    target_key: binding.target_key.clone(),
                    subject_id: binding.subject_id.clone(),
                    params: params.clone(),
                })
            }
            _ => None,
        };
        let payload = json!({ "kind": finding.kind, "project": finding.project,
            "path": finding.path, "repair": label, "by": attempt.operator(),
            "adoptedParams": adopted.as_ref().map(|adopted| &adopted.params) });
        append_drift_event(
            tx.db(),
            BINDING_DRIFT_RESOLVED,
            (
                finding.subject_id.as_deref().unwrap_or_default(),
                finding.target_key.as_deref().unwrap_or_default(),
            ),
            None,
            &payload.to_string(),
        )
        .await?;
        attempt.done(tx.db()).await?;
        Ok::<_, ApiError>(adopted)
    })
    .await
}

/// Which drifted file to compare.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct DiffQuery {
    /// The GitLab project of the finding.
    project: String,
    /// The finding's file.
    path: String,
}

/// A drifted file against what changegate wrote.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftDiff {
    kind: String,
    path: String,
    /// A unified diff from what changegate wrote (`a/`; `/dev/null` when
    /// no live binding names the file) to what the target branch holds
    /// (`b/`; `/dev/null` when it is missing). Empty when the file could
    /// not be read (see `unreadable`).
    diff: String,
    /// Why the target branch's file could not be read, when it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    unreadable: Option<String>,
}

/// The unified diff of one drifted file: read from the target branch now,
/// against the binding's rendering.
#[utoipa::path(get, path = "/admin/v1/drift/diff", tag = "admin", operation_id = "get_drift_diff",
    params(DiffQuery),
    responses((status = 200, description = "The file against what changegate wrote", body = DriftDiff),
        (status = 400, description = "INVALID_ARGUMENT: `project` or `path` is missing"),
        (status = 404, description = "NOT_FOUND: no such finding now")))]
pub async fn diff(
    State(state): State<AppState>,
    Database(db): Database,
    AppQuery(query): AppQuery<DiffQuery>,
) -> ApiResult<Json<DriftDiff>> {
    let finding = finding_at(&db, &query.project, &query.path)
        .await?
        .ok_or(ApiError::NotFound)?;
    let settings = state.config.current();
    let place = place_of(&settings, binding_of(&finding), &finding.path);
    // What changegate would have the file hold: the live binding's
    // rendering, or for a file or entry no live binding names, its absence.
    let believed = match (&finding.subject_id, &finding.target_key) {
        (Some(subject), Some(target)) => match live_operation(&db, subject, target).await? {
            Some(operation) => file_change(&settings, &operation).ok(),
            None => settings
                .targets
                .get(target)
                .map(|settings| settings.layout.remove(target, subject)),
        },
        _ => None,
    };
    let (diff, unreadable) = match branch_file(&state, &finding.project, &place.file).await {
        Ok(current) => {
            let believed = match believed {
                Some(FileChange::Whole { content, .. }) => content,
                // The file with the entry as the binding has it and every
                // other entry as it is.
                Some(change @ FileChange::Key { .. }) => {
                    match shared_action(&place.file, current.as_deref(), &[&change]) {
                        Ok(Some(action)) => action.content,
                        _ => current.clone(),
                    }
                }
                None => None,
            };
            (
                unified_diff(&place.file, believed.as_deref(), current.as_deref()),
                None,
            )
        }
        Err(reason) => (String::new(), Some(reason)),
    };
    Ok(Json(DriftDiff {
        kind: finding.kind,
        path: finding.path,
        diff,
        unreadable,
    }))
}

/// An operator's restore of one drifted file.
#[derive(Debug, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RestoreBody {
    /// The GitLab project of the finding.
    project: String,
    /// The finding's file (`CHANGED` or `MISSING`).
    path: String,
    #[schema(schema_with = crate::http::reason::operator_reason_schema)]
    reason: String,
    #[serde(rename = "__authenticatedOperator", default, skip_serializing)]
    #[schema(ignore)]
    _operator: Option<serde::de::IgnoredAny>,
}

/// Restores a drifted binding's file through the normal flow: a change
/// request (the operator's) that writes the binding's rendering again,
/// approved as any request unless `drift.restore_requires_approval` is
/// false, merged by the merge queue. Audited. The finding goes once the
/// restore lands.
#[utoipa::path(post, path = "/admin/v1/drift/restore", tag = "admin", operation_id = "restore_drift",
    request_body = RestoreBody,
    responses((status = 202, description = "The restore's change request", body = Accepted),
        (status = 400, description = "INVALID_ARGUMENT: no usable reason, or the binding's parameters no longer pass its target's schema"),
        (status = 404, description = "NOT_FOUND: the binding vanished meanwhile"),
        (status = 409, description = "CONFLICT: no such finding now, a file no binding names, or a binding that is not VALIDATED")))]
pub async fn restore(
    State(state): State<AppState>,
    AuthUser(caller): AuthUser,
    Database(db): Database,
    AppJson(body): AppJson<RestoreBody>,
) -> ApiResult<Response> {
    let reason = checked_reason(&body.reason, MAX_OPERATOR_REASON_CHARS)?;
    let operator = caller.identity.as_str();
    let attempt = Attempt::new(
        operator,
        "drift.restore",
        format!("{}:{}", body.project, body.path),
        audited(&body, operator),
    );
    let restored = restore_finding(&state, &db, &caller, &body, reason).await;
    let accepted = attempt.refusal_audited(&db, restored).await?;
    write_tx!(&db, |tx| attempt.done(tx.db()).await).await?;
    Ok(accepted.into_response())
}

async fn restore_finding(
    state: &AppState,
    db: &Db,
    caller: &Authorized,
    body: &RestoreBody,
    reason: String,
) -> ApiResult<Accepted> {
    let finding = finding_at(db, &body.project, &body.path)
        .await?
        .ok_or(ApiError::Conflict(
            "no drift of this file now: the last pass did not find it (see GET /admin/v1/drift)",
        ))?;
    let (Some(subject), Some(target), "CHANGED" | "MISSING") = (
        finding.subject_id.as_deref(),
        finding.target_key.as_deref(),
        finding.kind.as_str(),
    ) else {
        return Err(ApiError::Conflict(
            "no live binding names this file, so there is nothing to restore: adopt or ignore it",
        ));
    };
    let binding = get_binding(db, subject, target)
        .await?
        .filter(|binding| binding.status == BindingStatus::Validated)
        .ok_or(ApiError::Conflict(
            "the binding is not VALIDATED now: a request for it is on its way, which writes the file anew",
        ))?;
    let submission = Submission {
        kind: OperationKind::Apply,
        operation_id: None,
        target_key: target.to_owned(),
        subject_id: Some(subject.to_owned()),
        params: serde_json::from_str(&binding.params).ok(),
        expires_at: binding.expires_at.map(|at| at.and_utc()),
        not_before: None,
        reason,
        revert: None,
        restores_drift: true,
    };
    submit(state, db, caller, &HeaderMap::new(), submission).await
}
