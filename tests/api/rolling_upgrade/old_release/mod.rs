//! An instance of the release whose schema ended at migration 0008, as far
//! as its database goes: its migrations, and the SQL it ran, from
//! `tests/fixtures/releases/through-0008/`. Rows decode into the shapes that
//! release's code declared, so a column it reads that is gone, renamed or of
//! another type fails here as it would have failed there.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use chrono::NaiveDateTime;
use sqlx::migrate::Migrator;
use sqlx::mysql::{MySqlConnection, MySqlPool, MySqlRow};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteRow, SqliteSynchronous,
};
use sqlx::{AssertSqlSafe, FromRow, MySql, Sqlite, Transaction};

use changegate::db::{MYSQL_MIGRATIONS, SQLITE_MIGRATIONS};
use changegate::domain::StepStatus;

fn release_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/releases/through-0008")
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

/// An operation row as that release's `OperationRow` read it.
#[derive(Debug, Clone, FromRow)]
#[allow(
    dead_code,
    reason = "every column is decoded as the release did; only some are asserted on"
)]
pub struct OperationRow {
    pub id: i64,
    pub operation_id: String,
    pub kind: String,
    pub subject_id: String,
    pub target_key: String,
    pub requested_by: String,
    pub flow_order: String,
    pub step_code: i32,
    pub message: Option<String>,
    pub params: String,
    pub reason: String,
    pub expires_at: Option<NaiveDateTime>,
    pub mr_iid: Option<i64>,
    pub mr_url: Option<String>,
    pub version: i64,
    pub due_at: Option<NaiveDateTime>,
    pub attempts: i32,
    pub created_at: NaiveDateTime,
    pub updated_at: NaiveDateTime,
}

/// A binding row as that release's `BindingRow` read it.
#[derive(Debug, Clone, FromRow)]
#[allow(
    dead_code,
    reason = "every column is decoded as the release did; only some are asserted on"
)]
pub struct BindingRow {
    pub id: i64,
    pub subject_id: String,
    pub target_key: String,
    pub operation_id: String,
    pub status: String,
    pub requested_by: String,
    pub params: String,
    pub expires_at: Option<NaiveDateTime>,
    pub version: i64,
    pub created_at: NaiveDateTime,
    pub updated_at: NaiveDateTime,
}

/// The status answer's row: the operation, its binding and its batch.
#[derive(Debug, Clone, FromRow)]
pub struct OperationPage {
    #[sqlx(flatten)]
    pub operation: OperationRow,
    pub binding_status: Option<String>,
    #[allow(dead_code, reason = "decoded as the release did")]
    pub binding_owner: Option<String>,
    #[allow(dead_code, reason = "decoded as the release did")]
    pub batch_id: Option<i64>,
}

/// A row of the operators' listing.
#[derive(Debug, Clone, FromRow)]
#[allow(dead_code, reason = "decoded as the release did")]
struct ListedOperation {
    #[sqlx(flatten)]
    operation: OperationRow,
    binding_status: Option<String>,
    binding_owner: Option<String>,
}

/// An outbox event as the webhook relay read it.
#[derive(Debug, Clone, FromRow)]
#[allow(dead_code, reason = "decoded as the release did")]
struct EventRow {
    id: i64,
    event_type: String,
    operation_id: String,
    subject_id: String,
    target_key: String,
    from_status: Option<String>,
    to_status: String,
    payload: String,
    created_at: NaiveDateTime,
}

/// A step's name, as the event payload carries it.
fn step_name(code: i64) -> &'static str {
    i32::try_from(code)
        .ok()
        .and_then(|code| StepStatus::from_code(code).ok())
        .map_or("UNKNOWN", StepStatus::name)
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

/// A transaction as that release began it: `BEGIN IMMEDIATE` on SQLite,
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
fn release_migrator(embedded: &Migrator) -> anyhow::Result<Migrator> {
    let names = std::fs::read_to_string(release_dir().join("migrations.txt"))?;
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

/// What a request of the old release holds.
pub struct OldRequest<'a> {
    pub operation_id: &'a str,
    pub subject_id: &'a str,
    pub target_key: &'a str,
    pub requested_by: &'a str,
}

/// Where a write of the old release moves an operation.
pub struct OldStep<'a> {
    /// The binding's new status, if it changes.
    pub status: Option<&'a str>,
    pub step_code: i64,
    /// Whether the workflow runs the step at once (else it waits outside).
    pub due_now: bool,
}

