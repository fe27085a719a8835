//! `POST /api/v1/applications/preview` and
//! `POST /api/v1/bindings/{targetKey}/close/preview` (SPEC §12): a
//! submission's dry run. The same checks as submitting, answered as a list
//! of what stands in the way instead of the first refusal; the files the
//! commit would write, rendered by the commit's own code, against what the
//! target branch holds now; and the way the request would go. Nothing is
//! written: no row, no key, no audit entry, no GitLab write, nothing
//! counted against a rate limit.

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use chrono::Utc;
use serde::Serialize;

use super::applications::{ApplyBody, CloseBody};
use super::submission::{Checked, Submission, check, may_use_target};
use super::{APPLY, CLOSE};
use crate::clients::gitlab::GitLabError;
use crate::config::resolve::{access_open, closed_by_configuration};
use crate::config::{ApprovalProvider, Settings};
use crate::db::Db;
use crate::db::batches::frozen_by_operator;
use crate::db::bindings::get_binding;
use crate::db::operations::OperationRow;
use crate::domain::{OperationKind, StepStatus};
use crate::files::layout::FileChange;
use crate::files::params::FieldError;
use crate::http::error::{ApiError, ApiResult};
use crate::http::extract::{AppJson, AuthUser, Database};
use crate::http::layers::RouteSpec;
use crate::http::layers::authz::{Authorized, OPERATOR_RULE};
use crate::http::layers::rate_limit::would_refuse;
use crate::state::AppState;
use crate::store::{NewRequest, may_replace};
use crate::workflow::{bot, file_change, shared_action};

/// The longest a preview waits on GitLab: as the user types, an answer
/// without the repository's file beats a late one.
const GITLAB_WAIT: Duration = Duration::from_secs(5);

/// What a submission would do now.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreviewAnswer {
    /// The files the change request would write (none when a blocker
    /// keeps the caller from seeing them: permission, another person's
    /// binding, parameters that cannot be rendered).
    files: Vec<PreviewFile>,
    /// What would refuse the request if it were submitted now, or hold it
    /// once accepted; empty when nothing stands in the way.
    blockers: Vec<Blocker>,
    /// The way the request would go.
    route: PreviewRoute,
    /// Whether the files on the target branch could be read.
    gitlab: RepositoryRead,
}

/// One file of the change.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreviewFile {
    /// The file in the configuration repository.
    #[schema(examples("bindings/demo.feature-flags/alice.json"))]
    path: String,
    action: FileActionKind,
    /// The file on the target branch now; null when there is none, or when
    /// it could not be read (`currentKnown` false).
    current: Option<String>,
    /// Whether `current` is what the target branch holds (false when GitLab
    /// could not be read: `gitlab.reason` says why).
    current_known: bool,
    /// The whole file as the commit would write it (for a key of a shared
    /// file, the whole file after the edit); null when it is deleted. When
    /// the shared file could not be read, only the entry.
    proposed: Option<String>,
    /// A unified diff from `current` to `proposed`; empty when unchanged,
    /// null when `current` is not known.
    diff: Option<String>,
}

/// What the commit would do to a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum FileActionKind {
    /// The file does not exist yet.
    Create,
    /// The file exists with other content.
    Update,
    /// The file would be deleted.
    Delete,
    /// The target branch already holds the file as it would be written.
    Unchanged,
}

/// Something that stands in the way of the request.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Blocker {
    /// The code a submit would be answered with (`SERVICE_CLOSED`,
    /// `RATE_LIMITED`, `IN_PROGRESS`, `FORBIDDEN`, `INVALID_ARGUMENT`,
    /// `NOT_FOUND`), or `MERGE_FROZEN` for a hold.
    #[schema(examples("SERVICE_CLOSED"))]
    code: &'static str,
    /// What stands in the way and what helps, in words for the requester.
    message: String,
    effect: BlockerEffect,
    /// `IN_PROGRESS`: the change request in the way.
    #[serde(skip_serializing_if = "Option::is_none")]
    operation_id: Option<String>,
    /// `INVALID_ARGUMENT` for parameters: every field that breaks the
    /// target's schema.
    #[serde(skip_serializing_if = "Option::is_none")]
    fields: Option<Vec<FieldError>>,
}

