//! The `binding` table: one row per (subject, target), the status people see.

use chrono::NaiveDateTime;
use sqlx::AssertSqlSafe;

use super::statement::{SqlValue, Statement};
use super::{Db, DbTx, Reader, dialect};
use crate::domain::BindingStatus;
use crate::{with_pool, with_reader, with_tx};

/// A stored binding.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct BindingRow {
    /// Row id; also the cursor for "my bindings".
    pub id: i64,
    /// Who or what the binding is for.
    pub subject_id: String,
    /// The catalog key.
    pub target_key: String,
    /// The operation that currently owns the row.
    pub operation_id: String,
    /// What the requester sees.
    #[sqlx(try_from = "String")]
    pub status: BindingStatus,
    /// Canonical identity of the requester of the current operation.
    pub requested_by: String,
    /// Parameters of the current operation (JSON).
    pub params: String,
    /// When changegate removes the binding.
    pub expires_at: Option<NaiveDateTime>,
    /// Optimistic-concurrency version; grows by one per write, so a status
    /// that leaves and returns is still a change (no ABA).
    pub version: i64,
    /// Database time of creation.
    pub created_at: NaiveDateTime,
    /// Database time of the last write.
    pub updated_at: NaiveDateTime,
}

const COLUMNS: &str = "id, subject_id, target_key, operation_id, status, requested_by, params, \
    expires_at, version, created_at, updated_at";

/// Who owns a binding row now, and in which state: written on insert and reset.
#[derive(Debug, Clone)]
pub struct BindingOwner<'a> {
    /// The owning operation.
    pub operation_id: &'a str,
    /// Its status.
    pub status: BindingStatus,
    /// The operation's requester.
    pub requested_by: &'a str,
    /// The operation's parameters (JSON).
    pub params: &'a str,
    /// The operation's expiry.
    pub expires_at: Option<NaiveDateTime>,
}

/// Inserts the first row of a relation. A second row for the same
/// (subject, target) is a unique violation (I5).
pub async fn insert_binding(
    tx: &mut DbTx,
    subject_id: &str,
    target_key: &str,
    owner: &BindingOwner<'_>,
) -> Result<(), sqlx::Error> {
    insert_bindings_statement(&[(subject_id, target_key, owner.clone())])
        .execute(tx)
        .await
}

/// The INSERT of the first rows of relations, one statement for all; a
/// unique violation on any of them inserts none.
pub fn insert_bindings_statement<'a>(
    rows: &[(&'a str, &'a str, BindingOwner<'a>)],
) -> Statement<'a> {
    Statement {
        sql: format!(
            "INSERT INTO binding (subject_id, target_key, operation_id, status, requested_by, \
             params, expires_at) VALUES {}",
            dialect::value_rows(rows, |_| "(?, ?, ?, ?, ?, ?, ?)".to_owned())
        ),
        values: rows
            .iter()
            .flat_map(|(subject_id, target_key, owner)| {
                [
                    SqlValue::Text(subject_id),
                    SqlValue::Text(target_key),
                    SqlValue::Text(owner.operation_id),
                    SqlValue::Text(owner.status.as_str()),
                    SqlValue::Text(owner.requested_by),
                    SqlValue::Text(owner.params),
                    SqlValue::OptTime(owner.expires_at),
                ]
            })
            .collect(),
    }
}

/// The rows of the given relations that exist, in one read.
pub async fn get_bindings(
    db: &Db,
    relations: &[(&str, &str)],
) -> Result<Vec<BindingRow>, sqlx::Error> {
    let sql = format!(
        "SELECT {COLUMNS} FROM binding WHERE {}",
        vec!["(subject_id = ? AND target_key = ?)"; relations.len()].join(" OR ")
    );
    with_pool!(db, reader, |pool| {
        let mut query = sqlx::query_as(AssertSqlSafe(sql));
        for (subject_id, target_key) in relations {
            query = query.bind(*subject_id).bind(*target_key);
        }
        query.fetch_all(pool).await
    })
}

/// Hands an existing row to a new operation, only if it is still exactly at
/// the `expected_status` and `expected_version` just read (I5, I6). Returns
/// the affected rows: 0 means it changed in between.
pub async fn reset_binding(
    tx: &mut DbTx,
    id: i64,
    expected_status: BindingStatus,
    expected_version: i64,
    owner: &BindingOwner<'_>,
) -> Result<u64, sqlx::Error> {
    let sql = format!(
        "UPDATE binding SET operation_id = ?, status = ?, requested_by = ?, params = ?, \
         expires_at = ?, version = version + 1, updated_at = {} \
         WHERE id = ? AND status = ? AND version = ?",
        dialect::now_ms(tx.backend())
    );
    with_tx!(tx, |conn| {
        sqlx::query(AssertSqlSafe(sql))
            .bind(owner.operation_id)
            .bind(owner.status.as_str())
            .bind(owner.requested_by)
            .bind(owner.params)
            .bind(owner.expires_at)
            .bind(id)
            .bind(expected_status.as_str())
            .bind(expected_version)
            .execute(conn)
            .await
            .map(|done| done.rows_affected())
    })
}

