//! `webhook_delivery`: one event to one endpoint. The relay fills it from the
//! `event` outbox; delivery workers on every instance claim rows by
//! compare-and-swap on `(status, version)` (see [`super::webhook_claims`];
//! migration 0008 has the notes).

use std::time::Duration;

use chrono::NaiveDateTime;
use sqlx::AssertSqlSafe;

use super::events::EventRow;
use super::webhook_endpoints::{EndpointRow, list_enabled_in};
use super::{Db, IN_LIST_CHUNK, dialect, placeholders};
use crate::{with_pool, with_tx};

pub(super) const COLUMNS: &str = "id, endpoint_id, event_id, event_type, msg_id, body, status, version, \
    attempts, next_attempt_at, last_status, last_error, created_at, updated_at";

/// A delivery waiting to be sent.
pub const QUEUED: &str = "queued";
/// Claimed by an instance, under a lease.
pub const SENDING: &str = "sending";
/// Answered 2xx.
pub const DELIVERED: &str = "delivered";
/// Every attempt failed (or the endpoint answered 410).
pub const FAILED: &str = "failed";
/// Recorded while silent mode was on; never sent.
pub const SILENT: &str = "silent";

/// One delivery.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct DeliveryRow {
    /// Primary key.
    pub id: i64,
    /// The endpoint.
    pub endpoint_id: i64,
    /// The outbox event.
    pub event_id: i64,
    /// Its type.
    pub event_type: String,
    /// The `webhook-id` header, the same on every attempt.
    pub msg_id: String,
    /// The exact bytes signed and sent.
    pub body: String,
    /// See the status constants.
    pub status: String,
    /// Bumped by every write; the claim compares it.
    pub version: i64,
    /// Attempts made.
    pub attempts: i64,
    /// Not sent before this.
    pub next_attempt_at: NaiveDateTime,
    /// HTTP status of the last attempt, if it got an answer.
    pub last_status: Option<i64>,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
    /// Database time.
    pub created_at: NaiveDateTime,
    /// Database time.
    pub updated_at: NaiveDateTime,
}

/// What a relay round did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relayed {
    /// This many events fanned out into this many deliveries.
    Done {
        /// Events marked relayed.
        events: usize,
        /// Deliveries inserted.
        deliveries: usize,
    },
    /// Another instance relayed the same events first; nothing was written.
    Lost,
}

