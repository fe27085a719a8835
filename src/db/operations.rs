//! The `operation` table: one row per attempt, with its fine-grained step.

use chrono::NaiveDateTime;
use sqlx::AssertSqlSafe;

use super::batches::{InBatch, shown_number};
use super::outage::OutageClock;
use super::statement::{SqlValue, Statement};
use super::{Backend, Db, DbTx, Reader, dialect};
use crate::config::resolve::FlowOrder;
use crate::domain::{BindingStatus, OperationKind, StepStatus};
use crate::{with_pool, with_reader, with_tx};

/// A stored operation.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct OperationRow {
    /// Row id; also the cursor for operator listings.
    pub id: i64,
    /// The public id (UUID).
    pub operation_id: String,
    /// Apply or close.
    #[sqlx(try_from = "String")]
    pub kind: OperationKind,
    /// Who or what the binding is for.
    pub subject_id: String,
    /// The catalog key.
    pub target_key: String,
    /// The canonical identity that submitted it.
    pub requested_by: String,
    /// The order fixed when it was created.
    #[sqlx(try_from = "String")]
    pub flow_order: FlowOrder,
    /// The current step.
    #[sqlx(rename = "step_code", try_from = "i32")]
    pub step: StepStatus,
    /// The last step's explanation, if any.
    pub message: Option<String>,
    /// What keeps it from progressing right now, if anything (migration 0009).
    pub obstacle: Option<String>,
    /// Since when its step cannot connect to GitLab (migration 0012).
    pub unreachable_since: Option<NaiveDateTime>,
    /// Requested parameters (JSON).
    pub params: String,
    /// The requester's reason.
    pub reason: String,
    /// When the binding should be removed by changegate.
    pub expires_at: Option<NaiveDateTime>,
    /// The Merge Request, once there is one.
    pub mr_iid: Option<i64>,
    /// Its web address.
    pub mr_url: Option<String>,
    /// Optimistic-concurrency version; grows by one per write.
    pub version: i64,
    /// When a worker should next run its step; `None` while it waits for
    /// something outside or is finished.
    pub due_at: Option<NaiveDateTime>,
    /// Polls of the current step so far.
    pub attempts: i32,
    /// Database time of creation.
    pub created_at: NaiveDateTime,
    /// Database time of the last write.
    pub updated_at: NaiveDateTime,
    /// The W3C traceparent of the request that submitted it, when traces
    /// were exported then (migration 0015).
    pub trace_parent: Option<String>,
    /// The requester's earliest time for it to land (migration 0022).
    pub not_before: Option<NaiveDateTime>,
    /// An operator marked it urgent (migration 0022).
    pub urgent: bool,
    /// The request it reverts (migration 0022).
    pub revert_of: Option<String>,
    /// An operator's restore of a drifted file (migration 0023).
    pub restores_drift: bool,
}

const COLUMNS: &str = "id, operation_id, kind, subject_id, target_key, requested_by, flow_order, \
    step_code, message, obstacle, unreachable_since, params, reason, expires_at, mr_iid, mr_url, version, due_at, attempts, \
    created_at, updated_at, trace_parent, not_before, urgent, revert_of, restores_drift";

/// What a new operation row holds.
#[derive(Debug, Clone)]
pub struct NewOperation<'a> {
    /// The public id.
    pub operation_id: &'a str,
    /// Apply or close.
    pub kind: OperationKind,
    /// Subject.
    pub subject_id: &'a str,
    /// Target.
    pub target_key: &'a str,
    /// Canonical identity of the requester.
    pub requested_by: &'a str,
    /// Flow order at creation.
    pub flow_order: FlowOrder,
    /// First step.
    pub step: StepStatus,
    /// Parameters (JSON text).
    pub params: &'a str,
    /// Reason.
    pub reason: &'a str,
    /// Expiry.
    pub expires_at: Option<NaiveDateTime>,
    /// The submitting request's traceparent, if traces are exported.
    pub trace_parent: Option<&'a str>,
    /// The requester's earliest time for it to land.
    pub not_before: Option<NaiveDateTime>,
    /// Submitted urgent (an operator's revert).
    pub urgent: bool,
    /// The request it reverts.
    pub revert_of: Option<&'a str>,
    /// An operator's restore of a drifted file.
    pub restores_drift: bool,
}

/// Inserts an operation at version 1. A duplicate `operation_id` is a unique violation.
pub async fn insert_operation(tx: &mut DbTx, new: &NewOperation<'_>) -> Result<(), sqlx::Error> {
    insert_operations_statement(tx.backend(), std::slice::from_ref(new))
        .execute(tx)
        .await
}

