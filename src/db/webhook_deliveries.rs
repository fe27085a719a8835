//! `webhook_delivery`: one event to one endpoint. The relay fills it from the
//! `event` outbox; delivery workers on every instance claim rows by
//! compare-and-swap on `(status, version)` (migration 0008 has the notes).

use std::time::Duration;

use chrono::NaiveDateTime;
use sqlx::AssertSqlSafe;

use super::events::EventRow;
use super::webhook_endpoints::{EndpointRow, list_enabled_in};
use super::{Db, IN_LIST_CHUNK, dialect, placeholders};
use crate::{with_pool, with_tx};

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

const COLUMNS: &str = "id, endpoint_id, event_id, event_type, msg_id, body, status, version, \
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

/// Puts claims whose lease ran out (their instance died or hung) back in
/// the queue, with a new version so the old owner's late write matches
/// nothing. The expired rows are found by a plain read (`ix_delivery_due`,
/// status = 'sending') and updated by primary key with the condition
/// repeated: a range UPDATE would take next-key locks over every claimed
/// row's index entry and deadlock with the claims and answers of other
/// instances (seen on MariaDB with three instances).
pub async fn requeue_expired(db: &Db) -> Result<u64, sqlx::Error> {
    let now = dialect::now_ms(db.backend());
    let find = format!(
        "SELECT id FROM webhook_delivery WHERE status = 'sending' AND lease_until < {now} LIMIT ?"
    );
    let ids: Vec<i64> = with_pool!(db, reader, |pool| {
        sqlx::query_scalar(AssertSqlSafe(find))
            .bind(IN_LIST_CHUNK as i64)
            .fetch_all(pool)
            .await
    })?;
    if ids.is_empty() {
        return Ok(0);
    }
    let sql = format!(
        "UPDATE webhook_delivery SET status = 'queued', version = version + 1, \
         lease_owner = NULL, lease_until = NULL, updated_at = {now} \
         WHERE id IN ({}) AND status = 'sending' AND lease_until < {now}",
        placeholders(ids.len())
    );
    with_pool!(db, writer, |pool| {
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for id in &ids {
            query = query.bind(id);
        }
        query.execute(pool).await.map(|done| done.rows_affected())
    })
}

/// A due delivery as the workers see it before claiming.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Due {
    /// Delivery id.
    pub id: i64,
    /// Its version, for the claim.
    pub version: i64,
    /// Its endpoint.
    pub endpoint_id: i64,
    /// The endpoint's breaker state (an `open` one here is due for a probe).
    pub breaker_state: String,
}

/// Up to `limit` queued deliveries due by the database clock whose endpoint
/// is enabled and whose breaker lets them through, earliest first. Served by
/// `ix_delivery_due` (status = 'queued', range on next_attempt_at, in order);
/// the endpoint by primary key.
pub async fn list_due(db: &Db, limit: u32) -> Result<Vec<Due>, sqlx::Error> {
    let now = dialect::now_ms(db.backend());
    let sql = format!(
        "SELECT d.id, d.version, d.endpoint_id, e.breaker_state FROM webhook_delivery d \
         JOIN webhook_endpoint e ON e.id = d.endpoint_id \
         WHERE d.status = 'queued' AND d.next_attempt_at <= {now} AND e.enabled = TRUE \
         AND (e.breaker_until IS NULL OR e.breaker_until <= {now}) \
         ORDER BY d.next_attempt_at LIMIT ?"
    );
    with_pool!(db, reader, |pool| {
        sqlx::query_as(AssertSqlSafe(sql))
            .bind(limit)
            .fetch_all(pool)
            .await
    })
}

/// Claims a delivery by compare-and-swap: `true` only when this call moved
/// it from `queued` at `version` to `sending` (exactly one row), holding it
/// for `lease`. Primary key lookup.
pub async fn claim(
    db: &Db,
    id: i64,
    version: i64,
    owner: &str,
    lease: Duration,
) -> Result<bool, sqlx::Error> {
    let backend = db.backend();
    let sql = format!(
        "UPDATE webhook_delivery SET status = 'sending', version = version + 1, \
         attempts = attempts + 1, lease_owner = ?, lease_until = {}, updated_at = {} \
         WHERE id = ? AND status = 'queued' AND version = ?",
        dialect::now_plus_ms(backend),
        dialect::now_ms(backend)
    );
    with_pool!(db, writer, |pool| {
        sqlx::query(AssertSqlSafe(sql))
            .bind(owner)
            .bind(millis(lease))
            .bind(id)
            .bind(version)
            .execute(pool)
            .await
            .map(|done| done.rows_affected() == 1)
    })
}

/// Silent mode: a queued delivery becomes `silent` (compare-and-swap like
/// [`claim`]), so it is never sent, not even when silent mode ends.
pub async fn mark_silent(db: &Db, id: i64, version: i64) -> Result<bool, sqlx::Error> {
    let sql = format!(
        "UPDATE webhook_delivery SET status = 'silent', version = version + 1, updated_at = {} \
         WHERE id = ? AND status = 'queued' AND version = ?",
        dialect::now_ms(db.backend())
    );
    with_pool!(db, writer, |pool| {
        sqlx::query(AssertSqlSafe(sql))
            .bind(id)
            .bind(version)
            .execute(pool)
            .await
            .map(|done| done.rows_affected() == 1)
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

/// How an attempt ended, for [`finish`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// 2xx.
    Delivered,
    /// Try again after this pause.
    RetryIn(Duration),
    /// No more attempts.
    Failed,
}

/// Records the end of an attempt on a delivery this instance claimed at
/// `claimed_version`; `false` when the claim was lost meanwhile (its lease
/// ran out and it was requeued), in which case nothing is written.
pub async fn finish(
    db: &Db,
    id: i64,
    claimed_version: i64,
    ending: Ending,
    http_status: Option<u16>,
    error: Option<&str>,
) -> Result<bool, sqlx::Error> {
    let backend = db.backend();
    let now = dialect::now_ms(backend);
    let (status, next) = match ending {
        Ending::Delivered => (DELIVERED, None),
        Ending::RetryIn(pause) => (QUEUED, Some(pause)),
        Ending::Failed => (FAILED, None),
    };
    let next_sql = match next {
        Some(_) => dialect::now_plus_ms(backend),
        None => "next_attempt_at",
    };
    let sql = format!(
        "UPDATE webhook_delivery SET status = ?, version = version + 1, next_attempt_at = {next_sql}, \
         lease_owner = NULL, lease_until = NULL, last_status = ?, last_error = ?, updated_at = {now} \
         WHERE id = ? AND version = ? AND status = 'sending'"
    );
    let error = error.map(|text| text.chars().take(500).collect::<String>());
    with_pool!(db, writer, |pool| {
        let mut query = sqlx::query(AssertSqlSafe(sql)).bind(status);
        if let Some(pause) = next {
            query = query.bind(millis(pause));
        }
        query
            .bind(http_status.map(i64::from))
            .bind(&error)
            .bind(id)
            .bind(claimed_version)
            .execute(pool)
            .await
            .map(|done| done.rows_affected() == 1)
    })
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
