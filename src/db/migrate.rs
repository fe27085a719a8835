//! Applying the embedded migrations under an exclusive lock, so instances
//! that start together against one database migrate one after the other:
//! the first applies, the others wait for it and then find nothing to do.
//!
//! sqlx's migrator has no lock on SQLite, and on MariaDB its
//! `GET_LOCK(name, -1)` is refused (a negative timeout is invalid there: the
//! answer is NULL with a warning), so it would run unlocked. Each backend's
//! lock is therefore taken here, and the migrator runs with its own disabled.
//! While the lock is held no other instance is between writing a migration's
//! row and marking it applied, so a row left unfinished is one a crashed
//! migration left behind, never one still in progress.

use std::time::Duration;

use sqlx::migrate::{Migrate, MigrateError, Migrator};
use sqlx::{AssertSqlSafe, Connection, MySqlConnection, MySqlPool, SqliteConnection, SqlitePool};

use super::{MYSQL_MIGRATIONS, SQLITE_MIGRATIONS};

/// How long an instance waits for another one's migrations to finish. Long,
/// because a migration that rewrites a big table may take minutes; past it
/// start-up retries (`serve`) or fails with a message (`migrate`).
const LOCK_WAIT: Duration = Duration::from_secs(600);

/// SQLite's result code when the busy timeout ran out waiting for a lock.
const SQLITE_BUSY: &str = "5";

/// Why migrations were not applied.
#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    /// Another instance held the lock for all of [`LOCK_WAIT`].
    #[error(
        "another instance held the migration lock for {} s; it is probably still migrating: try again when it has finished",
        LOCK_WAIT.as_secs()
    )]
    LockTimeout,
    /// `database.url` selects no database, so there is nothing to lock or migrate.
    #[error("database.url names no database")]
    NoDatabase,
    /// The server answered `GET_LOCK` with NULL (an error, such as the session being killed).
    #[error("the server refused the migration lock {0:?}")]
    LockRefused(String),
    /// A statement around the migrator (taking or releasing the lock) failed.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    /// The migrator failed.
    #[error(transparent)]
    Migrate(#[from] MigrateError),
}

/// Applies `migrations` on `conn` without the migrator's own lock.
/// `Migrator::run` on a borrowed connection cannot be shown to be `Send` for
/// every lifetime, which the spawned start-up task needs; `run_direct` is
/// what sqlx provides for exactly that.
async fn run_unlocked<C: Migrate>(migrations: &Migrator, conn: &mut C) -> Result<(), MigrateError> {
    let mut migrator = Migrator::with_migrations(migrations.iter().cloned().collect());
    migrator.set_locking(false);
    migrator.run_direct(None, conn, false).await
}

/// Applies the MySQL/MariaDB migrations holding an advisory lock named for
/// the database (`GET_LOCK` names are server-wide). The lock belongs to the
/// session, so the migrations run on the session that holds it: should the
/// connection drop, the lock and the migration end together. The connection
/// is taken out of the pool and closed afterwards, so no pooled connection
/// can go on holding the lock after a failed run.
pub(super) async fn mysql(pool: &MySqlPool) -> Result<(), MigrationError> {
    let mut conn = pool.acquire().await?.detach();
    let result = mysql_locked(&mut conn).await;
    // Closing the session releases the lock even if RELEASE_LOCK failed.
    let _ = conn.close().await;
    result
}

async fn mysql_locked(conn: &mut MySqlConnection) -> Result<(), MigrationError> {
    // SHA1 keeps the name within MySQL's 64 characters for any database name.
    let name: Option<String> =
        sqlx::query_scalar("SELECT CONCAT('changegate-migrations-', SHA1(DATABASE()))")
            .fetch_one(&mut *conn)
            .await?;
    let name = name.ok_or(MigrationError::NoDatabase)?;
    let locked: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, ?)")
        .bind(&name)
        .bind(LOCK_WAIT.as_secs())
        .fetch_one(&mut *conn)
        .await?;
    match locked {
        Some(1) => {}
        Some(_) => return Err(MigrationError::LockTimeout),
        None => return Err(MigrationError::LockRefused(name)),
    }
    let applied = run_unlocked(&MYSQL_MIGRATIONS, conn).await;
    let released = sqlx::query("SELECT RELEASE_LOCK(?)")
        .bind(&name)
        .execute(&mut *conn)
        .await;
    applied?;
    released?;
    Ok(())
}

/// Applies the SQLite migrations inside one `BEGIN IMMEDIATE` transaction.
///
/// That takes SQLite's own write lock on the database, which every process
/// with the file open obeys whatever path it opened it by, and which the
/// operating system drops if the process dies. A second lock beside it (a
/// lock file) would only hold for processes that agree on the file's path,
/// and would stay behind on disk. Since the whole run commits at once, an
/// instance that gets the lock next sees every migration applied or none.
/// Each migration's own transaction becomes a savepoint inside this one.
/// The writer's busy timeout is raised to [`LOCK_WAIT`] while waiting for
/// the lock, so a waiter outlasts a long migration, and restored after.
pub(super) async fn sqlite(writer: &SqlitePool) -> Result<(), MigrationError> {
    let mut conn = writer.acquire().await?;
    let busy_timeout_ms: i64 = sqlx::query_scalar("PRAGMA busy_timeout")
        .fetch_one(&mut *conn)
        .await?;
    set_busy_timeout(&mut conn, LOCK_WAIT.as_millis()).await?;
    let applied = sqlite_locked(&mut conn).await;
    let restored = set_busy_timeout(&mut conn, busy_timeout_ms).await;
    applied?;
    restored?;
    Ok(())
}

async fn sqlite_locked(conn: &mut SqliteConnection) -> Result<(), MigrationError> {
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.map_err(|err| {
        match err.as_database_error().and_then(|db| db.code()) {
            Some(code) if code == SQLITE_BUSY => MigrationError::LockTimeout,
            _ => MigrationError::Database(err),
        }
    })?;
    run_unlocked(&SQLITE_MIGRATIONS, &mut *tx).await?;
    tx.commit().await?;
    Ok(())
}

async fn set_busy_timeout(
    conn: &mut SqliteConnection,
    milliseconds: impl std::fmt::Display,
) -> Result<(), sqlx::Error> {
    sqlx::query(AssertSqlSafe(format!(
        "PRAGMA busy_timeout = {milliseconds}"
    )))
    .execute(conn)
    .await
    .map(drop)
}
