//! `webhook_endpoint`: subscribers of outbound webhooks, their secrets and
//! their circuit breaker (shared by every instance; see migration 0008).

use std::time::Duration;

use chrono::NaiveDateTime;
use sqlx::AssertSqlSafe;

use super::batches::LastInsertId;
use super::{Db, DbTx, dialect};
use crate::{with_pool, with_tx};

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

const COLUMNS: &str = "id, url, description, event_types, secret, previous_secret, \
    previous_secret_until, enabled, disabled_reason, breaker_state, breaker_failures, \
    breaker_until, created_at, updated_at";

/// One endpoint. Holds secrets: never log it whole (its `Debug` hides them).
#[derive(Clone, PartialEq, sqlx::FromRow)]
pub struct EndpointRow {
    /// Primary key.
    pub id: i64,
    /// Where deliveries are POSTed.
    pub url: String,
    /// Free text from the operator.
    pub description: String,
    /// `,a,b,` or empty for every event type.
    pub event_types: String,
    /// The current `whsec_` secret, sealed (see [`crate::sealing`]).
    pub secret: String,
    /// The secret before the last rotation, sealed, valid until `previous_secret_until`.
    pub previous_secret: Option<String>,
    /// End of the rotation grace period.
    pub previous_secret_until: Option<NaiveDateTime>,
    /// Disabled endpoints get no new deliveries and send none.
    pub enabled: bool,
    /// Why it was disabled (an operator, or a 410 answer).
    pub disabled_reason: Option<String>,
    /// `closed`, `open` or `half_open`.
    pub breaker_state: String,
    /// Consecutive failed attempts.
    pub breaker_failures: i64,
    /// When an open breaker may be probed / a half-open probe counts as lost.
    pub breaker_until: Option<NaiveDateTime>,
    /// Database time.
    pub created_at: NaiveDateTime,
    /// Database time.
    pub updated_at: NaiveDateTime,
}

impl std::fmt::Debug for EndpointRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointRow")
            .field("id", &self.id)
            .field("url", &self.url)
            .field("enabled", &self.enabled)
            .field("breaker_state", &self.breaker_state)
            .finish_non_exhaustive()
    }
}

/// Stores `event_types` as `,a,b,`, empty meaning every type.
pub fn encode_event_types(types: &[String]) -> String {
    if types.is_empty() {
        String::new()
    } else {
        format!(",{},", types.join(","))
    }
}

/// The list form of a stored `event_types`.
pub fn decode_event_types(stored: &str) -> Vec<String> {
    stored
        .split(',')
        .filter(|part| !part.is_empty())
        .map(str::to_owned)
        .collect()
}

impl EndpointRow {
    /// Whether this endpoint subscribes to `event_type`.
    pub fn wants(&self, event_type: &str) -> bool {
        self.event_types.is_empty() || self.event_types.contains(&format!(",{event_type},"))
    }
}

/// Inserts an endpoint; answers its id.
pub async fn insert_endpoint(
    tx: &mut DbTx,
    url: &str,
    description: &str,
    event_types: &str,
    secret: &str,
) -> Result<i64, sqlx::Error> {
    let sql = "INSERT INTO webhook_endpoint (url, description, event_types, secret) \
               VALUES (?, ?, ?, ?)";
    let id = with_tx!(tx, |conn| {
        sqlx::query(sql)
            .bind(url)
            .bind(description)
            .bind(event_types)
            .bind(secret)
            .execute(&mut *conn)
            .await
            .map(|done| done.last_insert_id_of())
    })?;
    Ok(id)
}

/// One endpoint by id (primary key).
pub async fn get_endpoint(db: &Db, id: i64) -> Result<Option<EndpointRow>, sqlx::Error> {
    let sql = format!("SELECT {COLUMNS} FROM webhook_endpoint WHERE id = ?");
    with_pool!(db, reader, |pool| {
        sqlx::query_as(AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(pool)
            .await
    })
}

/// The endpoints among `ids` (primary key lookups; a delivery worker's page
/// names only a few).
pub async fn endpoints_in(db: &Db, ids: &[i64]) -> Result<Vec<EndpointRow>, sqlx::Error> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT {COLUMNS} FROM webhook_endpoint WHERE id IN ({})",
        super::placeholders(ids.len())
    );
    with_pool!(db, reader, |pool| {
        let mut query = sqlx::query_as(AssertSqlSafe(sql));
        for id in ids {
            query = query.bind(id);
        }
        query.fetch_all(pool).await
    })
}

