//! Everything a request's page shows, read in one read-only transaction:
//! the operation with its status, its history, its merge batch and the
//! other operations of its relation. Read separately, a step recorded
//! between two reads made the status, the step and the history disagree.

use chrono::NaiveDateTime;

use super::history::{HistoryRow, list_history};
use super::operations::{OperationPage, get_operation_page};
use super::{Db, DbTx};
use crate::domain::{BindingStatus, OperationKind, StepStatus};
use crate::with_tx;

/// How many operations of the relation the page lists, newest first.
pub const RELATION_LIMIT: u32 = 50;

/// One operation's page, as of one moment.
#[derive(Debug)]
pub struct OperationSnapshot {
    /// The operation, its binding status, batch and successor.
    pub page: OperationPage,
    /// Its history, oldest first.
    pub history: Vec<HistoryRow>,
    /// How many requests its merge batch holds, when it is in one.
    pub batch_members: Option<i64>,
    /// Every operation of the same subject and target (this one included),
    /// newest first, at most [`RELATION_LIMIT`].
    pub relation: Vec<RelatedOperation>,
}

impl OperationSnapshot {
    /// The binding status shown: the binding's while the operation owns it,
    /// else the last one its history recorded.
    pub fn status(&self) -> Option<BindingStatus> {
        self.page.status.or_else(|| {
            self.history
                .iter()
                .rev()
                .find_map(|row| row.to_status.as_deref()?.parse().ok())
        })
    }
}

/// Another attempt at the same relation.
#[derive(Debug, sqlx::FromRow)]
pub struct RelatedOperation {
    /// Its public id.
    pub operation_id: String,
    /// Apply or close.
    #[sqlx(try_from = "String")]
    pub kind: OperationKind,
    /// Its current step.
    #[sqlx(rename = "step_code", try_from = "i32")]
    pub step: StepStatus,
    /// The status of the binding, while it owns it.
    pub binding_status: Option<String>,
    /// The last status its history recorded.
    pub last_status: Option<String>,
    /// Database time of creation.
    pub created_at: NaiveDateTime,
}

/// The snapshot of `operation_id`; `None` when there is no such operation.
pub async fn read_operation_snapshot(
    db: &Db,
    operation_id: &str,
) -> Result<Option<OperationSnapshot>, sqlx::Error> {
    let mut tx = db.begin_read().await?;
    let Some(page) = get_operation_page(&mut tx, operation_id).await? else {
        return Ok(None);
    };
    let history = list_history(&mut tx, operation_id).await?;
    let batch_members = match &page.batch {
        Some(batch) => Some(count_batch_members(&mut tx, batch.id).await?),
        None => None,
    };
    let relation = relation_of(
        &mut tx,
        &page.operation.subject_id,
        &page.operation.target_key,
    )
    .await?;
    tx.commit().await?;
    Ok(Some(OperationSnapshot {
        page,
        history,
        batch_members,
        relation,
    }))
}

async fn count_batch_members(tx: &mut DbTx, batch_id: i64) -> Result<i64, sqlx::Error> {
    let sql = "SELECT COUNT(*) FROM merge_batch_request WHERE batch_id = ?";
    with_tx!(tx, |conn| {
        sqlx::query_scalar(sql)
            .bind(batch_id)
            .fetch_one(&mut *conn)
            .await
    })
}

/// The relation's operations, newest first (`ix_operation_relation`); the
/// last recorded status of each through `ix_operation_history_operation`.
async fn relation_of(
    tx: &mut DbTx,
    subject_id: &str,
    target_key: &str,
) -> Result<Vec<RelatedOperation>, sqlx::Error> {
    let sql = "SELECT o.operation_id, o.kind, o.step_code, b.status AS binding_status, \
               (SELECT h.to_status FROM operation_history h \
                WHERE h.operation_id = o.operation_id AND h.to_status IS NOT NULL \
                ORDER BY h.id DESC LIMIT 1) AS last_status, o.created_at \
               FROM operation o LEFT JOIN binding b ON b.operation_id = o.operation_id \
               WHERE o.subject_id = ? AND o.target_key = ? ORDER BY o.id DESC LIMIT ?";
    with_tx!(tx, |conn| {
        sqlx::query_as(sql)
            .bind(subject_id)
            .bind(target_key)
            .bind(RELATION_LIMIT)
            .fetch_all(&mut *conn)
            .await
    })
}
