//! Timeline events: what a request went through outside its own steps (a
//! pipeline run of its MR, a reviewer bot's approval, a rebase, the merge
//! commit), kept as `operation_history` entries that change no step, so a
//! request's page reads them with its steps in one read, in the order they
//! happened, and retention keeps them as long as the steps.

use sqlx::AssertSqlSafe;

use super::DbTx;
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
/// version each operation is at: one statement per event for a whole batch.
/// An event already recorded for an operation (same kind and message: a
/// round that ran again after its answer was lost) is not recorded twice.
/// The caller holds the operations' row locks (or writes nothing else), so
/// the read of `operation` takes no lock out of the store's order.
pub async fn record_events(
    tx: &mut DbTx,
    operation_ids: &[String],
    events: &[TimelineEvent],
) -> Result<(), sqlx::Error> {
    for chunk in operation_ids.chunks(super::IN_LIST_CHUNK) {
        let sql = format!(
            "INSERT INTO operation_history (operation_id, from_step, to_step, operation_version, \
             actor, message, event, detail, url) \
             SELECT o.operation_id, o.step_code, o.step_code, o.version, ?, ?, ?, ?, ? \
             FROM operation o WHERE o.operation_id IN ({}) AND NOT EXISTS \
             (SELECT 1 FROM operation_history h WHERE h.operation_id = o.operation_id \
             AND h.event = ? AND h.message = ?)",
            vec!["?"; chunk.len()].join(", ")
        );
        for event in events {
            with_tx!(tx, |conn| {
                let mut query = sqlx::query(AssertSqlSafe(sql.clone()))
                    .bind(&event.actor)
                    .bind(&event.message)
                    .bind(event.kind.as_str())
                    .bind(&event.detail)
                    .bind(&event.url);
                for id in chunk {
                    query = query.bind(id);
                }
                query
                    .bind(event.kind.as_str())
                    .bind(&event.message)
                    .execute(&mut *conn)
                    .await
                    .map(|_| ())
            })?;
        }
    }
    Ok(())
}
