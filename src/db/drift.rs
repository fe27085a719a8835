//! What the drift job reads and records (SPEC §13, migration 0023): the
//! operations whose renderings the live bindings are, the relations with a
//! request in flight, and the findings of the last pass. Each query names
//! the index it uses.

use std::collections::HashMap;

use chrono::NaiveDateTime;
use sqlx::AssertSqlSafe;

use super::operations::{OperationRow, prefixed_columns};
use super::{Db, DbTx, Reader, dialect};
use crate::{with_pool, with_reader, with_tx};

/// The binding statuses whose file changegate believes is on the target
/// branch, as the operation that owns the binding rendered it.
const LIVE: &str = "('VALIDATED', 'MERGED')";
/// The binding statuses whose file is expected to move: a request is in
/// flight, or stopped half-way and waits for an operator.
const MOVING: &str = "('APPROVAL_SENDING', 'APPROVAL_SENT', 'MR_CREATING', 'MR_CREATED', \
    'MERGING', 'CLOSING', 'CREATE_FAILED', 'HANDLE_FAILED', 'CLOSE_FAILED')";

/// The operation that owns each live binding (its rendering is what the
/// branch should hold). A scan of `binding`, then the operation's unique key.
pub async fn live_operations(
    reader: impl Into<Reader<'_>>,
) -> Result<Vec<OperationRow>, sqlx::Error> {
    let sql = format!(
        "SELECT {} FROM binding b JOIN operation o ON o.operation_id = b.operation_id \
         WHERE b.status IN {LIVE}",
        prefixed_columns()
    );
    with_reader!(reader.into(), |exec| {
        sqlx::query_as(AssertSqlSafe(sql)).fetch_all(exec).await
    })
}

/// `(subject, target, moving)` of every binding that is not live, in one
/// scan of `binding`: `moving` when its file is expected to move (a request
/// in flight, or one stopped half-way that waits for an operator), else
/// changegate believes it absent (closed, refused, abandoned).
pub async fn other_relations(
    reader: impl Into<Reader<'_>>,
) -> Result<Vec<(String, String, bool)>, sqlx::Error> {
    let sql = format!(
        "SELECT subject_id, target_key, CASE WHEN status IN {MOVING} THEN 1 ELSE 0 END \
         FROM binding WHERE status NOT IN {LIVE}"
    );
    let rows: Vec<(String, String, i64)> = with_reader!(reader.into(), |exec| {
        sqlx::query_as(AssertSqlSafe(sql)).fetch_all(exec).await
    })?;
    Ok(rows
        .into_iter()
        .map(|(subject, target, moving)| (subject, target, moving != 0))
        .collect())
}

/// Each binding's status and owning operation, by `(subject, target)`.
pub type BindingStates = HashMap<(String, String), (String, String)>;

/// Each binding's status and owning operation, by `(subject, target)`, in
/// one scan of `binding`: what a pass compares against is read before it
/// lists the branch, and this again after, so that a relation that moved
/// meanwhile is left to the next pass.
pub async fn binding_states(reader: impl Into<Reader<'_>>) -> Result<BindingStates, sqlx::Error> {
    let sql = "SELECT subject_id, target_key, status, operation_id FROM binding";
    let rows: Vec<(String, String, String, String)> = with_reader!(reader.into(), |exec| {
        sqlx::query_as(sql).fetch_all(exec).await
    })?;
    Ok(rows
        .into_iter()
        .map(|(subject, target, status, operation)| ((subject, target), (status, operation)))
        .collect())
}

/// One file where the target branch and changegate disagree.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct FindingRow {
    /// Row id.
    pub id: i64,
    /// The GitLab project.
    pub project: String,
    /// The file.
    pub path: String,
    /// `CHANGED`, `MISSING` or `UNEXPECTED`.
    pub kind: String,
    /// The binding's target, when a binding names the file.
    pub target_key: Option<String>,
    /// The binding's subject, when a binding names the file.
    pub subject_id: Option<String>,
    /// What the branch holds (none: missing).
    pub blob_id: Option<String>,
    /// The commit that last changed the file when it was first seen.
    pub since_commit: Option<String>,
    /// When a pass first saw it.
    pub since: NaiveDateTime,
    /// When a pass last saw it.
    pub detected_at: NaiveDateTime,
}