/// The INSERT of operations, one statement for all; a unique violation on
/// any of them inserts none.
pub fn insert_operations_statement<'a>(
    backend: Backend,
    rows: &[NewOperation<'a>],
) -> Statement<'a> {
    Statement {
        sql: format!(
            "INSERT INTO operation (operation_id, kind, subject_id, target_key, requested_by, \
             flow_order, step_code, params, reason, expires_at, trace_parent, not_before, urgent, \
             revert_of, restores_drift, due_at) VALUES {}",
            dialect::value_rows(rows, |new| format!(
                "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, {})",
                due_at_of(backend, new.step)
            ))
        ),
        values: rows
            .iter()
            .flat_map(|new| {
                [
                    SqlValue::Text(new.operation_id),
                    SqlValue::Text(new.kind.as_str()),
                    SqlValue::Text(new.subject_id),
                    SqlValue::Text(new.target_key),
                    SqlValue::Text(new.requested_by),
                    SqlValue::Text(new.flow_order.as_str()),
                    SqlValue::Int(new.step.code().into()),
                    SqlValue::Text(new.params),
                    SqlValue::Text(new.reason),
                    SqlValue::OptTime(new.expires_at),
                    SqlValue::OptText(new.trace_parent),
                    SqlValue::OptTime(new.not_before),
                    SqlValue::Int(i64::from(new.urgent)),
                    SqlValue::OptText(new.revert_of),
                    SqlValue::Int(i64::from(new.restores_drift)),
                ]
            })
            .collect(),
    }
}

/// Reads an operation and locks it for the transaction (the first lock of
/// the fixed order: operation, then binding).
pub async fn lock_operation(
    tx: &mut DbTx,
    operation_id: &str,
) -> Result<Option<OperationRow>, sqlx::Error> {
    let sql = format!(
        "SELECT {COLUMNS} FROM operation WHERE operation_id = ?{}",
        dialect::for_update(tx.backend())
    );
    with_tx!(tx, |conn| {
        sqlx::query_as(AssertSqlSafe(sql))
            .bind(operation_id)
            .fetch_optional(conn)
            .await
    })
}

/// The SQL value of `due_at` for an operation that reaches `step`: the
/// database's now plus the step's pause, or NULL when nothing is due.
fn due_at_of(backend: Backend, step: StepStatus) -> String {
    match step.resume_after() {
        None => "NULL".to_owned(),
        Some(pause) => dialect::now_plus_ms(backend).replace('?', &pause.as_millis().to_string()),
    }
}

/// Moves an operation to `step` if it is still at `expected_version`, and
/// makes it due as the step says (its polls start again from zero).
/// Returns the affected rows: 1 on success, 0 when another writer got there first.
pub async fn update_operation_step(
    tx: &mut DbTx,
    operation_id: &str,
    expected_version: i64,
    step: StepStatus,
    message: Option<&str>,
) -> Result<u64, sqlx::Error> {
    let sql = format!(
        "UPDATE operation SET step_code = ?, message = ?, obstacle = NULL, unreachable_since = NULL, \
         version = version + 1, \
         updated_at = {}, due_at = {}, attempts = 0 WHERE operation_id = ? AND version = ?",
        dialect::now_ms(tx.backend()),
        due_at_of(tx.backend(), step)
    );
    with_tx!(tx, |conn| {
        sqlx::query(AssertSqlSafe(sql))
            .bind(step.code())
            .bind(message)
            .bind(operation_id)
            .bind(expected_version)
            .execute(conn)
            .await
            .map(|done| done.rows_affected())
    })
}

/// Records (or, with `None`, clears) what keeps an operation from
/// progressing, and moves its outage clock. Not versioned: it describes the
/// moment, not the step, and every step change clears both anyway.
pub async fn set_operation_obstacle(
    db: &Db,
    operation_id: &str,
    obstacle: Option<&str>,
    clock: OutageClock,
) -> Result<(), sqlx::Error> {
    let sql = format!(
        "UPDATE operation SET obstacle = ?, {} WHERE operation_id = ?",
        clock.assignment(db.backend())
    );
    with_pool!(db, writer, |pool| {
        sqlx::query(AssertSqlSafe(sql))
            .bind(obstacle)
            .bind(operation_id)
            .execute(pool)
            .await
            .map(|_| ())
    })
}

/// One operation by its public id.
pub async fn get_operation(
    db: &Db,
    operation_id: &str,
) -> Result<Option<OperationRow>, sqlx::Error> {
    let sql = format!("SELECT {COLUMNS} FROM operation WHERE operation_id = ?");
    with_pool!(db, reader, |pool| {
        sqlx::query_as(AssertSqlSafe(sql))
            .bind(operation_id)
            .fetch_optional(pool)
            .await
    })
}

