//! `POST /callbacks/deploy`: the deploy pipeline reports a merged MR deployed.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;

use super::signed::{DeployPipeline, SignedJson};
use super::{Answer, CallbackAnswer, first_receipt, trace_operation, valid_callback_id};
use crate::config::Settings;
use crate::config::projects::{NamedProject, ProjectKey, Projects};
use crate::db::callbacks::{CallbackSource, MrOperation, insert_deploy_report, operations_of_mr};
use crate::domain::{BindingStatus, OperationId, StepStatus};
use crate::http::error::{ApiError, ApiResult};
use crate::http::extract::Database;
use crate::state::AppState;
use crate::store::{Change, StoreError, StoreTx, flip_in, note_in};
use crate::write_tx;

/// The deploy outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
enum DeployStatus {
    Success,
    Failed,
}

/// The longest project name stored with a deploy report (as
/// `merge_batch.project` holds a configured one).
const MAX_PROJECT_CHARS: usize = 191;

/// A GitLab project, by numeric id or full path.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
enum ProjectName {
    /// Its numeric id, e.g. `42` (CI's `CI_PROJECT_ID`).
    Id(u64),
    /// Its full path, e.g. `"group/repo"` (CI's `CI_PROJECT_PATH`), or its id
    /// as a string.
    Path(String),
}

impl ProjectName {
    fn text(&self) -> String {
        match self {
            Self::Id(id) => id.to_string(),
            Self::Path(path) => path.clone(),
        }
    }
}

/// What the deploy pipeline sends.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeployCallback {
    callback_id: String,
    /// The deployed MR's iid, numbered within `project`.
    mr_iid: i64,
    status: DeployStatus,
    #[serde(default)]
    operation_ids: Option<Vec<String>>,
    #[serde(default)]
    sha: Option<String>,
    /// The MR's project, in the form the configuration names it (an id
    /// matches only a project configured by id, a path one configured by
    /// path, case-insensitively). Required when the targets span several
    /// projects; without it the one project they use is meant.
    #[serde(default)]
    project: Option<ProjectName>,
}

/// Marks the MR's MERGED operations VALIDATED (or notes the failure). The MR
/// is the iid within the callback's project: operations of another
/// project's MR with the same iid are not touched. When the callback names
/// its operations, exactly those are meant (beyond the notes, which match by
/// MR only). Each flip goes through flip-once, so this and the
/// reconciliation job never both count a binding. A project no target uses
/// is answered as an unknown MR is: stored, and IGNORED_STALE.
#[utoipa::path(post, path = "/callbacks/deploy", tag = "callbacks",
    request_body = DeployCallback,
    params(("webhook-id" = String, Header), ("webhook-timestamp" = String, Header),
        ("webhook-signature" = String, Header, description = "Standard Webhooks `v1,<base64 HMAC-SHA256>`")),
    responses((status = 200, description = "OK (applied), DUPLICATE (applied before) or IGNORED_STALE (no longer applies)", body = CallbackAnswer),
        (status = 400, description = "INVALID_ARGUMENT: a bad `callbackId`; `project` missing while the targets span several projects, empty, or in a form no configured project can be matched in (an id where projects are configured by path, or the reverse)"),
        (status = 401, description = "INVALID_SIGNATURE")))]
pub async fn deploy_callback(
    State(state): State<AppState>,
    Database(db): Database,
    SignedJson(callback, _): SignedJson<DeployCallback, DeployPipeline>,
) -> ApiResult<Json<CallbackAnswer>> {
    if !valid_callback_id(&callback.callback_id) {
        return Err(ApiError::InvalidArgument(
            "field `callbackId`: 1 to 191 printable characters".to_owned(),
        ));
    }
    let settings = state.config.current();
    let project = named_project(&settings, callback.project.as_ref())?;
    let success = callback.status == DeployStatus::Success;
    let sha = callback.sha.as_deref().filter(|sha| sha.len() <= 64);
    let applied = write_tx!(&db, |tx| {
        if !first_receipt(tx, CallbackSource::Deploy, &callback.callback_id).await? {
            return Ok(None);
        }
        insert_deploy_report(
            tx.db(),
            &callback.callback_id,
            project.key().as_str(),
            callback.mr_iid,
            sha,
            success,
        )
        .await?;
        let operations = match &project {
            NamedProject::Known(key) => operations_meant(tx, &settings, key, &callback).await?,
            NamedProject::Unknown(_) => Vec::new(),
        };
        let mut applied = 0;
        for MrOperation { operation_id, .. } in &operations {
            let outcome = if success {
                let change = Change {
                    step: StepStatus::DeployConfirmed,
                    message: None,
                    actor: "deploy-callback",
                };
                flip_in(
                    tx,
                    operation_id,
                    &[BindingStatus::Merged],
                    BindingStatus::Validated,
                    change,
                )
                .await
                .map(|flip| flip.is_some())
            } else {
                let change = Change {
                    step: StepStatus::DeployFailed,
                    message: Some("the deploy pipeline reported a failure"),
                    actor: "deploy-callback",
                };
                note_in(tx, operation_id, &[BindingStatus::Merged], change).await
            };
            match outcome {
                Ok(true) => applied += 1,
                Ok(false) | Err(StoreError::NotFound) => {}
                Err(err) => return Err(ApiError::internal(err)),
            }
        }
        Ok::<_, ApiError>(Some((applied, operations)))
    })
    .await?;
    let Some((applied, operations)) = applied else {
        return Ok(Answer::Duplicate.json());
    };
    for operation in &operations {
        trace_operation(
            &operation.operation_id,
            Some(callback.mr_iid),
            operation.trace_parent.as_deref(),
        );
    }
    Ok(if applied > 0 {
        Answer::Ok
    } else {
        Answer::IgnoredStale
    }
    .json())
}

/// The configured project the callback's `project` names (SPEC §2: a 400
/// says what to send instead).
fn named_project(settings: &Settings, given: Option<&ProjectName>) -> ApiResult<NamedProject> {
    let given = given.map(ProjectName::text);
    if given
        .as_ref()
        .is_some_and(|text| text.chars().count() > MAX_PROJECT_CHARS)
    {
        return Err(ApiError::InvalidArgument(format!(
            "field `project`: at most {MAX_PROJECT_CHARS} characters"
        )));
    }
    Projects::of(settings)
        .resolve(given.as_deref())
        .map_err(|err| ApiError::InvalidArgument(err.to_string()))
}

/// The operations the callback is about: those of its MR in `project`
/// (an MR iid is numbered per project), and of those only the ones it
/// names, if it names any. Sorted by id, so concurrent callbacks lock rows
/// in one order.
async fn operations_meant(
    tx: &mut StoreTx,
    settings: &Settings,
    project: &ProjectKey,
    callback: &DeployCallback,
) -> Result<Vec<MrOperation>, sqlx::Error> {
    let named: Option<Vec<String>> = callback.operation_ids.as_ref().map(|named| {
        named
            .iter()
            .filter_map(|id| OperationId::parse(id).ok())
            .map(|id| id.as_string())
            .collect()
    });
    Ok(operations_of_mr(tx.db(), callback.mr_iid)
        .await?
        .into_iter()
        .filter(|operation| {
            ProjectKey::new(settings.project_for(&operation.target_key)) == *project
        })
        .filter(|operation| {
            named
                .as_ref()
                .is_none_or(|named| named.contains(&operation.operation_id))
        })
        .collect())
}
