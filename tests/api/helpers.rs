//! Test support: a fresh database per test on each backend, and a running app.

use changegate::clients::health::{Dependencies, System};
use changegate::clients::http::{
    Outbound, ProxyRules, SystemClient, Trust, install_crypto_provider,
};
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::sync::Once;
use std::time::Duration;

use changegate::app::{Application, Parts};
use changegate::config::{LiveConfig, Settings, source};
use changegate::db::{self, Db};
use tokio_util::sync::CancellationToken;

/// Environment variable with the MariaDB/MySQL server for tests, e.g.
/// `mysql://root@127.0.0.1:3306`.
pub const MYSQL_URL_VAR: &str = "CHANGEGATE_TEST_MYSQL_URL";
/// When set (CI sets it), a missing [`MYSQL_URL_VAR`] fails the tests instead
/// of skipping the MariaDB half.
pub const REQUIRE_MYSQL_VAR: &str = "CHANGEGATE_TEST_REQUIRE_MYSQL";

/// A database that exists for one test and is removed afterwards.
pub struct TestDb {
    /// Its URL, for starting an app on it.
    pub url: String,
    /// Connected and migrated.
    pub db: Db,
    /// Which backend, for assertion messages.
    pub name: &'static str,
    // Held only so the directory or database outlives the test.
    _sqlite_dir: Option<tempfile::TempDir>,
    _mysql: Option<MySqlScratch>,
}

/// Connects with test-friendly timeouts.
pub fn database_settings(url: &str) -> changegate::config::DatabaseSettings {
    // The wait for a pooled connection is the acquire timeout too: on a
    // loaded machine (the soak beside a build) 2 s ran out while racing
    // tasks held SQLite's one writer, and the test failed on the wait,
    // not on what it checks.
    let (settings, _) = settings_from(&format!(
        "[database]\nurl = {url:?}\nconnect_timeout = \"10s\"\nretry_max_interval = \"200ms\"\n"
    ));
    settings.database
}

/// The override CI sets to run the merge-queue tests once more with one
/// batch in flight at a time, as before the merge train.
pub const TRAIN_DEPTH_VAR: &str = "CHANGEGATE__BATCH__MAX_IN_FLIGHT";

/// The depth of the merge train the tests run at: `batch.max_in_flight`'s
/// default, unless [`TRAIN_DEPTH_VAR`] says otherwise.
pub fn train_depth() -> u32 {
    std::env::var(TRAIN_DEPTH_VAR)
        .ok()
        .and_then(|depth| depth.parse().ok())
        .unwrap_or(4)
}

/// Settings from TOML text, panicking on errors (tests write valid configs),
/// with [`TRAIN_DEPTH_VAR`] applied over the text when set.
pub fn settings_from(text: &str) -> (Settings, Vec<changegate::config::Problem>) {
    let mut table = source::parse(text).expect("test config is valid TOML");
    source::apply_env_overrides(
        &mut table,
        std::env::vars().filter(|(name, _)| name == TRAIN_DEPTH_VAR),
    );
    Settings::from_table(&table, None)
}

/// A fresh SQLite database in a temporary directory.
pub async fn sqlite_db() -> TestDb {
    let dir = tempfile::tempdir().expect("temporary directory");
    let url = format!("sqlite://{}", dir.path().join("test.db").display());
    let db = db::open(&database_settings(&url))
        .await
        .expect("open sqlite");
    TestDb {
        url,
        db,
        name: "sqlite",
        _sqlite_dir: Some(dir),
        _mysql: None,
    }
}

/// A fresh MariaDB/MySQL database, or `None` (with a note) when
/// [`MYSQL_URL_VAR`] is not set.
pub async fn mysql_db() -> Option<TestDb> {
    let scratch = MySqlScratch::create().await?;
    let url = scratch.url();
    let db = db::open(&database_settings(&url))
        .await
        .expect("open mysql");
    Some(TestDb {
        url,
        db,
        name: "mysql",
        _sqlite_dir: None,
        _mysql: Some(scratch),
    })
}

