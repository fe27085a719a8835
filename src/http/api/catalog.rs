//! `GET /api/v1/targets` and the deprecated `GET /api/v1/preview`.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::submission::may_use_target;
use crate::db::bindings::get_binding;
use crate::domain::OperationId;
use crate::domain::render::valid_subject;
use crate::files::document::set_key;
use crate::files::layout::FileChange;
use crate::files::template::TemplateContext;
use crate::http::error::ApiResult;
use crate::http::extract::AuthUser;
use crate::http::layers::authz::Authorized;
use crate::state::AppState;

/// A catalog entry the caller may apply for.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetView {
    key: String,
    description: String,
    /// Parameter names the target accepts (the schema's properties).
    params: Vec<String>,
    /// What a request's parameters must be: a JSON Schema (draft 2020-12)
    /// for an object, to build a form from. A target that only names its
    /// parameters has a string property for each.
    #[schema(value_type = Object)]
    params_schema: serde_json::Value,
    /// The format of the file its bindings are written in.
    #[schema(examples("json", "yaml", "toml"))]
    format: &'static str,
    /// Whether the subject must be the caller.
    self_only: bool,
}

/// The catalog entries the caller may apply for: one permission round trip
/// for every rule code of the catalog.
#[utoipa::path(get, path = "/api/v1/targets", tag = "requests",
    responses((status = 200, description = "The catalog entries", body = Vec<TargetView>)))]
pub async fn list_targets(
    State(state): State<AppState>,
    AuthUser(caller): AuthUser,
) -> ApiResult<Json<Vec<TargetView>>> {
    let settings = state.config.current();
    let mut codes: Vec<String> = settings
        .targets
        .values()
        .flat_map(|t| t.rule_codes.clone())
        .collect();
    codes.sort();
    codes.dedup();
    let granted = if codes.is_empty() || caller.operator {
        codes.iter().cloned().collect()
    } else {
        state
            .permissions
            .granted(&settings.authz, &caller.identity, &codes)
            .await
            .unwrap_or_else(|err| {
                tracing::warn!("permission check failed; listing open targets only: {err}");
                Default::default()
            })
    };
    Ok(Json(
        settings
            .targets
            .iter()
            .filter(|(_, t)| {
                t.rule_codes.is_empty() || t.rule_codes.iter().any(|c| granted.contains(c))
            })
            .map(|(key, t)| TargetView {
                key: key.clone(),
                description: t.description.clone(),
                params: t.params.names(),
                params_schema: t.params.schema().clone(),
                format: t.layout.format().as_str(),
                self_only: t.self_only,
            })
            .collect(),
    ))
}

/// What to preview.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(rename_all = "camelCase")]
pub struct PreviewQuery {
    /// The target.
    target_key: Option<String>,
    /// The subject; default the caller.
    subject_id: Option<String>,
}

/// The answer to a preview.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct LegacyPreviewAnswer {
    /// The change; null when there is nothing to show (an unknown target, a
    /// subject or target the caller may not apply for, any failure).
    data: Option<Preview>,
}

/// The file change a request would make.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Preview {
    /// The file in the configuration repository.
    #[schema(examples("bindings/demo.feature-flags/alice.json"))]
    path: String,
    action: PreviewAction,
    /// The file as the request would write it.
    content: String,
    /// The status of the binding that exists already (a binding status),
    /// null when there is none.
    current: Option<String>,
}

/// Whether the file would be written new or over the existing one.
#[derive(Debug, Clone, Copy, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum PreviewAction {
    /// No binding yet.
    Create,
    /// A binding exists (in any status).
    Update,
}

/// Deprecated, kept for one release: use `POST /api/v1/applications/preview`,
/// which shows the file against the target branch and what stands in the
/// way. The file change the request would make with the schema's defaults,
/// read-only. On any failure it answers 200 with `data: null`.
#[utoipa::path(get, path = "/api/v1/preview", tag = "requests", params(PreviewQuery),
    responses((status = 200, description = "The change, or `data: null`", body = LegacyPreviewAnswer)))]
pub async fn preview(
    State(state): State<AppState>,
    AuthUser(caller): AuthUser,
    query: Result<Query<PreviewQuery>, QueryRejection>,
) -> Json<LegacyPreviewAnswer> {
    let data = match query {
        Ok(Query(query)) => build_preview(&state, &caller, query).await,
        Err(_) => None,
    };
    Json(LegacyPreviewAnswer { data })
}

/// The preview, under the same subject and permission rules as submitting,
/// so it shows nothing a caller could not apply for.
async fn build_preview(
    state: &AppState,
    caller: &Authorized,
    query: PreviewQuery,
) -> Option<Preview> {
    let identity = &caller.identity;
    let settings = state.config.current();
    let target_key = query.target_key?;
    let target = settings.targets.get(&target_key)?;
    let subject = query
        .subject_id
        .unwrap_or_else(|| identity.as_str().to_owned());
    if !valid_subject(&subject)
        || (target.self_only && subject != identity.as_str() && !caller.operator)
        || may_use_target(state, &settings, target, caller)
            .await
            .is_err()
    {
        return None;
    }
    let current = match state.db.get() {
        Some(db) => get_binding(db, &subject, &target_key).await.ok()?,
        None => None,
    };
    // The file as the schema's defaults would write it: of a shared file,
    // only the entry its key would get.
    let params = target
        .params
        .check(&json!({}))
        .unwrap_or_else(|_| json!({}));
    let binding = TemplateContext {
        subject: &subject,
        target: &target_key,
        params: &params,
        expires_at: None,
        operation_id: &OperationId::new().as_string(),
        requested_by: identity.as_str(),
    };
    let content = match target.layout.write(&binding).ok()? {
        FileChange::Whole { content, .. } => content.unwrap_or_default(),
        // The entry as the file's format writes it, alone.
        FileChange::Key {
            key, value, format, ..
        } => set_key(format, None, &key, &value.unwrap_or_default()).ok()?,
    };
    Some(Preview {
        path: target.layout.path(&target_key, &subject),
        action: if current.is_some() {
            PreviewAction::Update
        } else {
            PreviewAction::Create
        },
        content,
        current: current.map(|b| b.status.to_string()),
    })
}
