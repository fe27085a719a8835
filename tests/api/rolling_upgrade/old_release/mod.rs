//! An instance of an earlier release, as far as its database goes: its
//! migrations, and the SQL it ran, from `tests/fixtures/releases/<release>/`.
//! Rows decode into the shapes that release's code declared, so a column it
//! reads that is gone, renamed or of another type fails here as it would
//! have failed there.

mod instance;
mod outages;
mod queue;
mod requests;
mod rows;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use anyhow::{Context, ensure};
use sqlx::migrate::Migrator;
use sqlx::mysql::{MySqlConnection, MySqlPool, MySqlRow};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteRow, SqliteSynchronous,
};
use sqlx::{AssertSqlSafe, FromRow, MySql, Sqlite, Transaction};

use changegate::db::{MYSQL_MIGRATIONS, SQLITE_MIGRATIONS};

pub use instance::{OldInstance, this_host};
pub use outages::UNREACHABLE;
pub use requests::{OldRequest, OldStep};

/// A release whose database the upgrade starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Migrations 0001–0008.
    Through0008,
    /// Migrations 0001–0012: obstacles (0009), lease owners named by seat
    /// (0010), deploy reports per project (0011), outage clocks and settle
    /// counts (0012).
    Through0012,
}

impl Release {
    /// Its folder under `tests/fixtures/releases/`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Through0008 => "through-0008",
            Self::Through0012 => "through-0012",
        }
    }

    fn dir(self) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/releases")
            .join(self.name())
    }
}

/// A value bound to a `?` of a statement.
#[derive(Debug, Clone)]
pub enum Value {
    Text(String),
    Int(i64),
    Null,
}

impl From<&str> for Value {
    fn from(text: &str) -> Self {
        Self::Text(text.to_owned())
    }
}

impl From<i64> for Value {
    fn from(number: i64) -> Self {
        Self::Int(number)
    }
}

impl From<Option<&str>> for Value {
    fn from(text: Option<&str>) -> Self {
        text.map_or(Self::Null, Value::from)
    }
}

/// A decoded row of either backend.
trait OldRow: for<'r> FromRow<'r, SqliteRow> + for<'r> FromRow<'r, MySqlRow> + Send + Unpin {}
impl<T> OldRow for T where
    T: for<'r> FromRow<'r, SqliteRow> + for<'r> FromRow<'r, MySqlRow> + Send + Unpin
{
}

enum Pool {
    Sqlite(SqlitePool),
    MySql(MySqlPool),
}

