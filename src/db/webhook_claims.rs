//! The delivery workers' statements on `webhook_delivery`, each for a whole
//! page of deliveries in one round trip: finding due work, the claim (a
//! set-based compare-and-swap), reading back what was won, silencing, and
//! recording how the attempts ended. Migration 0008 has the row's life
//! cycle.
//!
//! Lists of ids are padded to a power of two (repeating the last id, which
//! changes nothing in an `IN` list or a `CASE`), so a worker sends only a
//! handful of distinct statement texts and MySQL's prepared-statement cache
//! keeps them all: a new text would cost a prepare round trip of its own.

use std::time::Duration;

use sqlx::AssertSqlSafe;

use super::webhook_deliveries::{COLUMNS, DeliveryRow, Ending, QUEUED};
use super::{Db, IN_LIST_CHUNK, dialect, retrying};
use crate::with_pool;

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
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
    let ids = padded(&ids);
    let sql = format!(
        "UPDATE webhook_delivery SET status = 'queued', version = version + 1, \
         lease_owner = NULL, lease_until = NULL, updated_at = {now} \
         WHERE id IN ({}) AND status = 'sending' AND lease_until < {now}",
        super::placeholders(ids.len())
    );
    retrying(|| async {
        with_pool!(db, writer, |pool| {
            let mut query = sqlx::query(AssertSqlSafe(sql.clone()));
            for id in &ids {
                query = query.bind(id);
            }
            query.execute(pool).await.map(|done| done.rows_affected())
        })
    })
    .await
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

/// Claims a page of deliveries in one statement: each row moves from
/// `queued` at the version read to `sending`, holding `token` as its lease
/// owner for `lease`. This is the compare-and-swap of migration 0008 for
/// every row at once: the database applies it row by row under the row's
/// lock, so of several instances claiming the same row exactly one matches
/// its version; the others' statements skip it. Answers how many rows this
/// call won; [`claimed`] reads them back by `token`. Primary key lookups.
pub async fn claim(
    db: &Db,
    due: &[(i64, i64)],
    token: &str,
    lease: Duration,
) -> Result<u64, sqlx::Error> {
    swap_queued(db, due, Swap::Claim { token, lease }).await
}

/// The deliveries among `ids` that the claim holding `token` won, with
/// their bodies and their versions after the claim. Primary key lookups.
pub async fn claimed(db: &Db, ids: &[i64], token: &str) -> Result<Vec<DeliveryRow>, sqlx::Error> {
    let mut rows = Vec::with_capacity(ids.len());
    for page in ids.chunks(IN_LIST_CHUNK) {
        let page = padded(page);
        let sql = format!(
            "SELECT {COLUMNS} FROM webhook_delivery \
             WHERE id IN ({}) AND lease_owner = ? AND status = 'sending'",
            super::placeholders(page.len())
        );
        let found: Vec<DeliveryRow> = with_pool!(db, reader, |pool| {
            let mut query = sqlx::query_as(AssertSqlSafe(sql));
            for id in &page {
                query = query.bind(id);
            }
            query.bind(token).fetch_all(pool).await
        })?;
        rows.extend(found);
    }
    Ok(rows)
}

/// Silent mode: queued deliveries at the versions read become `silent`
/// (compare-and-swap like [`claim`]), so they are never sent, not even when
/// silent mode ends. Answers how many this call silenced.
pub async fn silence(db: &Db, due: &[(i64, i64)]) -> Result<u64, sqlx::Error> {
    swap_queued(db, due, Swap::Silence).await
}

/// Where [`swap_queued`] moves its rows.
enum Swap<'a> {
    Claim { token: &'a str, lease: Duration },
    Silence,
}

/// Moves the queued deliveries of `due` (id and version read) as `swap`
/// says, each only if it still is `queued` at that version; one statement
/// per chunk, sent again whole if it lost a lock race (it was rolled back;
/// a chunk that did apply matches nothing when sent again). Answers how
/// many moved.
async fn swap_queued(db: &Db, due: &[(i64, i64)], swap: Swap<'_>) -> Result<u64, sqlx::Error> {
    let backend = db.backend();
    let now = dialect::now_ms(backend);
    let set = match swap {
        Swap::Claim { .. } => format!(
            "status = 'sending', attempts = attempts + 1, lease_owner = ?, lease_until = {}",
            dialect::now_plus_ms(backend)
        ),
        Swap::Silence => "status = 'silent'".to_owned(),
    };
    let mut moved = 0;
    for page in due.chunks(IN_LIST_CHUNK / 3) {
        let page = padded(page);
        let sql = format!(
            "UPDATE webhook_delivery SET {set}, version = version + 1, updated_at = {now} \
             WHERE id IN ({}) AND status = 'queued' AND version = {}",
            super::placeholders(page.len()),
            case_by_id(page.len()),
        );
        moved += retrying(|| async {
            with_pool!(db, writer, |pool| {
                let mut query = sqlx::query(AssertSqlSafe(sql.clone()));
                if let Swap::Claim { token, lease } = &swap {
                    query = query.bind(*token).bind(millis(*lease));
                }
                for (id, _) in &page {
                    query = query.bind(id);
                }
                for (id, version) in &page {
                    query = query.bind(id).bind(version);
                }
                query.execute(pool).await.map(|done| done.rows_affected())
            })
        })
        .await?;
    }
    Ok(moved)
}

