//! Webhook delivery throughput: 10,000 stored events to a loopback receiver
//! that answers 204, on MariaDB with one instance and with three (each its
//! own pool), and on SQLite with one. Besides deliveries/s it reports the
//! database round trips per delivery (MariaDB's `Questions` counter before
//! and after) and the CPU-seconds per 10,000 deliveries of changegate (this
//! process: the receiver runs in a child process of its own) and of the
//! database server (its `/proc/<pid>/stat`). Targets (one MariaDB instance,
//! concurrency 64): at most 0.3 round trips per delivery, at most 5
//! CPU-seconds per 10,000 for changegate and the database together; three
//! instances not slower than one.
//!
//! ```sh
//! CHANGEGATE_TEST_MYSQL_URL=mysql://root@127.0.0.1:3306 cargo bench --bench webhook_delivery
//! ```

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::post;
use changegate::clients::health::Dependencies;
use changegate::clients::http::Outbound;
use changegate::config::{LiveConfig, Settings, source};
use changegate::db::events::{BINDING_STATUS_CHANGED, NewEvent, append_event};
use changegate::db::webhook_endpoints::insert_endpoint;
use changegate::db::{self, Db};
use changegate::domain::BindingStatus;
use changegate::jobs::Outcome;
use changegate::sealing::KeyRing;
use changegate::signature::WebhookSecret;
use changegate::webhooks::relay;
use changegate::webhooks::worker::{Deliverer, http_client};

const EVENTS: usize = 10_000;
/// Set in the child process that only receives.
const RECEIVER_ROLE: &str = "CHANGEGATE_BENCH_WEBHOOK_RECEIVER";

fn settings(text: &str) -> Settings {
    let (settings, problems) = Settings::from_table(&source::parse(text).expect("toml"), None);
    assert!(problems.is_empty(), "{problems:?}");
    settings
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

/// The server's count of statements received from clients.
async fn questions(server: &str) -> i64 {
    use sqlx::{Connection, Row};
    let mut conn = sqlx::MySqlConnection::connect(server)
        .await
        .expect("connect");
    let row = sqlx::query("SHOW GLOBAL STATUS LIKE 'Questions'")
        .fetch_one(&mut conn)
        .await
        .expect("status");
    let value: String = row.get(1);
    value.parse().expect("a count")
}

/// The database server's process id, from its pid file.
async fn server_pid(server: &str) -> Option<u32> {
    use sqlx::Connection;
    let mut conn = sqlx::MySqlConnection::connect(server).await.ok()?;
    let file: String = sqlx::query_scalar("SELECT @@pid_file")
        .fetch_one(&mut conn)
        .await
        .ok()?;
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

/// User and system CPU-seconds a process has used so far.
fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / clock_ticks())
}

fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(100.0)
}

async fn add_events(db: &Db) {
    for _ in 0..EVENTS / 1000 {
        let mut tx = db.begin().await.expect("begin");
        for n in 0..1000 {
            let operation_id = uuid::Uuid::new_v4().to_string();
            let payload = format!("{{\"n\":{n}}}");
            let event = NewEvent {
                event_type: BINDING_STATUS_CHANGED,
                operation_id: &operation_id,
                subject_id: "alice",
                target_key: "demo.feature-flags",
                from_status: Some(BindingStatus::Merged),
                to_status: BindingStatus::Validated,
                payload: &payload,
            };
            append_event(&mut tx, &event).await.expect("event");
        }
        tx.commit().await.expect("commit");
    }
}

async fn count_delivered(db: &Db) -> i64 {
    changegate::with_pool!(db, reader, |pool| {
        sqlx::query_scalar("SELECT COUNT(*) FROM webhook_delivery WHERE status = 'delivered'")
            .fetch_one(pool)
            .await
    })
    .expect("count")
}

/// Where the run's database lives.
enum Backend<'a> {
    MariaDb { server: &'a str, pid: Option<u32> },
    Sqlite,
}

