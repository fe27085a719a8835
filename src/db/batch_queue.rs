//! The merge queue's waiting set in `merge_batch_request` (SPEC §7): how an
//! approved request joins it, how a round claims a group of it into a
//! batch (and numbers the batch), and how members leave it or go back to
//! it. Each query names the index it uses.

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
) -> Result<bool, sqlx::Error> {
    let sql =
        "INSERT INTO merge_batch_request (operation_id, partition_key, project) VALUES (?, ?, ?)";
    let inserted = with_tx!(tx, |conn| {
        sqlx::query(sql)
            .bind(operation_id)
            .bind(partition_key)
            .bind(project)
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

/// Partitions with waiting requests: the lock-free pre-check that skips
/// empty rounds. Served by `ix_merge_batch_request_waiting`.
pub async fn waiting_partitions(db: &Db) -> Result<Vec<String>, sqlx::Error> {
    let sql = "SELECT DISTINCT partition_key FROM merge_batch_request WHERE batch_id IS NULL";
    with_pool!(db, reader, |pool| {
        sqlx::query_scalar(sql).fetch_all(pool).await
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
}

/// The oldest waiting request of a partition, created before the database's
/// now: a plain (non-locking) read, so enqueues never wait on a claim (I3).
/// Served by `ix_merge_batch_request_waiting`.
pub async fn oldest_waiting(
    tx: &mut DbTx,
    partition_key: &str,
) -> Result<Option<Waiting>, sqlx::Error> {
    let sql = format!(
        "SELECT id, operation_id, project, split_group FROM merge_batch_request \
         WHERE partition_key = ? AND batch_id IS NULL AND created_at < {} ORDER BY id LIMIT 1",
        dialect::now_ms(tx.backend())
    );
    with_tx!(tx, |conn| {
        sqlx::query_as(AssertSqlSafe(sql))
            .bind(partition_key)
            .fetch_optional(conn)
            .await
    })
}

/// Up to `limit` waiting requests of one project and split group, oldest
/// first: a plain read (I3). Served by `ix_merge_batch_request_waiting`.
pub async fn waiting_group(
    tx: &mut DbTx,
    partition_key: &str,
    project: &str,
    split_group: &str,
    limit: u32,
) -> Result<Vec<Waiting>, sqlx::Error> {
    let sql = format!(
        "SELECT id, operation_id, project, split_group FROM merge_batch_request \
         WHERE partition_key = ? AND batch_id IS NULL AND created_at < {} \
         AND project = ? AND split_group = ? ORDER BY id LIMIT ?",
        dialect::now_ms(tx.backend())
    );
    with_tx!(tx, |conn| {
        sqlx::query_as(AssertSqlSafe(sql))
            .bind(partition_key)
            .bind(project)
            .bind(split_group)
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
