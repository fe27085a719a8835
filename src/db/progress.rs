//! How many requests are in each unfinished status and step, how long the
//! oldest has been in its status, and how many webhook endpoints have their
//! breaker open: what the progress gauges report.

use sqlx::AssertSqlSafe;

use super::{Backend, Db, dialect};
use crate::domain::BindingStatus;
use crate::with_pool;

/// Statuses a request has not finished in: still moving, or failed and
/// waiting for the team.
pub const UNFINISHED: &[BindingStatus] = &[
    BindingStatus::ApprovalSending,
    BindingStatus::ApprovalSent,
    BindingStatus::MrCreating,
    BindingStatus::MrCreated,
    BindingStatus::Merging,
    BindingStatus::Merged,
    BindingStatus::CreateFailed,
    BindingStatus::HandleFailed,
    BindingStatus::Closing,
    BindingStatus::CloseFailed,
];

/// One status and step with requests in it.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct InProgress {
    /// The binding status.
    pub status: String,
    /// The operation's step code.
    pub step_code: i32,
    /// How many requests.
    pub requests: i64,
    /// Milliseconds since the oldest of them entered its status.
    pub oldest_ms: i64,
}

/// Milliseconds from `column` to the database's now, as an integer.
fn millis_since(backend: Backend, column: &str) -> String {
    match backend {
        Backend::Sqlite => {
            format!("CAST((julianday('now') - julianday({column})) * 86400000 AS INTEGER)")
        }
        Backend::MySql => format!(
            "(TIMESTAMPDIFF(MICROSECOND, {column}, {}) DIV 1000)",
            dialect::now_ms(backend)
        ),
    }
}

/// Requests in every unfinished status and step (served by
/// `ix_binding_status_updated`: a range over the unfinished statuses).
pub async fn in_progress(db: &Db) -> Result<Vec<InProgress>, sqlx::Error> {
    let statuses = super::status_list(UNFINISHED);
    let sql = format!(
        "SELECT b.status, o.step_code, COUNT(*) AS requests, {} AS oldest_ms \
         FROM binding b JOIN operation o ON o.operation_id = b.operation_id \
         WHERE b.status IN ({statuses}) GROUP BY b.status, o.step_code",
        millis_since(db.backend(), "MIN(b.updated_at)")
    );
    with_pool!(db, reader, |pool| {
        sqlx::query_as(AssertSqlSafe(sql)).fetch_all(pool).await
    })
}

/// Enabled webhook endpoints by breaker state (`closed`, `open`,
/// `half_open`); a small table, read whole.
pub async fn endpoints_by_breaker(db: &Db) -> Result<Vec<(String, i64)>, sqlx::Error> {
    let sql = "SELECT breaker_state, COUNT(*) FROM webhook_endpoint \
               WHERE enabled = TRUE GROUP BY breaker_state";
    with_pool!(db, reader, |pool| {
        sqlx::query_as(sql).fetch_all(pool).await
    })
}
