//! `callback_receipt` and `deploy_report`: what callers told us, once each.

use chrono::NaiveDateTime;
use sqlx::AssertSqlSafe;

use super::{Db, DbTx, placeholders};
use crate::config::projects::TargetFilter;
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

/// Appends a deploy report for the project keyed `project` (see
/// [`ProjectKey`](crate::config::projects::ProjectKey)).
pub async fn insert_deploy_report(
    tx: &mut DbTx,
    callback_id: &str,
    project: &str,
    mr_iid: i64,
    sha: Option<&str>,
    success: bool,
) -> Result<(), sqlx::Error> {
    let sql = "INSERT INTO deploy_report (callback_id, project, mr_iid, sha, status) \
               VALUES (?, ?, ?, ?, ?)";
    with_tx!(tx, |conn| {
        sqlx::query(sql)
            .bind(callback_id)
            .bind(project)
            .bind(mr_iid)
            .bind(sha)
            .bind(if success { "success" } else { "failed" })
            .execute(conn)
            .await
            .map(|_| ())
    })
}

/// An operation of a merged MR and its target, which names the MR's project.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct MrOperation {
    /// The operation.
    pub operation_id: String,
    /// Its target.
    pub target_key: String,
    /// The traceparent of the request that submitted it, if traced.
    pub trace_parent: Option<String>,
}

/// Operations whose MR has the iid `mr_iid` (in whichever project) and whose
/// binding is still theirs, in id order (one lock order for every caller),
/// served by `ix_operation_mr_iid`.
pub async fn operations_of_mr(tx: &mut DbTx, mr_iid: i64) -> Result<Vec<MrOperation>, sqlx::Error> {
    let sql = "SELECT o.operation_id, o.target_key, o.trace_parent FROM operation o \
               JOIN binding b ON b.operation_id = o.operation_id WHERE o.mr_iid = ? ORDER BY o.operation_id";
    with_tx!(tx, |conn| {
        sqlx::query_as(sql).bind(mr_iid).fetch_all(conn).await
    })
}

/// Whether the deploy pipeline already reported MR `mr_iid` deployed, at or
/// after `since` (a report that beat the MERGED write), in a report stored
/// under one of `projects` (the MR's project's report keys). Served by
/// `ix_deploy_report_status_project_mr`.
pub async fn deployed_since(
    db: &Db,
    projects: &[&str],
    mr_iid: i64,
    since: NaiveDateTime,
) -> Result<bool, sqlx::Error> {
    let sql = format!(
        "SELECT COUNT(*) FROM deploy_report \
         WHERE status = 'success' AND project IN ({}) AND mr_iid = ? AND received_at >= ?",
        placeholders(projects.len())
    );
    let count: i64 = with_pool!(db, reader, |pool| {
        let mut query = sqlx::query_scalar(AssertSqlSafe(sql));
        for project in projects {
            query = query.bind(*project);
        }
        query.bind(mr_iid).bind(since).fetch_one(pool).await
    })?;
    Ok(count > 0)
}

/// The highest MR iid the deploy pipeline reported deployed, per project
/// key: each project's watermark (the pipeline deploys a project's target
/// branch in merge order, so every MR of that project merged before that one
/// is deployed too). Two seeks into `ix_deploy_report_status_project_mr`
/// per project (the next project key, then its highest iid), so the cost
/// follows the number of projects, not of reports: a `GROUP BY` reads every
/// successful report.
pub async fn deploy_watermarks(db: &Db) -> Result<Vec<(String, i64)>, sqlx::Error> {
    let first = "SELECT MIN(project) FROM deploy_report WHERE status = 'success'";
    let next = "SELECT MIN(project) FROM deploy_report WHERE status = 'success' AND project > ?";
    let highest = "SELECT MAX(mr_iid) FROM deploy_report WHERE status = 'success' AND project = ?";
    let mut watermarks = Vec::new();
    let mut project: Option<String> = with_pool!(db, reader, |pool| {
        sqlx::query_scalar(first).fetch_one(pool).await
    })?;
    while let Some(key) = project {
        let mr_iid: Option<i64> = with_pool!(db, reader, |pool| {
            sqlx::query_scalar(highest).bind(&key).fetch_one(pool).await
        })?;
        project = with_pool!(db, reader, |pool| {
            sqlx::query_scalar(next).bind(&key).fetch_one(pool).await
        })?;
        watermarks.extend(mr_iid.map(|iid| (key, iid)));
    }
    Ok(watermarks)
}

/// MERGED operations of the targets `targets` last changed between
/// `max_age` and `min_age` ago (by the database clock) whose MR is at or
/// below `watermark`, oldest first. Served by `ix_binding_status_updated`.
pub async fn merged_below_watermark(
    db: &Db,
    min_age_ms: i64,
    max_age_ms: i64,
    targets: &TargetFilter,
    watermark: i64,
    limit: u32,
) -> Result<Vec<String>, sqlx::Error> {
    let backend = db.backend();
    let (names, target_clause) = match targets {
        TargetFilter::In(names) if names.is_empty() => return Ok(Vec::new()),
        TargetFilter::In(names) => (
            names,
            format!(" AND b.target_key IN ({})", placeholders(names.len())),
        ),
        TargetFilter::NotIn(names) if names.is_empty() => (names, String::new()),
        TargetFilter::NotIn(names) => (
            names,
            format!(" AND b.target_key NOT IN ({})", placeholders(names.len())),
        ),
    };
    let sql = format!(
        "SELECT b.operation_id FROM binding b JOIN operation o ON o.operation_id = b.operation_id \
         WHERE b.status = 'MERGED' AND b.updated_at > {} AND b.updated_at < {}{target_clause} \
         AND o.mr_iid IS NOT NULL AND o.mr_iid <= ? ORDER BY b.updated_at LIMIT ?",
        super::dialect::now_minus_ms(backend),
        super::dialect::now_minus_ms(backend)
    );
    with_pool!(db, reader, |pool| {
        let mut query = sqlx::query_scalar(AssertSqlSafe(sql))
            .bind(max_age_ms)
            .bind(min_age_ms);
        for name in names {
            query = query.bind(name.as_str());
        }
        query.bind(watermark).bind(limit).fetch_all(pool).await
    })
}

/// MERGED operations, last changed less than `max_age` ago, of batches whose
/// merge commit a successful deploy report of the batch's project names: the
/// exact match. A report without a project (stored before callbacks named
/// one) is of the project keyed `default_project`. Served by
/// `ix_deploy_report_sha`, `ix_merge_batch_merge_commit`,
/// `ix_merge_batch_request_batch` and the binding's unique operation id.
pub async fn merged_by_deployed_commit(
    db: &Db,
    default_project: &str,
    max_age_ms: i64,
    limit: u32,
) -> Result<Vec<String>, sqlx::Error> {
    let sql = format!(
        "SELECT DISTINCT r.operation_id FROM deploy_report d \
         JOIN merge_batch m ON m.merge_commit_sha = d.sha \
         JOIN merge_batch_request r ON r.batch_id = m.id \
         JOIN binding b ON b.operation_id = r.operation_id \
         WHERE d.status = 'success' AND b.status = 'MERGED' AND b.updated_at > {} \
         AND (d.project = LOWER(m.project) OR (d.project = '' AND LOWER(m.project) = ?)) LIMIT ?",
        super::dialect::now_minus_ms(db.backend())
    );
    with_pool!(db, reader, |pool| {
        sqlx::query_scalar(AssertSqlSafe(sql))
            .bind(max_age_ms)
            .bind(default_project)
            .bind(limit)
            .fetch_all(pool)
            .await
    })
}
