//! `GET /admin/v1/audit`: what operators did, newest first.

use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::openapi::schema::{Object, ObjectBuilder, Type};

use crate::db::audit::{DONE, REFUSED, list_audit_page, shown_params};
use crate::http::api::status::rfc3339;
use crate::http::error::ApiResult;
use crate::http::extract::{AppQuery, Database};
use crate::http::page::PageRequest;

const DEFAULT_PAGE: u32 = 50;
const MAX_PAGE: u32 = 200;

/// Page selection.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// `nextCursor` of the previous page.
    #[param(pattern = r"^[0-9]{1,18}$")]
    cursor: Option<String>,
    /// Page size, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    limit: Option<u32>,
}

/// One audit entry: an operator action, done or refused.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditView {
    id: i64,
    /// The authenticated operator who acted (or tried to).
    actor: String,
    action: String,
    /// What the action was about (an operation id, an endpoint id, ...).
    target: String,
    /// The parameters the operator sent, as stored (secret-looking values
    /// redacted, long ones cut), without the keys the server reserves
    /// (starting with `__`): who acted is `actor`.
    #[schema(value_type = Object)]
    params: Value,
    #[schema(schema_with = outcome_schema)]
    outcome: String,
    /// Why it was refused: the message of the 409 answer; null when done.
    refusal_reason: Option<String>,
    #[schema(value_type = String, format = DateTime)]
    created_at: String,
}

/// The outcomes an entry records.
fn outcome_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(
            "`DONE` (the action happened) or `REFUSED` (the state did not allow it: \
             answered 409, nothing changed)",
        ))
        .enum_values(Some([DONE, REFUSED]))
        .build()
}

/// One page of audit entries.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditPage {
    items: Vec<AuditView>,
    /// Pass as `cursor` for the next page; null on the last page.
    next_cursor: Option<String>,
}

/// The audit log, newest first.
#[utoipa::path(get, path = "/admin/v1/audit", tag = "admin", operation_id = "list_audit",
    params(AuditQuery),
    responses((status = 200, description = "A page of audit entries", body = AuditPage),
        (status = 400, description = "INVALID_ARGUMENT: a bad cursor or limit")))]
pub async fn list(
    Database(db): Database,
    AppQuery(query): AppQuery<AuditQuery>,
) -> ApiResult<Json<AuditPage>> {
    let page = PageRequest::parse(query.cursor.as_deref(), query.limit, DEFAULT_PAGE, MAX_PAGE)?;
    let mut rows = list_audit_page(&db, page.before, page.fetch_limit()).await?;
    let next_cursor = page.finish(&mut rows, |entry| entry.id);
    let items = rows
        .into_iter()
        .map(|entry| AuditView {
            id: entry.id,
            actor: entry.row.actor,
            action: entry.row.action,
            target: entry.row.subject,
            params: serde_json::from_str(&entry.row.params)
                .map(|params| shown_params(&params))
                .unwrap_or(Value::Null),
            outcome: entry.row.outcome,
            refusal_reason: entry.row.refusal_reason,
            created_at: rfc3339(entry.created_at),
        })
        .collect();
    Ok(Json(AuditPage { items, next_cursor }))
}