/// Reads the binding an operation owns and locks it (the second lock of the
/// fixed order). `None` when the operation no longer owns any row.
pub async fn lock_binding_of(
    tx: &mut DbTx,
    operation_id: &str,
) -> Result<Option<BindingRow>, sqlx::Error> {
    let sql = format!(
        "SELECT {COLUMNS} FROM binding WHERE operation_id = ?{}",
        dialect::for_update(tx.backend())
    );
    with_tx!(tx, |conn| {
        sqlx::query_as(AssertSqlSafe(sql))
            .bind(operation_id)
            .fetch_optional(conn)
            .await
    })
}

/// Moves a binding to `to` if it is still at `expected_version`; returns the affected rows.
pub async fn update_binding_status(
    tx: &mut DbTx,
    id: i64,
    expected_version: i64,
    to: BindingStatus,
) -> Result<u64, sqlx::Error> {
    let sql = format!(
        "UPDATE binding SET status = ?, version = version + 1, updated_at = {} \
         WHERE id = ? AND version = ?",
        dialect::now_ms(tx.backend())
    );
    with_tx!(tx, |conn| {
        sqlx::query(AssertSqlSafe(sql))
            .bind(to.as_str())
            .bind(id)
            .bind(expected_version)
            .execute(conn)
            .await
            .map(|done| done.rows_affected())
    })
}

/// Gives a binding the parameters its file on the target branch holds (a
/// drift adoption), only while it is `id` at `expected_version`, as just
/// read; returns the affected rows.
pub async fn adopt_binding_params(
    tx: &mut DbTx,
    id: i64,
    expected_version: i64,
    params: &str,
) -> Result<u64, sqlx::Error> {
    let sql = format!(
        "UPDATE binding SET params = ?, version = version + 1, updated_at = {} \
         WHERE id = ? AND version = ?",
        dialect::now_ms(tx.backend())
    );
    with_tx!(tx, |conn| {
        sqlx::query(AssertSqlSafe(sql))
            .bind(params)
            .bind(id)
            .bind(expected_version)
            .execute(conn)
            .await
            .map(|done| done.rows_affected())
    })
}

/// The row of a relation, if any.
pub async fn get_binding(
    reader: impl Into<Reader<'_>>,
    subject_id: &str,
    target_key: &str,
) -> Result<Option<BindingRow>, sqlx::Error> {
    let sql = format!("SELECT {COLUMNS} FROM binding WHERE subject_id = ? AND target_key = ?");
    with_reader!(reader.into(), |exec| {
        sqlx::query_as(AssertSqlSafe(sql))
            .bind(subject_id)
            .bind(target_key)
            .fetch_optional(exec)
            .await
    })
}

/// The row an operation owns, if it still owns one.
pub async fn get_binding_of(
    db: &Db,
    operation_id: &str,
) -> Result<Option<BindingRow>, sqlx::Error> {
    let sql = format!("SELECT {COLUMNS} FROM binding WHERE operation_id = ?");
    with_pool!(db, reader, |pool| {
        sqlx::query_as(AssertSqlSafe(sql))
            .bind(operation_id)
            .fetch_optional(pool)
            .await
    })
}

/// A requester's bindings, newest first, `limit` rows below the cursor
/// `before_id` (the last id of the previous page). Served by `ix_binding_requested_by`.
pub async fn list_bindings_of_requester(
    db: &Db,
    requested_by: &str,
    before_id: Option<i64>,
    limit: u32,
) -> Result<Vec<BindingRow>, sqlx::Error> {
    let sql = format!(
        "SELECT {COLUMNS} FROM binding WHERE requested_by = ? AND id < ? ORDER BY id DESC LIMIT ?"
    );
    with_pool!(db, reader, |pool| {
        sqlx::query_as(AssertSqlSafe(sql))
            .bind(requested_by)
            .bind(before_id.unwrap_or(i64::MAX))
            .bind(limit)
            .fetch_all(pool)
            .await
    })
}

/// Relations (subject, target) of VALIDATED bindings whose expiry has passed
/// by the database clock. Served by `ix_binding_status_updated` (status).
pub async fn list_expired(db: &Db, limit: u32) -> Result<Vec<(String, String)>, sqlx::Error> {
    let sql = format!(
        "SELECT subject_id, target_key FROM binding WHERE status = 'VALIDATED' \
         AND expires_at IS NOT NULL AND expires_at < {} ORDER BY expires_at LIMIT ?",
        dialect::now_ms(db.backend())
    );
    with_pool!(db, reader, |pool| {
        sqlx::query_as(AssertSqlSafe(sql))
            .bind(limit)
            .fetch_all(pool)
            .await
    })
}