/// One fresh database per available backend: SQLite always, MariaDB when configured.
pub async fn each_backend() -> Vec<TestDb> {
    let mut dbs = vec![sqlite_db().await];
    dbs.extend(mysql_db().await);
    dbs
}

/// Tells whoever runs the tests, once per test binary, that the MariaDB/MySQL
/// half of the storage tests did not run and how to run it.
///
/// Written on the `Stderr` handle, not with `eprintln!`: libtest captures
/// what a test prints through the print macros (`set_output_capture`) and
/// shows it only when that test fails, so such a note would never be seen
/// on a green run, whereas a write on the handle goes straight to the
/// process's standard error, which cargo passes through.
fn note_mysql_skipped() {
    static NOTE: Once = Once::new();
    NOTE.call_once(|| {
        let note = format!(
            "note: the MariaDB/MySQL storage tests were skipped: {MYSQL_URL_VAR} is not set. \
             To run them too: {MYSQL_URL_VAR}=mysql://root@127.0.0.1:3306 cargo test --workspace\n"
        );
        // A note that cannot be written is no reason to fail a test.
        let _ = std::io::stderr().write_all(note.as_bytes());
    });
}

/// A uniquely named MariaDB database, dropped when this value is dropped
/// (also when the test panics).
pub struct MySqlScratch {
    server: url::Url,
    name: String,
}

impl MySqlScratch {
    /// The server from the environment, without a database path but with
    /// its query (TLS parameters): `mysql://root@127.0.0.1:3306`,
    /// `mysql://root@127.0.0.1:3307/?ssl-mode=VERIFY_IDENTITY&ssl-ca=/ca.pem`
    /// and the same with a database path all name one server.
    pub fn server_url() -> Option<url::Url> {
        match std::env::var(MYSQL_URL_VAR) {
            Ok(text) if !text.trim().is_empty() => {
                let mut url = url::Url::parse(text.trim())
                    .unwrap_or_else(|err| panic!("{MYSQL_URL_VAR} is not a URL: {err}"));
                url.set_path("");
                Some(url)
            }
            _ => {
                assert!(
                    std::env::var_os(REQUIRE_MYSQL_VAR).is_none(),
                    "{REQUIRE_MYSQL_VAR} is set but {MYSQL_URL_VAR} is not: MariaDB tests cannot run"
                );
                note_mysql_skipped();
                None
            }
        }
    }

    /// A name for a database that does not exist yet (nothing is created).
    pub fn reserve() -> Option<Self> {
        Some(Self {
            server: Self::server_url()?,
            name: format!("cg_test_{}", uuid::Uuid::new_v4().simple()),
        })
    }

    /// Creates the database.
    pub async fn create() -> Option<Self> {
        let scratch = Self::reserve()?;
        scratch.create_now().await;
        Some(scratch)
    }

    /// Creates the reserved database now.
    pub async fn create_now(&self) {
        self.admin(&format!("CREATE DATABASE `{}`", self.name))
            .await;
    }

    /// The database's URL: the server's with the database as its path.
    pub fn url(&self) -> String {
        let mut url = self.server.clone();
        url.set_path(&self.name);
        url.into()
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The arguments naming the server to MariaDB's command-line tools.
    pub fn client_args(&self) -> Vec<String> {
        let mut args = vec![
            "--protocol=tcp".to_owned(),
            format!("--host={}", self.server.host_str().unwrap_or("127.0.0.1")),
            format!("--port={}", self.server.port().unwrap_or(3306)),
            format!("--user={}", self.server.username()),
        ];
        if let Some(password) = self.server.password() {
            args.push(format!("--password={password}"));
        }
        args
    }

    async fn admin(&self, sql: &str) {
        use sqlx::Connection;
        let mut conn = sqlx::MySqlConnection::connect(self.server.as_str())
            .await
            .expect("connect to the MariaDB test server");
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
            .execute(&mut conn)
            .await
            .expect("admin statement");
    }
}

impl Drop for MySqlScratch {
    fn drop(&mut self) {
        // A test that failed may leave a transaction open on a connection it
        // can no longer reach; the drop then gives up after a while rather
        // than wait for that transaction's metadata lock for ever.
        let sql = format!(
            "SET SESSION lock_wait_timeout = 10; DROP DATABASE IF EXISTS `{}`",
            self.name
        );
        let server = self.server.to_string();
        // Drop runs outside async context and possibly during a panic, so the
        // cleanup gets its own thread and runtime.
        let cleanup = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("cleanup runtime");
            runtime.block_on(async {
                use sqlx::Connection;
                if let Ok(mut conn) = sqlx::MySqlConnection::connect(&server).await {
                    let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                        .execute(&mut conn)
                        .await;
                }
            });
        });
        let _ = cleanup.join();
    }
}

