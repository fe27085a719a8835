//! Deleting old rows in bounded chunks (the retention job), and the job
//! lease that lets one instance at a time run it (migration 0014).
//!
//! A table's old rows are found through the index on their age: first the
//! newest id old enough (one index read), then chunks in id order up to that
//! id (primary-key ranges, each scanned once per run, kept rows included),
//! each deleted by its ids. A chunk is one short statement: never one large
//! DELETE holding locks on a whole range of a busy table.

use std::time::Duration;

use sqlx::AssertSqlSafe;

use super::{Backend, Db, dialect};
use crate::with_pool;

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// The tables the retention job prunes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pruned {
    /// `event`: only events already relayed to the webhook deliveries.
    Events,
    /// `webhook_delivery`: only finished deliveries.
    WebhookDeliveries,
    /// `callback_receipt`: callbacks' dedupe records.
    CallbackReceipts,
    /// `deploy_report`: each project's highest successful report (the
    /// reconciliation watermark) stays.
    DeployReports,
    /// `operation_history`: only of operations no binding points at any
    /// more (removed, or applied again since).
    OperationHistory,
    /// `audit_log`.
    AuditLog,
}

impl Pruned {
    /// Every pruned table.
    pub const ALL: [Self; 6] = [
        Self::Events,
        Self::WebhookDeliveries,
        Self::CallbackReceipts,
        Self::DeployReports,
        Self::OperationHistory,
        Self::AuditLog,
    ];

    /// The table's name, also the metric label.
    pub fn table(self) -> &'static str {
        match self {
            Self::Events => "event",
            Self::WebhookDeliveries => "webhook_delivery",
            Self::CallbackReceipts => "callback_receipt",
            Self::DeployReports => "deploy_report",
            Self::OperationHistory => "operation_history",
            Self::AuditLog => "audit_log",
        }
    }

    /// The column holding a row's age, each indexed.
    fn age(self) -> &'static str {
        match self {
            Self::WebhookDeliveries => "updated_at",
            Self::CallbackReceipts | Self::DeployReports => "received_at",
            Self::Events | Self::OperationHistory | Self::AuditLog => "created_at",
        }
    }

    /// What else makes a row eligible and may change after it was found:
    /// checked again by the DELETE (a delivery redelivered meanwhile stays).
    fn still_eligible(self) -> &'static str {
        match self {
            Self::Events => "relayed = TRUE",
            Self::WebhookDeliveries => "status IN ('delivered', 'failed', 'silent')",
            Self::CallbackReceipts
            | Self::DeployReports
            | Self::OperationHistory
            | Self::AuditLog => "1 = 1",
        }
    }

    /// The join the condition of [`Self::eligible_for_good`] reads.
    /// History's is an anti-join, one lookup of the unique operation id per
    /// row: MariaDB turns `NOT EXISTS` into a `NOT IN` it materialises by
    /// scanning every binding, for each chunk.
    fn joined(self) -> &'static str {
        match self {
            Self::OperationHistory => {
                "LEFT JOIN binding b ON b.operation_id = operation_history.operation_id"
            }
            Self::Events
            | Self::WebhookDeliveries
            | Self::CallbackReceipts
            | Self::DeployReports
            | Self::AuditLog => "",
        }
    }

    /// What else makes a row eligible and never changes once true: an
    /// operation a binding no longer points at never becomes current
    /// again (a new apply is a new operation), and a report below its
    /// project's watermark stays below it (the watermark only grows).
    fn eligible_for_good(self) -> &'static str {
        match self {
            Self::OperationHistory => "b.id IS NULL",
            Self::DeployReports => {
                "NOT (status = 'success' AND mr_iid >= (SELECT MAX(w.mr_iid) FROM deploy_report w \
                 WHERE w.status = 'success' AND w.project = deploy_report.project))"
            }
            Self::Events | Self::WebhookDeliveries | Self::CallbackReceipts | Self::AuditLog => {
                "1 = 1"
            }
        }
    }
}