/// Whether a blocker refuses the submit or holds the accepted request.
#[derive(Debug, Clone, Copy, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum BlockerEffect {
    /// A submit now would be refused with `code`.
    Refuse,
    /// A submit would be accepted, and the request would wait (the merge
    /// queue is frozen).
    Hold,
}

/// The way the request would go.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreviewRoute {
    approval: ApprovalRoute,
    /// Whether the approved request waits for a merge round with others
    /// (one MR for the batch) or gets its own MR at once (as a removal
    /// always does).
    batched: bool,
    /// Who approves the MR in GitLab once its pipeline passed.
    #[schema(examples(json!(["reviewer bot 1", "reviewer bot 2"])))]
    reviewers: Vec<String>,
    /// The GitLab project the file is written in.
    #[schema(examples("config/repo"))]
    project: String,
    /// The branch the MR merges into.
    #[schema(examples("main"))]
    target_branch: String,
}

/// Who approves the request before its MR is written.
#[derive(Debug, Clone, Copy, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalRoute {
    /// An operator, in changegate (built-in approval).
    Builtin,
    /// The external approval system.
    Http,
    /// Nobody: a removal is not approved before its MR is written (the
    /// MR's reviewers still approve it).
    None,
}

/// Whether the target branch's files could be read for the preview.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RepositoryRead {
    /// True when every file's `current` is what the target branch holds.
    readable: bool,
    /// Why not, when not.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

/// What an apply would do now: the same checks as `POST
/// /api/v1/applications`, nothing written, nothing counted against the
/// apply limit. Blockers are answered 200 with the rest of the preview.
#[utoipa::path(post, path = "/api/v1/applications/preview", tag = "requests",
    operation_id = "preview_apply",
    request_body = ApplyBody,
    responses(
        (status = 200, description = "The files, the blockers and the route", body = PreviewAnswer),
        (status = 503, description = "NOT_READY, DATABASE_UNAVAILABLE or TIMEOUT: retry shortly")))]
pub async fn preview_apply(
    State(state): State<AppState>,
    AuthUser(caller): AuthUser,
    Database(db): Database,
    headers: HeaderMap,
    AppJson(body): AppJson<ApplyBody>,
) -> ApiResult<Json<PreviewAnswer>> {
    preview(&state, &db, &caller, &headers, body.into_submission())
        .await
        .map(Json)
}

/// What a removal would do now: the same checks as `POST
/// /api/v1/bindings/{targetKey}/close`, nothing written.
#[utoipa::path(post, path = "/api/v1/bindings/{targetKey}/close/preview", tag = "requests",
    operation_id = "preview_close",
    request_body = CloseBody,
    params(("targetKey" = String, Path, description = "Target of the binding")),
    responses(
        (status = 200, description = "The files, the blockers and the route", body = PreviewAnswer),
        (status = 503, description = "NOT_READY, DATABASE_UNAVAILABLE or TIMEOUT: retry shortly")))]
pub async fn preview_close(
    State(state): State<AppState>,
    AuthUser(caller): AuthUser,
    Database(db): Database,
    Path(target_key): Path<String>,
    headers: HeaderMap,
    AppJson(body): AppJson<CloseBody>,
) -> ApiResult<Json<PreviewAnswer>> {
    preview(
        &state,
        &db,
        &caller,
        &headers,
        body.into_submission(target_key),
    )
    .await
    .map(Json)
}

/// A refusal as a blocker, with the code and words a submit would answer.
fn refusal(err: ApiError) -> Blocker {
    let (_, code) = err.status_and_code();
    let message = err.to_string();
    let (operation_id, fields) = match err {
        ApiError::InProgress { operation_id, .. } => (Some(operation_id), None),
        ApiError::InvalidFields(fields) => (None, Some(fields)),
        _ => (None, None),
    };
    Blocker {
        code,
        message,
        effect: BlockerEffect::Refuse,
        operation_id,
        fields,
    }
}

