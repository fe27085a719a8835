//! Opening a database from its URL, with errors a person can act on.

use std::str::FromStr;
use std::time::Duration;

use rustls::CertificateError;
use sqlx::mysql::{MySqlConnection, MySqlDatabaseError, MySqlPool, MySqlPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{ConnectOptions, Connection, Executor, MySql};

use super::failover::Nodes;
use super::mysql_url::MySqlUrl;
use super::readiness::rewrite_user_version;
use super::{Backend, Db, MySqlDb, SqliteDb};
use crate::config::DatabaseSettings;

/// How long a pooled MySQL connection may sit idle before it is pinged on
/// its next use.
const PING_AFTER_IDLE: Duration = Duration::from_secs(1);

/// MySQL's `ER_SECURE_TRANSPORT_REQUIRED`. MariaDB 10.11 has no such error:
/// it refuses an unencrypted login with 1045, as it refuses a wrong password.
const ER_SECURE_TRANSPORT_REQUIRED: u16 = 3159;
/// `ER_ACCESS_DENIED_ERROR`.
const ER_ACCESS_DENIED: u16 = 1045;

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
    /// The server refuses unencrypted connections and the URL disables TLS.
    #[error(
        "the MySQL server requires TLS: add ssl-mode=VERIFY_IDENTITY (and ssl-ca=PATH) to database.url"
    )]
    TlsRequired,
    /// The server's certificate chains to no CA the client trusts.
    #[error("the MySQL server's certificate is not trusted: {}", match .ca {
        None => "set ssl-ca=PATH in database.url (the CA that signed it)".to_owned(),
        Some(ca) => format!("it is not signed by the CA in ssl-ca={ca}: set ssl-ca to the CA that signed it"),
    })]
    CertificateNotTrusted {
        /// The `ssl-ca` file the URL names, if any.
        ca: Option<String>,
    },
    /// The server's certificate does not name the host the URL connects to.
    #[error(
        "the MySQL server's certificate is not valid for {host}: use a host name the certificate \
         lists in database.url (or ssl-mode=VERIFY_CA to check only who signed it)"
    )]
    CertificateName {
        /// The host in the URL.
        host: String,
    },
    /// Any other TLS failure (an expired certificate, a server without TLS).
    #[error("TLS with the MySQL server failed: {0}")]
    Tls(String),
    /// A certificate or key file named in the URL cannot be read.
    #[error("cannot read {parameter}={path} from database.url: {reason}")]
    TlsFile {
        /// `ssl-ca`, `ssl-cert` or `ssl-key`.
        parameter: &'static str,
        /// The path as written.
        path: String,
        /// What the operating system said.
        reason: String,
    },
    /// A migration failed.
    #[error("database migration failed: {0}")]
    Migrate(String),
}

/// Connects and applies migrations.
pub async fn open(settings: &DatabaseSettings) -> Result<Db, OpenError> {
    let db = connect(settings).await?;
    if let Err(err) = db.migrate().await {
        db.close().await;
        return Err(OpenError::Migrate(err.to_string()));
    }
    Ok(db)
}

/// Connects without applying migrations: for a tool that must leave the
/// schema as it is (a backup taken before an upgrade's migrations).
pub async fn connect(settings: &DatabaseSettings) -> Result<Db, OpenError> {
    Ok(match Backend::of_url(&settings.url) {
        Some(Backend::Sqlite) => Db::Sqlite(open_sqlite(settings).await?),
        Some(Backend::MySql) => {
            let pool = open_mysql(settings).await?;
            let galera = is_galera_node(&pool).await;
            Db::MySql(MySqlDb { pool, galera })
        }
        None => return Err(OpenError::UnsupportedUrl),
    })
}

async fn open_mysql(settings: &DatabaseSettings) -> Result<MySqlPool, OpenError> {
    let url = MySqlUrl::parse(&settings.url).map_err(OpenError::InvalidUrl)?;
    for (parameter, path) in &url.files {
        if let Err(err) = tokio::fs::File::open(path).await {
            return Err(OpenError::TlsFile {
                parameter,
                path: path.display().to_string(),
                reason: err.to_string(),
            });
        }
    }
    // With several nodes, the first healthy one (the first, if none is: its
    // error is the one to report).
    let nodes = Nodes::of(settings, &url);
    let node = if settings.failover_hosts.is_empty() {
        nodes.first().clone()
    } else {
        nodes.first_healthy().await.unwrap_or(nodes.first()).clone()
    };
    let sync_wait = settings.galera_sync_wait;
    let connected = MySqlPoolOptions::new()
        .max_connections(settings.max_connections)
        .acquire_slow_level(SLOW_STATEMENT_LEVEL)
        .after_connect(move |conn, _| {
            Box::pin(async move { read_your_writes(conn, sync_wait).await })
        })
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
        .connect_with(node)
        .await;
    match connected {
        Ok(pool) => {
            log_autoinc_lock_mode(&pool).await;
            Ok(pool)
        }
        Err(err) => Err(mysql_connect_error(err, &url, settings.connect_timeout).await),
    }
}

