//! Storage: one code path over SQLite (embedded default) and MySQL/MariaDB
//! (production, several instances), selected by the URL scheme (SPEC §5).
//!
//! The `Any` driver is not used because it lacks native date-time types;
//! instead [`Db`] holds a native pool per backend and [`with_pool!`](crate::with_pool) expands
//! one query body for each, so most SQL is written once.

pub mod audit;
pub mod backup;
pub mod batch_queue;
pub mod batches;
pub mod bindings;
pub mod callbacks;
pub mod departed;
pub mod dialect;
pub mod drift;
pub mod estimates;
pub mod events;
pub mod failover;
pub mod handback;
pub mod history;
pub mod idempotency;
pub mod lease_owners;
pub mod leases;
mod migrate;

mod mysql_url;
mod open;
pub mod operation_listing;
pub mod operation_snapshot;
pub mod operations;
pub mod outage;
pub mod overview;
pub mod progress;
mod reader;
mod readiness;
pub mod retention;
mod retry;
pub mod script;
pub mod settle_counts;
pub mod statement;
pub mod timeline_events;
pub mod train;
mod tx;
pub mod webhook_claims;
pub mod webhook_deliveries;
pub mod webhook_endpoints;

use sqlx::migrate::Migrator;
use sqlx::{MySqlPool, SqlitePool};

pub use migrate::MigrationError;
pub use open::{OpenError, connect, open, sqlite_file};
pub use reader::Reader;
pub use readiness::{DbSlot, connect_until_ready};
pub use retry::{
    Conflict, Contended, RETRIES, describe_metrics as describe_retry_metrics, retrying,
    retrying_with,
};
pub use tx::DbTx;

/// Most ids bound in one `IN (...)` list: far below every backend's limit
/// on bound parameters (SQLite's is 32,766, MySQL's 65,535).
pub const IN_LIST_CHUNK: usize = 500;

/// Migrations for SQLite, embedded in the binary.
pub static SQLITE_MIGRATIONS: Migrator = sqlx::migrate!("migrations/sqlite");
/// Migrations for MySQL/MariaDB, embedded in the binary.
pub static MYSQL_MIGRATIONS: Migrator = sqlx::migrate!("migrations/mysql");

/// A connected, migrated database.
#[derive(Debug, Clone)]
pub enum Db {
    /// Embedded SQLite file.
    Sqlite(SqliteDb),
    /// MySQL or MariaDB server.
    MySql(MySqlDb),
}

/// A MySQL or MariaDB server's pool, and whether the server is a Galera
/// node.
#[derive(Debug, Clone)]
pub struct MySqlDb {
    /// The connections.
    pub pool: MySqlPool,
    /// Read once when the pool opens (`@@wsrep_on`). Unknown counts as a
    /// Galera node: the safe side of [`Db::script_pool`].
    pub galera: bool,
}

/// SQLite pools. SQLite allows one writer at a time; several pooled writers
/// would queue on the busy timeout (measured: p99 up to 2.7 s at 32-way
/// concurrency), so all writes share one connection and reads use their own
/// read-only pool, which also rules out deadlocks on lock upgrade.
#[derive(Debug, Clone)]
pub struct SqliteDb {
    /// The single writer connection.
    pub writer: SqlitePool,
    /// Read-only connections.
    pub reader: SqlitePool,
}

/// Which database engine a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `sqlite:` URLs.
    Sqlite,
    /// `mysql://` or `mariadb://` URLs.
    MySql,
}

impl Backend {
    /// The backend a database URL names, if it is a supported one.
    pub fn of_url(url: &str) -> Option<Self> {
        if url.starts_with("sqlite:") {
            Some(Self::Sqlite)
        } else if url.starts_with("mysql://") || url.starts_with("mariadb://") {
            Some(Self::MySql)
        } else {
            None
        }
    }
}

