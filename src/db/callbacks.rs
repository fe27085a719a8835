//! `callback_receipt` and `deploy_report`: what callers told us, once each.

use chrono::NaiveDateTime;

use super::{Db, DbTx};
use crate::{with_pool, with_tx};

/// Who sent a callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallbackSource {
    /// `POST /callbacks/approval`.
    Approval,
    /// `POST /callbacks/deploy`.
    Deploy,
}

impl CallbackSource {
    fn as_str(self) -> &'static str {
        match self {
            Self::Approval => "approval",
            Self::Deploy => "deploy",
        }
    }
}

/// Records a callback id; a unique violation means it was seen before.
pub async fn insert_receipt(
    tx: &mut DbTx,
    source: CallbackSource,
    callback_id: &str,
) -> Result<(), sqlx::Error> {
    let sql = "INSERT INTO callback_receipt (source, callback_id) VALUES (?, ?)";
    with_tx!(tx, |conn| {
        sqlx::query(sql)
            .bind(source.as_str())
            .bind(callback_id)
            .execute(conn)
            .await
            .map(|_| ())
    })
}

/// Appends a deploy report.
pub async fn insert_deploy_report(
    tx: &mut DbTx,
    callback_id: &str,
    mr_iid: i64,
    sha: Option<&str>,
    success: bool,
) -> Result<(), sqlx::Error> {
    let sql = "INSERT INTO deploy_report (callback_id, mr_iid, sha, status) VALUES (?, ?, ?, ?)";
    with_tx!(tx, |conn| {
        sqlx::query(sql)
            .bind(callback_id)
            .bind(mr_iid)
            .bind(sha)
            .bind(if success { "success" } else { "failed" })
            .execute(conn)
            .await
            .map(|_| ())
    })
}

/// Operations of the MR `mr_iid` whose binding is still theirs, in id order
/// (one lock order for every caller), served by `ix_operation_mr_iid`.
pub async fn operations_of_mr(tx: &mut DbTx, mr_iid: i64) -> Result<Vec<String>, sqlx::Error> {
    let sql = "SELECT o.operation_id FROM operation o \
               JOIN binding b ON b.operation_id = o.operation_id WHERE o.mr_iid = ? ORDER BY o.operation_id";
    with_tx!(tx, |conn| {
        sqlx::query_scalar(sql).bind(mr_iid).fetch_all(conn).await
    })
}

/// Whether the deploy pipeline already reported MR `mr_iid` deployed, at or
/// after `since` (a report that beat the MERGED write). Served by
/// `ix_deploy_report_status_mr`.
pub async fn deployed_since(
    db: &Db,
    mr_iid: i64,
    since: NaiveDateTime,
) -> Result<bool, sqlx::Error> {
    let sql = "SELECT COUNT(*) FROM deploy_report \
               WHERE status = 'success' AND mr_iid = ? AND received_at >= ?";
    let count: i64 = with_pool!(db, reader, |pool| {
        sqlx::query_scalar(sql)
            .bind(mr_iid)
            .bind(since)
            .fetch_one(pool)
            .await
    })?;
    Ok(count > 0)
}
