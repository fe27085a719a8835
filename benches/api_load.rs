//! Load benchmark of the requester API, measured side by side in one run:
//! raw single-row INSERT transactions vs `POST /api/v1/applications`,
//! `GET /api/v1/operations/{id}`, the cost of the layer stack on a trivial
//! route, and the rate limiter's memory for a million idle subjects.
//!
//! Run: `cargo bench --bench api_load` (needs `wrk`; set
//! `CHANGEGATE_TEST_MYSQL_URL` to include MariaDB). Results go to stdout as
//! a Markdown table for BENCHMARKS.md.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use changegate::app::{Application, Parts};
use changegate::config::{LiveConfig, LogFormat, Settings, source};
use changegate::db::Db;
use changegate::http::layers::limiter::SlidingWindow;
use changegate::http::layers::{RateLimitSpec, RouteSpec, guard};
use changegate::http::with_edge_layers;
use changegate::telemetry;
use changegate::with_tx;
use changegate::workflow::{StepFuture, Steps};

const CONCURRENCY: usize = 64;
const RUN: Duration = Duration::from_secs(10);

const CONFIG: &str = r#"
[access]
mode = "OPEN"
[rate_limit]
apply = 0
[authz.rules]
apply = ["requester"]
read = ["requester"]
bench = ["requester"]
[authz.grants]
"requester" = ["*"]
[targets."team.access"]
self_only = false
[executor]
queue_capacity = 100000
"#;

struct Wrk {
    requests: u64,
    requests_per_second: f64,
    p99_ms: f64,
    non_2xx: u64,
}

fn wrk(url: &str, script: &str) -> Wrk {
    run_wrk(Command::new("wrk").arg("-t2"), url, script)
}

/// One wrk thread pinned to core 1 (the layer comparison's server is on core 0).
fn wrk_on_core_1(url: &str, script: &str) -> Wrk {
    run_wrk(
        Command::new("taskset").args(["-c", "1", "wrk", "-t1"]),
        url,
        script,
    )
}

fn run_wrk(command: &mut Command, url: &str, script: &str) -> Wrk {
    let output = command
        .args([
            &format!("-c{CONCURRENCY}"),
            &format!("-d{}s", RUN.as_secs()),
            "--latency",
            "-s",
        ])
        .arg(format!(
            "{}/benches/wrk/{script}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .arg(url)
        .output()
        .expect("wrk is installed (apt-get install wrk)");
    let text = String::from_utf8_lossy(&output.stdout);
    let number = |prefix: &str| {
        text.lines()
            .find_map(|line| line.trim().strip_prefix(prefix))
            .map(|rest| rest.split_whitespace().next().unwrap_or("0").to_owned())
            .unwrap_or_default()
    };
    let p99 = number("99%");
    let p99_ms = match p99.strip_suffix("ms") {
        Some(ms) => ms.parse().unwrap_or(f64::NAN),
        None => match p99.strip_suffix("us") {
            Some(us) => us.parse::<f64>().unwrap_or(f64::NAN) / 1000.0,
            None => p99
                .strip_suffix('s')
                .and_then(|s| s.parse::<f64>().ok())
                .map_or(f64::NAN, |s| s * 1000.0),
        },
    };
    Wrk {
        requests: text
            .lines()
            .find_map(|line| line.trim().split_once(" requests in "))
            .and_then(|(count, _)| count.parse().ok())
            .unwrap_or(0),
        requests_per_second: number("Requests/sec:").parse().unwrap_or(0.0),
        p99_ms,
        non_2xx: number("Non-2xx or 3xx responses:").parse().unwrap_or(0),
    }
}

fn settings(database_url: &str) -> Settings {
    let text =
        format!("[server]\nlisten = \"127.0.0.1:0\"\n[database]\nurl = {database_url:?}\n{CONFIG}");
    let (settings, problems) = Settings::from_table(&source::parse(&text).expect("valid"), None);
    assert!(problems.is_empty(), "{problems:?}");
    settings
}

/// Single-row INSERT transactions per second at [`CONCURRENCY`].
async fn raw_insert_rate(db: &Db) -> f64 {
    let create =
        "CREATE TABLE bench_insert (id INTEGER PRIMARY KEY AUTO_INCREMENT, v VARCHAR(64) NOT NULL)";
    let create = match db.backend() {
        changegate::db::Backend::Sqlite => create.replace(
            "INTEGER PRIMARY KEY AUTO_INCREMENT",
            "INTEGER PRIMARY KEY AUTOINCREMENT",
        ),
        changegate::db::Backend::MySql => create.to_owned(),
    };
    let mut tx = db.begin().await.expect("begin");
    with_tx!(&mut tx, |conn| sqlx::query(sqlx::AssertSqlSafe(create))
        .execute(conn)
        .await
        .map(|_| ()))
    .expect("create");
    tx.commit().await.expect("commit");
    let deadline = Instant::now() + Duration::from_secs(5);
    let tasks: Vec<_> = (0..CONCURRENCY)
        .map(|_| {
            let db = db.clone();
            tokio::spawn(async move {
                let mut done = 0u64;
                while Instant::now() < deadline {
                    let mut tx = db.begin().await.expect("begin");
                    with_tx!(&mut tx, |conn| {
                        sqlx::query("INSERT INTO bench_insert (v) VALUES (?)")
                            .bind("x")
                            .execute(conn)
                            .await
                            .map(|_| ())
                    })
                    .expect("insert");
                    tx.commit().await.expect("commit");
                    done += 1;
                }
                done
            })
        })
        .collect();
    let mut total = 0;
    for task in tasks {
        total += task.await.expect("task");
    }
    total as f64 / 5.0
}

fn peak_rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    rss_field(&status, "VmHWM:")
}

fn rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    rss_field(&status, "VmRSS:")
}

