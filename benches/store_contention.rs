//! Database contention against MariaDB: 2,000 first applies of distinct
//! users, each followed by an operator's approval or rejection on another
//! instance, interleaved with merge-queue rounds asked for on every
//! instance, on one and on three instances over one database. Reports the
//! 5xx and RETRY_LATER answers (target: none) and the store retries taken,
//! by reason. MariaDB only: SQLite has one writer, so it has no deadlocks.
//!
//! ```sh
//! CHANGEGATE_TEST_MYSQL_URL=mysql://root@127.0.0.1:3306 cargo bench --bench store_contention
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use changegate::app::{Application, Parts};
use changegate::config::{LiveConfig, Settings, source};
use changegate::workflow::{StepFuture, Steps};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const APPLIES: usize = 2000;
/// Callers at once, spread over the instances.
const CALLERS: usize = 64;

/// Workers that leave requests where the API put them, so every decision
/// finds its request awaiting approval.
struct Idle;

impl Steps for Idle {
    fn run(&self, _operation_id: String) -> StepFuture {
        Box::pin(async { None })
    }
}

async fn admin(server: &str, sql: &str) {
    use sqlx::Connection;
    let mut conn = sqlx::MySqlConnection::connect(server)
        .await
        .expect("connect");
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(&mut conn)
        .await
        .expect("admin statement");
}

struct Instance {
    address: String,
    shutdown: CancellationToken,
    server: tokio::task::JoinHandle<anyhow::Result<()>>,
}

async fn start(database_url: &str) -> Instance {
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[database]\nurl = {database_url:?}\nmax_connections = 20\n\
         [log]\nlevel = \"error\"\n[access]\nmode = \"OPEN\"\n[rate_limit]\napply = 0\n\
         [authz.rules]\napply = [\"r\"]\nread = [\"r\"]\noperator = [\"o\"]\n\
         [authz.grants]\n\"r\" = [\"*\"]\n\"o\" = [\"admin\"]\n\
         [targets.\"demo.feature-flags\"]\ndescription = \"bench\"\n\
         [executor]\nqueue_capacity = 4096\n[batch]\ninterval = \"100ms\"\n"
    );
    let (settings, problems) = Settings::from_table(&source::parse(&text).expect("toml"), None);
    assert!(problems.is_empty(), "{problems:?}");
    let parts = Parts {
        steps: Some(Arc::new(Idle)),
        ..Parts::default()
    };
    let app = Application::build_with(LiveConfig::new(settings, None, None), parts)
        .await
        .expect("app");
    Instance {
        address: format!("http://127.0.0.1:{}", app.port()),
        shutdown: app.shutdown_token(),
        server: tokio::spawn(app.run_until_stopped()),
    }
}

/// What the callers saw.
#[derive(Default)]
struct Tally {
    requests: usize,
    server_errors: usize,
    retry_later: usize,
    accepted: usize,
}

impl Tally {
    fn count(&mut self, status: u16, body: &Value) {
        self.requests += 1;
        if status >= 500 {
            self.server_errors += 1;
        }
        match body["code"].as_str() {
            Some("RETRY_LATER") => self.retry_later += 1,
            Some("ACCEPTED") if status == 202 => self.accepted += 1,
            _ => {}
        }
    }

    fn add(&mut self, other: Tally) {
        self.requests += other.requests;
        self.server_errors += other.server_errors;
        self.retry_later += other.retry_later;
        self.accepted += other.accepted;
    }
}

async fn send(request: reqwest::RequestBuilder, user: &str, tally: &mut Tally) -> Value {
    let answer = request
        .header("x-auth-request-user", user)
        .send()
        .await
        .expect("the instance answers");
    let status = answer.status().as_u16();
    let body: Value = answer.json().await.unwrap_or(Value::Null);
    tally.count(status, &body);
    body
}