/// How one claimed attempt ended, for [`record`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// The delivery.
    pub id: i64,
    /// Its version after this instance's claim.
    pub claimed_version: i64,
    /// Delivered, retried later or failed.
    pub ending: Ending,
    /// The HTTP status of the answer, if there was one.
    pub http_status: Option<u16>,
    /// Why it failed, if it did.
    pub error: Option<String>,
}

/// Records how a group of claimed attempts ended, in one statement (per
/// chunk of rows): each row only if it still is `sending` at the version its
/// claim gave it and still held by `token`, so a claim whose lease ran out
/// (requeued, maybe claimed again elsewhere) is not overwritten. Answers how
/// many were recorded; the others will be sent again by whoever holds them
/// now.
///
/// Each chunk's statement is retried on a lost lock race ([`retrying`]):
/// instances recording answers at once can deadlock on InnoDB's locks, and
/// the victim's statement is rolled back whole, so it is sent again as it
/// was. A chunk already applied matches no row when sent again (its rows
/// left `sending` at that version), so a replay changes nothing.
pub async fn record(db: &Db, token: &str, attempts: &[Attempt]) -> Result<u64, sqlx::Error> {
    let backend = db.backend();
    let now = dialect::now_ms(backend);
    let mut recorded = 0;
    for chunk in attempts.chunks(IN_LIST_CHUNK / 12) {
        let rows = padded(chunk);
        let retried: Vec<(i64, Duration)> = rows
            .iter()
            .filter_map(|row| match row.ending {
                Ending::RetryIn(pause) => Some((row.id, pause)),
                Ending::Delivered | Ending::Failed => None,
            })
            .collect();
        let retried = padded(&retried);
        let next_attempt = if retried.is_empty() {
            String::new()
        } else {
            let arms =
                format!("WHEN ? THEN {} ", dialect::now_plus_ms(backend)).repeat(retried.len());
            format!("next_attempt_at = CASE id {arms}ELSE next_attempt_at END, ")
        };
        let case = case_by_id(rows.len());
        let sql = format!(
            "UPDATE webhook_delivery SET status = {case}, version = version + 1, {next_attempt}\
             lease_owner = NULL, lease_until = NULL, last_status = {case}, last_error = {case}, \
             updated_at = {now} \
             WHERE id IN ({}) AND status = 'sending' AND lease_owner = ? AND version = {case}",
            super::placeholders(rows.len())
        );
        let errors: Vec<Option<String>> = rows
            .iter()
            .map(|row| {
                row.error
                    .as_ref()
                    .map(|text| text.chars().take(500).collect())
            })
            .collect();
        recorded += retrying(|| async {
            with_pool!(db, writer, |pool| {
                let mut query = sqlx::query(AssertSqlSafe(sql.clone()));
                for row in &rows {
                    query = query.bind(row.id).bind(stored_status(row.ending));
                }
                for (id, pause) in &retried {
                    query = query.bind(id).bind(millis(*pause));
                }
                for row in &rows {
                    query = query.bind(row.id).bind(row.http_status.map(i64::from));
                }
                for (row, error) in rows.iter().zip(&errors) {
                    query = query.bind(row.id).bind(error);
                }
                for row in &rows {
                    query = query.bind(row.id);
                }
                query = query.bind(token);
                for row in &rows {
                    query = query.bind(row.id).bind(row.claimed_version);
                }
                query.execute(pool).await.map(|done| done.rows_affected())
            })
        })
        .await?;
    }
    Ok(recorded)
}

/// The status a row takes when an attempt ends so.
fn stored_status(ending: Ending) -> &'static str {
    match ending {
        Ending::Delivered => super::webhook_deliveries::DELIVERED,
        Ending::RetryIn(_) => QUEUED,
        Ending::Failed => super::webhook_deliveries::FAILED,
    }
}

/// `CASE id WHEN ? THEN ? … END` with `rows` arms: a value per row, bound
/// as id and value pairs.
fn case_by_id(rows: usize) -> String {
    format!("CASE id {}END", "WHEN ? THEN ? ".repeat(rows))
}

/// `items` padded to the next power of two by repeating the last one.
fn padded<T: Clone>(items: &[T]) -> Vec<T> {
    let mut padded = items.to_vec();
    if let Some(last) = items.last() {
        padded.resize(items.len().next_power_of_two(), last.clone());
    }
    padded
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_padded_to_a_power_of_two_with_the_last_item() {
        assert_eq!(padded::<i64>(&[]), Vec::<i64>::new());
        assert_eq!(padded(&[7]), vec![7]);
        assert_eq!(padded(&[1, 2, 3]), vec![1, 2, 3, 3]);
        assert_eq!(padded(&[1, 2, 3, 4, 5]), vec![1, 2, 3, 4, 5, 5, 5, 5]);
        assert_eq!(padded(&[1, 2, 3, 4]).len(), 4);
    }
}