/// Step codes of that release (its `src/domain/step.rs`) that the test writes.
pub mod steps {
    pub const ACCEPTED: i64 = 10001;
    pub const BUSY_REJECTED: i64 = 10002;
    pub const APPROVAL_SENT: i64 = 10004;
    pub const QUEUED: i64 = 10007;
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

/// The database as an instance of the old release used it.
pub struct OldRelease {
    pool: Pool,
    statements: HashMap<String, String>,
}

impl OldRelease {
    /// Creates the database at `url` as the old release left a fresh one:
    /// its migrations applied, nothing else.
    pub async fn create(url: &str) -> anyhow::Result<Self> {
        let (pool, file) = if url.starts_with("sqlite:") {
            // As that release opened SQLite (its src/db/open.rs).
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
            release_migrator(&SQLITE_MIGRATIONS)?.run(&pool).await?;
            (Pool::Sqlite(pool), "sqlite.sql")
        } else {
            let pool = MySqlPool::connect(url).await?;
            release_migrator(&MYSQL_MIGRATIONS)?.run(&pool).await?;
            (Pool::MySql(pool), "mysql.sql")
        };
        let text = std::fs::read_to_string(release_dir().join(file))?;
        Ok(Self {
            pool,
            statements: parse_statements(&text)?,
        })
    }