/// Caller `caller`'s share of the applies, each decided on the next instance.
async fn apply_and_decide(
    client: reqwest::Client,
    addresses: Arc<Vec<String>>,
    caller: usize,
) -> Tally {
    let mut tally = Tally::default();
    for n in (caller..APPLIES).step_by(CALLERS) {
        let applying = &addresses[n % addresses.len()];
        let apply = client
            .post(format!("{applying}/api/v1/applications"))
            .header("idempotency-key", format!("key-{n}"))
            .json(&json!({ "targetKey": "demo.feature-flags", "reason": "bench" }));
        let body = send(apply, &format!("user{n}"), &mut tally).await;
        let Some(id) = body["operationId"].as_str() else {
            continue;
        };
        let decision = if n.is_multiple_of(3) {
            "reject"
        } else {
            "approve"
        };
        let deciding = &addresses[(n + 1) % addresses.len()];
        let decide = client
            .post(format!("{deciding}/admin/v1/approvals/{id}/{decision}"))
            .json(&json!({ "reason": "bench" }));
        send(decide, "admin", &mut tally).await;
    }
    tally
}

/// Operator-asked merge rounds on every instance in turn, until `done`.
async fn batch_rounds(
    client: reqwest::Client,
    addresses: Arc<Vec<String>>,
    done: CancellationToken,
) -> Tally {
    let mut tally = Tally::default();
    let mut turn = 0;
    while !done.is_cancelled() {
        let address = &addresses[turn % addresses.len()];
        let run = client
            .post(format!("{address}/admin/v1/batches/run"))
            .json(&json!({}));
        send(run, "admin", &mut tally).await;
        turn += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tally
}

/// The store retry counters from /metrics (the process's, so every
/// in-process instance's): `(reason or "exhausted", count)`.
async fn retries(client: &reqwest::Client, address: &str) -> Vec<(String, f64)> {
    let text = client
        .get(format!("{address}/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    text.lines()
        .filter_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            let value: f64 = value.parse().ok()?;
            if name == "changegate_store_retries_exhausted_total" {
                return Some(("exhausted".to_owned(), value));
            }
            let reason = name
                .strip_prefix("changegate_store_retries_total{reason=\"")?
                .strip_suffix("\"}")?;
            Some((reason.to_owned(), value))
        })
        .collect()
}

fn retry_count(counts: &[(String, f64)], reason: &str) -> f64 {
    counts
        .iter()
        .find(|(found, _)| found == reason)
        .map_or(0.0, |(_, count)| *count)
}

async fn run(server: &str, instances: usize) {
    let name = format!("cg_contention_{}_{instances}", std::process::id());
    admin(server, &format!("CREATE DATABASE {name}")).await;
    let url = format!("{server}/{name}");
    let mut started = Vec::new();
    for _ in 0..instances {
        started.push(start(&url).await);
    }
    changegate::clients::http::install_crypto_provider();
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    for instance in &started {
        while client
            .get(format!("{}/readyz", instance.address))
            .send()
            .await
            .map(|r| r.status() != 200)
            .unwrap_or(true)
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let addresses: Arc<Vec<String>> = Arc::new(started.iter().map(|i| i.address.clone()).collect());
    let before = retries(&client, &addresses[0]).await;

    let clock = Instant::now();
    let done = CancellationToken::new();
    let rounds = tokio::spawn(batch_rounds(
        client.clone(),
        addresses.clone(),
        done.clone(),
    ));
    let mut callers = tokio::task::JoinSet::new();
    for caller in 0..CALLERS {
        callers.spawn(apply_and_decide(client.clone(), addresses.clone(), caller));
    }
    let mut tally = Tally::default();
    for caller in callers.join_all().await {
        tally.add(caller);
    }
    done.cancel();
    tally.add(rounds.await.expect("rounds"));
    let seconds = clock.elapsed().as_secs_f64();

    let after = retries(&client, &addresses[0]).await;
    let taken = |reason: &str| retry_count(&after, reason) - retry_count(&before, reason);
    println!(
        "| {instances} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} |",
        tally.accepted,
        tally.requests,
        tally.server_errors,
        tally.retry_later,
        taken("deadlock"),
        taken("lock_wait_timeout"),
        taken("busy"),
        taken("exhausted"),
        seconds
    );
    for instance in started {
        instance.shutdown.cancel();
        let _ = instance.server.await;
    }
    admin(server, &format!("DROP DATABASE {name}")).await;
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
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        println!(
            "| instances | first applies accepted | requests | 5xx | RETRY_LATER | retries: deadlock | lock_wait_timeout | busy | exhausted | s |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|");
        for instances in [1, 3] {
            run(&server, instances).await;
        }
    });
}
