//! The typed settings snapshot and how it is built from a TOML table.
//!
//! Static settings (listen address, database) are strict: a wrong value is an
//! error that stops start-up. Dynamic settings go through [`super::resolve`]
//! and always produce a usable value, with a warning when they fell back.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use secrecy::SecretString;
use toml::{Table, Value};

use super::reader::Reader;
use super::resolve::{self, AccessMode, AccessWindow, ApproveImpl, FlowOrder};
use super::retention::{self, RetentionSettings};
use super::scheduling::{self, SchedulingSettings};
use super::schema::SCHEMA;
use super::secrets::{self, SecretFiles};
use super::sections::{
    AuthzSettings, DriftSettings, ExecutorSettings, IdempotencySettings, IdentitySettings,
    PollSchedule, ReconcileSettings, WebSettings, WebhookSettings,
};
use super::targets::{self, TargetSettings};
use super::telemetry::{self, TelemetrySettings};
use super::tls::{self, TlsSettings};
use super::windows::Windows;
use super::{Problem, sections};

/// One immutable snapshot of the whole configuration. Hot reload swaps in a
/// new snapshot; readers never lock and never see a half-applied file.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Static: the HTTP listener.
    pub server: ServerSettings,
    /// Static: the database.
    pub database: DatabaseSettings,
    /// Logging; `level` is dynamic, `format` static.
    pub log: LogSettings,
    /// Dynamic: who may submit, and when.
    pub access: AccessSettings,
    /// Dynamic: requests per minute per bucket; `None` means no limit.
    pub rate_limit: BTreeMap<String, Option<u32>>,
    /// Who is calling.
    pub identity: IdentitySettings,
    /// Who may do what; rules and grants are dynamic.
    pub authz: AuthzSettings,
    /// Dynamic: the target catalog.
    pub targets: BTreeMap<String, TargetSettings>,
    /// Dynamic: the change windows targets can require, `[windows.<name>]`.
    pub windows: Windows,
    /// Dynamic: requests scheduled for later.
    pub scheduling: SchedulingSettings,
    /// Idempotency records.
    pub idempotency: IdempotencySettings,
    /// Static: the bounded worker pool.
    pub executor: ExecutorSettings,
    /// Dynamic: the order new requests follow.
    pub flow_order: FlowOrder,
    /// Dynamic: how waits on GitLab poll.
    pub polling: PollSchedule,
    /// Dynamic (`workflow.unreachable_deadline`, default `15m`): how long a
    /// step or batch goes on trying a system it cannot connect to before it
    /// fails (waiting no longer looks like it will help).
    pub unreachable_deadline: Duration,
    /// Closing out lost deploy callbacks.
    pub reconcile: ReconcileSettings,
    /// The drift job.
    pub drift: DriftSettings,
    /// How long finished history is kept.
    pub retention: RetentionSettings,
    /// GitLab connection (static) and approve implementation (dynamic).
    pub gitlab: GitLabSettings,
    /// The approval system.
    pub approval: ApprovalSettings,
    /// `deploy.callback_secret` or `deploy.callback_secret_file`: verifies
    /// `POST /callbacks/deploy`; read per request, so a reload applies it.
    pub deploy_callback_secret: Option<SecretString>,
    /// Dynamic: the batch merge queue.
    pub batch: BatchSettings,
    /// Dynamic: when on, outbound webhook deliveries are recorded as silent, not sent.
    pub webhooks_silent: bool,
    /// Static: outbound webhook delivery.
    pub webhooks: WebhookSettings,
    /// Dynamic: the single-page app.
    pub web: WebSettings,
    /// Static: trust for outbound HTTPS.
    pub tls: TlsSettings,
    /// Static: where traces are exported.
    pub telemetry: TelemetrySettings,
    /// The files the secrets above were read from; a reload reads them again.
    pub secret_files: SecretFiles,
}

impl Settings {
    /// The GitLab project a target's files live in: its own, else `gitlab.project`.
    pub fn project_for(&self, target_key: &str) -> &str {
        self.targets
            .get(target_key)
            .map(|target| target.project.as_str())
            .filter(|project| !project.is_empty())
            .unwrap_or(&self.gitlab.project)
    }
}

/// `[server]`
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSettings {
    /// `listen` (`CHANGEGATE_LISTEN`), default `127.0.0.1:8080`.
    pub listen: SocketAddr,
    /// `request_timeout`, default `30s`: a request running longer gets 503.
    pub request_timeout: Duration,
    /// `shutdown_timeout`, default `10s`: how long in-flight work may finish on SIGTERM.
    pub shutdown_timeout: Duration,
}