/// One connection or transaction of either backend.
enum Conn<'c> {
    Sqlite(&'c mut SqliteConnection),
    MySql(&'c mut MySqlConnection),
}

/// A transaction as those releases began it: `BEGIN IMMEDIATE` on SQLite,
/// so it never has to upgrade a read lock while another writer works.
enum Tx {
    Sqlite(Transaction<'static, Sqlite>),
    MySql(Transaction<'static, MySql>),
}

impl Tx {
    fn conn(&mut self) -> Conn<'_> {
        match self {
            Self::Sqlite(tx) => Conn::Sqlite(tx),
            Self::MySql(tx) => Conn::MySql(tx),
        }
    }

    async fn commit(self) -> Result<(), sqlx::Error> {
        match self {
            Self::Sqlite(tx) => tx.commit().await,
            Self::MySql(tx) => tx.commit().await,
        }
    }
}

macro_rules! bound {
    ($query:expr, $values:expr) => {{
        let mut query = $query;
        for value in $values {
            query = match value {
                Value::Text(text) => query.bind(text.clone()),
                Value::Int(number) => query.bind(*number),
                Value::Null => query.bind(None::<String>),
            };
        }
        query
    }};
}

impl Conn<'_> {
    async fn execute(&mut self, sql: &str, values: &[Value]) -> Result<u64, sqlx::Error> {
        let sql = AssertSqlSafe(sql.to_owned());
        match self {
            Self::Sqlite(conn) => bound!(sqlx::query(sql), values)
                .execute(&mut **conn)
                .await
                .map(|done| done.rows_affected()),
            Self::MySql(conn) => bound!(sqlx::query(sql), values)
                .execute(&mut **conn)
                .await
                .map(|done| done.rows_affected()),
        }
    }

    /// Executes an INSERT; the id it generated.
    async fn insert(&mut self, sql: &str, values: &[Value]) -> Result<i64, sqlx::Error> {
        let sql = AssertSqlSafe(sql.to_owned());
        match self {
            Self::Sqlite(conn) => bound!(sqlx::query(sql), values)
                .execute(&mut **conn)
                .await
                .map(|done| done.last_insert_rowid()),
            Self::MySql(conn) => bound!(sqlx::query(sql), values)
                .execute(&mut **conn)
                .await
                .map(|done| i64::try_from(done.last_insert_id()).unwrap_or(i64::MAX)),
        }
    }

    async fn fetch<T: OldRow>(
        &mut self,
        sql: &str,
        values: &[Value],
    ) -> Result<Vec<T>, sqlx::Error> {
        let sql = AssertSqlSafe(sql.to_owned());
        match self {
            Self::Sqlite(conn) => {
                bound!(sqlx::query_as(sql), values)
                    .fetch_all(&mut **conn)
                    .await
            }
            Self::MySql(conn) => {
                bound!(sqlx::query_as(sql), values)
                    .fetch_all(&mut **conn)
                    .await
            }
        }
    }
}

/// Names the statements of a fixture file: `-- name: origin`, the
/// statement, a blank line.
fn parse_statements(text: &str) -> anyhow::Result<HashMap<String, String>> {
    let mut statements = HashMap::new();
    for block in text.split("\n\n").map(str::trim).filter(|b| !b.is_empty()) {
        let (header, sql) = block
            .split_once('\n')
            .context("a statement after its name")?;
        let name = header
            .strip_prefix("-- ")
            .and_then(|rest| rest.split_once(':'))
            .map(|(name, _)| name.to_owned())
            .with_context(|| format!("`-- name: origin` expected, found {header:?}"))?;
        let sql = sql.trim().trim_end_matches(';').to_owned();
        ensure!(
            statements.insert(name.clone(), sql).is_none(),
            "{name} twice"
        );
    }
    Ok(statements)
}

/// The release's migrations, from the embedded set: released migrations never
/// change (`migrations_released.rs`), so these are the files it shipped.
fn release_migrator(release: Release, embedded: &Migrator) -> anyhow::Result<Migrator> {
    let names = std::fs::read_to_string(release.dir().join("migrations.txt"))?;
    let mut migrations = Vec::new();
    for name in names.lines().filter(|line| !line.is_empty()) {
        let found = embedded
            .iter()
            .find(|m| format!("{:04}_{}", m.version, m.description.replace(' ', "_")) == name)
            .with_context(|| format!("the release's migration {name} is not embedded"))?;
        migrations.push(found.clone());
    }
    let mut migrator = Migrator::with_migrations(migrations);
    // MariaDB refuses the migrator's GET_LOCK(name, -1); one test migrates alone.
    migrator.set_locking(false);
    Ok(migrator)
}

/// Step codes of those releases (their `src/domain/step.rs`, alike for
/// these) that the test writes.
pub mod steps {
    pub const ACCEPTED: i64 = 10001;
    pub const BUSY_REJECTED: i64 = 10002;
    pub const APPROVAL_SENT: i64 = 10004;
    pub const QUEUED: i64 = 10007;
    pub const MR_CREATING: i64 = 10008;
    pub const MR_CREATED: i64 = 10009;
    pub const CREATE_REFUSED: i64 = 10012;
    pub const HANDLE_STARTED: i64 = 10101;
    pub const HANDLE_MERGED: i64 = 10104;
    pub const HANDLE_MERGE_REFUSED: i64 = 10107;
    pub const CLOSE_REQUESTED: i64 = 10201;
    pub const CLOSED: i64 = 10204;
    pub const CLOSE_FAILED: i64 = 10205;
    pub const CALLED_BACK_REJECTED: i64 = 10302;
    pub const DEPLOY_CONFIRMED: i64 = 10304;
    pub const MANUAL_ABANDONED: i64 = 10505;
}

/// The `reason` of the operations the test writes as the old release.
pub const REASON: &str = "written by the previous release";

/// The database as instances of the old release used it.
pub struct OldRelease {
    release: Release,
    pool: Pool,
    statements: HashMap<String, String>,
}

impl OldRelease {
    /// Creates the database at `url` as `release` left a fresh one: its
    /// migrations applied, nothing else.
    pub async fn create(url: &str, release: Release) -> anyhow::Result<Self> {
        let (pool, file) = if url.starts_with("sqlite:") {
            // As those releases opened SQLite (their src/db/open.rs).
            let options = SqliteConnectOptions::from_str(url)?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal)
                .busy_timeout(Duration::from_secs(10))
                .foreign_keys(true);
            let pool = SqlitePoolOptions::new()
                .max_connections(4)
                .connect_with(options)
                .await?;
            release_migrator(release, &SQLITE_MIGRATIONS)?
                .run(&pool)
                .await?;
            (Pool::Sqlite(pool), "sqlite.sql")
        } else {
            let pool = MySqlPool::connect(url).await?;
            release_migrator(release, &MYSQL_MIGRATIONS)?
                .run(&pool)
                .await?;
            (Pool::MySql(pool), "mysql.sql")
        };
        let text = std::fs::read_to_string(release.dir().join(file))?;
        Ok(Self {
            release,
            pool,
            statements: parse_statements(&text)?,
        })
    }

    /// Which release it is.
    pub fn release(&self) -> Release {
        self.release
    }

    fn sql(&self, name: &str) -> &str {
        self.statements
            .get(name)
            .unwrap_or_else(|| panic!("the SQL of release {} has no {name}", self.release.name()))
    }

    async fn begin(&self) -> Result<Tx, sqlx::Error> {
        Ok(match &self.pool {
            Pool::Sqlite(pool) => Tx::Sqlite(pool.begin_with("BEGIN IMMEDIATE").await?),
            Pool::MySql(pool) => Tx::MySql(pool.begin().await?),
        })
    }

    async fn read<T: OldRow>(&self, name: &str, values: &[Value]) -> anyhow::Result<Vec<T>> {
        let rows = match &self.pool {
            Pool::Sqlite(pool) => {
                Conn::Sqlite(&mut *pool.acquire().await?)
                    .fetch(self.sql(name), values)
                    .await
            }
            Pool::MySql(pool) => {
                Conn::MySql(&mut *pool.acquire().await?)
                    .fetch(self.sql(name), values)
                    .await
            }
        };
        rows.with_context(|| format!("the previous release's {name}"))
    }

    async fn write(&self, name: &str, values: &[Value]) -> anyhow::Result<u64> {
        let done = match &self.pool {
            Pool::Sqlite(pool) => {
                Conn::Sqlite(&mut *pool.acquire().await?)
                    .execute(self.sql(name), values)
                    .await
            }
            Pool::MySql(pool) => {
                Conn::MySql(&mut *pool.acquire().await?)
                    .execute(self.sql(name), values)
                    .await
            }
        };
        done.with_context(|| format!("the previous release's {name}"))
    }

    async fn write_in(&self, tx: &mut Tx, name: &str, values: &[Value]) -> anyhow::Result<u64> {
        tx.conn()
            .execute(self.sql(name), values)
            .await
            .with_context(|| format!("the previous release's {name}"))
    }

    async fn insert_in(&self, tx: &mut Tx, name: &str, values: &[Value]) -> anyhow::Result<i64> {
        tx.conn()
            .insert(self.sql(name), values)
            .await
            .with_context(|| format!("the previous release's {name}"))
    }

    async fn read_in<T: OldRow>(
        &self,
        tx: &mut Tx,
        name: &str,
        values: &[Value],
    ) -> anyhow::Result<Vec<T>> {
        tx.conn()
            .fetch(self.sql(name), values)
            .await
            .with_context(|| format!("the previous release's {name}"))
    }
}
