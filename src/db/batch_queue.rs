//! The merge queue's waiting set in `merge_batch_request` (SPEC §7): how an
//! approved request joins it, how a round claims a group of it into a
//! batch (and numbers the batch), and how members leave it or go back to
//! it. Each query names the index it uses.

use chrono::NaiveDateTime;
use sqlx::AssertSqlSafe;

use super::{Db, DbTx, IN_LIST_CHUNK, dialect, is_unique_violation, placeholders};
use crate::{with_pool, with_tx};

/// Puts an approved request in the waiting set; `false` when it is there
/// already (I4: the unique operation id makes enqueue idempotent).
pub async fn enqueue(
    tx: &mut DbTx,
    operation_id: &str,
    partition_key: &str,
    project: &str,
    not_before: Option<NaiveDateTime>,
) -> Result<bool, sqlx::Error> {
    let sql = "INSERT INTO merge_batch_request (operation_id, partition_key, project, not_before) \
               VALUES (?, ?, ?, ?)";
    let inserted = with_tx!(tx, |conn| {
        sqlx::query(sql)
            .bind(operation_id)
            .bind(partition_key)
            .bind(project)
            .bind(not_before)
            .execute(conn)
            .await
            .map(|_| ())
    });
    match inserted {
        Ok(_) => Ok(true),
        Err(err) if is_unique_violation(&err) => Ok(false),
        Err(err) => Err(err),
    }
}

/// Partitions with waiting requests whose time has come: the lock-free
/// pre-check that skips empty rounds. Served by
/// `ix_merge_batch_request_waiting`.
pub async fn waiting_partitions(db: &Db) -> Result<Vec<String>, sqlx::Error> {
    let sql = format!(
        "SELECT DISTINCT partition_key FROM merge_batch_request WHERE batch_id IS NULL \
         AND (not_before IS NULL OR not_before <= {})",
        dialect::now_ms(db.backend())
    );
    with_pool!(db, reader, |pool| {
        sqlx::query_scalar(AssertSqlSafe(sql)).fetch_all(pool).await
    })
}

/// The projects of `partition_key` with ordinary requests (not the halves
/// of a failed batch) waiting whose time has come: whose pace a claim
/// reads. Served by `ix_merge_batch_request_waiting`.
pub async fn waiting_projects(db: &Db, partition_key: &str) -> Result<Vec<String>, sqlx::Error> {
    let sql = format!(
        "SELECT DISTINCT project FROM merge_batch_request WHERE partition_key = ? \
         AND batch_id IS NULL AND split_group = '' AND (not_before IS NULL OR not_before <= {})",
        dialect::now_ms(db.backend())
    );
    with_pool!(db, reader, |pool| {
        sqlx::query_scalar(AssertSqlSafe(sql))
            .bind(partition_key)
            .fetch_all(pool)
            .await
    })
}

/// A waiting request.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Waiting {
    /// Row id.
    pub id: i64,
    /// The operation.
    pub operation_id: String,
    /// Its project.
    pub project: String,
    /// Its split group.
    pub split_group: String,
    /// Its target.
    pub target_key: String,
}

/// How many waiting rows one claim reads at most: enough to find a group
/// of requests that may land now past those waiting for a change window.
pub const CLAIM_SCAN: u32 = 1000;

/// The partition's waiting requests that may land by their time: created
/// before the database's now and with no `not_before` after it, oldest
/// first, with their targets (whose change windows the caller checks). A
/// plain (non-locking) read, so enqueues never wait on a claim (I3).
/// Served by `ix_merge_batch_request_waiting`, then the operation's unique
/// key.
pub async fn due_waiting(
    tx: &mut DbTx,
    partition_key: &str,
    limit: u32,
) -> Result<Vec<Waiting>, sqlx::Error> {
    let now = dialect::now_ms(tx.backend());
    let sql = format!(
        "SELECT r.id, r.operation_id, r.project, r.split_group, \
         COALESCE(o.target_key, '') AS target_key \
         FROM merge_batch_request r LEFT JOIN operation o ON o.operation_id = r.operation_id \
         WHERE r.partition_key = ? AND r.batch_id IS NULL AND r.created_at < {now} \
         AND (r.not_before IS NULL OR r.not_before <= {now}) ORDER BY r.id LIMIT ?"
    );
    with_tx!(tx, |conn| {
        sqlx::query_as(AssertSqlSafe(sql))
            .bind(partition_key)
            .bind(limit)
            .fetch_all(conn)
            .await
    })
}

