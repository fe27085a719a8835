//! The merge train's rows (SPEC §7, migration 0021): a partition's active
//! batches in train order, the place a claim takes, what a batch was built
//! on, and building batches again. Each query names the index it uses.

use sqlx::AssertSqlSafe;

use super::batches::{BatchRow, COLUMNS, LastInsertId};
use super::{DbTx, Reader, dialect, placeholders};
use crate::{with_reader, with_tx};

/// The active (RUNNING or BLOCKED) batches of `partition_key`, front first.
/// Served by `uk_merge_batch_train` (`active_slot` is the partition while
/// a batch is active).
pub async fn active_train(
    reader: impl Into<Reader<'_>>,
    partition_key: &str,
) -> Result<Vec<BatchRow>, sqlx::Error> {
    let sql = format!(
        "SELECT {COLUMNS} FROM merge_batch WHERE active_slot = ? ORDER BY train_position, id"
    );
    with_reader!(reader.into(), |exec| {
        sqlx::query_as(AssertSqlSafe(sql))
            .bind(partition_key)
            .fetch_all(exec)
            .await
    })
}

/// How many batches of `partition_key` are active, and the last place
/// taken (0 when none is), read in the claim's transaction. A plain read:
/// two claimers that read the same places take the same next one, and the
/// unique index lets only one of them have it.
pub async fn places_taken(tx: &mut DbTx, partition_key: &str) -> Result<(i64, i64), sqlx::Error> {
    let sql =
        "SELECT COUNT(*), COALESCE(MAX(train_position), 0) FROM merge_batch WHERE active_slot = ?";
    with_tx!(tx, |conn| {
        sqlx::query_as(sql)
            .bind(partition_key)
            .fetch_one(conn)
            .await
    })
}

/// A new RUNNING batch at `position` of `partition_key`'s train. A
/// duplicate key (or, on InnoDB, a deadlock or lock wait over the index) is
/// the caller's "taken".
pub async fn insert_car(
    tx: &mut DbTx,
    partition_key: &str,
    position: i64,
) -> Result<i64, sqlx::Error> {
    let sql = "INSERT INTO merge_batch (status, partition_key, train_position, project) \
               VALUES ('RUNNING', ?, ?, '')";
    with_tx!(tx, |conn| {
        sqlx::query(sql)
            .bind(partition_key)
            .bind(position)
            .execute(&mut *conn)
            .await
            .map(|done| done.last_insert_id_of())
    })
}

/// Records what a batch is built on, before its branch is made, so every
/// later round (and an MR adopted after a crash) goes by the same footing:
/// guarded by the version, like every batch write; the affected rows.
pub async fn record_footing(
    tx: &mut DbTx,
    batch_id: i64,
    version: i64,
    ahead: Option<i64>,
    base_sha: &str,
) -> Result<u64, sqlx::Error> {
    let sql = format!(
        "UPDATE merge_batch SET ahead_batch_id = ?, base_sha = ?, polls = 0, obstacle = NULL, \
         version = version + 1, updated_at = {} WHERE id = ? AND version = ? AND status = 'RUNNING'",
        dialect::now_ms(tx.backend())
    );
    with_tx!(tx, |conn| {
        sqlx::query(AssertSqlSafe(sql))
            .bind(ahead)
            .bind(base_sha)
            .bind(batch_id)
            .bind(version)
            .execute(conn)
            .await
            .map(|done| done.rows_affected())
    })
}

/// Sends batches back to OPENING to be built again, each on a branch of its
/// own: their MR and footing are forgotten (the next build closes the MR
/// and deletes the branch of the last), their version moves on, so a round
/// of theirs in progress writes nothing, and their start is now (a build
/// has `batch.timeout` of its own). `expected` guards one batch
/// by its version (a batch building itself again); the batches behind a
/// failed one are sent back whatever their version, as what they were
/// built on is gone. The affected rows.
pub async fn send_back(
    tx: &mut DbTx,
    ids: &[i64],
    expected: Option<i64>,
    reason: &str,
) -> Result<u64, sqlx::Error> {
    if ids.is_empty() {
        return Ok(0);
    }
    let guard = if expected.is_some() {
        " AND version = ?"
    } else {
        ""
    };
    let now = dialect::now_ms(tx.backend());
    let sql = format!(
        "UPDATE merge_batch SET phase = 'OPENING', mr_iid = NULL, mr_url = NULL, \
         ahead_batch_id = NULL, base_sha = NULL, head_sha = NULL, rebuilds = rebuilds + 1, \
         opened_at = NULL, passed_at = NULL, merging_at = NULL, \
         polls = 0, obstacle = NULL, message = ?, version = version + 1, updated_at = {now}, \
         created_at = {now} WHERE id IN ({}) AND status = 'RUNNING'{guard}",
        placeholders(ids.len())
    );
    with_tx!(tx, |conn| {
        let mut query = sqlx::query(AssertSqlSafe(sql)).bind(reason);
        for id in ids {
            query = query.bind(*id);
        }
        if let Some(version) = expected {
            query = query.bind(version);
        }
        query.execute(conn).await.map(|done| done.rows_affected())
    })
}

/// How many active batches are ahead of batch `batch_id` in its train,
/// while it is active. Served by the primary key and `uk_merge_batch_train`.
pub async fn batches_ahead(
    reader: impl Into<Reader<'_>>,
    batch_id: i64,
) -> Result<Option<i64>, sqlx::Error> {
    let sql = "SELECT (SELECT COUNT(*) FROM merge_batch a \
               WHERE a.active_slot = b.active_slot AND a.train_position < b.train_position) \
               FROM merge_batch b WHERE b.id = ? AND b.active_slot IS NOT NULL";
    with_reader!(reader.into(), |exec| {
        sqlx::query_scalar(sql)
            .bind(batch_id)
            .fetch_optional(exec)
            .await
    })
}

/// Whether the half `group` of the failed batch `parent` failed in turn:
/// its requests, split off `parent` into `group`, were later split again
/// or failed, in a batch after it. Served by
/// `ix_merge_batch_history_batch` (the half's requests) and
/// `ix_merge_batch_history_operation` (what became of them).
pub async fn half_failed(
    reader: impl Into<Reader<'_>>,
    parent: i64,
    group: &str,
) -> Result<bool, sqlx::Error> {
    let sql = "SELECT COUNT(*) FROM merge_batch_history later \
               WHERE later.operation_id IN (SELECT split.operation_id FROM merge_batch_history split \
               WHERE split.batch_id = ? AND split.event = 'SPLIT' AND split.detail = ?) \
               AND later.batch_id > ? AND later.event IN ('SPLIT', 'FAILED')";
    let failed: i64 = with_reader!(reader.into(), |exec| {
        sqlx::query_scalar(sql)
            .bind(parent)
            .bind(group)
            .bind(parent)
            .fetch_one(exec)
            .await
    })?;
    Ok(failed > 0)
}