/// Fans out up to `limit` unrelayed events, oldest first, in one
/// transaction: marks them relayed (guarded, so only one instance can) and
/// inserts one delivery per matching enabled endpoint with the body
/// `body_of` serialises, `silent` instead of `queued` in silent mode.
/// Reads unrelayed events through `ix_event_unrelayed`.
pub async fn relay_events(
    db: &Db,
    limit: u32,
    silent: bool,
    body_of: impl Fn(&EventRow) -> String,
) -> Result<Relayed, sqlx::Error> {
    // Idle rounds (the usual case) take no write lock: on SQLite a write
    // transaction would hold the single writer every poll on every instance.
    let pending = "SELECT id FROM event WHERE relayed = FALSE LIMIT 1";
    let any: Option<i64> = with_pool!(db, reader, |pool| {
        sqlx::query_scalar(pending).fetch_optional(pool).await
    })?;
    if any.is_none() {
        return Ok(Relayed::Done {
            events: 0,
            deliveries: 0,
        });
    }
    let mut tx = db.begin().await?;
    let select = "SELECT id, event_type, operation_id, subject_id, target_key, from_status, \
                  to_status, payload, created_at FROM event WHERE relayed = FALSE ORDER BY id LIMIT ?";
    let events: Vec<EventRow> = with_tx!(&mut tx, |conn| {
        sqlx::query_as(select).bind(limit).fetch_all(conn).await
    })?;
    if events.is_empty() {
        tx.rollback().await?;
        return Ok(Relayed::Done {
            events: 0,
            deliveries: 0,
        });
    }
    // Primary key lookups: row locks on these events only, never a gap.
    let mark = format!(
        "UPDATE event SET relayed = TRUE WHERE relayed = FALSE AND id IN ({})",
        placeholders(events.len())
    );
    let marked = with_tx!(&mut tx, |conn| {
        let mut query = sqlx::query(AssertSqlSafe(mark));
        for event in &events {
            query = query.bind(event.id);
        }
        query.execute(conn).await.map(|done| done.rows_affected())
    })?;
    if usize::try_from(marked).ok() != Some(events.len()) {
        tx.rollback().await?;
        return Ok(Relayed::Lost);
    }
    let endpoints = list_enabled_in(&mut tx).await?;
    let status = if silent { SILENT } else { QUEUED };
    let mut rows: Vec<(&EndpointRow, &EventRow, String)> = Vec::new();
    for event in &events {
        let wanted: Vec<&EndpointRow> = endpoints
            .iter()
            .filter(|endpoint| endpoint.wants(&event.event_type))
            .collect();
        if wanted.is_empty() {
            continue;
        }
        // Serialised once per event: every endpoint gets the same bytes.
        let body = body_of(event);
        rows.extend(
            wanted
                .into_iter()
                .map(|endpoint| (endpoint, event, body.clone())),
        );
    }
    for chunk in rows.chunks(IN_LIST_CHUNK / 6) {
        let sql = format!(
            "INSERT INTO webhook_delivery (endpoint_id, event_id, event_type, msg_id, body, status) \
             VALUES {}",
            vec!["(?, ?, ?, ?, ?, ?)"; chunk.len()].join(", ")
        );
        with_tx!(&mut tx, |conn| {
            let mut query = sqlx::query(AssertSqlSafe(sql));
            for (endpoint, event, body) in chunk {
                query = query
                    .bind(endpoint.id)
                    .bind(event.id)
                    .bind(&event.event_type)
                    .bind(format!("msg_{}_{}", event.id, endpoint.id))
                    .bind(body)
                    .bind(status);
            }
            query.execute(conn).await.map(|_| ())
        })?;
    }
    tx.commit().await?;
    Ok(Relayed::Done {
        events: events.len(),
        deliveries: rows.len(),
    })
}

/// One delivery by id (primary key).
pub async fn get_delivery(db: &Db, id: i64) -> Result<Option<DeliveryRow>, sqlx::Error> {
    let sql = format!("SELECT {COLUMNS} FROM webhook_delivery WHERE id = ?");
    with_pool!(db, reader, |pool| {
        sqlx::query_as(AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(pool)
            .await
    })
}

/// How an attempt ended (see [`super::webhook_claims::record`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// 2xx.
    Delivered,
    /// Try again after this pause.
    RetryIn(Duration),
    /// No more attempts.
    Failed,
}

/// An endpoint's deliveries, newest first, below `before` when given.
/// Served by `ix_delivery_endpoint`.
pub async fn list_for_endpoint(
    db: &Db,
    endpoint_id: i64,
    before: Option<i64>,
    limit: u32,
) -> Result<Vec<DeliveryRow>, sqlx::Error> {
    let sql = format!(
        "SELECT {COLUMNS} FROM webhook_delivery WHERE endpoint_id = ? AND id < ? \
         ORDER BY id DESC LIMIT ?"
    );
    with_pool!(db, reader, |pool| {
        sqlx::query_as(AssertSqlSafe(sql))
            .bind(endpoint_id)
            .bind(before.unwrap_or(i64::MAX))
            .bind(limit)
            .fetch_all(pool)
            .await
    })
}

/// An operator's redelivery: a finished delivery (`delivered`, `failed` or
/// `silent`) is queued again now with a fresh count of attempts and the same
/// `webhook-id`. `false` when it is not finished (still queued or sending)
/// or does not exist. Primary key lookup.
pub async fn redeliver(tx: &mut super::DbTx, id: i64) -> Result<bool, sqlx::Error> {
    let now = dialect::now_ms(tx.backend());
    let sql = format!(
        "UPDATE webhook_delivery SET status = 'queued', version = version + 1, attempts = 0, \
         next_attempt_at = {now}, last_error = NULL, updated_at = {now} \
         WHERE id = ? AND status IN ('delivered', 'failed', 'silent')"
    );
    with_tx!(tx, |conn| {
        sqlx::query(AssertSqlSafe(sql))
            .bind(id)
            .execute(conn)
            .await
            .map(|done| done.rows_affected() == 1)
    })
}
