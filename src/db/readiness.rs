//! Start-up without a deadlock on the database (seed 000): the service starts
//! and reports not-ready while the database is down or does not exist yet,
//! keeps trying in the background, and becomes ready without a restart.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use sqlx::{SqliteConnection, SqlitePool};
use tokio_util::sync::CancellationToken;

use super::{Db, open};
use crate::config::DatabaseSettings;

/// The database once it is connected and migrated; empty until then.
#[derive(Debug, Clone, Default)]
pub struct DbSlot(Arc<OnceLock<Db>>);

impl DbSlot {
    /// A slot that already holds `db`.
    pub fn ready(db: Db) -> Self {
        let slot = Self::default();
        slot.fill(db);
        slot
    }

    /// The database, if it is ready.
    pub fn get(&self) -> Option<&Db> {
        self.0.get()
    }

    fn fill(&self, db: Db) {
        if self.0.set(db).is_ok() {
            metrics::gauge!("changegate_database_ready").set(1.0);
        }
    }
}

const FIRST_RETRY: Duration = Duration::from_millis(200);

/// Tries to open the database until it succeeds or `shutdown` is cancelled,
/// with exponential backoff up to `settings.retry_max_interval`. Logs when
/// the reason changes, not on every attempt, so a long outage is a few lines.
pub async fn connect_until_ready(
    settings: DatabaseSettings,
    slot: DbSlot,
    shutdown: CancellationToken,
) {
    metrics::gauge!("changegate_database_ready").set(0.0);
    let mut delay = FIRST_RETRY.min(settings.retry_max_interval);
    let mut last_reason: Option<String> = None;
    loop {
        match open(&settings).await {
            Ok(db) => {
                tracing::info!("database ready");
                slot.fill(db);
                return;
            }
            Err(err) => {
                let reason = err.to_string();
                if last_reason.as_deref() != Some(reason.as_str()) {
                    tracing::warn!("database not ready, retrying in the background: {reason}");
                    last_reason = Some(reason);
                } else {
                    tracing::debug!("database still not ready: {reason}");
                }
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(settings.retry_max_interval);
    }
}

/// Whether the SQLite file takes a write. Reads keep working on a file whose
/// storage turned read-only or full, from pages already cached and through
/// the separate read-only pool, so only a write tells.
pub(super) async fn sqlite_takes_a_write(writer: &SqlitePool) -> Result<(), String> {
    let failed = |err: sqlx::Error| format!("database write failed: {err}");
    let mut tx = writer.begin_with("BEGIN IMMEDIATE").await.map_err(failed)?;
    rewrite_user_version(&mut tx).await.map_err(failed)?;
    tx.commit().await.map_err(failed)
}

/// Sets SQLite's `user_version` to the value it has: a change that changes
/// nothing, yet writes the file's first page when committed (an UPDATE that
/// changes nothing writes nothing) and is refused at once by a connection
/// that cannot write. Nothing in changegate reads `user_version`.
pub(super) async fn rewrite_user_version(conn: &mut SqliteConnection) -> Result<(), sqlx::Error> {
    let version: i64 = sqlx::query_scalar("PRAGMA user_version")
        .fetch_one(&mut *conn)
        .await?;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "PRAGMA user_version = {version}"
    )))
    .execute(&mut *conn)
    .await
    .map(|_| ())
}