/// Checks a `mysql://` URL's parameters: the error says what to change; the
/// warnings name settings that work but probably do not do what was meant.
pub fn check_mysql_url(url: &str) -> Result<Vec<String>, String> {
    mysql_url::MySqlUrl::parse(url).map(|parsed| parsed.warnings)
}

/// Expands `$body` once per backend with `$pool` bound to that backend's pool.
/// `reader` or `writer` picks the SQLite pool; MySQL has one pool for both.
///
/// ```text
/// let n: i64 = with_pool!(db, reader, |pool| {
///     sqlx::query_scalar("SELECT COUNT(*) FROM binding").fetch_one(pool).await
/// })?;
/// ```
#[macro_export]
macro_rules! with_pool {
    ($db:expr, $role:ident, |$pool:ident| $body:expr) => {
        match $db {
            $crate::db::Db::Sqlite(sqlite) => {
                let $pool = &sqlite.$role;
                $body
            }
            $crate::db::Db::MySql(mysql) => {
                let $pool = &mysql.pool;
                $body
            }
        }
    };
}

impl Db {
    /// The pool to run a transaction as one multi-statement [`script`] on:
    /// a MySQL server that is not a Galera node. A Galera node breaks such a
    /// transaction when it aborts it for a conflicting write replicated from
    /// another node (a "brute force" abort) while the script runs: MariaDB
    /// 10.11 answers every statement as done, yet rolls back the ones before
    /// the abort and commits the ones after it (`tests/api/galera/scripts.rs`
    /// shows it). Statement by statement, the abort is answered as a
    /// deadlock, so on Galera every transaction goes that way.
    pub fn script_pool(&self) -> Option<&MySqlPool> {
        match self {
            Self::MySql(mysql) if !mysql.galera => Some(&mysql.pool),
            _ => None,
        }
    }

    /// Which engine this is.
    pub fn backend(&self) -> Backend {
        match self {
            Self::Sqlite(_) => Backend::Sqlite,
            Self::MySql(_) => Backend::MySql,
        }
    }

    /// Applies the embedded migrations. Safe to run from several instances at
    /// once: each waits for an exclusive lock on the database first.
    pub async fn migrate(&self) -> Result<(), MigrationError> {
        match self {
            Self::Sqlite(sqlite) => migrate::sqlite(&sqlite.writer).await,
            Self::MySql(mysql) => migrate::mysql(&mysql.pool).await,
        }
    }

    /// Whether the database answers and the newest embedded migration is
    /// applied, on SQLite a write goes through, and, on a Galera node with
    /// `require_synced`, the node is `Synced` (a donor or joiner answers, but
    /// not as its cluster would).
    pub async fn check_ready(&self, require_synced: bool) -> Result<(), String> {
        if let (Self::MySql(mysql), true) = (self, require_synced) {
            let mut conn = mysql
                .pool
                .acquire()
                .await
                .map_err(|err| format!("no database connection: {err}"))?;
            if let Some(problem) = failover::node_problem(&mut conn, true).await {
                return Err(problem);
            }
        }
        let latest = match self {
            Self::Sqlite(_) => &SQLITE_MIGRATIONS,
            Self::MySql(_) => &MYSQL_MIGRATIONS,
        }
        .iter()
        .map(|migration| migration.version)
        .max()
        .unwrap_or_default();
        let sql = "SELECT COUNT(*) FROM _sqlx_migrations WHERE version = ? AND success = 1";
        let applied: i64 = with_pool!(self, reader, |pool| {
            sqlx::query_scalar(sql).bind(latest).fetch_one(pool).await
        })
        .map_err(|err| format!("database query failed: {err}"))?;
        if applied != 1 {
            return Err(format!("migration {latest} is not applied"));
        }
        match self {
            Self::Sqlite(sqlite) => readiness::sqlite_takes_a_write(&sqlite.writer).await,
            Self::MySql(_) => Ok(()),
        }
    }