/// The newest id of `table` older than `older_than`, through the age index.
pub async fn newest_old_id(
    db: &Db,
    table: Pruned,
    older_than: Duration,
) -> Result<Option<i64>, sqlx::Error> {
    let (name, age) = (table.table(), table.age());
    let sql = format!(
        "SELECT id FROM {name} WHERE {age} < {} ORDER BY {age} DESC, id DESC LIMIT 1",
        dialect::now_minus_ms(db.backend())
    );
    with_pool!(db, reader, |pool| {
        sqlx::query_scalar(AssertSqlSafe(sql))
            .bind(millis(older_than))
            .fetch_optional(pool)
            .await
    })
}

/// Up to `limit` eligible ids of `table` in `(after, up_to]`, in order.
pub async fn eligible_ids(
    db: &Db,
    table: Pruned,
    older_than: Duration,
    (after, up_to): (i64, i64),
    limit: u32,
) -> Result<Vec<i64>, sqlx::Error> {
    // By primary key only: through an index on the conditions (age, status)
    // the database would sort every old row of the table to find the first
    // chunk, a cost that grows with the table. Columns are named with their
    // table: the joined binding has an id, a status and times too.
    let by_primary_key = match db.backend() {
        Backend::Sqlite => "NOT INDEXED",
        Backend::MySql => "FORCE INDEX (PRIMARY)",
    };
    let sql = format!(
        "SELECT {name}.id FROM {name} {by_primary_key} {joined} \
         WHERE {name}.id > ? AND {name}.id <= ? AND {name}.{age} < {cutoff} \
         AND {still} AND {for_good} ORDER BY {name}.id LIMIT ?",
        name = table.table(),
        joined = table.joined(),
        age = table.age(),
        cutoff = dialect::now_minus_ms(db.backend()),
        still = table.still_eligible(),
        for_good = table.eligible_for_good(),
    );
    with_pool!(db, writer, |pool| {
        sqlx::query_scalar(AssertSqlSafe(sql))
            .bind(after)
            .bind(up_to)
            .bind(millis(older_than))
            .bind(limit)
            .fetch_all(pool)
            .await
    })
}

/// Deletes the rows `ids` of `table` that are still eligible; answers how many.
pub async fn delete_ids(db: &Db, table: Pruned, ids: &[i64]) -> Result<u64, sqlx::Error> {
    if ids.is_empty() {
        return Ok(0);
    }
    let listed = ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
    // SQLite, without statistics, would rather find the rows through the
    // index on their status and scan every finished delivery. MySQL's
    // single-table DELETE takes no index hint and looks the ids up by
    // primary key.
    let by_primary_key = match db.backend() {
        Backend::Sqlite => "NOT INDEXED",
        Backend::MySql => "",
    };
    let sql = format!(
        "DELETE FROM {} {by_primary_key} WHERE id IN ({listed}) AND {}",
        table.table(),
        table.still_eligible()
    );
    with_pool!(db, writer, |pool| {
        sqlx::query(AssertSqlSafe(sql))
            .execute(pool)
            .await
            .map(|done| done.rows_affected())
    })
}

/// Takes the lease of background job `job` for `owner` for `lease`, if it
/// is free, expired, or `owner`'s already; `true` when taken.
pub async fn take_job_lease(
    db: &Db,
    job: &str,
    owner: &str,
    lease: Duration,
) -> Result<bool, sqlx::Error> {
    super::leases::take_row_lease(db, super::leases::LeasedRow::Job(job), owner, lease).await
}

/// Gives the lease of `job` back, if `owner` holds it.
pub async fn release_job_lease(db: &Db, job: &str, owner: &str) -> Result<(), sqlx::Error> {
    let sql = "UPDATE job_lease SET lease_owner = NULL, lease_until = NULL \
               WHERE name = ? AND lease_owner = ?";
    with_pool!(db, writer, |pool| {
        sqlx::query(sql)
            .bind(job)
            .bind(owner)
            .execute(pool)
            .await
            .map(drop)
    })
}
