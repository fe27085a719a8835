//! Machine-to-machine callbacks, `/callbacks` (SPEC §2.2): signed, applied
//! at most once per callback id, and always answered 2xx when understood so
//! the caller does not retry forever.

mod approval;
mod deploy;
mod signed;

use axum::Json;
use serde::Serialize;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouter};
use utoipa_axum::routes;

use crate::db::callbacks::{CallbackSource, insert_receipt};
use crate::db::is_unique_violation;
use crate::http::error::ApiResult;
use crate::http::layers::{RouteSpec, observed};
use crate::state::AppState;
use crate::store::StoreTx;
use crate::traces::propagation;

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

/// Marks the callback's span (when exported) as about `operation_id`, linked
/// to the request that submitted it: the callback arrives from outside, in
/// a trace of its own or of its caller.
fn trace_operation(operation_id: &str, mr_iid: Option<i64>, trace_parent: Option<&str>) {
    let span = Span::current();
    if span.is_disabled() {
        return;
    }
    span.set_attribute("operation.id", operation_id.to_owned());
    if let Some(iid) = mr_iid {
        span.set_attribute("mr.iid", iid);
    }
    propagation::link_stored(&span, trace_parent, operation_id);
}

/// The answer codes of a callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[schema(as = CallbackCode)]
enum Answer {
    /// Applied.
    Ok,
    /// This callback id was applied before.
    Duplicate,
    /// Understood, but it no longer applies (stale or unknown operation).
    IgnoredStale,
}

/// The answer to a callback that was understood.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CallbackAnswer {
    code: Answer,
}

impl Answer {
    fn json(self) -> Json<CallbackAnswer> {
        Json(CallbackAnswer { code: self })
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
