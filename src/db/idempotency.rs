//! `idempotency_record`: which operation a request key created.

use sqlx::AssertSqlSafe;

use super::statement::{SqlValue, Statement};
use super::{Backend, Db, DbTx, dialect};
use crate::with_pool;

/// A live (unexpired) record.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct IdempotencyRow {
    /// Row id.
    pub id: i64,
    /// SHA-256 (hex) of the canonical request.
    pub request_hash: String,
    /// The operation the key created.
    pub operation_id: String,
}

/// A key to claim in the transaction that creates the operation.
#[derive(Debug, Clone)]
pub struct NewIdempotency<'a> {
    /// The canonical identity that owns the key.
    pub requester: &'a str,
    /// The key.
    pub key: &'a str,
    /// SHA-256 (hex) of the canonical request.
    pub request_hash: &'a str,
    /// The operation being created.
    pub operation_id: &'a str,
    /// Lifetime in milliseconds from the database's now.
    pub ttl_ms: i64,
}

/// Claims a key; a unique violation means another request holds it.
pub async fn insert_idempotency(
    tx: &mut DbTx,
    new: &NewIdempotency<'_>,
) -> Result<(), sqlx::Error> {
    insert_idempotency_statement(tx.backend(), std::slice::from_ref(new))
        .execute(tx)
        .await
}

/// The INSERT of keys, one statement for all; a unique violation on
/// any of them inserts none.
pub fn insert_idempotency_statement<'a>(
    backend: Backend,
    rows: &[NewIdempotency<'a>],
) -> Statement<'a> {
    let expires_at = dialect::now_plus_ms(backend);
    Statement {
        sql: format!(
            "INSERT INTO idempotency_record (requester, idempotency_key, request_hash, \
             operation_id, expires_at) VALUES {}",
            dialect::value_rows(rows, |_| format!("(?, ?, ?, ?, {expires_at})"))
        ),
        values: rows
            .iter()
            .flat_map(|new| {
                [
                    SqlValue::Text(new.requester),
                    SqlValue::Text(new.key),
                    SqlValue::Text(new.request_hash),
                    SqlValue::Text(new.operation_id),
                    SqlValue::Int(new.ttl_ms),
                ]
            })
            .collect(),
    }
}

/// The unexpired record of a key, if any.
pub async fn get_idempotency(
    db: &Db,
    requester: &str,
    key: &str,
) -> Result<Option<IdempotencyRow>, sqlx::Error> {
    let sql = format!(
        "SELECT id, request_hash, operation_id FROM idempotency_record \
         WHERE requester = ? AND idempotency_key = ? AND expires_at > {}",
        dialect::now_ms(db.backend())
    );
    with_pool!(db, reader, |pool| {
        sqlx::query_as(AssertSqlSafe(sql))
            .bind(requester)
            .bind(key)
            .fetch_optional(pool)
            .await
    })
}

/// Deletes an expired record of a key so the key can be claimed again.
pub async fn delete_expired_key(db: &Db, requester: &str, key: &str) -> Result<u64, sqlx::Error> {
    let sql = format!(
        "DELETE FROM idempotency_record WHERE requester = ? AND idempotency_key = ? AND expires_at <= {}",
        dialect::now_ms(db.backend())
    );
    with_pool!(db, writer, |pool| {
        sqlx::query(AssertSqlSafe(sql))
            .bind(requester)
            .bind(key)
            .execute(pool)
            .await
            .map(|done| done.rows_affected())
    })
}

/// Deletes up to `batch` expired records, using `ix_idempotency_expires`.
pub async fn delete_expired(db: &Db, batch: u32) -> Result<u64, sqlx::Error> {
    let sql = dialect::delete_expired(db.backend(), "idempotency_record", "expires_at");
    with_pool!(db, writer, |pool| {
        sqlx::query(AssertSqlSafe(sql))
            .bind(batch)
            .execute(pool)
            .await
            .map(|done| done.rows_affected())
    })
}
