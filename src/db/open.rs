//! Opening a database from its URL, with errors a person can act on.

use std::str::FromStr;
use std::time::Duration;

use sqlx::Connection;
use sqlx::mysql::{MySqlPool, MySqlPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use super::mysql_url::MySqlUrl;
use super::{Backend, Db, SqliteDb};
use crate::config::DatabaseSettings;

/// How long a pooled MySQL connection may sit idle before it is pinged on
/// its next use.
const PING_AFTER_IDLE: Duration = Duration::from_secs(1);

/// Why the database could not be opened; each message is one actionable line.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The URL names an engine changegate does not support.
    #[error("unsupported database URL: use sqlite://PATH or mysql://USER:PASSWORD@HOST/DATABASE")]
    UnsupportedUrl,
    /// The URL is malformed.
    #[error("invalid database URL: {0}")]
    InvalidUrl(String),
    /// The SQLite file or its directory cannot be created or opened.
    #[error("cannot open SQLite database {path}: {reason} (check that the directory is writable)")]
    SqliteFile {
        /// The file path.
        path: String,
        /// What the operating system or SQLite said.
        reason: String,
    },
    /// The server is unreachable, refuses the login, or the database does not exist.
    #[error("cannot connect to the database: {0}")]
    Connect(String),
    /// A migration failed.
    #[error("database migration failed: {0}")]
    Migrate(String),
}

/// Connects and applies migrations.
pub async fn open(settings: &DatabaseSettings) -> Result<Db, OpenError> {
    let db = match Backend::of_url(&settings.url) {
        Some(Backend::Sqlite) => Db::Sqlite(open_sqlite(settings).await?),
        Some(Backend::MySql) => Db::MySql(open_mysql(settings).await?),
        None => return Err(OpenError::UnsupportedUrl),
    };
    if let Err(err) = db.migrate().await {
        db.close().await;
        return Err(OpenError::Migrate(err.to_string()));
    }
    Ok(db)
}

async fn open_mysql(settings: &DatabaseSettings) -> Result<MySqlPool, OpenError> {
    let url = MySqlUrl::parse(&settings.url).map_err(OpenError::InvalidUrl)?;
    MySqlPoolOptions::new()
        .max_connections(settings.max_connections)
        .acquire_timeout(settings.connect_timeout)
        // sqlx pings every pooled connection before handing it out: one
        // more round trip per query. As HikariCP does, only a connection
        // idle for a while is checked; one in steady use has just answered.
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= PING_AFTER_IDLE {
                    conn.ping().await?;
                }
                Ok(true)
            })
        })
        .connect_with(url.options)
        .await
        .map_err(|err| OpenError::Connect(err.to_string()))
}

async fn open_sqlite(settings: &DatabaseSettings) -> Result<SqliteDb, OpenError> {
    let options = SqliteConnectOptions::from_str(&settings.url)
        .map_err(|err| OpenError::InvalidUrl(err.to_string()))?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(settings.connect_timeout)
        .foreign_keys(true);
    let path = options.get_filename().to_path_buf();
    let file_error = |reason: String| OpenError::SqliteFile {
        path: path.display().to_string(),
        reason,
    };
    let in_memory = path.to_str() == Some(":memory:");
    if !in_memory && let Some(directory) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        std::fs::create_dir_all(directory).map_err(|err| file_error(err.to_string()))?;
    }
    let writer = SqlitePoolOptions::new()
        .max_connections(1)
        .acquire_timeout(settings.connect_timeout)
        .connect_with(options.clone())
        .await
        .map_err(|err| file_error(err.to_string()))?;
    // An in-memory database exists only inside its one connection.
    let reader = if in_memory {
        writer.clone()
    } else {
        SqlitePoolOptions::new()
            .max_connections(settings.max_connections)
            .acquire_timeout(settings.connect_timeout)
            .connect_with(options.read_only(true))
            .await
            .map_err(|err| file_error(err.to_string()))?
    };
    Ok(SqliteDb { writer, reader })
}
