//! The operators' listing of operations: newest first, filtered, with the
//! status each shows, read in page order from an index for every filter.

use sqlx::AssertSqlSafe;

use super::operations::{OperationRow, WithStatus, with_status_select_from};
use super::{Backend, Db, dialect};
use crate::domain::{BindingStatus, StepStatus};
use crate::with_pool;

/// One operation of the operators' listing.
#[derive(Debug)]
pub struct ListedOperation {
    /// The operation.
    pub operation: OperationRow,
    /// The status of the binding it owns, if it still owns one.
    pub status: Option<BindingStatus>,
    /// The operation that holds its relation now, when that is another one.
    pub superseded_by: Option<String>,
}

impl From<WithStatus> for ListedOperation {
    fn from(row: WithStatus) -> Self {
        let superseded_by = row.superseded_by();
        let (operation, status) = row.split();
        Self {
            operation,
            status,
            superseded_by,
        }
    }
}

/// Which operations the operators' listing keeps, by status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusFilter {
    /// Those owning a binding in this status.
    Binding(BindingStatus),
    /// Those whose relation a newer operation took over: they own no
    /// binding, and are listed as superseded, so the filter and the list
    /// agree.
    Superseded,
}

/// Filters for the operators' listing; every field narrows the result.
#[derive(Debug, Clone, Default)]
pub struct OperationFilter {
    /// By the status the listing shows.
    pub status: Option<StatusFilter>,
    /// Current step.
    pub step: Option<StepStatus>,
    /// Last changed at least this long ago (by the database clock).
    pub unchanged_for_ms: Option<i64>,
    /// On this catalog key.
    pub target_key: Option<String>,
    /// For this subject.
    pub subject_id: Option<String>,
    /// Only rows with `id` below this (the cursor of the previous page).
    pub before_id: Option<i64>,
    /// Page size.
    pub limit: u32,
}

/// Up to this many bindings in the status asked for, the listing reads
/// them all and sorts them; beyond it, it walks the operations newest first.
const FEW_IN_STATUS: u32 = 1000;

/// Operations newest first, joined to the status of the binding they own.
/// Filters by step, target and subject read `ix_operation_step_id`,
/// `ix_operation_target_id` and `ix_operation_subject_id` in page order.
///
/// A status filter is on the binding, so no index yields its operations
/// in id order. A rare status (failures, pending approvals: the usual
/// question) is read through `ix_binding_status_updated` and sorted, a
/// bounded sort; a common one (most bindings are VALIDATED) by walking the
/// operations newest first, which finds a page after a few rows. Either
/// join order alone is a cost growing with the data for the other kind.
pub async fn list_operations(
    db: &Db,
    filter: &OperationFilter,
) -> Result<Vec<ListedOperation>, sqlx::Error> {
    let first = dialect::outer_first_join(db.backend());
    let operations = operations_in_page_order(db.backend(), filter);
    let first_join = match filter.status {
        None | Some(StatusFilter::Superseded) => format!("{operations} LEFT JOIN binding b"),
        Some(StatusFilter::Binding(status))
            if bindings_in(db, status, FEW_IN_STATUS).await? < FEW_IN_STATUS =>
        {
            format!("binding b {first} operation o")
        }
        Some(StatusFilter::Binding(_)) => format!("{operations} {first} binding b"),
    };
    let mut sql = format!(
        "{} WHERE 1 = 1",
        with_status_select_from(&first_join, "", "")
    );
    match filter.status {
        Some(StatusFilter::Binding(_)) => sql.push_str(" AND b.status = ?"),
        Some(StatusFilter::Superseded) => sql.push_str(" AND b.id IS NULL"),
        None => {}
    }
    if filter.step.is_some() {
        sql.push_str(" AND o.step_code = ?");
    }
    if filter.unchanged_for_ms.is_some() {
        sql.push_str(&format!(
            " AND o.updated_at < {}",
            dialect::now_minus_ms(db.backend())
        ));
    }
    if filter.target_key.is_some() {
        sql.push_str(" AND o.target_key = ?");
    }
    if filter.subject_id.is_some() {
        sql.push_str(" AND o.subject_id = ?");
    }
    if filter.before_id.is_some() {
        sql.push_str(" AND o.id < ?");
    }
    sql.push_str(" ORDER BY o.id DESC LIMIT ?");

    let rows: Vec<WithStatus> = with_pool!(db, reader, |pool| {
        let mut query = sqlx::query_as(AssertSqlSafe(sql));
        if let Some(StatusFilter::Binding(status)) = filter.status {
            query = query.bind(status.as_str());
        }
        if let Some(step) = filter.step {
            query = query.bind(step.code());
        }
        if let Some(ms) = filter.unchanged_for_ms {
            query = query.bind(ms);
        }
        if let Some(target_key) = &filter.target_key {
            query = query.bind(target_key.as_str());
        }
        if let Some(subject_id) = &filter.subject_id {
            query = query.bind(subject_id.as_str());
        }
        if let Some(before) = filter.before_id {
            query = query.bind(before);
        }
        query.bind(filter.limit).fetch_all(pool).await
    })?;
    Ok(rows.into_iter().map(ListedOperation::from).collect())
}

/// `operation o` as the listing walks it when the operations come first. A
/// step alone is read from `ix_operation_step_id`, which gives its page in
/// id order: MariaDB's optimizer otherwise walks the primary key and
/// filters, as its statistics say a step holds a few percent of the rows,
/// and on a year of data that walk reads scattered pages for every row it
/// skips. A subject or target is more selective, and the optimizer takes
/// its index unprompted.
fn operations_in_page_order(backend: Backend, filter: &OperationFilter) -> &'static str {
    let step_alone =
        filter.step.is_some() && filter.target_key.is_none() && filter.subject_id.is_none();
    match backend {
        Backend::MySql if step_alone => "operation o FORCE INDEX (ix_operation_step_id)",
        _ => "operation o",
    }
}

/// How many bindings are in `status`, counting no further than `up_to`
/// (an index-only read of at most that many entries).
async fn bindings_in(db: &Db, status: BindingStatus, up_to: u32) -> Result<u32, sqlx::Error> {
    let sql = "SELECT COUNT(*) FROM (SELECT 1 FROM binding WHERE status = ? LIMIT ?) found";
    let count: i64 = with_pool!(db, reader, |pool| {
        sqlx::query_scalar(sql)
            .bind(status.as_str())
            .bind(up_to)
            .fetch_one(pool)
            .await
    })?;
    Ok(u32::try_from(count).unwrap_or(up_to))
}