/// A changegate running in this process on a random port.
pub struct TestApp {
    /// `http://127.0.0.1:PORT`
    pub address: String,
    /// A client without proxies or redirects.
    pub client: reqwest::Client,
    shutdown: CancellationToken,
    server: tokio::task::JoinHandle<anyhow::Result<()>>,
}

/// Authorisation and catalog for requester tests: everyone applies and reads,
/// `admin` is the operator, submissions are open.
pub const REQUESTER_CONFIG: &str = r#"
[access]
mode = "OPEN"
[authz.rules]
apply = ["changegate.requester"]
close = ["changegate.requester"]
read = ["changegate.requester"]
operator = ["changegate.operator"]
[authz.grants]
"changegate.requester" = ["*"]
"changegate.operator" = ["admin"]
[targets."demo.feature-flags"]
description = "Demo flags"
[targets."team.access"]
self_only = false
params = ["level"]
[targets."restricted"]
rule_codes = ["restricted.apply"]
"#;

/// Starts changegate on `database_url` with `extra` TOML appended to the
/// test defaults (it opens inside the `[database]` section).
pub async fn spawn_app(database_url: &str, extra: &str) -> TestApp {
    spawn_app_with(database_url, extra, Parts::default()).await
}

/// [`spawn_app`] with replaced parts (worker steps, metrics observer).
pub async fn spawn_app_with(database_url: &str, extra: &str, parts: Parts) -> TestApp {
    // `extra` opens inside `[database]`, and may give its own connect_timeout.
    let gives_connect_timeout = extra
        .lines()
        .take_while(|line| !line.starts_with('['))
        .any(|line| line.starts_with("connect_timeout"));
    let connect_timeout = if gives_connect_timeout {
        ""
    } else {
        "connect_timeout = \"2s\"\n"
    };
    let (settings, problems) = settings_from(&format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nshutdown_timeout = \"2s\"\n\
         [database]\nurl = {database_url:?}\n{connect_timeout}retry_max_interval = \"200ms\"\n{extra}"
    ));
    assert!(problems.is_empty(), "test config problems: {problems:?}");
    let app = Application::build_with(LiveConfig::new(settings, None, None), parts)
        .await
        .expect("application builds");
    let address = format!("http://127.0.0.1:{}", app.port());
    let shutdown = app.shutdown_token();
    let server = tokio::spawn(app.run_until_stopped());
    TestApp {
        address,
        client: plain_client()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("client"),
        shutdown,
        server,
    }
}

