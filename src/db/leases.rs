//! Who runs an operation's step now, and which operations are due: the
//! durable half of the workflow (SPEC §6, beyond). A lease is taken by
//! compare-and-swap on an absent or expired lease, so of several instances
//! (or a restarted one) exactly one runs a step at a time, and a crashed
//! owner's lease simply runs out.
//!
//! Each lease write is one guarded statement, sent again whole when it
//! loses a lock race ([`retrying`]): instances taking and giving back
//! leases of neighbouring rows deadlock now and then on InnoDB's index
//! locks, and the victim's statement did nothing. Sent again after it did
//! apply, it changes nothing: a take by the holder only extends its lease,
//! and a release finds the lease no longer held.

use std::time::Duration;

use sqlx::AssertSqlSafe;

use super::{Db, DbTx, dialect, retrying};
use crate::{with_pool, with_tx};

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Takes the lease of `operation_id` for `owner` for `lease`, if nobody
/// holds one (or it expired, or `owner` holds it already); `true` when taken.
pub async fn acquire_lease(
    db: &Db,
    operation_id: &str,
    owner: &str,
    lease: Duration,
) -> Result<bool, sqlx::Error> {
    take_row_lease(db, LeasedRow::Operation(operation_id), owner, lease).await
}

/// A row whose `lease_owner` and `lease_until` one instance at a time holds.
#[derive(Debug, Clone, Copy)]
pub(crate) enum LeasedRow<'a> {
    /// An operation's step, by operation id.
    Operation(&'a str),
    /// A background job, by name (`job_lease`).
    Job(&'a str),
}

/// Takes the lease of `row` for `owner` for `lease`, if nobody holds one
/// (or it expired, or `owner` holds it already); `true` when taken.
pub(crate) async fn take_row_lease(
    db: &Db,
    row: LeasedRow<'_>,
    owner: &str,
    lease: Duration,
) -> Result<bool, sqlx::Error> {
    let (table, key_column, key) = match row {
        LeasedRow::Operation(id) => ("operation", "operation_id", id),
        LeasedRow::Job(name) => ("job_lease", "name", name),
    };
    let backend = db.backend();
    let sql = format!(
        "UPDATE {table} SET lease_owner = ?, lease_until = {} WHERE {key_column} = ? \
         AND (lease_owner IS NULL OR lease_until < {} OR lease_owner = ?)",
        dialect::now_plus_ms(backend),
        dialect::now_ms(backend)
    );
    retrying(|| async {
        with_pool!(db, writer, |pool| {
            sqlx::query(AssertSqlSafe(sql.clone()))
                .bind(owner)
                .bind(millis(lease))
                .bind(key)
                .bind(owner)
                .execute(pool)
                .await
                .map(|done| done.rows_affected() == 1)
        })
    })
    .await
}

/// Extends the lease `owner` holds; `false` when it no longer holds it.
pub async fn renew_lease(
    db: &Db,
    operation_id: &str,
    owner: &str,
    lease: Duration,
) -> Result<bool, sqlx::Error> {
    let sql = format!(
        "UPDATE operation SET lease_until = {} WHERE operation_id = ? AND lease_owner = ?",
        dialect::now_plus_ms(db.backend())
    );
    retrying(|| async {
        with_pool!(db, writer, |pool| {
            sqlx::query(AssertSqlSafe(sql.clone()))
                .bind(millis(lease))
                .bind(operation_id)
                .bind(owner)
                .execute(pool)
                .await
                .map(|done| done.rows_affected() == 1)
        })
    })
    .await
}

/// Gives the lease back. With `poll_again_in`, and only if the operation is
/// still at `seen_version` (nobody moved it meanwhile), it becomes due again
/// after that pause and counts one more poll; otherwise its due time stays
/// as the last step write set it.
pub async fn release_lease(
    db: &Db,
    operation_id: &str,
    owner: &str,
    seen_version: i64,
    poll_again_in: Option<Duration>,
) -> Result<(), sqlx::Error> {
    let sql = match poll_again_in {
        None => "UPDATE operation SET lease_owner = NULL, lease_until = NULL \
                 WHERE operation_id = ? AND lease_owner = ?"
            .to_owned(),
        Some(_) => format!(
            "UPDATE operation SET lease_owner = NULL, lease_until = NULL, \
             due_at = CASE WHEN version = ? THEN {} ELSE due_at END, \
             attempts = CASE WHEN version = ? THEN attempts + 1 ELSE attempts END \
             WHERE operation_id = ? AND lease_owner = ?",
            dialect::now_plus_ms(db.backend())
        ),
    };
    retrying(|| async {
        with_pool!(db, writer, |pool| {
            let mut query = sqlx::query(AssertSqlSafe(sql.clone()));
            if let Some(pause) = poll_again_in {
                query = query
                    .bind(seen_version)
                    .bind(millis(pause))
                    .bind(seen_version);
            }
            query
                .bind(operation_id)
                .bind(owner)
                .execute(pool)
                .await
                .map(|_| ())
        })
    })
    .await
}

/// Up to `limit` operations due by the database clock whose lease is free,
/// expired, or held by `owner`, earliest first. `owner` is the caller's
/// own step lease id: whatever it holds and is not running (the caller
/// skips those) is a lease it could not give back, say while its database
/// node was gone, and waiting for it to expire would only delay the step.
/// Served by `ix_operation_due` (the range scan stops at now; the lease
/// test filters the few rows in it).
pub async fn list_due(db: &Db, owner: &str, limit: u32) -> Result<Vec<String>, sqlx::Error> {
    let now = dialect::now_ms(db.backend());
    let sql = format!(
        "SELECT operation_id FROM operation WHERE due_at <= {now} \
         AND (lease_owner IS NULL OR lease_until < {now} OR lease_owner = ?) \
         ORDER BY due_at LIMIT ?"
    );
    with_pool!(db, reader, |pool| {
        sqlx::query_scalar(AssertSqlSafe(sql))
            .bind(owner)
            .bind(limit)
            .fetch_all(pool)
            .await
    })
}

/// Makes `operation_id` due now with its polls counted from zero (an
/// operator's retry), inside the caller's transaction.
pub async fn make_due_now(tx: &mut DbTx, operation_id: &str) -> Result<(), sqlx::Error> {
    let sql = format!(
        "UPDATE operation SET due_at = {}, attempts = 0 WHERE operation_id = ?",
        dialect::now_ms(tx.backend())
    );
    with_tx!(tx, |conn| {
        sqlx::query(AssertSqlSafe(sql))
            .bind(operation_id)
            .execute(conn)
            .await
            .map(|_| ())
    })
}

/// Makes `operation_id` due at `at` (a scheduled request's time), inside
/// the caller's transaction.
pub async fn make_due_at(
    tx: &mut DbTx,
    operation_id: &str,
    at: chrono::NaiveDateTime,
) -> Result<(), sqlx::Error> {
    let sql = "UPDATE operation SET due_at = ?, attempts = 0 WHERE operation_id = ?";
    with_tx!(tx, |conn| {
        sqlx::query(sql)
            .bind(at)
            .bind(operation_id)
            .execute(conn)
            .await
            .map(|_| ())
    })
}