/// `[database]`
#[derive(Debug, Clone, PartialEq)]
pub struct DatabaseSettings {
    /// `url` (`CHANGEGATE_DATABASE_URL`), default `sqlite://data/changegate.db`,
    /// with the password from `password_file` inserted when that is set.
    pub url: String,
    /// `password_file`: the file the password in `url` was read from.
    pub password_file: Option<PathBuf>,
    /// `max_connections`, default 10 (MySQL pool; SQLite readers).
    pub max_connections: u32,
    /// `connect_timeout`, default `5s`.
    pub connect_timeout: Duration,
    /// `retry_max_interval`, default `10s`: the longest pause between attempts
    /// to reach a database that is down or does not exist yet.
    pub retry_max_interval: Duration,
    /// `galera_sync_wait`, default 1: the `wsrep_sync_wait` each connection
    /// to a Galera node sets, so a read sees every write the cluster has
    /// acknowledged (0 turns it off; see MariaDB's `wsrep_sync_wait`).
    pub galera_sync_wait: u32,
    /// `failover_hosts`, default none: further `host:port`s of the same
    /// database (other nodes of a cluster), connected to with everything
    /// else `url` says, in order, when the ones before them fail their
    /// health check.
    pub failover_hosts: Vec<(String, u16)>,
    /// `galera_require_synced`, default true: on a Galera node, only one
    /// whose state is `Synced` is healthy and ready.
    pub galera_require_synced: bool,
}

/// `[log]`
#[derive(Debug, Clone)]
pub struct LogSettings {
    /// `level` (`CHANGEGATE_LOG`), dynamic, default `info`.
    pub level: String,
    /// `format`, static: `human` (default) or `json`.
    pub format: LogFormat,
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Human,
    /// One JSON object per line.
    Json,
}

/// `[access]`
#[derive(Debug, Clone)]
pub struct AccessSettings {
    /// `mode`: `OPEN`, `TEST_WINDOW` (default: only inside `window`) or `CLOSED`.
    pub mode: AccessMode,
    /// `window` in `timezone`.
    pub window: AccessWindow,
}

/// `[gitlab]`
#[derive(Debug, Clone)]
pub struct GitLabSettings {
    /// `base_url`; the REST root is `{base_url}/api/v4`.
    pub base_url: String,
    /// `project`: id or path, the default for targets that name none.
    pub project: String,
    /// `target_branch`, default `main`.
    pub target_branch: String,
    /// `bot_token` or `bot_token_file`: the change bot.
    pub bot_token: Option<SecretString>,
    /// `reviewer_tokens` or `reviewer_token_files`: the two reviewer bots, in order.
    pub reviewer_tokens: Vec<SecretString>,
    /// `approve_impl`, dynamic.
    pub approve_impl: ApproveImpl,
    /// `timeout`, static, default `30s`: one GitLab call.
    pub timeout: Duration,
}

/// `[approval]`
#[derive(Debug, Clone)]
pub struct ApprovalSettings {
    /// `provider`: `builtin` (default) or `http`.
    pub provider: ApprovalProvider,
    /// `url`: where the http provider POSTs approval requests.
    pub url: String,
    /// `callback_secret` or `callback_secret_file`: verifies `POST /callbacks/approval`.
    pub callback_secret: Option<SecretString>,
    /// `retries`, dynamic, default 3.
    pub retries: u32,
    /// `timeout`, default `10s`: one approval call.
    pub timeout: Duration,
}

/// Who decides approvals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalProvider {
    /// Operators approve through the admin API.
    Builtin,
    /// An external approval system over HTTP.
    Http,
}

/// `[batch]`
#[derive(Debug, Clone)]
pub struct BatchSettings {
    /// `enabled`, default true.
    pub enabled: bool,
    /// `interval`, default `5s`.
    pub interval: Duration,
    /// `max_requests`, default 500.
    pub max_requests: u32,
    /// `freeze`, default false: no new rounds start (merge windows,
    /// embargoes); nothing waiting or running fails.
    pub freeze: bool,
    /// `timeout`, default `30m`: a batch RUNNING longer is settled by the sweep.
    pub timeout: Duration,
    /// `max_split_depth`, default 4: how many times a failing batch is halved
    /// before its members fail together, once both halves of a failed batch
    /// failed; while one change is what fails, it is halved until alone.
    pub max_split_depth: u32,
    /// `partition_by_project`, default false: one active batch per GitLab
    /// project instead of one in all.
    pub partition_by_project: bool,
    /// `max_in_flight`, default 4 (1–20): how many batches of one partition
    /// are in flight at once, a merge train, each tested on top of the ones
    /// ahead of it and merged in order; 1 is one batch at a time.
    pub max_in_flight: u32,
    /// `max_attempts`, default 3: how many batches a request may be in
    /// that end without merging or failing (settled, for example when
    /// GitLab never answered) before it fails with the last batch's error.
    pub max_attempts: u32,
}

