//! Members that left a running batch after it was claimed (an operator
//! force-failed one, say): they stay in `merge_batch_request` with the
//! batch's id until their file is out of the batch's MR, which is how the
//! next round finds them, and leave it then.

use sqlx::AssertSqlSafe;

use super::{Db, DbTx, IN_LIST_CHUNK, placeholders};
use crate::{with_pool, with_tx};

/// The members of `batch_id` whose binding is no longer in the merge
/// queue's live set (or whose binding has moved on to another operation),
/// in id order.
pub async fn departed_members(db: &Db, batch_id: i64) -> Result<Vec<String>, sqlx::Error> {
    let live = super::status_list(crate::domain::IN_MERGE_QUEUE);
    let sql = format!(
        "SELECT r.operation_id FROM merge_batch_request r \
         LEFT JOIN binding b ON b.operation_id = r.operation_id \
         WHERE r.batch_id = ? AND (b.status IS NULL OR b.status NOT IN ({live})) \
         ORDER BY r.operation_id"
    );
    with_pool!(db, reader, |pool| {
        sqlx::query_scalar(AssertSqlSafe(sql))
            .bind(batch_id)
            .fetch_all(pool)
            .await
    })
}

/// Takes `operation_ids` out of `batch_id` for good.
pub async fn leave_batch(
    tx: &mut DbTx,
    batch_id: i64,
    operation_ids: &[String],
) -> Result<(), sqlx::Error> {
    for chunk in operation_ids.chunks(IN_LIST_CHUNK) {
        let sql = format!(
            "DELETE FROM merge_batch_request WHERE batch_id = ? AND operation_id IN ({})",
            placeholders(chunk.len())
        );
        with_tx!(tx, |conn| {
            let mut query = sqlx::query(AssertSqlSafe(sql)).bind(batch_id);
            for id in chunk {
                query = query.bind(id.as_str());
            }
            query.execute(&mut *conn).await.map(|_| ())
        })?;
    }
    Ok(())
}