impl TestApp {
    /// GET a path.
    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.client
            .get(format!("{}{path}", self.address))
            .send()
            .await
            .expect("request reaches the app")
    }

    /// POSTs JSON `body` as `user` (through the trusted loopback proxy headers).
    pub async fn post_as(
        &self,
        user: &str,
        path: &str,
        body: &serde_json::Value,
    ) -> reqwest::Response {
        self.client
            .post(format!("{}{path}", self.address))
            .header("x-auth-request-user", user)
            .json(body)
            .send()
            .await
            .expect("request reaches the app")
    }

    /// GETs `path` as `user`.
    pub async fn get_as(&self, user: &str, path: &str) -> reqwest::Response {
        self.client
            .get(format!("{}{path}", self.address))
            .header("x-auth-request-user", user)
            .send()
            .await
            .expect("request reaches the app")
    }

    /// Polls `/readyz` until it answers 200 (MySQL connects in the background).
    pub async fn wait_until_ready(&self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while self.get("/readyz").await.status() != 200 {
            assert!(
                std::time::Instant::now() < deadline,
                "app never became ready"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops the app gracefully and returns how `run_until_stopped` ended.
    pub async fn stop(self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        self.server.await.expect("server task")
    }
}

/// Polls `done` every 50 ms until it holds; fails with `what` after 15 s.
pub async fn wait_until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while !done().await {
        assert!(std::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The built changegate binary as a command, without any `CHANGEGATE*`
/// variables from the test environment.
pub fn changegate_command() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_changegate"));
    command.stdin(Stdio::null());
    for (name, _) in std::env::vars() {
        if name.starts_with("CHANGEGATE") {
            command.env_remove(name);
        }
    }
    command
}

/// A client for `system` trusting the platform's roots, with no proxy
/// whatever the environment says, recording into its own health record.
/// Room for one batch of at most `members` in a partition at a time: the
/// claim as it was before the merge train (`batch.max_in_flight = 1`).
pub fn one_at_a_time(members: u32) -> changegate::batch::Room<'static> {
    changegate::batch::Room {
        members,
        in_flight: 1,
        ordinary: changegate::batch::Ordinary::Unpaced,
    }
}

pub fn system_client(system: System) -> SystemClient {
    let outbound = Outbound::new(
        Trust::platform_and_pem(b"").expect("platform roots"),
        ProxyRules::default(),
    );
    SystemClient::new(&outbound, &Dependencies::default(), system, |builder| {
        builder
    })
    .expect("an HTTP client")
}

/// A builder for the tests' own plain-HTTP clients (never proxied).
pub fn plain_client() -> reqwest::ClientBuilder {
    install_crypto_provider();
    reqwest::Client::builder().no_proxy()
}

/// Log lines (at info and above, or the level given), captured while
/// [`Logs::capture`]'s guard lives, on the test's thread (where a current-thread test runs the app too).
#[derive(Clone, Default)]
pub struct Logs(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs, once, a global subscriber that records nothing but says every
/// level may be wanted. tracing keeps one global "highest level anyone
/// wants" and a per-callsite interest cache, rebuilt whenever a dispatcher
/// comes or goes; two threads rebuilding at once (tests starting and
/// dropping their captures in parallel) can leave them computed without a
/// capture that was just set, and its thread's events are then filtered
/// out before they reach it. With this one always asking for every level
/// and for each event to be asked about, no rebuild can filter an event
/// out: each goes to its thread's capture, or is dropped here.
fn keep_every_level_live() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = tracing::dispatcher::set_global_default(tracing::Dispatch::new(EveryLevelLive));
    });
}

/// See [`keep_every_level_live`].
struct EveryLevelLive;

impl tracing::Subscriber for EveryLevelLive {
    fn register_callsite(
        &self,
        _: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        tracing::subscriber::Interest::sometimes()
    }
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        false
    }
    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::TRACE)
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, _: &tracing::Event<'_>) {}
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

impl Logs {
    /// Starts capturing; stops when the guard is dropped.
    pub fn capture() -> (Self, tracing::subscriber::DefaultGuard) {
        Self::capture_at(tracing::Level::INFO)
    }

    /// Starts capturing lines at `level` and above; stops when the guard
    /// is dropped.
    pub fn capture_at(level: tracing::Level) -> (Self, tracing::subscriber::DefaultGuard) {
        let (logs, dispatch) = Self::dispatch_at(level);
        (logs, tracing::dispatcher::set_default(&dispatch))
    }

    /// A subscriber capturing lines at `level` and above, to be made the
    /// default of threads of one's own (a runtime's workers).
    pub fn dispatch_at(level: tracing::Level) -> (Self, tracing::Dispatch) {
        keep_every_level_live();
        let logs = Self::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(level)
            .with_writer(move || writer.clone())
            .finish();
        (logs, tracing::Dispatch::new(subscriber))
    }

    /// Every line captured.
    pub fn lines(&self) -> Vec<String> {
        self.lines_with(&[])
    }

    /// The lines holding every one of `words`.
    pub fn lines_with(&self, words: &[&str]) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .filter(|line| words.iter().all(|word| line.contains(word)))
            .map(str::to_owned)
            .collect()
    }
}