fn rss_field(status: &str, field: &str) -> f64 {
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = format!("http://{}", listener.local_addr().expect("address"));
    tokio::spawn(async move {
        let service = router.into_make_service_with_connect_info::<std::net::SocketAddr>();
        axum::serve(listener, service).await.expect("serve");
    });
    address
}

/// Workers that take operations and do nothing: the benchmark measures the
/// API's own work, not the workflow's (which otherwise competes for the same
/// database and cores).
struct IdleSteps;

impl Steps for IdleSteps {
    fn run(&self, _: String) -> StepFuture {
        Box::pin(async { None })
    }
}

fn idle_parts() -> Parts {
    Parts {
        steps: Some(Arc::new(IdleSteps)),
        ..Parts::default()
    }
}

async fn backend(name: &str, url: &str) {
    let config = LiveConfig::new(settings(url), None, None);
    let app = Application::build_with(config, idle_parts())
        .await
        .expect("app builds");
    let address = format!("http://127.0.0.1:{}", app.port());
    let state = app.state().clone();
    let shutdown = app.shutdown_token();
    let running = tokio::spawn(app.run_until_stopped());
    let db = loop {
        if let Some(db) = state.db.get() {
            break db.clone();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let raw = raw_insert_rate(&db).await;
    let apply = wrk(&format!("{address}/api/v1/applications"), "apply.lua");
    let rss = peak_rss_mb();
    changegate::clients::http::install_crypto_provider();
    let client = reqwest::Client::new();
    let created: serde_json::Value = client
        .post(format!("{address}/api/v1/applications"))
        .header("x-auth-request-user", "bench")
        .json(&serde_json::json!({ "targetKey": "team.access", "subjectId": "reader", "reason": "bench" }))
        .send()
        .await
        .expect("apply")
        .json()
        .await
        .expect("json");
    let id = created["operationId"].as_str().expect("operation id");
    let read = wrk(&format!("{address}/api/v1/operations/{id}"), "get.lua");
    println!(
        "| {name} | {raw:.0} | {:.0} ({:.0}% of raw) | {:.1} | {} | {:.0} | {:.1} | {rss:.0} |",
        apply.requests_per_second,
        100.0 * apply.requests_per_second / raw,
        apply.p99_ms,
        apply.non_2xx,
        read.requests_per_second,
        read.p99_ms,
    );
    // Stopped, so that its background jobs take no CPU from the next backend's run.
    shutdown.cancel();
    running.await.expect("app task").expect("app stops");
}

async fn trivial() -> &'static str {
    "ok"
}

const BENCH_ROUTE: RouteSpec = RouteSpec {
    name: "bench",
    rate_limit: Some(RateLimitSpec {
        bucket: "bench",
        default_limit: u32::MAX,
        message: "slow down",
    }),
    activity: Some("bench"),
};

/// The layer comparison's servers run on one thread pinned to core 0 and wrk
/// on core 1. Each variant is scored by requests answered per second of the
/// server thread's CPU time, next to its wall-clock rate: one wrk thread
/// cannot always keep the bare route busy (the server core then idles and
/// the wall rate measures wrk), and unpinned runs, where the scheduler
/// shares both cores between the server and wrk, varied by ±20%. The three
/// variants are measured in interleaved rounds; each one's median is kept.
fn layer_overhead() {
    const ROUNDS: usize = 3;
    let (started, ready) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        assert!(
            core_affinity::set_for_current(core_affinity::CoreId { id: 0 }),
            "pin the server to core 0"
        );
        let server_thread =
            std::fs::read_link("/proc/thread-self").expect("this thread's /proc entry");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let dir = tempfile::tempdir().expect("temp dir");
            let sqlite = format!("sqlite://{}", dir.path().join("layers.db").display());
            let config = LiveConfig::new(settings(&sqlite), None, None);
            let app = Application::build_with(config, idle_parts())
                .await
                .expect("app builds");
            let state = app.state().clone();
            let bare = serve(Router::new().route("/trivial", get(trivial))).await;
            let edge_only = serve(with_edge_layers(
                Router::new().route("/trivial", get(trivial)),
                Duration::from_secs(30),
            ))
            .await;
            let stacked_routes = Router::new()
                .route("/trivial", guard(&state, &BENCH_ROUTE, get(trivial)))
                .with_state(state);
            let stacked = serve(with_edge_layers(stacked_routes, Duration::from_secs(30))).await;
            started
                .send((server_thread, [bare, edge_only, stacked]))
                .expect("the benchmark waits");
            std::future::pending::<()>().await;
            drop(dir);
        });
    });
    let (server_thread, addresses) = ready.recv().expect("servers start");
    let server_cpu_seconds = || {
        let schedstat =
            std::fs::read_to_string(Path::new("/proc").join(&server_thread).join("schedstat"))
                .expect("the server thread's schedstat");
        let on_cpu_ns: f64 = schedstat
            .split_whitespace()
            .next()
            .and_then(|ns| ns.parse().ok())
            .expect("schedstat starts with nanoseconds on CPU");
        on_cpu_ns / 1e9
    };
    let mut per_cpu_second: [Vec<f64>; 3] = Default::default();
    let mut wall: [Vec<f64>; 3] = Default::default();
    let mut non_2xx = 0;
    for _ in 0..ROUNDS {
        for (variant, address) in addresses.iter().enumerate() {
            let cpu_before = server_cpu_seconds();
            let result = wrk_on_core_1(&format!("{address}/trivial"), "many_users.lua");
            let cpu = server_cpu_seconds() - cpu_before;
            per_cpu_second[variant].push(result.requests as f64 / cpu);
            wall[variant].push(result.requests_per_second);
            non_2xx += result.non_2xx;
        }
    }
    let median = |mut runs: Vec<f64>| {
        runs.sort_by(f64::total_cmp);
        runs[runs.len() / 2]
    };
    let [bare, edge_only, stacked] = per_cpu_second.map(median);
    let [bare_wall, edge_only_wall, stacked_wall] = wall.map(median);
    println!(
        "\nLayer stack on a trivial route (median of {ROUNDS} rounds; requests per second of server CPU, wall-clock req/s in brackets): bare {bare:.0} ({bare_wall:.0}), edge layers only {edge_only:.0} ({edge_only_wall:.0}), full stack {stacked:.0} ({stacked_wall:.0}): the stack costs {:.1}% of the bare route's throughput ({non_2xx} non-2xx)",
        100.0 * (1.0 - stacked / bare),
    );
}

