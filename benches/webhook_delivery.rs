//! Webhook delivery throughput on MariaDB: one instance, then three (each
//! its own pool), relaying and delivering events to a fast loopback
//! receiver that answers 204 (target: one instance at least 1,000
//! deliveries/s; three more than one).
//!
//! ```sh
//! CHANGEGATE_TEST_MYSQL_URL=mysql://root@127.0.0.1:3306 cargo bench --bench webhook_delivery
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

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
use changegate::sealing::KeyRing;
use changegate::signature::WebhookSecret;
use changegate::webhooks::relay;
use changegate::webhooks::worker::{Deliverer, http_client};

const EVENTS: usize = 10_000;

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

async fn delivered(db: &Db) -> i64 {
    changegate::with_pool!(db, reader, |pool| {
        sqlx::query_scalar("SELECT COUNT(*) FROM webhook_delivery WHERE status = 'delivered'")
            .fetch_one(pool)
            .await
    })
    .expect("count")
}

async fn measure(server: &str, receiver: &str, instances: usize) {
    let name = format!("cg_hooks_{}_{instances}", std::process::id());
    admin(server, &format!("CREATE DATABASE {name}")).await;
    let url = format!("{server}/{name}");
    let config = settings(&format!(
        "[database]\nurl = {url:?}\nmax_connections = 8\n\
         [log]\nlevel = \"warn\"\n[webhooks]\nallow_private_targets = true\nconcurrency = 64\n"
    ));
    let first = db::open(&config.database).await.expect("open");
    // Sealed as the service stores it: each delivery opens it.
    let keys = Arc::new(KeyRing::new(&[42; 32], &[]));
    let secret = keys.seal(&WebhookSecret::generate().expose());
    let mut tx = first.begin().await.expect("begin");
    insert_endpoint(&mut tx, receiver, "", "", &secret)
        .await
        .expect("endpoint");
    tx.commit().await.expect("commit");
    add_events(&first).await;
    let live = LiveConfig::new(config.clone(), None, None);
    let started = Instant::now();
    let mut running = tokio::task::JoinSet::new();
    for _ in 0..instances {
        let pool = db::open(&config.database).await.expect("open");
        let worker = Deliverer::new(
            pool.clone(),
            live.clone(),
            // The receivers are on loopback.
            http_client(
                &Outbound::from_platform().expect("outbound"),
                &Dependencies::default(),
                true,
            )
            .expect("client"),
            keys.clone(),
        );
        running.spawn(async move {
            while delivered(&pool).await < EVENTS as i64 {
                relay::run_once(&pool, false).await.expect("relay");
                worker.run_once().await.expect("deliver");
            }
        });
    }
    running.join_all().await;
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "| {instances} | {EVENTS} | {elapsed:.1} | {:.0} |",
        EVENTS as f64 / elapsed
    );
    first.close().await;
    admin(server, &format!("DROP DATABASE {name}")).await;
}

fn main() {
    let Ok(server) = std::env::var("CHANGEGATE_TEST_MYSQL_URL") else {
        eprintln!("set CHANGEGATE_TEST_MYSQL_URL (MariaDB) to run this benchmark");
        return;
    };
    let server = server.trim_end_matches('/').to_owned();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let received = Arc::new(AtomicU64::new(0));
        let counter = received.clone();
        let app = Router::new().route(
            "/hook",
            post(move || {
                let counter = counter.clone();
                async move {
                    counter.fetch_add(1, Ordering::Relaxed);
                    StatusCode::NO_CONTENT
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let receiver = format!("http://{}/hook", listener.local_addr().expect("address"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        println!("| instances | deliveries | seconds | deliveries/s |");
        println!("|---|---|---|---|");
        measure(&server, &receiver, 1).await;
        measure(&server, &receiver, 3).await;
        assert!(received.load(Ordering::Relaxed) >= 2 * EVENTS as u64);
    });
}