/// The submission's dry run.
pub(super) async fn preview(
    state: &AppState,
    db: &Db,
    caller: &Authorized,
    headers: &HeaderMap,
    submission: Submission,
) -> ApiResult<PreviewAnswer> {
    let settings = state.config.current();
    let kind = submission.kind;
    let route_spec = match kind {
        OperationKind::Apply => &APPLY,
        OperationKind::Close => &CLOSE,
    };
    let mut answer = PreviewAnswer {
        files: Vec::new(),
        blockers: Vec::new(),
        route: route_of(&settings, &submission.target_key, kind),
        gitlab: RepositoryRead {
            readable: true,
            reason: None,
        },
    };
    // The checks of the submit's layers (its route's rule, its rate limit),
    // then the submit's own, in its order.
    let mut forbidden = !may_use_route(state, &settings, route_spec, caller).await;
    if let Some(message) = would_refuse(state, &settings, route_spec, &caller.identity) {
        answer
            .blockers
            .push(refusal(ApiError::RateLimited(message)));
    }
    let access = &settings.access;
    if !access_open(access.mode, &access.window, Utc::now()) {
        answer
            .blockers
            .push(refusal(ApiError::ServiceClosed(closed_by_configuration(
                access.mode,
                &access.window,
            ))));
    }
    let Some(target) = settings.targets.get(&submission.target_key) else {
        answer.blockers.push(refusal(ApiError::InvalidArgument(
            "field `targetKey`: not in the catalog; see GET /api/v1/targets".to_owned(),
        )));
        return Ok(with_forbidden(answer, forbidden));
    };
    let Checked { request, refusals } = check(&settings, target, caller, headers, submission);
    for err in refusals {
        match err {
            ApiError::Forbidden => forbidden = true,
            err => answer.blockers.push(refusal(err)),
        }
    }
    if !forbidden
        && may_use_target(state, &settings, target, caller)
            .await
            .is_err()
    {
        forbidden = true;
    }
    // Nothing is shown of what the caller could not apply for.
    let Some(request) = request.filter(|_| !forbidden) else {
        return Ok(with_forbidden(answer, forbidden));
    };
    let binding = get_binding(db, &request.subject_id, &request.target_key).await?;
    if kind == OperationKind::Close
        && binding
            .as_ref()
            .is_none_or(|b| !caller.operator && b.requested_by != caller.identity.as_str())
    {
        // As the submit: anyone else learns nothing about the binding.
        answer.blockers.push(Blocker {
            message: "you have no binding of this target for this subject to remove".to_owned(),
            ..refusal(ApiError::NotFound)
        });
        return Ok(answer);
    }
    if let Some(row) = binding.as_ref().filter(|b| !may_replace(kind, b.status)) {
        answer.blockers.push(refusal(ApiError::InProgress {
            status: row.status,
            operation_id: row.operation_id.clone(),
        }));
    }
    if settings.batch.enabled && (settings.batch.freeze || frozen_by_operator(db).await?) {
        answer.blockers.push(Blocker {
            code: "MERGE_FROZEN",
            message: "the merge queue is frozen: once approved, the request waits until it \
                      thaws before its MR is written"
                .to_owned(),
            effect: BlockerEffect::Hold,
            operation_id: None,
            fields: None,
        });
    }
    // Rendered by the code the commit runs, from the request as it would
    // be recorded, so the preview cannot show what the MR would not write.
    let Ok(change) = file_change(&settings, &operation_row(&request)) else {
        // The refusal that says why is among the blockers already.
        return Ok(answer);
    };
    let project = settings.project_for(&request.target_key).to_owned();
    let current = read_current(state, &settings, &project, change.path()).await;
    match current {
        Ok(current) => answer.files.push(file_view(&change, current.as_deref())),
        Err(reason) => {
            answer
                .files
                .push(unknown_file_view(&change, binding.is_some()));
            answer.gitlab = RepositoryRead {
                readable: false,
                reason: Some(reason),
            };
        }
    }
    Ok(answer)
}

/// The answer with the permission blocker, when the caller lacks one.
fn with_forbidden(mut answer: PreviewAnswer, forbidden: bool) -> PreviewAnswer {
    if forbidden {
        answer.blockers.insert(0, refusal(ApiError::Forbidden));
    }
    answer
}