/// Says once, at start-up, how InnoDB locks for auto-increment values: with
/// mode 0 every insert into a table with an AUTO_INCREMENT key takes the
/// table's AUTO-INC lock until it ends, so concurrent requests queue on it
/// (their lost races are retried as MySQL 1467); with 1 (MariaDB's default)
/// only inserts of unknown row count do, and changegate sends none on its
/// hot paths; 2 (MySQL 8's default) takes none and is recommended. Only
/// said: changegate works with each of them.
async fn log_autoinc_lock_mode(pool: &MySqlPool) {
    match sqlx::query_scalar::<_, i64>("SELECT CAST(@@innodb_autoinc_lock_mode AS SIGNED)")
        .fetch_one(pool)
        .await
    {
        Ok(2) => tracing::info!(
            innodb_autoinc_lock_mode = 2,
            "InnoDB auto-increment locking"
        ),
        Ok(mode) => tracing::info!(
            innodb_autoinc_lock_mode = mode,
            "InnoDB auto-increment locking; 2 (interleaved) is recommended: concurrent inserts \
             then never wait on a table's AUTO-INC lock"
        ),
        Err(err) => tracing::debug!("cannot read innodb_autoinc_lock_mode: {err}"),
    }
}

/// Whether the server is a Galera node (`@@wsrep_on`; MySQL has no such
/// variable). When it cannot be told, it is taken to be one: that only
/// costs the one-round-trip transactions ([`Db::script_pool`]).
async fn is_galera_node(pool: &MySqlPool) -> bool {
    match wsrep_on(pool).await {
        Ok(galera) => galera,
        Err(err) => {
            tracing::warn!(
                "cannot tell whether the database is a Galera node ({err}); writing every transaction statement by statement"
            );
            true
        }
    }
}

/// On a Galera node, makes `conn` wait before each read until the node has
/// applied every write the cluster acknowledged (`wsrep_sync_wait`): without
/// it, a read on one node right after a write on another may miss it (a
/// request just answered 202 on one instance, then 404 on the next). It
/// costs each read a wait for the node's replication queue.
async fn read_your_writes(conn: &mut MySqlConnection, sync_wait: u32) -> Result<(), sqlx::Error> {
    if wsrep_on(&mut *conn).await? {
        sqlx::query("SET SESSION wsrep_sync_wait = ?")
            .bind(sync_wait)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// Whether the server runs Galera replication (`@@wsrep_on`): MySQL has no
/// such variable, and a MariaDB server outside a cluster has it off.
pub(super) async fn wsrep_on<'c>(
    executor: impl Executor<'c, Database = MySql>,
) -> Result<bool, sqlx::Error> {
    match sqlx::query_scalar::<_, Option<i64>>("SELECT @@wsrep_on")
        .fetch_one(executor)
        .await
    {
        Ok(on) => Ok(on == Some(1)),
        Err(err) if is_unknown_variable(&err) => Ok(false),
        Err(err) => Err(err),
    }
}

/// Whether `err` is MySQL's 1193, an unknown system variable (as
/// `wsrep_on` is on MySQL, which has no Galera).
pub(super) fn is_unknown_variable(err: &sqlx::Error) -> bool {
    err.as_database_error()
        .and_then(|db| db.try_downcast_ref::<MySqlDatabaseError>())
        .is_some_and(|e| e.number() == 1193)
}

/// The error for a failed MySQL connection; a TLS failure says what to change
/// in `database.url`.
async fn mysql_connect_error(err: sqlx::Error, url: &MySqlUrl, timeout: Duration) -> OpenError {
    match &err {
        sqlx::Error::Database(db_err) => {
            let number = db_err
                .try_downcast_ref::<MySqlDatabaseError>()
                .map(MySqlDatabaseError::number);
            let refused_without_tls = number == Some(ER_ACCESS_DENIED) && url.tls_disabled();
            if number == Some(ER_SECURE_TRANSPORT_REQUIRED)
                || (refused_without_tls && encrypted_login_works(url, timeout).await)
            {
                return OpenError::TlsRequired;
            }
        }
        sqlx::Error::Io(io) => {
            if let Some(tls) = io.get_ref().and_then(|inner| inner.downcast_ref()) {
                return tls_error(tls, url);
            }
        }
        sqlx::Error::Tls(reason) => return OpenError::Tls(reason.to_string()),
        _ => {}
    }
    OpenError::Connect(err.to_string())
}

fn tls_error(err: &rustls::Error, url: &MySqlUrl) -> OpenError {
    match err {
        rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => {
            OpenError::CertificateNotTrusted {
                ca: url.ssl_ca().map(|ca| ca.display().to_string()),
            }
        }
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => OpenError::CertificateName {
            host: url.options.get_host().to_owned(),
        },
        other => OpenError::Tls(other.to_string()),
    }
}

/// Whether the login refused without TLS succeeds with it: MariaDB answers
/// an unencrypted login to a server that requires TLS as it answers a wrong
/// password. The second try verifies no certificate: whoever could intercept
/// it could as well have read the unencrypted try that came first.
async fn encrypted_login_works(url: &MySqlUrl, timeout: Duration) -> bool {
    let Ok(options) = url.encrypted_login() else {
        return false;
    };
    match tokio::time::timeout(timeout, MySqlConnection::connect_with(&options)).await {
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
            true
        }
        _ => false,
    }
}

