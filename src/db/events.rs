//! `event`: the transactional outbox of binding status flips.

use chrono::NaiveDateTime;

use super::statement::{SqlValue, Statement};
use super::{Db, DbTx, dialect};
use crate::domain::BindingStatus;
use crate::with_pool;

/// Event type of a binding status change.
pub const BINDING_STATUS_CHANGED: &str = "binding.status_changed";

/// One stored event.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct EventRow {
    /// Order of recording.
    pub id: i64,
    /// What happened, e.g. [`BINDING_STATUS_CHANGED`].
    pub event_type: String,
    /// The operation that flipped.
    pub operation_id: String,
    /// Its subject.
    pub subject_id: String,
    /// Its target.
    pub target_key: String,
    /// Status before (none for a new relation).
    pub from_status: Option<String>,
    /// Status after.
    pub to_status: String,
    /// JSON payload for subscribers.
    pub payload: String,
    /// Database time.
    pub created_at: NaiveDateTime,
}

/// What to append.
#[derive(Debug, Clone)]
pub struct NewEvent<'a> {
    /// Event type.
    pub event_type: &'a str,
    /// The operation.
    pub operation_id: &'a str,
    /// Subject.
    pub subject_id: &'a str,
    /// Target.
    pub target_key: &'a str,
    /// Status before.
    pub from_status: Option<BindingStatus>,
    /// Status after.
    pub to_status: BindingStatus,
    /// JSON payload.
    pub payload: &'a str,
}

/// Appends one event, in the caller's transaction.
pub async fn append_event(tx: &mut DbTx, event: &NewEvent<'_>) -> Result<(), sqlx::Error> {
    append_events_statement(std::slice::from_ref(event))
        .execute(tx)
        .await
}

/// The INSERT of events, in order, one statement for all.
pub fn append_events_statement<'a>(events: &[NewEvent<'a>]) -> Statement<'a> {
    Statement {
        sql: format!(
            "INSERT INTO event (event_type, operation_id, subject_id, target_key, from_status, \
             to_status, payload) VALUES {}",
            dialect::value_rows(events, |_| "(?, ?, ?, ?, ?, ?, ?)".to_owned())
        ),
        values: events
            .iter()
            .flat_map(|event| {
                [
                    SqlValue::Text(event.event_type),
                    SqlValue::Text(event.operation_id),
                    SqlValue::Text(event.subject_id),
                    SqlValue::Text(event.target_key),
                    SqlValue::OptText(event.from_status.map(BindingStatus::as_str)),
                    SqlValue::Text(event.to_status.as_str()),
                    SqlValue::Text(event.payload),
                ]
            })
            .collect(),
    }
}

/// Event type of a file first found where the target branch and
/// changegate disagree (SPEC §13).
pub const BINDING_DRIFTED: &str = "binding.drifted";
/// Event type of such a file no longer found so.
pub const BINDING_DRIFT_RESOLVED: &str = "binding.drift_resolved";

/// A drift event, in the caller's transaction: about the binding that names
/// the file (`binding`: its operation and status), or about no binding
/// (empty operation id, status `NONE`) for a file nobody's binding names.
pub async fn append_drift_event(
    tx: &mut DbTx,
    event_type: &str,
    subject_and_target: (&str, &str),
    binding: Option<(&str, BindingStatus)>,
    payload: &str,
) -> Result<(), sqlx::Error> {
    let (subject, target) = subject_and_target;
    let (operation_id, status) = binding.map_or(("", "NONE"), |(operation, status)| {
        (operation, status.as_str())
    });
    let sql = "INSERT INTO event (event_type, operation_id, subject_id, target_key, from_status, \
               to_status, payload) VALUES (?, ?, ?, ?, NULL, ?, ?)";
    crate::with_tx!(tx, |conn| {
        sqlx::query(sql)
            .bind(event_type)
            .bind(operation_id)
            .bind(subject)
            .bind(target)
            .bind(status)
            .bind(payload)
            .execute(conn)
            .await
            .map(drop)
    })
}

/// An operation's events, oldest first.
pub async fn list_events(db: &Db, operation_id: &str) -> Result<Vec<EventRow>, sqlx::Error> {
    let sql = "SELECT id, event_type, operation_id, subject_id, target_key, from_status, \
               to_status, payload, created_at FROM event WHERE operation_id = ? ORDER BY id";
    with_pool!(db, reader, |pool| {
        sqlx::query_as(sql).bind(operation_id).fetch_all(pool).await
    })
}

/// For the events among `event_ids` whose operation kept its submitting
/// request's traceparent: the event, the operation and the traceparent, so
/// a webhook delivery's span links to that request. The events by primary
/// key, each operation by its unique id.
pub async fn trace_parents_of(
    db: &Db,
    event_ids: &[i64],
) -> Result<Vec<(i64, String, String)>, sqlx::Error> {
    let mut found = Vec::new();
    for chunk in event_ids.chunks(super::IN_LIST_CHUNK) {
        let sql = format!(
            "SELECT e.id, o.operation_id, o.trace_parent FROM event e \
             JOIN operation o ON o.operation_id = e.operation_id \
             WHERE e.id IN ({}) AND o.trace_parent IS NOT NULL",
            super::placeholders(chunk.len())
        );
        let rows: Vec<(i64, String, String)> = with_pool!(db, reader, |pool| {
            let mut query = sqlx::query_as(sqlx::AssertSqlSafe(sql));
            for id in chunk {
                query = query.bind(id);
            }
            query.fetch_all(pool).await
        })?;
        found.extend(rows);
    }
    Ok(found)
}
