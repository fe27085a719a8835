//! The ops console's overview: how many requests are in each status, the
//! one waiting longest in each unfinished status, and how many requests
//! reached each outcome per hour of the last day.

use chrono::NaiveDateTime;
use sqlx::AssertSqlSafe;

use super::{Backend, Db, dialect, progress::UNFINISHED};
use crate::domain::BindingStatus;
use crate::with_pool;

/// The statuses a request's outcome is read from: done, refused, failed.
pub const OUTCOMES: &[BindingStatus] = &[
    BindingStatus::Validated,
    BindingStatus::Closed,
    BindingStatus::Rejected,
    BindingStatus::BusyRejected,
    BindingStatus::Abandoned,
    BindingStatus::CreateFailed,
    BindingStatus::HandleFailed,
    BindingStatus::CloseFailed,
];

/// Requests (bindings) by status; statuses without any are left out. Read
/// from `ix_binding_status_updated` alone.
pub async fn requests_by_status(db: &Db) -> Result<Vec<(String, i64)>, sqlx::Error> {
    let sql = "SELECT status, COUNT(*) FROM binding GROUP BY status ORDER BY status";
    with_pool!(db, reader, |pool| {
        sqlx::query_as(sql).fetch_all(pool).await
    })
}

/// The request in each unfinished status that has been in it longest:
/// `(status, operation id, since)`, one row per status that has any, each
/// the first entry of `ix_binding_status_updated` for its status.
pub async fn oldest_unfinished(
    db: &Db,
) -> Result<Vec<(String, String, NaiveDateTime)>, sqlx::Error> {
    let mut oldest = Vec::new();
    for status in UNFINISHED {
        let sql = "SELECT operation_id, updated_at FROM binding WHERE status = ? \
                   ORDER BY updated_at LIMIT 1";
        let row: Option<(String, NaiveDateTime)> = with_pool!(db, reader, |pool| {
            sqlx::query_as(sql)
                .bind(status.as_str())
                .fetch_optional(pool)
                .await
        })?;
        if let Some((operation_id, since)) = row {
            oldest.push((status.as_str().to_owned(), operation_id, since));
        }
    }
    Ok(oldest)
}

/// How many requests reached each outcome status per hour over the last
/// `hours`: `(hour as "YYYY-MM-DD HH" UTC, status, requests)`, oldest hour
/// first. Counted from the history's status changes (kept for
/// `retention.operation_history`), found through its age index.
pub async fn outcomes_by_hour(
    db: &Db,
    hours: u32,
) -> Result<Vec<(String, String, i64)>, sqlx::Error> {
    let hour = match db.backend() {
        Backend::Sqlite => "strftime('%Y-%m-%d %H', created_at)",
        Backend::MySql => "DATE_FORMAT(created_at, '%Y-%m-%d %H')",
    };
    let sql = format!(
        "SELECT {hour} AS hour, to_status, COUNT(*) FROM operation_history \
         WHERE created_at >= {since} AND to_status IN ({outcomes}) \
         AND (from_status IS NULL OR from_status <> to_status) \
         GROUP BY hour, to_status ORDER BY hour, to_status",
        since = dialect::now_minus_ms(db.backend()),
        outcomes = super::status_list(OUTCOMES),
    );
    let window_ms = i64::from(hours) * 3_600_000;
    with_pool!(db, reader, |pool| {
        sqlx::query_as(AssertSqlSafe(sql))
            .bind(window_ms)
            .fetch_all(pool)
            .await
    })
}
