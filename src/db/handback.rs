//! Handing a binding back to the request a withdrawn removal took it from
//! (SPEC §12): every recorded request of a relation took its binding over
//! when it was recorded, so the one a removal replaced is the newest request
//! of the relation recorded before it (`ix_operation_relation`), and the
//! status it left is the removal's first history entry's `from_status`.

use sqlx::AssertSqlSafe;

use super::{DbTx, dialect};
use crate::with_tx;

/// The request `operation_id` took its binding over from, if any.
pub async fn replaced_request(
    tx: &mut DbTx,
    operation_id: &str,
) -> Result<Option<String>, sqlx::Error> {
    let sql = "SELECT p.operation_id FROM operation r JOIN operation p \
               ON p.subject_id = r.subject_id AND p.target_key = r.target_key AND p.id < r.id \
               WHERE r.operation_id = ? ORDER BY p.id DESC LIMIT 1";
    with_tx!(tx, |conn| {
        sqlx::query_scalar(sql)
            .bind(operation_id)
            .fetch_optional(conn)
            .await
    })
}

/// The status the binding had when `operation_id` was recorded (its first
/// history entry's `from_status`).
pub async fn status_replaced(
    tx: &mut DbTx,
    operation_id: &str,
) -> Result<Option<String>, sqlx::Error> {
    let sql =
        "SELECT from_status FROM operation_history WHERE operation_id = ? ORDER BY id LIMIT 1";
    let found: Option<Option<String>> = with_tx!(tx, |conn| {
        sqlx::query_scalar(sql)
            .bind(operation_id)
            .fetch_optional(conn)
            .await
    })?;
    Ok(found.flatten())
}

/// Gives binding `id`, which removal `removal` holds at `expected_version`,
/// back to `owner`; the affected rows. The status is set by the caller's
/// move, and the binding's requester, parameters and expiry are the
/// applicant's already: a removal keeps them.
pub async fn hand_back(
    tx: &mut DbTx,
    id: i64,
    expected_version: i64,
    removal: &str,
    owner: &str,
) -> Result<u64, sqlx::Error> {
    let sql = format!(
        "UPDATE binding SET operation_id = ?, version = version + 1, updated_at = {} \
         WHERE id = ? AND version = ? AND operation_id = ?",
        dialect::now_ms(tx.backend())
    );
    with_tx!(tx, |conn| {
        sqlx::query(AssertSqlSafe(sql))
            .bind(owner)
            .bind(id)
            .bind(expected_version)
            .bind(removal)
            .execute(conn)
            .await
            .map(|done| done.rows_affected())
    })
}
