//! Database contention as an operator meets it: three instances over one
//! MariaDB, with their real workflow and webhooks on, take 1,500 first
//! applies of distinct users, each approved or rejected in turn by an
//! operator on another instance, while their relay and delivery workers send
//! every status change to a registered endpoint and the approved requests go
//! through merge rounds, pipelines and deploy confirmation (simulators on
//! loopback). Five runs, each on a fresh database. Reports per run the 5xx
//! and RETRY_LATER answers (by route and code), the store retries by reason,
//! the retries exhausted, and the WARN and ERROR lines changegate logged (by
//! message); exits non-zero, naming them, when any run had a 5xx, a
//! RETRY_LATER or such a line (target: none of the three), a request left
//! without an answer, or work still moving a minute after the last decision.
//! MariaDB only: SQLite has one writer, so it has no lock races.
//!
//! ```sh
//! CHANGEGATE_TEST_MYSQL_URL=mysql://root@127.0.0.1:3306 cargo bench --bench store_contention
//! ```

mod log_lines;
mod outside;
mod report;

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use changegate::app::Application;
use changegate::config::{LiveConfig, Settings, source};
use serde_json::{Value, json};
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection};
use sqlx::{ConnectOptions, Connection};
use tokio_util::sync::CancellationToken;

use log_lines::LogLines;
use outside::{Outside, PROJECT, TOKENS};
use report::{Answers, Report, Retries};

const RUNS: usize = 5;
const INSTANCES: usize = 3;
const APPLIES: usize = 1500;
/// Callers at once, spread over the instances.
const CALLERS: usize = 64;
/// How long the approved requests and the webhooks get to finish after the
/// last decision.
const SETTLE_WITHIN: Duration = Duration::from_secs(60);
/// 32 bytes in base64: on MySQL no endpoint can be registered without one.
const SEALING_KEY: &str = "KioqKioqKioqKioqKioqKioqKioqKioqKioqKioqKio=";

const APPLY: &str = "POST /api/v1/applications";
const APPROVE: &str = "POST /admin/v1/approvals/{id}/approve";
const REJECT: &str = "POST /admin/v1/approvals/{id}/reject";
const REGISTER: &str = "POST /admin/v1/webhook-endpoints";
const DEPLOY_CALLBACK: &str = "POST /callbacks/deploy";

/// Binding statuses a request leaves on its own (the workflow, a merge
/// round, the deploy confirmation); the others are final or wait for an
/// operator.
const MOVING: &[&str] = &[
    "APPROVAL_SENDING",
    "MR_CREATING",
    "MR_CREATED",
    "MERGING",
    "MERGED",
    "CLOSING",
];

/// A connection of the bench's own, whose statements changegate's log
/// counts must not see (sqlx logs slow ones at WARN).
async fn connect(url: &str) -> MySqlConnection {
    let options = MySqlConnectOptions::from_str(url)
        .expect("database URL")
        .disable_statement_logging();
    MySqlConnection::connect_with(&options)
        .await
        .expect("connect")
}

async fn admin(server: &str, sql: &str) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(&mut connect(server).await)
        .await
        .expect("admin statement");
}

struct Instance {
    address: String,
    shutdown: CancellationToken,
    server: tokio::task::JoinHandle<anyhow::Result<()>>,
}

/// An instance as deployed, but with room for 64 callers at once (no rate
/// limit, 20 connections instead of 10, a queue that takes 1,500 applies: a
/// full one answers BUSY_REJECTED, which is capacity, not contention) and a
/// merge round every second instead of every five.
async fn start(database_url: &str, outside: &Outside) -> Instance {
    let [(_, bot), (_, reviewer_a), (_, reviewer_b)] = TOKENS;
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[database]\nurl = {database_url:?}\nmax_connections = 20\n\
         [access]\nmode = \"OPEN\"\n[rate_limit]\napply = 0\n\
         [authz.rules]\napply = [\"r\"]\nread = [\"r\"]\noperator = [\"o\"]\n\
         [authz.grants]\n\"r\" = [\"*\"]\n\"o\" = [\"admin\"]\n\
         [targets.\"demo.feature-flags\"]\ndescription = \"bench\"\n\
         [executor]\nqueue_capacity = 4096\n[batch]\ninterval = \"1s\"\n\
         [gitlab]\nbase_url = {:?}\nproject = {PROJECT:?}\nbot_token = {bot:?}\n\
         reviewer_tokens = [{reviewer_a:?}, {reviewer_b:?}]\n\
         [deploy]\ncallback_secret = {:?}\n\
         [webhooks]\nallow_private_targets = true\nsecret_key = {SEALING_KEY:?}\n",
        outside.gitlab_url(),
        outside.deploy.secret(),
    );
    let (settings, problems) = Settings::from_table(&source::parse(&text).expect("toml"), None);
    assert!(problems.is_empty(), "{problems:?}");
    let app = Application::build(LiveConfig::new(settings, None, None))
        .await
        .expect("app");
    Instance {
        address: format!("http://127.0.0.1:{}", app.port()),
        shutdown: app.shutdown_token(),
        server: tokio::spawn(app.run_until_stopped()),
    }
}