/// Every endpoint, oldest first (a small table: full scan).
pub async fn list_endpoints(db: &Db) -> Result<Vec<EndpointRow>, sqlx::Error> {
    let sql = format!("SELECT {COLUMNS} FROM webhook_endpoint ORDER BY id");
    with_pool!(db, reader, |pool| {
        sqlx::query_as(AssertSqlSafe(sql)).fetch_all(pool).await
    })
}

/// Every enabled endpoint, inside the caller's transaction (the relay).
pub async fn list_enabled_in(tx: &mut DbTx) -> Result<Vec<EndpointRow>, sqlx::Error> {
    let sql = format!("SELECT {COLUMNS} FROM webhook_endpoint WHERE enabled = TRUE ORDER BY id");
    with_tx!(tx, |conn| {
        sqlx::query_as(AssertSqlSafe(sql)).fetch_all(conn).await
    })
}

/// What an operator may change.
#[derive(Debug, Default)]
pub struct EndpointPatch<'a> {
    /// New URL (validated by the caller).
    pub url: Option<&'a str>,
    /// New description.
    pub description: Option<&'a str>,
    /// New stored event types.
    pub event_types: Option<&'a str>,
    /// Enable (also clears the reason and closes the breaker) or disable.
    pub enabled: Option<bool>,
}

/// Applies a patch; `false` when the endpoint does not exist.
pub async fn update_endpoint(
    tx: &mut DbTx,
    id: i64,
    patch: &EndpointPatch<'_>,
) -> Result<bool, sqlx::Error> {
    let now = dialect::now_ms(tx.backend());
    let sql = format!(
        "UPDATE webhook_endpoint SET url = COALESCE(?, url), \
         description = COALESCE(?, description), event_types = COALESCE(?, event_types), \
         enabled = COALESCE(?, enabled), \
         disabled_reason = CASE WHEN ? = TRUE THEN NULL WHEN ? = FALSE THEN 'disabled by an operator' \
         ELSE disabled_reason END, \
         breaker_state = CASE WHEN ? = TRUE THEN 'closed' ELSE breaker_state END, \
         breaker_failures = CASE WHEN ? = TRUE THEN 0 ELSE breaker_failures END, \
         breaker_until = CASE WHEN ? = TRUE THEN NULL ELSE breaker_until END, \
         updated_at = {now} WHERE id = ?"
    );
    with_tx!(tx, |conn| {
        sqlx::query(AssertSqlSafe(sql))
            .bind(patch.url)
            .bind(patch.description)
            .bind(patch.event_types)
            .bind(patch.enabled)
            .bind(patch.enabled)
            .bind(patch.enabled)
            .bind(patch.enabled)
            .bind(patch.enabled)
            .bind(patch.enabled)
            .bind(id)
            .execute(conn)
            .await
            .map(|done| done.rows_affected() == 1)
    })
}

/// Deletes an endpoint and its deliveries; `false` when it did not exist.
pub async fn delete_endpoint(tx: &mut DbTx, id: i64) -> Result<bool, sqlx::Error> {
    with_tx!(tx, |conn| {
        sqlx::query("DELETE FROM webhook_delivery WHERE endpoint_id = ?")
            .bind(id)
            .execute(&mut *conn)
            .await?;
        sqlx::query("DELETE FROM webhook_endpoint WHERE id = ?")
            .bind(id)
            .execute(&mut *conn)
            .await
            .map(|done| done.rows_affected() == 1)
    })
}

/// Rotates the secret: the current one stays valid for `grace`.
pub async fn rotate_secret(
    tx: &mut DbTx,
    id: i64,
    new_secret: &str,
    grace: Duration,
) -> Result<bool, sqlx::Error> {
    let backend = tx.backend();
    let sql = format!(
        "UPDATE webhook_endpoint SET previous_secret = secret, secret = ?, \
         previous_secret_until = {}, updated_at = {} WHERE id = ?",
        dialect::now_plus_ms(backend),
        dialect::now_ms(backend)
    );
    with_tx!(tx, |conn| {
        sqlx::query(AssertSqlSafe(sql))
            .bind(new_secret)
            .bind(millis(grace))
            .bind(id)
            .execute(conn)
            .await
            .map(|done| done.rows_affected() == 1)
    })
}

/// The stored (sealed or, from before sealing, plain) secrets of one endpoint.
#[derive(Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct StoredSecrets {
    /// The endpoint.
    pub id: i64,
    /// `webhook_endpoint.secret` as stored.
    pub secret: String,
    /// `webhook_endpoint.previous_secret` as stored.
    pub previous_secret: Option<String>,
}

/// Every endpoint's stored secrets (a small table: full scan).
pub async fn list_stored_secrets(db: &Db) -> Result<Vec<StoredSecrets>, sqlx::Error> {
    let sql = "SELECT id, secret, previous_secret FROM webhook_endpoint ORDER BY id";
    with_pool!(db, writer, |pool| {
        sqlx::query_as(sql).fetch_all(pool).await
    })
}