    fn sql(&self, name: &str) -> &str {
        self.statements
            .get(name)
            .unwrap_or_else(|| panic!("the release's SQL has no {name}"))
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

    /// The outbox event and history entry of a flip, in its transaction.
    async fn record_flip(
        &self,
        tx: &mut Tx,
        operation: (&str, &str, &str),
        from: (Option<i64>, Option<&str>),
        to: (i64, &str),
        version: i64,
        actor: &str,
    ) -> anyhow::Result<()> {
        let (operation_id, subject_id, target_key) = operation;
        let payload = serde_json::json!({
            "operationId": operation_id,
            "subjectId": subject_id,
            "targetKey": target_key,
            "from": from.1,
            "to": to.1,
            "step": { "code": to.0, "name": step_name(to.0) },
        })
        .to_string();
        self.write_in(
            tx,
            "append_event",
            &[
                "binding.status_changed".into(),
                operation_id.into(),
                subject_id.into(),
                target_key.into(),
                from.1.into(),
                to.1.into(),
                payload.as_str().into(),
            ],
        )
        .await?;
        self.write_in(
            tx,
            "append_history",
            &[
                operation_id.into(),
                from.0.map_or(Value::Null, Value::Int),
                to.0.into(),
                from.1.into(),
                to.1.into(),
                version.into(),
                actor.into(),
                Value::Null,
            ],
        )
        .await?;
        Ok(())
    }

    /// A new apply, as that release's submit wrote it: APPROVAL_SENDING at
    /// ACCEPTED, due now.
    pub async fn submit(&self, request: &OldRequest<'_>) -> anyhow::Result<()> {
        let mut tx = self.begin().await?;
        self.write_in(
            &mut tx,
            "insert_operation",
            &[
                request.operation_id.into(),
                "APPLY".into(),
                request.subject_id.into(),
                request.target_key.into(),
                request.requested_by.into(),
                "approval_first".into(),
                steps::ACCEPTED.into(),
                "{}".into(),
                REASON.into(),
                Value::Null,
            ],
        )
        .await?;
        self.write_in(
            &mut tx,
            "insert_binding",
            &[
                request.subject_id.into(),
                request.target_key.into(),
                request.operation_id.into(),
                "APPROVAL_SENDING".into(),
                request.requested_by.into(),
                "{}".into(),
                Value::Null,
            ],
        )
        .await?;
        self.record_flip(
            &mut tx,
            (request.operation_id, request.subject_id, request.target_key),
            (None, None),
            (steps::ACCEPTED, "APPROVAL_SENDING"),
            1,
            request.requested_by,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// A removal of `applied`'s live binding, as that release's submit
    /// wrote it: the binding reset in place to a new CLOSE operation.
    pub async fn close(&self, applied: &OldRequest<'_>, close_id: &str) -> anyhow::Result<()> {
        let mut tx = self.begin().await?;
        let binding = self
            .read_in::<BindingRow>(&mut tx, "lock_binding_of", &[applied.operation_id.into()])
            .await?
            .pop()
            .context("the applied binding")?;
        self.write_in(
            &mut tx,
            "insert_operation",
            &[
                close_id.into(),
                "CLOSE".into(),
                applied.subject_id.into(),
                applied.target_key.into(),
                applied.requested_by.into(),
                "approval_first".into(),
                steps::CLOSE_REQUESTED.into(),
                "{}".into(),
                REASON.into(),
                Value::Null,
            ],
        )
        .await?;
        let reset = self
            .write_in(
                &mut tx,
                "reset_binding",
                &[
                    close_id.into(),
                    "CLOSING".into(),
                    binding.requested_by.as_str().into(),
                    binding.params.as_str().into(),
                    Value::Null,
                    binding.id.into(),
                    binding.status.as_str().into(),
                    binding.version.into(),
                ],
            )
            .await?;
        ensure!(reset == 1, "the binding moved meanwhile");
        self.record_flip(
            &mut tx,
            (close_id, applied.subject_id, applied.target_key),
            (None, Some(binding.status.as_str())),
            (steps::CLOSE_REQUESTED, "CLOSING"),
            1,
            applied.requested_by,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// One write of that release's transition: the operation to
    /// `to.step_code`, its binding to `to.status`, under both locks.
    pub async fn transition(&self, operation_id: &str, to: &OldStep<'_>) -> anyhow::Result<()> {
        let mut tx = self.begin().await?;
        let operation = self
            .read_in::<OperationRow>(&mut tx, "lock_operation", &[operation_id.into()])
            .await?
            .pop()
            .context("the operation")?;
        let binding = self
            .read_in::<BindingRow>(&mut tx, "lock_binding_of", &[operation_id.into()])
            .await?
            .pop()
            .context("its binding")?;
        let step = if to.due_now {
            "update_operation_step_due_now"
        } else {
            "update_operation_step_waiting"
        };
        let moved = self
            .write_in(
                &mut tx,
                step,
                &[
                    to.step_code.into(),
                    Value::Null,
                    operation_id.into(),
                    operation.version.into(),
                ],
            )
            .await?;
        ensure!(moved == 1, "{operation_id} moved meanwhile");
        if let Some(status) = to.status {
            let flipped = self
                .write_in(
                    &mut tx,
                    "update_binding_status",
                    &[status.into(), binding.id.into(), binding.version.into()],
                )
                .await?;
            ensure!(
                flipped == 1,
                "the binding of {operation_id} moved meanwhile"
            );
            self.record_flip(
                &mut tx,
                (operation_id, &operation.subject_id, &operation.target_key),
                (
                    Some(operation.step_code.into()),
                    Some(binding.status.as_str()),
                ),
                (to.step_code, status),
                operation.version + 1,
                "workflow",
            )
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Records the operation's MR, as the create step did.
    pub async fn record_merge_request(
        &self,
        operation_id: &str,
        iid: i64,
        url: &str,
    ) -> anyhow::Result<()> {
        let version = self.page(operation_id).await?.operation.version;
        let recorded = self
            .write(
                "record_merge_request",
                &[iid.into(), url.into(), operation_id.into(), version.into()],
            )
            .await?;
        ensure!(recorded == 1, "{operation_id} moved meanwhile");
        Ok(())
    }

    /// Puts an approved request in the merge queue's waiting set.
    pub async fn enqueue(&self, operation_id: &str, project: &str) -> anyhow::Result<()> {
        let inserted = self
            .write("enqueue", &[operation_id.into(), "".into(), project.into()])
            .await?;
        ensure!(inserted == 1, "{operation_id} was queued already");
        Ok(())
    }

    /// Takes the operation's lease as a worker did, and gives it back;
    /// another instance may hold it (an instance of the current release
    /// already running the step), which a worker took as a normal answer.
    pub async fn take_and_release_lease(&self, operation_id: &str) -> anyhow::Result<()> {
        let owner = "previous-release";
        let taken = self
            .write(
                "acquire_lease",
                &[
                    owner.into(),
                    30_000.into(),
                    operation_id.into(),
                    owner.into(),
                ],
            )
            .await?;
        if taken == 1 {
            self.write("release_lease", &[operation_id.into(), owner.into()])
                .await?;
        }
        Ok(())
    }

    /// The status answer's row of `operation_id`.
    pub async fn page(&self, operation_id: &str) -> anyhow::Result<OperationPage> {
        self.read::<OperationPage>("operation_page", &[operation_id.into()])
            .await?
            .pop()
            .with_context(|| format!("no operation {operation_id}"))
    }

    /// Every read of that release's instances once: the status answer of
    /// each of `operation_ids`, `requester`'s list, the operators' list and
    /// the background jobs' scans.
    pub async fn read_everything(
        &self,
        operation_ids: &[String],
        requester: &str,
    ) -> anyhow::Result<()> {
        for id in operation_ids {
            self.page(id).await?;
        }
        let listed: Vec<BindingRow> = self
            .read(
                "my_bindings",
                &[requester.into(), i64::MAX.into(), 50.into()],
            )
            .await?;
        if listed.is_empty() {
            bail!("{requester} has no bindings");
        }
        self.read::<ListedOperation>("operators_list", &[50.into()])
            .await?;
        self.read::<(String,)>("list_due", &[100.into()]).await?;
        self.read::<(String,)>("waiting_partitions", &[]).await?;
        self.read::<(i64,)>("runnable_batches", &[]).await?;
        self.read::<(String, String)>("list_expired", &[100.into()])
            .await?;
        self.read::<EventRow>("pending_events", &[100.into()])
            .await?;
        Ok(())
    }
}