async fn send(
    request: reqwest::RequestBuilder,
    route: &'static str,
    answers: &mut Answers,
) -> Value {
    match request.send().await {
        Ok(answer) => {
            let status = answer.status().as_u16();
            let body: Value = answer.json().await.unwrap_or(Value::Null);
            answers.count(route, status, body["code"].as_str().unwrap_or(""));
            body
        }
        Err(err) => {
            let why = if err.is_timeout() {
                "timeout"
            } else {
                "no connection"
            };
            answers.count(route, 0, why);
            Value::Null
        }
    }
}

/// Caller `caller`'s share of the applies, each decided on the next
/// instance: approved when even, rejected when odd.
async fn apply_and_decide(
    client: reqwest::Client,
    addresses: Arc<Vec<String>>,
    caller: usize,
) -> Answers {
    let mut answers = Answers::default();
    for n in (caller..APPLIES).step_by(CALLERS) {
        let applying = &addresses[n % INSTANCES];
        let apply = client
            .post(format!("{applying}/api/v1/applications"))
            .header("x-auth-request-user", format!("user{n}"))
            .header("idempotency-key", format!("key-{n}"))
            .json(&json!({ "targetKey": "demo.feature-flags", "reason": "bench" }));
        let body = send(apply, APPLY, &mut answers).await;
        let Some(id) = body["operationId"].as_str() else {
            continue;
        };
        let (route, decision) = if n.is_multiple_of(2) {
            (APPROVE, "approve")
        } else {
            (REJECT, "reject")
        };
        let deciding = &addresses[(n + 1) % INSTANCES];
        let decide = client
            .post(format!("{deciding}/admin/v1/approvals/{id}/{decision}"))
            .header("x-auth-request-user", "admin")
            .json(&json!({ "reason": "bench" }));
        send(decide, route, &mut answers).await;
    }
    answers
}

/// Rows by status in the run's database.
async fn by_status(conn: &mut MySqlConnection, table: &str) -> BTreeMap<String, i64> {
    let sql = format!("SELECT status, COUNT(*) FROM {table} GROUP BY status");
    sqlx::query_as::<_, (String, i64)>(sqlx::AssertSqlSafe(sql))
        .fetch_all(conn)
        .await
        .expect("count by status")
        .into_iter()
        .collect()
}

/// Where the run's requests and webhooks stand.
struct Progress {
    bindings: BTreeMap<String, i64>,
    unrelayed: i64,
    deliveries: BTreeMap<String, i64>,
}

impl Progress {
    async fn read(conn: &mut MySqlConnection) -> Self {
        let unrelayed = sqlx::query_scalar("SELECT COUNT(*) FROM event WHERE relayed = 0")
            .fetch_one(&mut *conn)
            .await
            .expect("count unrelayed");
        Self {
            bindings: by_status(conn, "binding").await,
            unrelayed,
            deliveries: by_status(conn, "webhook_delivery").await,
        }
    }

    /// Nothing left that moves without an operator.
    fn settled(&self) -> bool {
        self.unrelayed == 0
            && !self
                .bindings
                .keys()
                .any(|status| MOVING.contains(&status.as_str()))
            && !self
                .deliveries
                .keys()
                .any(|status| status == "queued" || status == "sending")
    }
}

fn listed(counts: &BTreeMap<String, i64>) -> String {
    let parts: Vec<String> = counts.iter().map(|(key, n)| format!("{key} {n}")).collect();
    if parts.is_empty() {
        "none".to_owned()
    } else {
        parts.join(", ")
    }
}