/// Whether the caller holds the rule of the submit's route (the preview's
/// own route needs only `read`): as the route's authz layer decides.
async fn may_use_route(
    state: &AppState,
    settings: &Settings,
    spec: &RouteSpec,
    caller: &Authorized,
) -> bool {
    let Some(Some(route_codes)) = settings.authz.rules.get(spec.name) else {
        return false;
    };
    let operator_codes: &[String] = match settings.authz.rules.get(OPERATOR_RULE) {
        Some(Some(codes)) => codes,
        _ => &[],
    };
    match state
        .permissions
        .route_access(
            &settings.authz,
            &caller.identity,
            route_codes,
            operator_codes,
        )
        .await
    {
        Ok((allowed, _)) => allowed,
        Err(err) => {
            tracing::warn!(route = spec.name, "permission check failed; denying: {err}");
            false
        }
    }
}

fn route_of(settings: &Settings, target_key: &str, kind: OperationKind) -> PreviewRoute {
    // A removal goes from its request to its own MR (its workflow's
    // CLOSE_REQUESTED step): no approval, no merge round.
    let removal = kind == OperationKind::Close;
    PreviewRoute {
        approval: match settings.approval.provider {
            _ if removal => ApprovalRoute::None,
            ApprovalProvider::Builtin => ApprovalRoute::Builtin,
            ApprovalProvider::Http => ApprovalRoute::Http,
        },
        batched: settings.batch.enabled && !removal,
        reviewers: (1..=settings.gitlab.reviewer_tokens.len())
            .map(|n| format!("reviewer bot {n}"))
            .collect(),
        project: settings.project_for(target_key).to_owned(),
        target_branch: settings.gitlab.target_branch.clone(),
    }
}

/// The request as the store would record it, read back as the commit
/// reads it.
fn operation_row(request: &NewRequest) -> OperationRow {
    let now = Utc::now().naive_utc();
    OperationRow {
        id: 0,
        operation_id: request.operation_id.as_string(),
        kind: request.kind,
        subject_id: request.subject_id.clone(),
        target_key: request.target_key.clone(),
        requested_by: request.requested_by.clone(),
        flow_order: request.flow_order,
        step: StepStatus::Accepted,
        message: None,
        obstacle: None,
        unreachable_since: None,
        params: request.params.to_string(),
        reason: request.reason.clone(),
        expires_at: request.expires_at,
        mr_iid: None,
        mr_url: None,
        version: 0,
        due_at: None,
        attempts: 0,
        created_at: now,
        updated_at: now,
        trace_parent: None,
        not_before: request.controls.not_before,
        urgent: request.controls.urgent,
        revert_of: request.controls.revert_of.clone(),
        restores_drift: request.controls.restores_drift,
    }
}

/// The file at the head of the target branch, or why it cannot be read.
async fn read_current(
    state: &AppState,
    settings: &Settings,
    project: &str,
    path: &str,
) -> Result<Option<String>, String> {
    let token = bot(settings).map_err(|err| describe(&err))?;
    let branch = &settings.gitlab.target_branch;
    let read = state.gitlab.cached_file(token, project, path, branch);
    match tokio::time::timeout(GITLAB_WAIT, read).await {
        Ok(Ok(content)) => Ok(content.map(|text| text.to_string())),
        Ok(Err(err)) => Err(describe(&err)),
        Err(_) => Err(format!(
            "GitLab did not answer within {} s",
            GITLAB_WAIT.as_secs()
        )),
    }
}

fn describe(err: &GitLabError) -> String {
    format!("the target branch could not be read from GitLab: {err}")
}