/// The file of the SQLite database at `url`; `None` for an in-memory one
/// or a URL that is not SQLite's.
pub fn sqlite_file(url: &str) -> Option<std::path::PathBuf> {
    if Backend::of_url(url) != Some(Backend::Sqlite) {
        return None;
    }
    let path = SqliteConnectOptions::from_str(url)
        .ok()?
        .get_filename()
        .to_path_buf();
    (path.to_str() != Some(":memory:")).then_some(path)
}

/// How much of the database file each connection reads through a memory
/// map. SQLite's own page cache is 2 MiB a connection; a year of data is
/// gigabytes, and a listing that looks up thousands of bindings by
/// operation id would copy each page from the operating system into that
/// small cache again and again (BENCHMARKS.md, "Cost as the data grows").
/// Mapped pages are shared by every connection and cost no memory of their
/// own beyond the operating system's file cache.
const SQLITE_MMAP_BYTES: u64 = 1 << 30;

/// A statement that takes longer than this is logged, at info, and so is a
/// wait for a pooled connection past sqlx's threshold: under contention a
/// statement waits on another's locks, and a burst queues for connections,
/// which is the database and the pool doing their job, not failing (sqlx
/// logs both at warn). Whether requests are too slow for the users is what
/// the latency metrics and their alerts tell.
pub(super) const SLOW_STATEMENT: Duration = Duration::from_secs(1);
/// The level of the slow-statement and slow-acquire log lines.
pub(super) const SLOW_STATEMENT_LEVEL: log::LevelFilter = log::LevelFilter::Info;

async fn open_sqlite(settings: &DatabaseSettings) -> Result<SqliteDb, OpenError> {
    let options = SqliteConnectOptions::from_str(&settings.url)
        .map_err(|err| OpenError::InvalidUrl(err.to_string()))?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(settings.connect_timeout)
        .foreign_keys(true)
        .pragma("mmap_size", SQLITE_MMAP_BYTES.to_string())
        .log_slow_statements(SLOW_STATEMENT_LEVEL, SLOW_STATEMENT);
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
        .acquire_slow_level(SLOW_STATEMENT_LEVEL)
        .max_connections(1)
        .acquire_timeout(settings.connect_timeout)
        .after_connect(|conn, _| Box::pin(refuse_read_only_writer(conn)))
        .after_release(|conn, _| Box::pin(discard_if_stuck_in_transaction(conn)));
    let writer =
        connect_sqlite_waiting_out_locks(writer, options.clone(), settings.connect_timeout)
            .await
            .map_err(|err| file_error(err.to_string()))?;
    // An in-memory database exists only inside its one connection.
    let reader = if in_memory {
        writer.clone()
    } else {
        let reader = SqlitePoolOptions::new()
            .acquire_slow_level(SLOW_STATEMENT_LEVEL)
            .max_connections(settings.max_connections)
            .acquire_timeout(settings.connect_timeout);
        connect_sqlite_waiting_out_locks(reader, options.read_only(true), settings.connect_timeout)
            .await
            .map_err(|err| file_error(err.to_string()))?
    };
    Ok(SqliteDb { writer, reader })
}