/// The guarded claim (I2): rows still unclaimed among `ids` join `batch_id`.
/// Returns how many did; fewer than `ids.len()` means another claimer won
/// some, and the caller must roll back. It must find the rows by primary
/// key: a scan of the `batch_id IS NULL` range would lock its gaps, and
/// every enqueue (a new NULL row) would wait for the claim to end (I3).
pub async fn claim(tx: &mut DbTx, batch_id: i64, ids: &[i64]) -> Result<u64, sqlx::Error> {
    let primary_key_only = match tx.backend() {
        super::Backend::MySql => " FORCE INDEX (PRIMARY)",
        super::Backend::Sqlite => "",
    };
    let mut claimed = 0;
    for chunk in ids.chunks(IN_LIST_CHUNK) {
        let sql = format!(
            "UPDATE merge_batch_request{primary_key_only} SET batch_id = ? \
             WHERE id IN ({}) AND batch_id IS NULL",
            placeholders(chunk.len())
        );
        claimed += with_tx!(tx, |conn| {
            let mut query = sqlx::query(AssertSqlSafe(sql)).bind(batch_id);
            for id in chunk {
                query = query.bind(*id);
            }
            query
                .execute(&mut *conn)
                .await
                .map(|done| done.rows_affected())
        })?;
    }
    Ok(claimed)
}

/// The next number of `project`'s batches, counted in its row of
/// `merge_batch_counter` in the caller's (the claim's) transaction: a claim
/// that rolls back takes its increment with it, so numbers have no gaps.
/// The upsert is a locking write, so it counts on the latest committed
/// value whatever the transaction's snapshot, and concurrent claimers of
/// one project wait for each other on that row until commit (on Galera the
/// second to commit fails certification and is tried again whole). The
/// unique `(project, number)` index makes a duplicate an error all the same.
/// Served by the counter's primary key.
pub async fn next_batch_number(tx: &mut DbTx, project: &str) -> Result<i64, sqlx::Error> {
    let upsert = match tx.backend() {
        super::Backend::MySql => {
            "INSERT INTO merge_batch_counter (project, last_number) VALUES (?, 1) \
             ON DUPLICATE KEY UPDATE last_number = last_number + 1"
        }
        super::Backend::Sqlite => {
            "INSERT INTO merge_batch_counter (project, last_number) VALUES (?, 1) \
             ON CONFLICT (project) DO UPDATE SET last_number = last_number + 1"
        }
    };
    let read = "SELECT last_number FROM merge_batch_counter WHERE project = ?";
    with_tx!(tx, |conn| {
        sqlx::query(upsert)
            .bind(project)
            .execute(&mut *conn)
            .await?;
        // A transaction reads its own write, so this is the value just set.
        sqlx::query_scalar(read)
            .bind(project)
            .fetch_one(&mut *conn)
            .await
    })
}

/// Puts `operation_id`, a member of a batch that is over, back in the
/// waiting set for the next round, in the caller's transaction.
pub async fn rejoin_waiting_set(tx: &mut DbTx, operation_id: &str) -> Result<(), sqlx::Error> {
    let sql = "UPDATE merge_batch_request SET batch_id = NULL, split_group = '', settled_count = 0 \
         WHERE operation_id = ?";
    with_tx!(tx, |conn| {
        sqlx::query(sql)
            .bind(operation_id)
            .execute(conn)
            .await
            .map(|_| ())
    })
}

