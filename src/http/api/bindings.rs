//! `GET /api/v1/me/bindings`: the caller's bindings, newest first.

use axum::Json;

use serde::{Deserialize, Serialize};

use super::status::rfc3339;
use crate::db::bindings::list_bindings_of_requester;
use crate::http::error::ApiResult;
use crate::http::extract::{AppQuery, AuthUser, Database};
use crate::http::page::PageRequest;

const DEFAULT_PAGE: u32 = 20;
const MAX_PAGE: u32 = 100;

/// Page selection.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PageQuery {
    /// `nextCursor` of the previous page.
    #[param(pattern = r"^[0-9]{1,18}$")]
    cursor: Option<String>,
    /// Page size, 1 to 100 (default 20).
    #[param(minimum = 1, maximum = 100)]
    limit: Option<u32>,
}

/// One page of bindings.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BindingPage {
    items: Vec<BindingView>,
    /// Pass as `cursor` for the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
}

/// One binding.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BindingView {
    subject_id: String,
    target_key: String,
    status: String,
    operation_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    expires_at: Option<String>,
    updated_at: String,
}

/// The caller's bindings, newest first, cursor-paginated.
#[utoipa::path(get, path = "/api/v1/me/bindings", tag = "requests", params(PageQuery),
    responses((status = 200, description = "A page of bindings", body = BindingPage),
        (status = 400, description = "INVALID_ARGUMENT: a bad cursor or limit")))]
pub async fn list_my_bindings(
    AuthUser(caller): AuthUser,
    Database(db): Database,
    AppQuery(page): AppQuery<PageQuery>,
) -> ApiResult<Json<BindingPage>> {
    let page = PageRequest::parse(page.cursor.as_deref(), page.limit, DEFAULT_PAGE, MAX_PAGE)?;
    let mut rows = list_bindings_of_requester(
        &db,
        caller.identity.as_str(),
        page.before,
        page.fetch_limit(),
    )
    .await?;
    let next_cursor = page.finish(&mut rows, |row| row.id);
    let items = rows
        .into_iter()
        .map(|row| BindingView {
            subject_id: row.subject_id,
            target_key: row.target_key,
            status: row.status.to_string(),
            operation_id: row.operation_id,
            expires_at: row.expires_at.map(rfc3339),
            updated_at: rfc3339(row.updated_at),
        })
        .collect();
    Ok(Json(BindingPage { items, next_cursor }))
}
