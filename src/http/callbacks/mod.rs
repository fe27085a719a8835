//! Machine-to-machine callbacks, `/callbacks` (SPEC §2.2): signed, applied
//! at most once per callback id, and always answered 2xx when understood so
//! the caller does not retry forever.

mod approval;
mod deploy;
mod signed;

use axum::Json;
use serde_json::{Value, json};
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouter};
use utoipa_axum::routes;

use crate::db::callbacks::{CallbackSource, insert_receipt};
use crate::db::is_unique_violation;
use crate::http::error::ApiResult;
use crate::http::layers::{RouteSpec, observed};
use crate::state::AppState;
use crate::store::StoreTx;

/// Callbacks count in the API metrics like every other route.
static CALLBACK: RouteSpec = RouteSpec {
    name: "callback",
    rate_limit: None,
    activity: None,
};

/// `POST /callbacks/approval` and `POST /callbacks/deploy`, with their
/// part of the OpenAPI document, observed by the API metrics.
pub fn router(state: &AppState) -> OpenApiRouter<AppState> {
    let observe = |(schemas, paths, route): UtoipaMethodRouter<AppState>| {
        (schemas, paths, observed(state, &CALLBACK, route))
    };
    OpenApiRouter::new()
        .routes(observe(routes!(approval::approval_callback)))
        .routes(observe(routes!(deploy::deploy_callback)))
}

/// The answer codes of a callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// Applied.
    Ok,
    /// This callback id was applied before.
    Duplicate,
    /// Understood, but it no longer applies (stale or unknown operation).
    IgnoredStale,
}

impl Answer {
    fn json(self) -> Json<Value> {
        let code = match self {
            Self::Ok => "OK",
            Self::Duplicate => "DUPLICATE",
            Self::IgnoredStale => "IGNORED_STALE",
        };
        Json(json!({ "code": code }))
    }
}

/// Records the callback id in `tx`; `false` when it was seen before (the
/// transaction is then of no further use and is rolled back by the caller).
async fn first_receipt(
    tx: &mut StoreTx,
    source: CallbackSource,
    callback_id: &str,
) -> ApiResult<bool> {
    match insert_receipt(tx.db(), source, callback_id).await {
        Ok(()) => Ok(true),
        Err(err) if is_unique_violation(&err) => Ok(false),
        Err(err) => Err(err.into()),
    }
}

/// A callback id must be a printable key of reasonable length, without
/// surrounding spaces (MySQL's binary collation ignores trailing spaces when
/// comparing, SQLite's does not: ids are kept free of them to compare alike).
fn valid_callback_id(id: &str) -> bool {
    !id.is_empty() && id.trim() == id && id.len() <= 191 && !id.chars().any(char::is_control)
}