/// `database.failover_hosts`: each `host:port` checked.
fn failover_hosts(r: &mut Reader<'_>) -> Vec<(String, u16)> {
    let mut hosts = Vec::new();
    for text in r.string_list_at(&["database", "failover_hosts"]) {
        match text
            .rsplit_once(':')
            .and_then(|(host, port)| Some((host, port.parse::<u16>().ok()?)))
        {
            Some((host, port)) if !host.is_empty() && port > 0 => {
                hosts.push((host.trim_matches(['[', ']']).to_owned(), port));
            }
            _ => r.error(
                "database.failover_hosts",
                format!("{text:?} is not HOST:PORT, like \"db2.internal:3306\""),
            ),
        }
    }
    hosts
}

impl Settings {
    /// Builds a snapshot from a table. `previous` is the running snapshot on a
    /// reload (for "keep the last good value" rules). Problems of severity
    /// [`crate::config::Severity::Error`] mean the table must not be used.
    pub fn from_table(table: &Table, previous: Option<&Settings>) -> (Settings, Vec<Problem>) {
        let mut r = Reader::new(table);
        r.check_schema(SCHEMA);
        let mut secret_files = SecretFiles::default();

        let listen_text = r.string("server", "listen", "127.0.0.1:8080");
        let listen = listen_text.parse().unwrap_or_else(|_| {
            r.error(
                "server.listen",
                format!("{listen_text:?} is not an address like 127.0.0.1:8080"),
            );
            SocketAddr::from(([127, 0, 0, 1], 8080))
        });
        let server = ServerSettings {
            listen,
            request_timeout: r.static_duration(
                "server",
                "request_timeout",
                Duration::from_secs(30),
            ),
            shutdown_timeout: r.static_duration(
                "server",
                "shutdown_timeout",
                Duration::from_secs(10),
            ),
        };

        let url = r.string("database", "url", "sqlite://data/changegate.db");
        match crate::db::Backend::of_url(&url) {
            None => r.error(
                "database.url",
                "unknown scheme: use sqlite://PATH or mysql://USER:PASSWORD@HOST/DATABASE",
            ),
            Some(crate::db::Backend::MySql) => match crate::db::check_mysql_url(&url) {
                Ok(warnings) => {
                    for warning in warnings {
                        r.warning("database.url", warning);
                    }
                }
                Err(message) => r.error("database.url", message),
            },
            Some(crate::db::Backend::Sqlite) => {}
        }
        let max_connections = match r.get("database", "max_connections") {
            None => 10,
            Some(Value::Integer(n)) if (1..=1000).contains(n) => *n as u32,
            Some(_) => {
                r.error(
                    "database.max_connections",
                    "must be a number from 1 to 1000",
                );
                10
            }
        };
        let (url, password_file) = secrets::database_url(&mut r, url);
        let database = DatabaseSettings {
            url,
            password_file,
            max_connections,
            connect_timeout: r.static_duration(
                "database",
                "connect_timeout",
                Duration::from_secs(5),
            ),
            retry_max_interval: r.static_duration(
                "database",
                "retry_max_interval",
                Duration::from_secs(10),
            ),
            galera_sync_wait: r.count_at(&["database", "galera_sync_wait"], 0..=15, 1),
            failover_hosts: failover_hosts(&mut r),
            galera_require_synced: r.bool_at(&["database", "galera_require_synced"], true),
        };

        let current_level = previous.map_or("info", |p| p.log.level.as_str());
        let log = LogSettings {
            level: r.resolved(
                "log.level",
                resolve::log_level(r.get("log", "level"), current_level),
            ),
            format: match r.string("log", "format", "human").as_str() {
                "human" => LogFormat::Human,
                "json" => LogFormat::Json,
                other => {
                    r.error("log.format", format!("{other:?} is not human or json"));
                    LogFormat::Human
                }
            },
        };

        let access = AccessSettings {
            mode: r.resolved(
                "access.mode",
                resolve::access_mode(r.get("access", "mode"), previous.map(|p| p.access.mode)),
            ),
            window: r.resolved(
                "access.window",
                resolve::access_window(r.get("access", "window"), r.get("access", "timezone")),
            ),
        };

        let mut rate_limit = BTreeMap::new();
        for (bucket, raw) in r
            .at(&["rate_limit"])
            .and_then(Value::as_table)
            .into_iter()
            .flatten()
        {
            let value = r.resolved(
                &format!("rate_limit.{bucket}"),
                resolve::rate_limit(Some(raw)),
            );
            rate_limit.insert(bucket.clone(), value);
        }

        let identity = sections::identity(&mut r, &mut secret_files);
        let authz = sections::authz(&mut r);
        let windows = scheduling::windows(&mut r);
        let targets = targets::targets(&mut r, &windows);
        let scheduling = scheduling::scheduling(&mut r);
        let idempotency = sections::idempotency(&mut r);
        let executor = sections::executor(&mut r);
        let polling = sections::poll_schedule(&mut r);
        let reconcile = sections::reconcile(&mut r);
        let drift = sections::drift(&mut r);
        let retention = retention::retention(&mut r);
        let web = sections::web(&mut r);

        let unreachable_deadline = r.resolved(
            "workflow.unreachable_deadline",
            resolve::duration(
                r.get("workflow", "unreachable_deadline"),
                Duration::from_secs(15 * 60),
            ),
        );
        let flow_order = r.resolved(
            "workflow.flow_order",
            resolve::flow_order(
                r.get("workflow", "flow_order"),
                previous.map(|p| p.flow_order),
            ),
        );

        let target_branch = r.string("gitlab", "target_branch", "main");
        if let Some(problem) = super::git_ref::branch_name_problem(&target_branch) {
            r.error(
                "gitlab.target_branch",
                format!("{target_branch:?} cannot be a branch name: it {problem}"),
            );
        }
        let gitlab = GitLabSettings {
            base_url: r
                .string("gitlab", "base_url", "")
                .trim_end_matches('/')
                .to_owned(),
            project: r.string("gitlab", "project", ""),
            target_branch,
            bot_token: secrets::secret(&mut r, &mut secret_files, &["gitlab", "bot_token"]),
            reviewer_tokens: secrets::list(
                &mut r,
                &mut secret_files,
                "gitlab",
                ["reviewer_tokens", "reviewer_token_files"],
            ),
            approve_impl: r.resolved(
                "gitlab.approve_impl",
                resolve::approve_impl(r.get("gitlab", "approve_impl")),
            ),
            timeout: r.static_duration("gitlab", "timeout", Duration::from_secs(30)),
        };

        let approval = ApprovalSettings {
            provider: match r.string("approval", "provider", "builtin").as_str() {
                "builtin" => ApprovalProvider::Builtin,
                "http" => ApprovalProvider::Http,
                other => {
                    r.error(
                        "approval.provider",
                        format!("{other:?} is not builtin or http"),
                    );
                    ApprovalProvider::Builtin
                }
            },
            url: r.string("approval", "url", ""),
            callback_secret: secrets::secret(
                &mut r,
                &mut secret_files,
                &["approval", "callback_secret"],
            ),
            retries: r.resolved(
                "approval.retries",
                resolve::approval_retries(r.get("approval", "retries")),
            ),
            timeout: r.static_duration("approval", "timeout", Duration::from_secs(10)),
        };
        if approval.provider == ApprovalProvider::Http && approval.url.is_empty() {
            r.error("approval.url", "required when approval.provider = \"http\"");
        }

        let batch = BatchSettings {
            enabled: r.resolved(
                "batch.enabled",
                resolve::batch_enabled(r.get("batch", "enabled")),
            ),
            interval: r.resolved(
                "batch.interval",
                resolve::duration(r.get("batch", "interval"), Duration::from_secs(5)),
            ),
            max_requests: r.resolved(
                "batch.max_requests",
                resolve::positive_count(r.get("batch", "max_requests"), 500),
            ),
            freeze: r.resolved("batch.freeze", resolve::freeze(r.get("batch", "freeze"))),
            timeout: r.resolved(
                "batch.timeout",
                resolve::duration(r.get("batch", "timeout"), Duration::from_secs(1800)),
            ),
            max_split_depth: r.count_at(&["batch", "max_split_depth"], 0..=16, 4),
            partition_by_project: r.resolved(
                "batch.partition_by_project",
                resolve::flag(r.get("batch", "partition_by_project"), false),
            ),
            max_in_flight: r.resolved(
                "batch.max_in_flight",
                resolve::train_depth(r.get("batch", "max_in_flight")),
            ),
            max_attempts: r.resolved(
                "batch.max_attempts",
                resolve::positive_count(r.get("batch", "max_attempts"), 3),
            ),
        };

        let settings = Settings {
            server,
            database,
            log,
            access,
            rate_limit,
            identity,
            authz,
            targets,
            windows,
            scheduling,
            idempotency,
            executor,
            flow_order,
            polling,
            unreachable_deadline,
            reconcile,
            drift,
            retention,
            gitlab,
            approval,
            deploy_callback_secret: secrets::secret(
                &mut r,
                &mut secret_files,
                &["deploy", "callback_secret"],
            ),
            batch,
            webhooks_silent: r.resolved(
                "webhooks.silent",
                resolve::webhook_silent(r.get("webhooks", "silent")),
            ),
            webhooks: sections::webhooks(&mut r, &mut secret_files),
            web,
            tls: tls::tls(&mut r),
            telemetry: telemetry::telemetry(&mut r),
            secret_files,
        };
        (settings, r.into_problems())
    }
}