/// Replaces an endpoint's stored secrets with `next` if they are still
/// `seen` (nobody rotated or resealed them meanwhile); `true` when replaced.
pub async fn replace_stored_secrets(
    db: &Db,
    seen: &StoredSecrets,
    next: &StoredSecrets,
) -> Result<bool, sqlx::Error> {
    let sql = "UPDATE webhook_endpoint SET secret = ?, previous_secret = ? \
               WHERE id = ? AND secret = ? AND COALESCE(previous_secret, '') = ?";
    with_pool!(db, writer, |pool| {
        sqlx::query(sql)
            .bind(&next.secret)
            .bind(&next.previous_secret)
            .bind(seen.id)
            .bind(&seen.secret)
            .bind(seen.previous_secret.as_deref().unwrap_or_default())
            .execute(pool)
            .await
            .map(|done| done.rows_affected() == 1)
    })
}

/// Disables an endpoint that answered 410 Gone.
pub async fn disable_gone(db: &Db, id: i64) -> Result<bool, sqlx::Error> {
    let sql = format!(
        "UPDATE webhook_endpoint SET enabled = FALSE, disabled_reason = '410 Gone', \
         updated_at = {} WHERE id = ? AND enabled = TRUE",
        dialect::now_ms(db.backend())
    );
    with_pool!(db, writer, |pool| {
        sqlx::query(AssertSqlSafe(sql))
            .bind(id)
            .execute(pool)
            .await
            .map(|done| done.rows_affected() == 1)
    })
}

/// Breaker: an open (or lost half-open) breaker whose time has come becomes
/// half-open for `probe_for`, for exactly one caller, which sends the probe.
pub async fn take_half_open(db: &Db, id: i64, probe_for: Duration) -> Result<bool, sqlx::Error> {
    let backend = db.backend();
    let sql = format!(
        "UPDATE webhook_endpoint SET breaker_state = 'half_open', breaker_until = {} \
         WHERE id = ? AND breaker_state IN ('open', 'half_open') AND breaker_until <= {}",
        dialect::now_plus_ms(backend),
        dialect::now_ms(backend)
    );
    with_pool!(db, writer, |pool| {
        sqlx::query(AssertSqlSafe(sql))
            .bind(millis(probe_for))
            .bind(id)
            .execute(pool)
            .await
            .map(|done| done.rows_affected() == 1)
    })
}

/// Breaker after a successful attempt: closes it and clears the failure
/// count. `true` only for the caller that closed an open or half-open
/// breaker, which logs it.
pub async fn record_success(db: &Db, id: i64) -> Result<bool, sqlx::Error> {
    let close = "UPDATE webhook_endpoint SET breaker_state = 'closed', breaker_failures = 0, \
                 breaker_until = NULL WHERE id = ? AND breaker_state <> 'closed'";
    let reset =
        "UPDATE webhook_endpoint SET breaker_failures = 0 WHERE id = ? AND breaker_failures <> 0";
    with_pool!(db, writer, |pool| {
        let closed = sqlx::query(close).bind(id).execute(pool).await?;
        if closed.rows_affected() == 0 {
            sqlx::query(reset).bind(id).execute(pool).await?;
        }
        Ok(closed.rows_affected() == 1)
    })
}

/// Breaker after `failures` failed attempts in a row (one worker's page
/// records them together): counts them, and opens the breaker (for
/// `open_for`) when a half-open probe failed or `threshold` consecutive
/// failures are reached. `true` only for the caller that opened it.
pub async fn record_failures(
    db: &Db,
    id: i64,
    failures: u32,
    threshold: u32,
    open_for: Duration,
) -> Result<bool, sqlx::Error> {
    let backend = db.backend();
    let count = "UPDATE webhook_endpoint SET breaker_failures = breaker_failures + ? WHERE id = ?";
    let open = format!(
        "UPDATE webhook_endpoint SET breaker_state = 'open', breaker_until = {} WHERE id = ? \
         AND (breaker_state = 'half_open' OR (breaker_state = 'closed' AND breaker_failures >= ?))",
        dialect::now_plus_ms(backend)
    );
    with_pool!(db, writer, |pool| {
        sqlx::query(count)
            .bind(i64::from(failures))
            .bind(id)
            .execute(pool)
            .await?;
        sqlx::query(AssertSqlSafe(open))
            .bind(millis(open_for))
            .bind(id)
            .bind(i64::from(threshold))
            .execute(pool)
            .await
            .map(|done| done.rows_affected() == 1)
    })
}
