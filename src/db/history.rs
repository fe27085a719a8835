//! `operation_history`: append-only record of every step and status change.

use std::collections::HashMap;

use chrono::NaiveDateTime;
use sqlx::AssertSqlSafe;

use super::statement::{SqlValue, Statement};
use super::{Db, DbTx, Reader, dialect};
use crate::domain::{BindingStatus, StepStatus};
use crate::{with_pool, with_reader};

/// One recorded change. Never updated or deleted.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct HistoryRow {
    /// Order of recording.
    pub id: i64,
    /// The operation.
    pub operation_id: String,
    /// Step before (none for the first entry).
    pub from_step: Option<i32>,
    /// Step after.
    pub to_step: i32,
    /// Binding status before, when it changed or was set.
    pub from_status: Option<String>,
    /// Binding status after, when it changed or was set.
    pub to_status: Option<String>,
    /// The operation's version after the change.
    pub operation_version: i64,
    /// Who made the change: an identity, or the component for automatic steps.
    pub actor: String,
    /// Explanation.
    pub message: Option<String>,
    /// For an event that changed no step (a pipeline run, an approval, a
    /// rebase, the merge commit): its kind
    /// ([`EventKind`](super::timeline_events::EventKind)); `None` for a step.
    pub event: Option<String>,
    /// What the event is about: a pipeline's status, a commit's sha.
    pub detail: Option<String>,
    /// The event's page on GitLab.
    pub url: Option<String>,
    /// Database time.
    pub created_at: NaiveDateTime,
}

/// What to append.
#[derive(Debug, Clone)]
pub struct NewHistory<'a> {
    /// The operation.
    pub operation_id: &'a str,
    /// Step before.
    pub from_step: Option<StepStatus>,
    /// Step after.
    pub to_step: StepStatus,
    /// Status before.
    pub from_status: Option<BindingStatus>,
    /// Status after.
    pub to_status: Option<BindingStatus>,
    /// Operation version after the change.
    pub operation_version: i64,
    /// Who.
    pub actor: &'a str,
    /// Why.
    pub message: Option<&'a str>,
}

/// Appends one entry.
pub async fn append_history(tx: &mut DbTx, entry: &NewHistory<'_>) -> Result<(), sqlx::Error> {
    append_history_statement(std::slice::from_ref(entry))
        .execute(tx)
        .await
}

/// The INSERT of history entries, in order, one statement for all.
pub fn append_history_statement<'a>(entries: &[NewHistory<'a>]) -> Statement<'a> {
    Statement {
        sql: format!(
            "INSERT INTO operation_history (operation_id, from_step, to_step, from_status, \
             to_status, operation_version, actor, message) VALUES {}",
            dialect::value_rows(entries, |_| "(?, ?, ?, ?, ?, ?, ?, ?)".to_owned())
        ),
        values: entries
            .iter()
            .flat_map(|entry| {
                [
                    SqlValue::Text(entry.operation_id),
                    SqlValue::OptInt(entry.from_step.map(|step| step.code().into())),
                    SqlValue::Int(entry.to_step.code().into()),
                    SqlValue::OptText(entry.from_status.map(BindingStatus::as_str)),
                    SqlValue::OptText(entry.to_status.map(BindingStatus::as_str)),
                    SqlValue::Int(entry.operation_version),
                    SqlValue::Text(entry.actor),
                    SqlValue::OptText(entry.message),
                ]
            })
            .collect(),
    }
}

/// An operation's history, oldest first.
pub async fn list_history(
    reader: impl Into<Reader<'_>>,
    operation_id: &str,
) -> Result<Vec<HistoryRow>, sqlx::Error> {
    with_reader!(reader.into(), |exec| {
        sqlx::query_as(LIST_HISTORY)
            .bind(operation_id)
            .fetch_all(exec)
            .await
    })
}

const LIST_HISTORY: &str = "SELECT id, operation_id, from_step, to_step, from_status, to_status, \
    operation_version, actor, message, event, detail, url, created_at \
    FROM operation_history WHERE operation_id = ? ORDER BY id";

/// The last binding status recorded for an operation (its status even after
/// a re-apply handed the binding to a newer operation).
pub async fn last_status(
    reader: impl Into<Reader<'_>>,
    operation_id: &str,
) -> Result<Option<String>, sqlx::Error> {
    let sql = "SELECT to_status FROM operation_history \
               WHERE operation_id = ? AND to_status IS NOT NULL ORDER BY id DESC LIMIT 1";
    with_reader!(reader.into(), |exec| {
        sqlx::query_scalar(sql)
            .bind(operation_id)
            .fetch_optional(exec)
            .await
    })
}

/// [`last_status`] of each of `operation_ids`, in one query per chunk of
/// ids (served by `ix_operation_history_operation`).
pub async fn last_statuses(
    db: &Db,
    operation_ids: &[&str],
) -> Result<HashMap<String, String>, sqlx::Error> {
    let mut last = HashMap::new();
    for chunk in operation_ids.chunks(super::IN_LIST_CHUNK) {
        let sql = format!(
            "SELECT operation_id, to_status FROM operation_history \
             WHERE operation_id IN ({}) AND to_status IS NOT NULL ORDER BY id",
            vec!["?"; chunk.len()].join(", ")
        );
        let rows: Vec<(String, String)> = with_pool!(db, reader, |pool| {
            let mut query = sqlx::query_as(AssertSqlSafe(sql));
            for id in chunk {
                query = query.bind(*id);
            }
            query.fetch_all(pool).await
        })?;
        // Ordered by id: the last row of each operation wins.
        last.extend(rows);
    }
    Ok(last)
}