/// Connects `pool` to `options`, trying again while another process holds a
/// lock, until `timeout`. Switching a fresh file to WAL needs an exclusive
/// lock, and SQLite answers `SQLITE_BUSY` at once, without its busy handler,
/// when that wait could deadlock (a connection holding a shared lock while
/// another holds the reserved one): so several instances opening one new
/// file together (each migrating it, say) would fail at random without this.
async fn connect_sqlite_waiting_out_locks(
    pool: SqlitePoolOptions,
    options: SqliteConnectOptions,
    timeout: Duration,
) -> Result<sqlx::SqlitePool, sqlx::Error> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match pool.clone().connect_with(options.clone()).await {
            Err(err)
                if super::is_retryable_conflict(&err) && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            connected => return connected,
        }
    }
}

/// Fails a new writer connection that cannot write. SQLite silently opens a
/// file it cannot open for writing read-only, so a writer connected while the
/// storage refuses writes would refuse every write for as long as it lives,
/// after the storage is back too. The test change is rolled back: nothing is
/// written.
///
/// Another process holding the write lock past the busy timeout (one
/// applying migrations, say) proves the file writable: the connection is
/// taken as it is, and it waits for the lock when it writes.
async fn refuse_read_only_writer(conn: &mut SqliteConnection) -> Result<(), sqlx::Error> {
    match sqlx::raw_sql("BEGIN IMMEDIATE").execute(&mut *conn).await {
        Ok(_) => {}
        Err(err) if super::is_retryable_conflict(&err) => return Ok(()),
        Err(err) => return Err(err),
    }
    let rewritten = rewrite_user_version(conn).await;
    sqlx::raw_sql("ROLLBACK").execute(&mut *conn).await?;
    rewritten
}

/// Whether the writer connection may go back to the pool: not if sqlx still
/// counts it in a transaction. When a COMMIT fails on an I/O error (storage
/// read-only or full) SQLite has already rolled the transaction back, so
/// the ROLLBACK sqlx sends when the transaction is dropped fails too and
/// sqlx's count stays at one: every later `BEGIN` on that connection would be
/// refused, and it is the only writer. The ping waits for the ROLLBACK of a
/// transaction dropped just before, queued ahead of it.
async fn discard_if_stuck_in_transaction(conn: &mut SqliteConnection) -> Result<bool, sqlx::Error> {
    if conn.is_in_transaction() {
        conn.ping().await?;
    }
    let stuck = conn.is_in_transaction();
    if stuck {
        tracing::warn!(
            "the SQLite writer connection is stuck in a failed transaction: replacing it"
        );
    }
    Ok(!stuck)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> MySqlUrl {
        MySqlUrl::parse(text).unwrap()
    }

    fn certificate(error: CertificateError) -> rustls::Error {
        rustls::Error::InvalidCertificate(error)
    }

    #[test]
    fn certificate_failures_say_what_to_set() {
        let plain = url("mysql://db.internal/changegate?ssl-mode=VERIFY_IDENTITY");
        assert_eq!(
            tls_error(&certificate(CertificateError::UnknownIssuer), &plain).to_string(),
            "the MySQL server's certificate is not trusted: set ssl-ca=PATH in database.url (the CA that signed it)"
        );
        let with_ca =
            url("mysql://db.internal/changegate?ssl-mode=VERIFY_IDENTITY&ssl-ca=/etc/ssl/ca.pem");
        assert!(
            tls_error(&certificate(CertificateError::UnknownIssuer), &with_ca)
                .to_string()
                .contains("not signed by the CA in ssl-ca=/etc/ssl/ca.pem")
        );
        assert!(
            tls_error(&certificate(CertificateError::NotValidForName), &plain)
                .to_string()
                .starts_with("the MySQL server's certificate is not valid for db.internal:")
        );
        assert_eq!(
            tls_error(&certificate(CertificateError::Expired), &plain).to_string(),
            "TLS with the MySQL server failed: invalid peer certificate: Expired"
        );
    }
}
