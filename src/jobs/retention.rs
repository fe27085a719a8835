//! Deletes finished history older than `[retention]` says, one instance at
//! a time (the `retention` job lease), in chunks of [`CHUNK`] rows with a
//! pause between them, so that MySQL never holds one large DELETE's locks.

use std::time::Duration;

use anyhow::Context;

use super::Outcome;
use crate::config::RetentionSettings;
use crate::db::Db;
use crate::db::retention::{
    Pruned, delete_ids, eligible_ids, newest_old_id, release_job_lease, take_job_lease,
};

/// The job lease's name.
pub const JOB: &str = "retention";
/// Rows deleted per statement.
pub const CHUNK: u32 = 1000;
/// The pause between two chunks: other writers get the table in between.
const PAUSE: Duration = Duration::from_millis(100);
/// How long the job lease holds without renewal (renewed every chunk).
const LEASE: Duration = Duration::from_secs(300);

/// Describes the job's metric, counted from zero per table so that an
/// alert or a dashboard sees the first deletion.
pub fn describe_metrics() {
    metrics::describe_counter!(
        "changegate_retention_deleted_total",
        "Rows the retention job deleted, by table."
    );
    for table in Pruned::ALL {
        metrics::counter!("changegate_retention_deleted_total", "table" => table.table())
            .increment(0);
    }
}

/// How old a row of `table` must be to go, per `settings`.
fn kept_for(settings: &RetentionSettings, table: Pruned) -> Option<Duration> {
    match table {
        Pruned::Events => settings.events,
        Pruned::WebhookDeliveries => settings.webhook_deliveries,
        Pruned::CallbackReceipts => settings.callback_receipts,
        Pruned::DeployReports => settings.deploy_reports,
        Pruned::OperationHistory => settings.operation_history,
        Pruned::AuditLog => settings.audit_log,
    }
}

/// One run over every table, if no other instance is running it (`owner`
/// is this instance's id for the lease).
pub async fn run_once(
    db: &Db,
    settings: &RetentionSettings,
    owner: &str,
) -> anyhow::Result<Outcome> {
    if !take_job_lease(db, JOB, owner, LEASE)
        .await
        .context("taking the retention lease")?
    {
        return Ok(Outcome::Idle);
    }
    let pruned = prune_all(db, settings, owner).await;
    release_job_lease(db, JOB, owner)
        .await
        .context("giving the retention lease back")?;
    Ok(match pruned? {
        0 => Outcome::Idle,
        done => Outcome::Worked { done, full: false },
    })
}

async fn prune_all(db: &Db, settings: &RetentionSettings, owner: &str) -> anyhow::Result<u64> {
    let mut deleted = 0;
    for table in Pruned::ALL {
        let Some(older_than) = kept_for(settings, table) else {
            continue;
        };
        let done = prune(db, table, older_than, owner)
            .await
            .with_context(|| format!("pruning {}", table.table()))?;
        if done > 0 {
            tracing::info!(
                table = table.table(),
                deleted = done,
                "retention: deleted rows older than {}",
                humantime::format_duration(older_than)
            );
        }
        deleted += done;
    }
    Ok(deleted)
}

/// Deletes `table`'s eligible rows older than `older_than`, chunk by chunk.
async fn prune(db: &Db, table: Pruned, older_than: Duration, owner: &str) -> anyhow::Result<u64> {
    let Some(up_to) = newest_old_id(db, table, older_than).await? else {
        return Ok(0);
    };
    let (mut after, mut deleted) = (0, 0);
    loop {
        let ids = eligible_ids(db, table, older_than, (after, up_to), CHUNK).await?;
        let Some(&last) = ids.last() else {
            break;
        };
        let done = delete_ids(db, table, &ids).await?;
        metrics::counter!("changegate_retention_deleted_total", "table" => table.table())
            .increment(done);
        deleted += done;
        after = last;
        if ids.len() < CHUNK as usize {
            break;
        }
        tokio::time::sleep(PAUSE).await;
        if !take_job_lease(db, JOB, owner, LEASE).await? {
            anyhow::bail!("the retention lease was lost");
        }
    }
    Ok(deleted)
}