/// A finding of one pass, to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewFinding {
    /// The file.
    pub path: String,
    /// `CHANGED`, `MISSING` or `UNEXPECTED`.
    pub kind: &'static str,
    /// The binding's target, when a binding names the file.
    pub target_key: Option<String>,
    /// The binding's subject, when a binding names the file.
    pub subject_id: Option<String>,
    /// What the branch holds (none: missing).
    pub blob_id: Option<String>,
}

const COLUMNS: &str =
    "id, project, path, kind, target_key, subject_id, blob_id, since_commit, since, detected_at";

/// Every finding, oldest first. Served by the primary key.
pub async fn list_findings(db: &Db) -> Result<Vec<FindingRow>, sqlx::Error> {
    let sql = format!("SELECT {COLUMNS} FROM drift_finding ORDER BY id");
    with_pool!(db, reader, |pool| {
        sqlx::query_as(AssertSqlSafe(sql)).fetch_all(pool).await
    })
}

/// The findings of `project`, by path, in the caller's transaction (the
/// pass that replaces them holds the job lease: no other writer).
pub async fn findings_of(
    tx: &mut DbTx,
    project: &str,
) -> Result<HashMap<String, FindingRow>, sqlx::Error> {
    let sql = format!("SELECT {COLUMNS} FROM drift_finding WHERE project = ?");
    let rows: Vec<FindingRow> = with_tx!(tx, |conn| {
        sqlx::query_as(AssertSqlSafe(sql))
            .bind(project)
            .fetch_all(conn)
            .await
    })?;
    Ok(rows
        .into_iter()
        .map(|row| (row.path.clone(), row))
        .collect())
}

/// Records a finding seen for the first time.
pub async fn insert_finding(
    tx: &mut DbTx,
    project: &str,
    finding: &NewFinding,
) -> Result<(), sqlx::Error> {
    let sql = "INSERT INTO drift_finding (project, path, kind, target_key, subject_id, blob_id) \
               VALUES (?, ?, ?, ?, ?, ?)";
    with_tx!(tx, |conn| {
        sqlx::query(sql)
            .bind(project)
            .bind(&finding.path)
            .bind(finding.kind)
            .bind(&finding.target_key)
            .bind(&finding.subject_id)
            .bind(&finding.blob_id)
            .execute(conn)
            .await
            .map(drop)
    })
}

/// A finding seen again: its kind and blob as now, seen now.
pub async fn refresh_finding(
    tx: &mut DbTx,
    id: i64,
    finding: &NewFinding,
) -> Result<(), sqlx::Error> {
    let sql = format!(
        "UPDATE drift_finding SET kind = ?, target_key = ?, subject_id = ?, blob_id = ?, \
         detected_at = {} WHERE id = ?",
        dialect::now_ms(tx.backend())
    );
    with_tx!(tx, |conn| {
        sqlx::query(AssertSqlSafe(sql))
            .bind(finding.kind)
            .bind(&finding.target_key)
            .bind(&finding.subject_id)
            .bind(&finding.blob_id)
            .bind(id)
            .execute(conn)
            .await
            .map(drop)
    })
}

/// Records the commit that last changed a finding's file.
pub async fn set_since_commit(
    db: &Db,
    project: &str,
    path: &str,
    sha: &str,
) -> Result<(), sqlx::Error> {
    let sql = "UPDATE drift_finding SET since_commit = ? WHERE project = ? AND path = ?";
    with_pool!(db, writer, |pool| {
        sqlx::query(sql)
            .bind(sha)
            .bind(project)
            .bind(path)
            .execute(pool)
            .await
            .map(drop)
    })
}

/// The finding of the binding of `(subject, target)`'s file, if any.
/// Served by `ix_drift_finding_binding`.
pub async fn finding_of_binding(
    db: &Db,
    subject_id: &str,
    target_key: &str,
) -> Result<Option<FindingRow>, sqlx::Error> {
    let sql = format!(
        "SELECT {COLUMNS} FROM drift_finding WHERE target_key = ? AND subject_id = ? LIMIT 1"
    );
    with_pool!(db, reader, |pool| {
        sqlx::query_as(AssertSqlSafe(sql))
            .bind(target_key)
            .bind(subject_id)
            .fetch_optional(pool)
            .await
    })
}