/// The file's view against what the target branch holds.
fn file_view(change: &FileChange, current: Option<&str>) -> PreviewFile {
    let path = change.path().to_owned();
    let proposed = match change {
        FileChange::Whole { content, .. } => Ok(content.clone()),
        FileChange::Key { .. } => match shared_action(&path, current, &[change]) {
            Ok(Some(action)) => Ok(action.content),
            // Nothing to write: the file stays as it is (or stays absent).
            Ok(None) => Ok(current.map(str::to_owned)),
            Err(unwritable) => Err(unwritable.message),
        },
    };
    let proposed = match proposed {
        Ok(proposed) => proposed,
        // The shared file cannot take the edit (it no longer parses): the
        // commit would fail the request; the preview shows the file as it is.
        Err(_) => current.map(str::to_owned),
    };
    let action = match (current, proposed.as_deref()) {
        (None, Some(_)) => FileActionKind::Create,
        (Some(_), None) => FileActionKind::Delete,
        (Some(now), Some(next)) if now != next => FileActionKind::Update,
        _ => FileActionKind::Unchanged,
    };
    let diff = unified_diff(&path, current, proposed.as_deref());
    PreviewFile {
        path,
        action,
        current: current.map(str::to_owned),
        current_known: true,
        proposed,
        diff: Some(diff),
    }
}

/// The file's view when the target branch could not be read: the action
/// from what changegate knows (its binding row), the proposed file alone.
fn unknown_file_view(change: &FileChange, bound: bool) -> PreviewFile {
    let (action, proposed) = match change {
        FileChange::Whole { content: None, .. } | FileChange::Key { value: None, .. } => {
            (FileActionKind::Delete, None)
        }
        FileChange::Whole { content, .. } => (
            if bound {
                FileActionKind::Update
            } else {
                FileActionKind::Create
            },
            content.clone(),
        ),
        FileChange::Key {
            format, key, value, ..
        } => (
            FileActionKind::Update,
            value
                .as_ref()
                .and_then(|value| crate::files::document::set_key(*format, None, key, value).ok()),
        ),
    };
    PreviewFile {
        path: change.path().to_owned(),
        action,
        current: None,
        current_known: false,
        proposed,
        diff: None,
    }
}

/// `git diff`'s form: `/dev/null` for the side where the file is absent.
pub(crate) fn unified_diff(path: &str, current: Option<&str>, proposed: Option<&str>) -> String {
    if current == proposed {
        return String::new();
    }
    let old = current.map_or_else(|| "/dev/null".to_owned(), |_| format!("a/{path}"));
    let new = proposed.map_or_else(|| "/dev/null".to_owned(), |_| format!("b/{path}"));
    similar::TextDiff::from_lines(current.unwrap_or(""), proposed.unwrap_or(""))
        .unified_diff()
        .context_radius(3)
        .header(&old, &new)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_diff_names_the_file_and_dev_null_for_a_missing_side() {
        let created = unified_diff("a.json", None, Some("{}\n"));
        assert!(
            created.starts_with("--- /dev/null\n+++ b/a.json\n@@ -0,0 +1 @@\n+{}\n"),
            "{created}"
        );
        let deleted = unified_diff("a.json", Some("{}\n"), None);
        assert!(
            deleted.starts_with("--- a/a.json\n+++ /dev/null\n"),
            "{deleted}"
        );
        assert_eq!(unified_diff("a.json", Some("x\n"), Some("x\n")), "");
        let updated = unified_diff("a.json", Some("a\nb\n"), Some("a\nc\n"));
        assert!(updated.contains("-b\n+c\n"), "{updated}");
    }

    #[test]
    fn a_key_edit_shows_the_whole_file_after_the_edit() {
        let change = FileChange::Key {
            path: "pools.toml".to_owned(),
            format: crate::files::document::FileFormat::Toml,
            key: vec!["pools".to_owned(), "payments".to_owned()],
            value: Some(serde_json::json!({ "size": 40 })),
        };
        let current = "# Pools.\n[pools.legacy]\nsize = 5\n";
        let view = file_view(&change, Some(current));
        assert_eq!(view.action, FileActionKind::Update);
        let proposed = view.proposed.unwrap();
        assert!(proposed.starts_with(current), "{proposed}");
        assert!(
            proposed.contains("[pools.payments]\nsize = 40"),
            "{proposed}"
        );
        let again = file_view(&change, Some(&proposed));
        assert_eq!(again.action, FileActionKind::Unchanged);
        assert_eq!(again.diff.as_deref(), Some(""));
    }
}