/// One operation, the status of the binding it owns (if it still owns one)
/// and that binding's requester, in a single round trip.
pub async fn get_operation_with_status(
    db: &Db,
    operation_id: &str,
) -> Result<Option<(OperationRow, Option<BindingStatus>, Option<String>)>, sqlx::Error> {
    let row = get_with_status(db, operation_id).await?;
    Ok(row.map(|row| {
        let owner = row.binding_owner.clone();
        let (operation, status) = row.split();
        (operation, status, owner)
    }))
}

/// What an operation's status answer shows: the operation, its binding's
/// status and requester, and the merge batch it is in.
#[derive(Debug)]
pub struct OperationPage {
    /// The operation.
    pub operation: OperationRow,
    /// The status of the binding it owns, if it still owns one.
    pub status: Option<BindingStatus>,
    /// That binding's requester.
    pub binding_owner: Option<String>,
    /// The merge batch it is (or was last) in, if any.
    pub batch: Option<InBatch>,
    /// The operation that holds its relation now, when that is another one.
    pub superseded_by: Option<String>,
}

/// [`get_operation_with_status`] and the operation's merge batch, still in
/// a single round trip (the status answer is the most frequent read).
pub async fn get_operation_page(
    reader: impl Into<Reader<'_>>,
    operation_id: &str,
) -> Result<Option<OperationPage>, sqlx::Error> {
    let sql = format!("{} WHERE o.operation_id = ?", page_select());
    let row: Option<WithStatus> = with_reader!(reader.into(), |exec| {
        sqlx::query_as(AssertSqlSafe(sql))
            .bind(operation_id)
            .fetch_optional(exec)
            .await
    })?;
    Ok(row.map(WithStatus::into_page))
}

/// The select of [`get_operation_page`]: the status columns and the
/// operation's merge batch.
fn page_select() -> String {
    with_status_select(
        ", r.batch_id AS batch_id, mb.number AS batch_number, mb.obstacle AS batch_obstacle",
        " LEFT JOIN merge_batch_request r ON r.operation_id = o.operation_id \
         LEFT JOIN merge_batch mb ON mb.id = r.batch_id",
    )
}