/// Memory of a million idle subjects, and what is left once they are
/// evicted: at once, and after two seconds in which the limiter keeps taking
/// requests (100 new subjects every 100 ms), as in a serving instance.
/// mimalloc hands freed pages back to the system after a short delay, on a
/// later allocation, so the memory is back with the traffic that follows the
/// eviction rather than at the eviction itself.
fn limiter_memory() {
    let before = rss_mb();
    let limiter = SlidingWindow::new(Duration::from_secs(2));
    let admit = |i: u32| {
        let address = std::net::Ipv4Addr::from(0x0a00_0000 + i);
        limiter.try_acquire(("apply", address), 10, Instant::now());
    };
    (0..1_000_000).for_each(admit);
    let holding = rss_mb() - before;
    std::thread::sleep(Duration::from_millis(2100));
    let evicted = limiter.evict_idle();
    let at_once = rss_mb() - before;
    for round in 0..20 {
        std::thread::sleep(Duration::from_millis(100));
        (0..100).for_each(|i| admit(2_000_000 + round * 100 + i));
    }
    let later = rss_mb() - before;
    println!(
        "\nRate limiter: 1,000,000 idle subjects hold {holding:.0} MB; after evicting {evicted} keys: {at_once:.0} MB at once, {later:.0} MB two seconds of traffic later ({} keys)",
        limiter.len()
    );
}

fn main() {
    // `cargo bench --bench api_load -- layers` runs only the layer
    // comparison; `api` and `limiter` likewise name the other parts.
    let wanted: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with('-'))
        .collect();
    let runs = |part: &str| wanted.is_empty() || wanted.iter().any(|arg| arg == part);
    // The production logger at its default level, so request spans cost what
    // they cost in service.
    telemetry::init_logging("info", LogFormat::Human, None).expect("logging");
    if runs("api") {
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        runtime.block_on(async {
            let dir = tempfile::tempdir().expect("temp dir");
            println!("| database | raw INSERT tx/s | POST applications req/s | POST p99 ms | non-2xx | GET operation req/s | GET p99 ms | peak RSS MB |");
            println!("|---|---|---|---|---|---|---|---|");
            let sqlite = format!("sqlite://{}", dir.path().join("bench.db").display());
            backend("SQLite", &sqlite).await;
            if let Ok(server) = std::env::var("CHANGEGATE_TEST_MYSQL_URL") {
                let name = format!("cg_bench_{}", std::process::id());
                let server = server.trim_end_matches('/').to_owned();
                admin(&server, &format!("CREATE DATABASE {name}")).await;
                backend("MariaDB", &format!("{server}/{name}")).await;
                admin(&server, &format!("DROP DATABASE {name}")).await;
            }
        });
    }
    if runs("layers") {
        layer_overhead();
    }
    if runs("limiter") {
        limiter_memory();
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
