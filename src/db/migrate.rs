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
//!
//! On MySQL and MariaDB the lock is a row, not `GET_LOCK`: advisory locks
//! belong to one server, and on a Galera cluster each node grants its own
//! (two instances on two nodes would both migrate), whereas a row written by
//! compare-and-swap is certified cluster-wide. The row names its holder and
//! expires unless the holder renews it, so a crashed holder's lock frees
//! itself.

use std::time::Duration;

use sqlx::migrate::{Migrate, MigrateError, Migrator};
use sqlx::{AssertSqlSafe, Connection, MySqlPool, SqliteConnection, SqlitePool};

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
    /// Another instance held the lock for all of `LOCK_WAIT`.
    #[error(
        "another instance held the migration lock for {} s; it is probably still migrating: try again when it has finished",
        LOCK_WAIT.as_secs()
    )]
    LockTimeout,
    /// `database.url` selects no database, so there is nothing to lock or migrate.
    #[error("database.url names no database")]
    NoDatabase,
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
    // A database a newer release already migrated further (mid rolling
    // upgrade, an old instance restarting; or after a rollback) still
    // opens: migrations only expand the schema (docs/src/how-to/backups-upgrades.md), so an
    // older release runs on a newer schema.
    migrator.set_ignore_missing(true);
    migrator.run_direct(None, conn, false).await
}

/// The lock row's table. It guards the migrations, so it cannot be one of
/// them: it is created here, idempotently, before the lock is taken.
const LOCK_TABLE: &str = "CREATE TABLE IF NOT EXISTS changegate_migration_lock (\
    id INT NOT NULL PRIMARY KEY, \
    holder VARCHAR(191) NULL, \
    expires_at DATETIME(3) NULL\
    ) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin";

/// How long the lock row holds without renewal: a holder that crashed
/// frees it after this.
const LOCK_TTL: Duration = Duration::from_secs(60);

/// How often a waiter tries for the lock again.
const LOCK_POLL: Duration = Duration::from_millis(250);

/// Applies the MySQL/MariaDB migrations holding the lock row, renewed while
/// they run and released after.
pub(super) async fn mysql(pool: &MySqlPool) -> Result<(), MigrationError> {
    let database: Option<String> = sqlx::query_scalar("SELECT DATABASE()")
        .fetch_one(pool)
        .await?;
    database.ok_or(MigrationError::NoDatabase)?;
    let holder = format!(
        "migrate-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    );
    take_lock_row(pool, &holder).await?;
    let renewer = {
        let (pool, holder) = (pool.clone(), holder.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(LOCK_TTL / 4).await;
                if let Err(err) = renew_lock_row(&pool, &holder).await {
                    tracing::warn!("cannot renew the migration lock: {err}");
                }
            }
        })
    };
    let applied = match pool.acquire().await {
        Ok(mut conn) => run_unlocked(&MYSQL_MIGRATIONS, &mut *conn)
            .await
            .map_err(MigrationError::from),
        Err(err) => Err(err.into()),
    };
    renewer.abort();
    // A release lost to a race (a Galera certification conflict, say) is
    // tried again: left taken, the lock would hold every instance off for
    // LOCK_TTL.
    let released = super::retrying(|| {
        sqlx::query(
            "UPDATE changegate_migration_lock SET holder = NULL, expires_at = NULL \
             WHERE id = 1 AND holder = ?",
        )
        .bind(&holder)
        .execute(pool)
    })
    .await;
    applied?;
    released?;
    Ok(())
}

/// Waits up to [`LOCK_WAIT`] for the lock row to be free (or expired) and
/// takes it, creating its table first when it is missing. A statement that
/// loses a race (a deadlock here; on Galera a certification conflict, or a
/// read of the table's existence aborted by another instance's `CREATE`
/// running cluster-wide) is a try that failed, like a held lock.
async fn take_lock_row(pool: &MySqlPool, holder: &str) -> Result<(), MigrationError> {
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    let mut table_exists = false;
    loop {
        let tried = async {
            if !table_exists {
                create_lock_table(pool).await?;
                table_exists = true;
            }
            try_lock_row(pool, holder).await
        };
        match tried.await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(err) if super::is_retryable_conflict(&err) => {}
            Err(err) => return Err(err.into()),
        }
        if std::time::Instant::now() >= deadline {
            return Err(MigrationError::LockTimeout);
        }
        tokio::time::sleep(LOCK_POLL).await;
    }
}

/// Creates the lock row's table when it is missing. DDL only then, that is
/// before anyone can hold the lock: on Galera each DDL runs cluster-wide in
/// total order and would abort the holder's migration statements on every
/// node. Instances starting together on a fresh database all find it
/// missing; their `CREATE`s run in total order and one can abort another,
/// or another's read of whether it exists (1213): the caller tries again.
async fn create_lock_table(pool: &MySqlPool) -> Result<(), sqlx::Error> {
    let exists: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.TABLES \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'changegate_migration_lock'",
    )
    .fetch_one(pool)
    .await?;
    if exists == 0 {
        sqlx::query(LOCK_TABLE).execute(pool).await?;
    }
    Ok(())
}

async fn try_lock_row(pool: &MySqlPool, holder: &str) -> Result<bool, sqlx::Error> {
    sqlx::query("INSERT IGNORE INTO changegate_migration_lock (id) VALUES (1)")
        .execute(pool)
        .await?;
    let taken = sqlx::query(
        "UPDATE changegate_migration_lock \
         SET holder = ?, expires_at = CURRENT_TIMESTAMP(3) + INTERVAL ? SECOND \
         WHERE id = 1 AND (holder IS NULL OR expires_at < CURRENT_TIMESTAMP(3))",
    )
    .bind(holder)
    .bind(LOCK_TTL.as_secs())
    .execute(pool)
    .await?;
    Ok(taken.rows_affected() == 1)
}

async fn renew_lock_row(pool: &MySqlPool, holder: &str) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE changegate_migration_lock \
         SET expires_at = CURRENT_TIMESTAMP(3) + INTERVAL ? SECOND WHERE id = 1 AND holder = ?",
    )
    .bind(LOCK_TTL.as_secs())
    .bind(holder)
    .execute(pool)
    .await
    .map(drop)
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
