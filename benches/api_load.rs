//! Load benchmark of the requester API, measured side by side in one run:
//! raw single-row INSERT transactions vs `POST /api/v1/applications`,
//! `GET /api/v1/operations/{id}`, the cost of the layer stack on a trivial
//! route, and the rate limiter's memory for a million idle subjects.
//!
//! Run: `cargo bench --bench api_load` (needs `wrk`; set
//! `CHANGEGATE_TEST_MYSQL_URL` to include MariaDB). Results go to stdout as
//! a Markdown table for BENCHMARKS.md.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::middleware::from_fn_with_state;
use axum::routing::get;
use changegate::app::{Application, Parts};
use changegate::config::{LiveConfig, Settings, source};
use changegate::db::Db;
use changegate::http::layers::limiter::SlidingWindow;
use changegate::http::layers::{RateLimitSpec, RouteSpec, guard, identify::identify};
use changegate::http::with_edge_layers;
use changegate::state::AppState;
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
    requests_per_second: f64,
    p99_ms: f64,
    non_2xx: u64,
}

fn wrk(url: &str, script: &str) -> Wrk {
    let output = Command::new("wrk")
        .args([
            "-t2",
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
    tokio::spawn(app.run_until_stopped());
    let db = loop {
        if let Some(db) = state.db.get() {
            break db.clone();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let raw = raw_insert_rate(&db).await;
    let apply = wrk(&format!("{address}/api/v1/applications"), "apply.lua");
    let rss = peak_rss_mb();
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

async fn layer_overhead(state: AppState) {
    let bare = serve(Router::new().route("/trivial", get(trivial))).await;
    let edge_only = serve(with_edge_layers(
        Router::new().route("/trivial", get(trivial)),
        Duration::from_secs(30),
    ))
    .await;
    let stacked_routes = Router::new()
        .route("/trivial", guard(&state, &BENCH_ROUTE, get(trivial)))
        .layer(from_fn_with_state(state.clone(), identify))
        .with_state(state);
    let stacked = serve(with_edge_layers(stacked_routes, Duration::from_secs(30))).await;
    let bare = wrk(&format!("{bare}/trivial"), "many_users.lua");
    let edge_only = wrk(&format!("{edge_only}/trivial"), "many_users.lua");
    let stacked = wrk(&format!("{stacked}/trivial"), "many_users.lua");
    println!(
        "\nLayer stack on a trivial route: bare {:.0} req/s, edge layers only {:.0} req/s, full stack {:.0} req/s ({:.1}% slower than bare, {} non-2xx)",
        bare.requests_per_second,
        edge_only.requests_per_second,
        stacked.requests_per_second,
        100.0 * (1.0 - stacked.requests_per_second / bare.requests_per_second),
        stacked.non_2xx,
    );
}

fn limiter_memory() {
    let before = rss_mb();
    let limiter = SlidingWindow::new(Duration::from_secs(2));
    for i in 0..1_000_000u32 {
        limiter.try_acquire(
            &format!("apply:ip:10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255),
            10,
        );
    }
    let holding = rss_mb() - before;
    std::thread::sleep(Duration::from_millis(2100));
    let evicted = limiter.evict_idle();
    let after = rss_mb() - before;
    println!(
        "\nRate limiter: 1,000,000 idle subjects hold {holding:.0} MB; after evicting {evicted} keys: {after:.0} MB"
    );
}

fn main() {
    // `cargo bench --bench api_load -- layers` runs only the layer comparison.
    let only_layers = std::env::args().any(|arg| arg == "layers");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        if only_layers {
            let dir = tempfile::tempdir().expect("temp dir");
            let sqlite = format!("sqlite://{}", dir.path().join("bench.db").display());
            let config = LiveConfig::new(settings(&sqlite), None, None);
            let app = Application::build_with(config, idle_parts()).await.expect("app builds");
            layer_overhead(app.state().clone()).await;
            return;
        }
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
        let config = LiveConfig::new(settings(&sqlite), None, None);
        let app = Application::build_with(config, idle_parts()).await.expect("app builds");
        layer_overhead(app.state().clone()).await;
    });
    drop(runtime);
    if !only_layers {
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