/// Moves `operation_id`'s row of the waiting set to `lane`, in the caller's
/// transaction: at once when it waits, else when its batch lets it go
/// (a batch's members go back to wait in their own rows' partitions).
pub async fn move_to_lane(
    tx: &mut DbTx,
    operation_id: &str,
    lane: &str,
) -> Result<(), sqlx::Error> {
    let sql = "UPDATE merge_batch_request SET partition_key = ? WHERE operation_id = ?";
    with_tx!(tx, |conn| {
        sqlx::query(sql)
            .bind(lane)
            .bind(operation_id)
            .execute(conn)
            .await
            .map(|_| ())
    })
}

/// The partition `operation_id` waits (or last waited) in, if it is in the
/// merge queue, in the caller's transaction.
pub async fn partition_of_request(
    tx: &mut DbTx,
    operation_id: &str,
) -> Result<Option<String>, sqlx::Error> {
    let sql = "SELECT partition_key FROM merge_batch_request WHERE operation_id = ?";
    with_tx!(tx, |conn| {
        sqlx::query_scalar(sql)
            .bind(operation_id)
            .fetch_optional(conn)
            .await
    })
}

/// Requests shown in a merge batch whose row does not exist: `(operation
/// id, batch id)`. A claim writes the batch and points its members at it in
/// one transaction, so none should ever be found; a database that lost part
/// of a committed transaction (seen once on a Galera cluster losing a node)
/// leaves them, and nothing else would ever move them. Only bindings still
/// `MR_CREATING` are looked at (`ix_binding_status_updated`): a batch that
/// opened its MR moved its members on.
pub async fn orphaned_members(db: &Db) -> Result<Vec<(String, i64)>, sqlx::Error> {
    let sql = "SELECT r.operation_id, r.batch_id FROM binding bd \
               JOIN merge_batch_request r ON r.operation_id = bd.operation_id \
               LEFT JOIN merge_batch b ON b.id = r.batch_id \
               WHERE bd.status = 'MR_CREATING' AND r.batch_id IS NOT NULL AND b.id IS NULL";
    with_pool!(db, reader, |pool| {
        sqlx::query_as(sql).fetch_all(pool).await
    })
}

/// Puts `operation_id` back in the waiting set if the batch it is shown in
/// does not exist, in the caller's transaction; the rows affected.
pub async fn rejoin_if_orphaned(tx: &mut DbTx, operation_id: &str) -> Result<u64, sqlx::Error> {
    let sql = "UPDATE merge_batch_request SET batch_id = NULL, split_group = '', settled_count = 0 \
               WHERE operation_id = ? AND batch_id IS NOT NULL \
               AND NOT EXISTS (SELECT 1 FROM merge_batch b WHERE b.id = merge_batch_request.batch_id)";
    with_tx!(tx, |conn| {
        sqlx::query(sql)
            .bind(operation_id)
            .execute(conn)
            .await
            .map(|done| done.rows_affected())
    })
}

/// Takes `operation_id` out of the waiting set, if it waits there, in the
/// caller's transaction (by its unique key: one row at most).
pub async fn leave_waiting_set(tx: &mut DbTx, operation_id: &str) -> Result<(), sqlx::Error> {
    let sql = "DELETE FROM merge_batch_request WHERE operation_id = ? AND batch_id IS NULL";
    with_tx!(tx, |conn| {
        sqlx::query(sql)
            .bind(operation_id)
            .execute(conn)
            .await
            .map(|_| ())
    })
}

/// Sends a failed batch's members back to wait, in `split_group` each (the
/// halves of a bisection), with their batch cleared.
pub async fn release_members(
    tx: &mut DbTx,
    halves: &[(&str, &[String])],
) -> Result<(), sqlx::Error> {
    for (group, ids) in halves {
        for chunk in ids.chunks(IN_LIST_CHUNK) {
            let sql = format!(
                "UPDATE merge_batch_request SET batch_id = NULL, split_group = ? WHERE operation_id IN ({})",
                placeholders(chunk.len())
            );
            with_tx!(tx, |conn| {
                let mut query = sqlx::query(AssertSqlSafe(sql)).bind(*group);
                for id in chunk {
                    query = query.bind(id.as_str());
                }
                query.execute(&mut *conn).await.map(|_| ())
            })?;
        }
    }
    Ok(())
}
