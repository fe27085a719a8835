//! Timeline events: what a request went through outside its own steps (a
//! pipeline run of its MR, a reviewer bot's approval, a rebase, the merge
//! commit), kept as `operation_history` entries that change no step, so a
//! request's page reads them with its steps in one read, in the order they
//! happened, and retention keeps them as long as the steps.

use std::collections::HashSet;

use sqlx::AssertSqlSafe;

use super::{DbTx, dialect};
use crate::with_tx;

/// What kind of thing happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// A pipeline run of the MR's head finished.
    Pipeline,
    /// A reviewer bot approved the MR.
    Approval,
    /// The MR's branch was rebased onto its target.
    Rebase,
    /// The MR was merged: the commit on the target branch.
    Merge,
}

impl EventKind {
    /// The `operation_history.event` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pipeline => "PIPELINE",
            Self::Approval => "APPROVAL",
            Self::Rebase => "REBASE",
            Self::Merge => "MERGE",
        }
    }
}

/// One event, as recorded for each operation it concerns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimelineEvent {
    /// Its kind.
    pub kind: EventKind,
    /// Who: the GitLab component or bot it came from.
    pub actor: String,
    /// What happened, in words; with the kind, what tells two events apart.
    pub message: String,
    /// What it is about: a pipeline's status, a commit's sha.
    pub detail: Option<String>,
    /// Its page on GitLab.
    pub url: Option<String>,
}

/// Records each of `events` for each of `operation_ids`, at the step and
/// version each operation is at: one read of the operations and of the
/// events they already have, then one plain multi-row insert per chunk.
/// An event already recorded for an operation (same kind and message: a
/// round that ran again after its answer was lost) is not recorded twice.
/// The caller holds the operations' row locks (or writes nothing else), so
/// the shared read of `operation` takes no lock out of the store's order.
///
/// The insert lists its rows instead of selecting them (`INSERT … SELECT`):
/// InnoDB cannot know in advance how many rows a select yields, so such a
/// statement takes `operation_history`'s table-level AUTO-INC lock until it
/// ends, and every step of every request, which appends to the same table,
/// queues behind it, and deadlocks there fail with MySQL 1467. A statement
/// with its rows listed takes only the light auto-increment mutex
/// (`innodb_autoinc_lock_mode` 1 and 2).
pub async fn record_events(
    tx: &mut DbTx,
    operation_ids: &[String],
    events: &[TimelineEvent],
) -> Result<(), sqlx::Error> {
    if events.is_empty() {
        return Ok(());
    }
    for chunk in operation_ids.chunks(super::IN_LIST_CHUNK) {
        let at = steps_of(tx, chunk).await?;
        let mut recorded = recorded_of(tx, chunk).await?;
        let mut rows = Vec::new();
        for (operation_id, step_code, version) in &at {
            for event in events {
                let key = (
                    operation_id.clone(),
                    event.kind.as_str().to_owned(),
                    event.message.clone(),
                );
                if recorded.insert(key) {
                    rows.push((operation_id.as_str(), *step_code, *version, event));
                }
            }
        }
        for rows in rows.chunks(ROWS_PER_INSERT) {
            insert_rows(tx, rows).await?;
        }
    }
    Ok(())
}

/// Rows in one insert: nine values each, well under every backend's limit
/// on bound parameters.
const ROWS_PER_INSERT: usize = 200;

/// Each operation of `ids` with its step code and version.
async fn steps_of(tx: &mut DbTx, ids: &[String]) -> Result<Vec<(String, i32, i64)>, sqlx::Error> {
    let sql = format!(
        "SELECT operation_id, step_code, version FROM operation WHERE operation_id IN ({}){}",
        super::placeholders(ids.len()),
        dialect::for_share(tx.backend())
    );
    with_tx!(tx, |conn| {
        let mut query = sqlx::query_as(AssertSqlSafe(sql));
        for id in ids {
            query = query.bind(id);
        }
        query.fetch_all(&mut *conn).await
    })
}

/// The timeline events the operations of `ids` already have, as operation,
/// kind and message.
async fn recorded_of(
    tx: &mut DbTx,
    ids: &[String],
) -> Result<HashSet<(String, String, String)>, sqlx::Error> {
    let sql = format!(
        "SELECT operation_id, event, message FROM operation_history \
         WHERE operation_id IN ({}) AND event IS NOT NULL",
        super::placeholders(ids.len())
    );
    let found: Vec<(String, String, Option<String>)> = with_tx!(tx, |conn| {
        let mut query = sqlx::query_as(AssertSqlSafe(sql));
        for id in ids {
            query = query.bind(id);
        }
        query.fetch_all(&mut *conn).await
    })?;
    Ok(found
        .into_iter()
        .map(|(id, kind, message)| (id, kind, message.unwrap_or_default()))
        .collect())
}

async fn insert_rows(
    tx: &mut DbTx,
    rows: &[(&str, i32, i64, &TimelineEvent)],
) -> Result<(), sqlx::Error> {
    let sql = format!(
        "INSERT INTO operation_history (operation_id, from_step, to_step, operation_version, \
         actor, message, event, detail, url) VALUES {}",
        vec!["(?, ?, ?, ?, ?, ?, ?, ?, ?)"; rows.len()].join(", ")
    );
    with_tx!(tx, |conn| {
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for (operation_id, step_code, version, event) in rows {
            query = query
                .bind(*operation_id)
                .bind(step_code)
                .bind(step_code)
                .bind(version)
                .bind(&event.actor)
                .bind(&event.message)
                .bind(event.kind.as_str())
                .bind(&event.detail)
                .bind(&event.url);
        }
        query.execute(&mut *conn).await.map(|_| ())
    })
}