pub(super) fn prefixed_columns() -> String {
    COLUMNS
        .split(", ")
        .map(|column| format!("o.{column}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// An operation with the status and requester of the binding it owns
/// (`b`), and the operation holding its relation now (`cur`: itself, or the
/// newer one that took the relation over); `extra_*` add columns and joins.
fn with_status_select(extra_columns: &str, extra_join: &str) -> String {
    with_status_select_from("operation o LEFT JOIN binding b", extra_columns, extra_join)
}

/// [`with_status_select`] with the first join (of `operation o` and
/// `binding b`, on the binding the operation owns) spelled by the caller,
/// which may fix its order.
pub(super) fn with_status_select_from(
    first_join: &str,
    extra_columns: &str,
    extra_join: &str,
) -> String {
    format!(
        "SELECT {}, b.status AS binding_status, b.requested_by AS binding_owner, \
         cur.operation_id AS current_operation_id{extra_columns} \
         FROM {first_join} ON b.operation_id = o.operation_id \
         LEFT JOIN binding cur ON cur.subject_id = o.subject_id AND cur.target_key = o.target_key\
         {extra_join}",
        prefixed_columns()
    )
}

async fn get_with_status(db: &Db, operation_id: &str) -> Result<Option<WithStatus>, sqlx::Error> {
    let sql = format!("{} WHERE o.operation_id = ?", with_status_select("", ""));
    with_pool!(db, reader, |pool| {
        sqlx::query_as(AssertSqlSafe(sql))
            .bind(operation_id)
            .fetch_optional(pool)
            .await
    })
}

/// An operation row joined with its binding's status and requester, and,
/// when asked for, its merge batch.
#[derive(sqlx::FromRow)]
pub(super) struct WithStatus {
    #[sqlx(flatten)]
    operation: OperationRow,
    binding_status: Option<String>,
    binding_owner: Option<String>,
    current_operation_id: Option<String>,
    #[sqlx(default)]
    batch_id: Option<i64>,
    #[sqlx(default)]
    batch_number: Option<i64>,
    #[sqlx(default)]
    batch_obstacle: Option<String>,
}

impl WithStatus {
    pub(super) fn split(self) -> (OperationRow, Option<BindingStatus>) {
        let status = self.binding_status.and_then(|s| s.parse().ok());
        (self.operation, status)
    }

    /// The newer operation holding the relation, when this one no longer
    /// owns its binding.
    pub(super) fn superseded_by(&self) -> Option<String> {
        self.current_operation_id.clone().filter(|current| {
            self.binding_status.is_none() && *current != self.operation.operation_id
        })
    }

    fn into_page(self) -> OperationPage {
        let binding_owner = self.binding_owner.clone();
        let batch = self.batch_id.map(|id| InBatch {
            id,
            number: shown_number(id, self.batch_number),
            obstacle: self.batch_obstacle.clone(),
        });
        let superseded_by = self.superseded_by();
        let (operation, status) = self.split();
        OperationPage {
            operation,
            status,
            binding_owner,
            batch,
            superseded_by,
        }
    }
}

/// Records the operation's Merge Request if it is still at
/// `expected_version`; returns the affected rows (the version grows by one).
pub async fn record_merge_request(
    db: &Db,
    operation_id: &str,
    expected_version: i64,
    iid: i64,
    url: Option<&str>,
) -> Result<u64, sqlx::Error> {
    let sql = format!(
        "UPDATE operation SET mr_iid = ?, mr_url = ?, version = version + 1, updated_at = {} \
         WHERE operation_id = ? AND version = ?",
        dialect::now_ms(db.backend())
    );
    with_pool!(db, writer, |pool| {
        sqlx::query(AssertSqlSafe(sql))
            .bind(iid)
            .bind(url)
            .bind(operation_id)
            .bind(expected_version)
            .execute(pool)
            .await
            .map(|done| done.rows_affected())
    })
}

/// The operations of `operation_ids`, in one query per chunk of ids.
pub async fn operations_by_ids(
    db: &Db,
    operation_ids: &[String],
) -> Result<Vec<OperationRow>, sqlx::Error> {
    let mut rows = Vec::with_capacity(operation_ids.len());
    for chunk in operation_ids.chunks(super::IN_LIST_CHUNK) {
        let sql = format!(
            "SELECT {COLUMNS} FROM operation WHERE operation_id IN ({}) ORDER BY operation_id",
            vec!["?"; chunk.len()].join(", ")
        );
        let found: Vec<OperationRow> = with_pool!(db, reader, |pool| {
            let mut query = sqlx::query_as(AssertSqlSafe(sql));
            for id in chunk {
                query = query.bind(id.as_str());
            }
            query.fetch_all(pool).await
        })?;
        rows.extend(found);
    }
    Ok(rows)
}

/// The members of batch `batch_id` that were submitted in a traced request,
/// with that request's traceparent, for the links of the batch's spans.
pub async fn member_trace_parents(
    db: &Db,
    batch_id: i64,
) -> Result<Vec<(String, String)>, sqlx::Error> {
    let sql = "SELECT o.operation_id, o.trace_parent FROM merge_batch_request r \
               JOIN operation o ON o.operation_id = r.operation_id \
               WHERE r.batch_id = ? AND o.trace_parent IS NOT NULL ORDER BY o.operation_id";
    with_pool!(db, reader, |pool| {
        sqlx::query_as(sql).bind(batch_id).fetch_all(pool).await
    })
}

/// Marks an operation urgent, in the caller's transaction; `false` when it
/// was already.
pub async fn mark_urgent(tx: &mut DbTx, operation_id: &str) -> Result<bool, sqlx::Error> {
    let sql = "UPDATE operation SET urgent = TRUE WHERE operation_id = ? AND urgent = FALSE";
    with_tx!(tx, |conn| {
        sqlx::query(sql)
            .bind(operation_id)
            .execute(conn)
            .await
            .map(|done| done.rows_affected() == 1)
    })
}

/// The newest request that reverts `operation_id`, if any. Served by
/// `ix_operation_revert_of`.
pub async fn reverted_by(db: &Db, operation_id: &str) -> Result<Option<String>, sqlx::Error> {
    let sql = "SELECT operation_id FROM operation WHERE revert_of = ? ORDER BY id DESC LIMIT 1";
    with_pool!(db, reader, |pool| {
        sqlx::query_scalar(sql)
            .bind(operation_id)
            .fetch_optional(pool)
            .await
    })
}

/// The newest revert of each of `operation_ids` that has one, in one query
/// per chunk of ids. Served by `ix_operation_revert_of`.
pub async fn reverts_of(
    db: &Db,
    operation_ids: &[&str],
) -> Result<std::collections::HashMap<String, String>, sqlx::Error> {
    let mut reverts = std::collections::HashMap::new();
    for chunk in operation_ids.chunks(super::IN_LIST_CHUNK) {
        let sql = format!(
            "SELECT revert_of, operation_id FROM operation WHERE revert_of IN ({}) ORDER BY id",
            vec!["?"; chunk.len()].join(", ")
        );
        let found: Vec<(String, String)> = with_pool!(db, reader, |pool| {
            let mut query = sqlx::query_as(AssertSqlSafe(sql));
            for id in chunk {
                query = query.bind(*id);
            }
            query.fetch_all(pool).await
        })?;
        // Oldest first: the newest revert of each stays.
        reverts.extend(found);
    }
    Ok(reverts)
}