/// One measured run: relays and delivers every event with `instances`
/// workers, each polling as an instance does (relay, then deliver) until
/// both find nothing to do.
async fn measure(backend: &Backend<'_>, receiver: &str, instances: usize) {
    let name = format!("cg_hooks_{}_{instances}", std::process::id());
    let scratch = tempfile::tempdir().expect("temp dir");
    let url = match backend {
        Backend::MariaDb { server, .. } => {
            admin(server, &format!("CREATE DATABASE {name}")).await;
            format!("{server}/{name}")
        }
        Backend::Sqlite => format!("sqlite://{}", scratch.path().join("hooks.db").display()),
    };
    let config = settings(&format!(
        "[database]\nurl = {url:?}\nmax_connections = 8\n\
         [log]\nlevel = \"warn\"\n[webhooks]\nallow_private_targets = true\nconcurrency = 64\n"
    ));
    let first = db::open(&config.database).await.expect("open");
    // Sealed as the service stores it.
    let keys = Arc::new(KeyRing::new(&[42; 32], &[]));
    let secret = keys.seal(&WebhookSecret::generate().expose());
    let mut tx = first.begin().await.expect("begin");
    insert_endpoint(&mut tx, receiver, "", "", &secret)
        .await
        .expect("endpoint");
    tx.commit().await.expect("commit");
    add_events(&first).await;
    let live = LiveConfig::new(config.clone(), None, None);
    let mut pools = Vec::new();
    for _ in 0..instances {
        pools.push(db::open(&config.database).await.expect("open"));
    }
    let (questions_before, server_cpu_before) = match backend {
        Backend::MariaDb { server, pid } => (
            Some(questions(server).await),
            pid.and_then(|pid| cpu_seconds(&pid.to_string())),
        ),
        Backend::Sqlite => (None, None),
    };
    let own_cpu_before = cpu_seconds("self").expect("own CPU time");
    let started = Instant::now();
    let mut running = tokio::task::JoinSet::new();
    for pool in pools {
        let worker = Deliverer::new(
            pool.clone(),
            live.clone(),
            // The receiver is on loopback.
            http_client(
                &Outbound::from_platform().expect("outbound"),
                &Dependencies::default(),
                true,
            )
            .expect("client"),
            keys.clone(),
        );
        running.spawn(async move {
            loop {
                let relayed = relay::run_once(&pool, false).await.expect("relay");
                let delivered = worker.run_once().await.expect("deliver");
                if relayed == Outcome::Idle && delivered == Outcome::Idle {
                    return;
                }
            }
        });
    }
    running.join_all().await;
    let elapsed = started.elapsed().as_secs_f64();
    let own_cpu = cpu_seconds("self").expect("own CPU time") - own_cpu_before;
    let (round_trips, server_cpu) = match backend {
        Backend::MariaDb { server, pid } => {
            let sent = questions(server).await - questions_before.expect("counted before");
            // The two status reads themselves are not the workers'.
            let per_delivery = (sent - 2) as f64 / EVENTS as f64;
            let cpu = server_cpu_before
                .zip(pid.and_then(|pid| cpu_seconds(&pid.to_string())))
                .map(|(before, after)| after - before);
            (format!("{per_delivery:.3}"), cpu)
        }
        Backend::Sqlite => ("in process".to_owned(), None),
    };
    assert_eq!(
        count_delivered(&first).await,
        EVENTS as i64,
        "all delivered"
    );
    let per_10k = |seconds: f64| seconds * 10_000.0 / EVENTS as f64;
    let server_cpu = server_cpu.map_or("n/a".to_owned(), |cpu| format!("{:.2}", per_10k(cpu)));
    let label = match backend {
        Backend::MariaDb { .. } => "MariaDB",
        Backend::Sqlite => "SQLite",
    };
    println!(
        "| {label} | {instances} | {EVENTS} | {elapsed:.2} | {:.0} | {round_trips} | {:.2} | {server_cpu} |",
        EVENTS as f64 / elapsed,
        per_10k(own_cpu),
    );
    first.close().await;
    if let Backend::MariaDb { server, .. } = backend {
        admin(server, &format!("DROP DATABASE {name}")).await;
    }
}

/// The child process: answers 204 to every POST on `/hook`, prints its URL,
/// serves until killed.
fn receive() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let app = Router::new().route("/hook", post(|| async { StatusCode::NO_CONTENT }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        println!("http://{}/hook", listener.local_addr().expect("address"));
        axum::serve(listener, app).await.expect("serve");
    });
}

/// Starts the receiver child process; answers it and its URL.
fn start_receiver() -> (Child, String) {
    let mut child = Command::new(std::env::current_exe().expect("this benchmark"))
        .env(RECEIVER_ROLE, "1")
        .stdout(Stdio::piped())
        .spawn()
        .expect("receiver process");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("piped"))
        .read_line(&mut line)
        .expect("receiver URL");
    (child, line.trim().to_owned())
}

fn main() {
    if std::env::var_os(RECEIVER_ROLE).is_some() {
        receive();
        return;
    }
    let (mut child, receiver) = start_receiver();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        println!(
            "| database | instances | deliveries | seconds | deliveries/s | DB round trips per delivery | changegate CPU-s per 10k | database CPU-s per 10k |"
        );
        println!("|---|---|---|---|---|---|---|---|");
        match std::env::var("CHANGEGATE_TEST_MYSQL_URL") {
            Ok(server) => {
                let server = server.trim_end_matches('/').to_owned();
                let pid = server_pid(&server).await;
                let mariadb = Backend::MariaDb {
                    server: &server,
                    pid,
                };
                measure(&mariadb, &receiver, 1).await;
                measure(&mariadb, &receiver, 3).await;
            }
            Err(_) => eprintln!("set CHANGEGATE_TEST_MYSQL_URL (MariaDB) to measure on MariaDB too"),
        }
        measure(&Backend::Sqlite, &receiver, 1).await;
    });
    child.kill().expect("stop the receiver");
    child.wait().expect("receiver stopped");
}