async fn run(server: &str, run: usize, lines: &LogLines) -> Report {
    let name = format!("cg_contention_{}_{run}", std::process::id());
    admin(server, &format!("CREATE DATABASE {name}")).await;
    let url = format!("{server}/{name}");
    let outside = Outside::start().await;
    let retries_before = Retries::read();
    let mut instances = Vec::new();
    for _ in 0..INSTANCES {
        instances.push(start(&url, &outside).await);
    }
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client");
    let ready_by = Instant::now() + Duration::from_secs(60);
    for instance in &instances {
        while client
            .get(format!("{}/readyz", instance.address))
            .send()
            .await
            .map(|r| r.status() != 200)
            .unwrap_or(true)
        {
            assert!(Instant::now() < ready_by, "{} not ready", instance.address);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let addresses: Arc<Vec<String>> =
        Arc::new(instances.iter().map(|i| i.address.clone()).collect());
    outside
        .deploy
        .set_callback_url(format!("{}/callbacks/deploy", addresses[0]));
    let mut answers = Answers::default();
    let register = client
        .post(format!("{}/admin/v1/webhook-endpoints", addresses[0]))
        .header("x-auth-request-user", "admin")
        .json(&json!({ "url": outside.receiver_url }));
    let endpoint = send(register, REGISTER, &mut answers).await;
    assert!(endpoint["id"].is_i64(), "endpoint registered: {endpoint}");

    let clock = Instant::now();
    let mut callers = tokio::task::JoinSet::new();
    for caller in 0..CALLERS {
        callers.spawn(apply_and_decide(client.clone(), addresses.clone(), caller));
    }
    for caller in callers.join_all().await {
        answers.add(caller);
    }
    let load_seconds = clock.elapsed().as_secs_f64();

    let mut conn = connect(&url).await;
    let settling = Instant::now();
    let mut progress = Progress::read(&mut conn).await;
    while !progress.settled() && settling.elapsed() < SETTLE_WITHIN {
        tokio::time::sleep(Duration::from_millis(250)).await;
        progress = Progress::read(&mut conn).await;
    }
    let settled = progress.settled();
    let settling_note = if settled {
        format!("settled {:.1} s later", settling.elapsed().as_secs_f64())
    } else {
        format!("NOT settled {} s later", SETTLE_WITHIN.as_secs())
    };
    println!(
        "run {run}: {APPLIES} applies and their decisions in {load_seconds:.1} s, {settling_note}: \
         bindings {}; events not relayed {}; deliveries {} (receiver got {}); merge requests {}",
        listed(&progress.bindings),
        progress.unrelayed,
        listed(&progress.deliveries),
        outside.received.load(Ordering::Relaxed),
        outside.merge_requests(),
    );
    conn.close().await.expect("close");
    for instance in instances {
        instance.shutdown.cancel();
        instance
            .server
            .await
            .expect("the instance's task")
            .expect("the instance stops");
    }
    for callback in outside.deploy.callbacks() {
        match callback.status {
            Some(status) => {
                let code = callback.answer["code"].as_str().unwrap_or("");
                answers.count(DEPLOY_CALLBACK, status, code);
            }
            None => answers.count(DEPLOY_CALLBACK, 0, "no answer"),
        }
    }
    admin(server, &format!("DROP DATABASE {name}")).await;

    let report = Report {
        run,
        answers,
        retries: Retries::read().since(&retries_before),
        lines: lines.take(),
        load_seconds,
        settled,
    };
    for detail in report.details() {
        println!("  {detail}");
    }
    report
}

fn main() {
    let Ok(server) = std::env::var("CHANGEGATE_TEST_MYSQL_URL") else {
        println!(
            "store_contention needs MariaDB: set CHANGEGATE_TEST_MYSQL_URL \
             (e.g. mysql://root@127.0.0.1:3306); skipped"
        );
        return;
    };
    let server = server.trim_end_matches('/').to_owned();
    let lines = LogLines::install();
    changegate::clients::http::install_crypto_provider();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let reports = runtime.block_on(async {
        let mode: i64 = sqlx::query_scalar("SELECT @@innodb_autoinc_lock_mode")
            .fetch_one(&mut connect(&server).await)
            .await
            .expect("autoinc lock mode");
        println!("innodb_autoinc_lock_mode = {mode}; {RUNS} runs of {INSTANCES} instances");
        let mut reports = Vec::new();
        for n in 1..=RUNS {
            reports.push(run(&server, n, &lines).await);
        }
        reports
    });
    println!("\n{}", Report::HEADER);
    for report in &reports {
        println!("{}", report.row());
    }
    let mut missed = false;
    for report in &reports {
        for miss in report.misses() {
            missed = true;
            eprintln!("run {}: {miss}", report.run);
        }
    }
    if missed {
        eprintln!("targets missed: no 5xx, no RETRY_LATER, no WARN or ERROR line in every run");
        std::process::exit(1);
    }
}