/// A finding no longer seen: the drift is resolved.
pub async fn delete_finding(tx: &mut DbTx, id: i64) -> Result<(), sqlx::Error> {
    with_tx!(tx, |conn| {
        sqlx::query("DELETE FROM drift_finding WHERE id = ?")
            .bind(id)
            .execute(conn)
            .await
            .map(drop)
    })
}

/// An operator's acceptance of a file as the repository holds it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct AcceptanceRow {
    /// The file.
    pub path: String,
    /// `ADOPT` or `IGNORE`.
    pub action: String,
    /// For `ADOPT`: the content accepted (none: its absence).
    pub blob_id: Option<String>,
}

/// `project`'s acceptances, by path.
pub async fn acceptances_of(
    reader: impl Into<Reader<'_>>,
    project: &str,
) -> Result<HashMap<String, AcceptanceRow>, sqlx::Error> {
    let sql = "SELECT path, action, blob_id FROM drift_acceptance WHERE project = ?";
    let rows: Vec<AcceptanceRow> = with_reader!(reader.into(), |exec| {
        sqlx::query_as(sql).bind(project).fetch_all(exec).await
    })?;
    Ok(rows
        .into_iter()
        .map(|row| (row.path.clone(), row))
        .collect())
}

/// Records an acceptance of `path` (replacing any earlier one), in the
/// caller's transaction.
pub async fn accept(
    tx: &mut DbTx,
    project: &str,
    path: &str,
    action: &str,
    blob_id: Option<&str>,
    accepted_by: &str,
    reason: &str,
) -> Result<(), sqlx::Error> {
    with_tx!(tx, |conn| {
        sqlx::query("DELETE FROM drift_acceptance WHERE project = ? AND path = ?")
            .bind(project)
            .bind(path)
            .execute(&mut *conn)
            .await?;
        sqlx::query(
            "INSERT INTO drift_acceptance (project, path, action, blob_id, accepted_by, reason) \
             VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind(project)
        .bind(path)
        .bind(action)
        .bind(blob_id)
        .bind(accepted_by)
        .bind(reason)
        .execute(&mut *conn)
        .await
        .map(drop)
    })
}

/// Deletes the acceptances of `paths` (the binding's file is its rendering
/// again: its next change landed).
pub async fn forget_acceptances(
    db: &Db,
    project: &str,
    paths: &[String],
) -> Result<(), sqlx::Error> {
    for path in paths {
        with_pool!(db, writer, |pool| {
            sqlx::query("DELETE FROM drift_acceptance WHERE project = ? AND path = ?")
                .bind(project)
                .bind(path)
                .execute(pool)
                .await
                .map(drop)
        })?;
    }
    Ok(())
}

/// The finding of `path` in `project`, if any. Served by
/// `uk_drift_finding_path`.
pub async fn finding_at(
    reader: impl Into<Reader<'_>>,
    project: &str,
    path: &str,
) -> Result<Option<FindingRow>, sqlx::Error> {
    let sql = format!("SELECT {COLUMNS} FROM drift_finding WHERE project = ? AND path = ?");
    with_reader!(reader.into(), |exec| {
        sqlx::query_as(AssertSqlSafe(sql))
            .bind(project)
            .bind(path)
            .fetch_optional(exec)
            .await
    })
}

/// The operation that owns the live binding of `(subject, target)`, if the
/// binding is live.
pub async fn live_operation(
    db: &Db,
    subject_id: &str,
    target_key: &str,
) -> Result<Option<OperationRow>, sqlx::Error> {
    let sql = format!(
        "SELECT {} FROM binding b JOIN operation o ON o.operation_id = b.operation_id \
         WHERE b.subject_id = ? AND b.target_key = ? AND b.status IN {LIVE}",
        prefixed_columns()
    );
    with_pool!(db, reader, |pool| {
        sqlx::query_as(AssertSqlSafe(sql))
            .bind(subject_id)
            .bind(target_key)
            .fetch_optional(pool)
            .await
    })
}