    /// The database clock, at millisecond precision. All times the service
    /// stores come from this clock, never the host's, so several instances
    /// agree on what "now" is.
    pub async fn now(&self) -> Result<chrono::NaiveDateTime, sqlx::Error> {
        let sql = format!("SELECT {}", dialect::now_ms(self.backend()));
        with_pool!(self, reader, |pool| {
            sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                .fetch_one(pool)
                .await
        })
    }

    /// Closes every pool, waiting for checked-out connections to return.
    pub async fn close(&self) {
        match self {
            Self::Sqlite(sqlite) => {
                sqlite.writer.close().await;
                sqlite.reader.close().await;
            }
            Self::MySql(mysql) => mysql.pool.close().await,
        }
    }
}

/// `count` bind placeholders for an `IN (...)` list: `?, ?, ?`.
pub(crate) fn placeholders(count: usize) -> String {
    vec!["?"; count].join(", ")
}

/// `statuses` as an SQL list of string literals (`'A', 'B'`), for an `IN`
/// over fixed status names (never user input).
pub(crate) fn status_list(statuses: &[crate::domain::BindingStatus]) -> String {
    statuses
        .iter()
        .map(|status| format!("'{}'", status.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether an error is a unique-key violation. Classified by kind, not by
/// constraint name, which SQLite and MySQL do not report alike.
pub fn is_unique_violation(err: &sqlx::Error) -> bool {
    err.as_database_error()
        .is_some_and(|db| matches!(db.kind(), sqlx::error::ErrorKind::UniqueViolation))
}

/// Whether an error means "lost a race for locks; trying again may work":
/// an InnoDB deadlock or Galera certification conflict (1213), a lock-wait
/// timeout (1205), a Galera node not ready yet (1047, 1180), a deadlock or
/// lock wait on an AUTO-INC lock (1467), or SQLite busy or locked
/// ([`Conflict`]).
pub fn is_retryable_conflict(err: &sqlx::Error) -> bool {
    Conflict::of(err).is_some()
}

/// Whether an error means the database cannot be used right now, rather
/// than that the statement was wrong: no connection (refused, dropped, a
/// pool that timed out or closed), a server shutting down (1053), a Galera
/// node not ready or not in the cluster (1047, 1180), a race for locks lost
/// on every retry, or SQLite unable to write its file (read-only, I/O
/// error, disk full, cannot open). The caller may try again later.
pub fn is_unavailable(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db_error) => {
            // A lost lock race past every retry, or a Galera node not ready
            // ([`Conflict`]), or a server shutting down.
            if let Some(mysql) = db_error.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
                return mysql.number() == 1053 || Conflict::of(err).is_some();
            }
            // SQLite's extended codes keep the primary code in the low byte.
            db_error
                .code()
                .and_then(|code| code.parse::<i64>().ok())
                .is_some_and(|code| matches!(code & 0xff, 5 | 6 | 8 | 10 | 13 | 14))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    fn versions(dir: &str) -> BTreeSet<String> {
        std::fs::read_dir(format!("{}/migrations/{dir}", env!("CARGO_MANIFEST_DIR")))
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn both_backends_have_the_same_migrations() {
        let sqlite = versions("sqlite");
        assert!(!sqlite.is_empty());
        assert_eq!(sqlite, versions("mysql"));
    }

    #[test]
    fn url_schemes() {
        use super::Backend;
        assert_eq!(Backend::of_url("sqlite://data/x.db"), Some(Backend::Sqlite));
        assert_eq!(Backend::of_url("sqlite::memory:"), Some(Backend::Sqlite));
        assert_eq!(
            Backend::of_url("mysql://root@127.0.0.1/x"),
            Some(Backend::MySql)
        );
        assert_eq!(
            Backend::of_url("mariadb://root@127.0.0.1/x"),
            Some(Backend::MySql)
        );
        assert_eq!(Backend::of_url("postgres://x"), None);
    }
}
