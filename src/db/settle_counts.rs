//! How often a waiting request's batches were settled without an end
//! (`merge_batch_request.settled_count`, migration 0012), so that a batch
//! GitLab never lets finish does not send its members round for ever.

use sqlx::AssertSqlSafe;

use super::{DbTx, IN_LIST_CHUNK, placeholders};
use crate::with_tx;

/// The members of `batch_id` for whom one more settle would reach
/// `max_attempts`: they fail instead of waiting again.
pub async fn exhausted_members(
    tx: &mut DbTx,
    batch_id: i64,
    max_attempts: u32,
) -> Result<Vec<String>, sqlx::Error> {
    let sql = "SELECT operation_id FROM merge_batch_request \
               WHERE batch_id = ? AND settled_count + 1 >= ? ORDER BY operation_id";
    with_tx!(tx, |conn| {
        sqlx::query_scalar(sql)
            .bind(batch_id)
            .bind(i64::from(max_attempts))
            .fetch_all(conn)
            .await
    })
}

/// Counts one more settle for each of `operation_ids`.
pub async fn count_settle(tx: &mut DbTx, operation_ids: &[String]) -> Result<(), sqlx::Error> {
    for chunk in operation_ids.chunks(IN_LIST_CHUNK) {
        let sql = format!(
            "UPDATE merge_batch_request SET settled_count = settled_count + 1 \
             WHERE operation_id IN ({})",
            placeholders(chunk.len())
        );
        with_tx!(tx, |conn| {
            let mut query = sqlx::query(AssertSqlSafe(sql));
            for id in chunk {
                query = query.bind(id.as_str());
            }
            query.execute(&mut *conn).await.map(|_| ())
        })?;
    }
    Ok(())
}
