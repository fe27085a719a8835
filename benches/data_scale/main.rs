//! Cost stays flat as the data grows: the reads and jobs that run all day,
//! timed on a nearly empty database and on one holding a year of a busy
//! installation, side by side, sample by sample in turn, so the machine's
//! drift falls on both alike (target: the full one within 2x of the empty
//! one), followed by the plan of every statement each one sent on the full
//! database (MariaDB `EXPLAIN`, SQLite `EXPLAIN QUERY PLAN`; `plans`).
//!
//! Both databases hold the same live work (requests waiting for a merge
//! round, merged ones awaiting their deploy, pending approvals, failures,
//! unrelayed events); the full one adds the finished history around it.
//! Sizes of the full one (defaults: the issue's year of a busy installation):
//!
//! - `CHANGEGATE_BENCH_OPERATIONS` (1,000,000), `CHANGEGATE_BENCH_BINDINGS`
//!   (200,000): operations over that many relations, the newest of each
//!   relation owning its binding;
//! - `CHANGEGATE_BENCH_ROWS` (10,000,000): history, event and delivery rows
//!   in total, split 5:3:2.
//!
//! `CHANGEGATE_BENCH_ONLY=sqlite` or `=mariadb` runs one backend.
//!
//! ```sh
//! cargo bench --bench data_scale                                                        # SQLite
//! CHANGEGATE_TEST_MYSQL_URL=mysql://root@127.0.0.1:3306 cargo bench --bench data_scale   # + MariaDB
//! CHANGEGATE_BENCH_OPERATIONS=100000 CHANGEGATE_BENCH_BINDINGS=20000 \
//!   CHANGEGATE_BENCH_ROWS=1000000 cargo bench --bench data_scale                          # a quick run
//! ```

mod fill;
mod plans;

use std::sync::Arc;
use std::time::{Duration, Instant};

use changegate::app::{Application, Parts};
use changegate::batch::{Claimed, Ordinary, Room, claim_batch};
use changegate::config::projects::Projects;
use changegate::config::{LiveConfig, Settings, source};
use changegate::db::retention::{Pruned, delete_ids, eligible_ids, newest_old_id};
use changegate::db::{self, Backend, Db};
use changegate::jobs::{Outcome, reconcile, retention};
use changegate::webhooks::relay;
use changegate::workflow::{StepFuture, Steps};
use fill::{Prepared, Scale, prepare};
use plans::Plans;
use sqlx::{AssertSqlSafe, Connection};

/// A year, the span of the full database's history.
const YEAR_MS: i64 = 365 * 24 * 3600 * 1000;
/// The live work, the same in both databases, newest operations last:
/// failed ones, pending approvals, requests waiting for a merge round and
/// merged ones awaiting their deploy.
const FAILED: i64 = 200;
const AWAITING_APPROVAL: i64 = 500;
const WAITING: i64 = MEMBERS as i64 * (ROUNDS as i64 + 1);
const MERGED: i64 = 1000;
const LIVE: i64 = FAILED + AWAITING_APPROVAL + WAITING + MERGED;
/// One live operation a minute: the merged ones fall in the reconciliation
/// window (10 minutes to 24 hours old).
const LIVE_SPACING_MS: i64 = 60_000;
/// Requests of a merge batch over the year.
const BATCH_SIZE: i64 = 50;
/// Catalog targets; relations are (subject, target) pairs.
const TARGETS: i64 = 8;
/// A claim round's members.
const MEMBERS: u32 = 500;
/// One batch of `MEMBERS` at a time: the claim measured is the same at any
/// train depth.
const ONE_BATCH: Room<'static> = Room {
    members: MEMBERS,
    in_flight: 1,
    ordinary: Ordinary::Unpaced,
};
/// Timed rounds of the jobs that use up their work (claim, relay,
/// retention), after one untimed warm-up round.
const ROUNDS: usize = 5;
/// Samples of each read.
const SAMPLES: usize = 25;
/// Events still to relay: one relay page per round.
const UNRELAYED: i64 = relay::PAGE as i64 * (ROUNDS as i64 + 1);
/// The age past which the retention job deletes (the default for events
/// and deliveries; history is kept 400 days by default, which a year of
/// history never reaches).
const RETAINED: Duration = Duration::from_secs(30 * 24 * 3600);

/// Workers that leave operations where they are: the bench measures reads
/// and jobs, not the workflow.
struct Idle;

impl Steps for Idle {
    fn run(&self, _operation_id: String) -> StepFuture {
        Box::pin(async { None })
    }
}

fn settings(database_url: &str) -> Settings {
    // Background jobs far apart and retention off: they would use up the
    // work the bench times them on.
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[database]\nurl = {database_url:?}\n\
         [log]\nlevel = \"error\"\n[access]\nmode = \"OPEN\"\n[rate_limit]\napply = 0\n\
         [authz.rules]\napply = [\"r\"]\nread = [\"r\"]\noperator = [\"o\"]\n\
         [authz.grants]\n\"r\" = [\"*\"]\n\"o\" = [\"admin\"]\n\
         [gitlab]\nproject = \"config/repo\"\n\
         [targets.\"target-0\"]\ndescription = \"bench\"\n\
         [batch]\ninterval = \"1h\"\n[reconcile]\ninterval = \"1h\"\n\
         [webhooks]\npoll_interval = \"1h\"\n\
         [retention]\nevents = 0\nwebhook_deliveries = 0\ncallback_receipts = 0\n\
         deploy_reports = 0\noperation_history = 0\naudit_log = 0\n"
    );
    let (settings, problems) = Settings::from_table(&source::parse(&text).expect("toml"), None);
    assert!(problems.is_empty(), "{problems:?}");
    settings
}

/// One measured thing: its median over the samples on the nearly empty
/// database and on the full one.
struct Timing {
    name: String,
    medians: [Duration; 2],
}

/// The nearly empty database, then the full one.
const BOTH: [usize; 2] = [0, FULL];
/// The full database's index in `BOTH`.
const FULL: usize = 1;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// A timing from samples taken on both databases in turn.
fn timing(name: String, [empty, full]: [Vec<Duration>; 2]) -> Timing {
    Timing {
        name,
        medians: [median(empty), median(full)],
    }
}

/// Runs `work` on database `which` untimed, as a warm-up; on the full one
/// its statements are captured for their plans.
async fn warm_up<Fut: Future>(
    plans: &mut Plans,
    name: &str,
    which: usize,
    work: Fut,
) -> Fut::Output {
    if which == FULL {
        plans.capture(name, work).await
    } else {
        work.await
    }
}

/// Times `read(database, sample)` on both databases in turn, sample by
/// sample (empty, full, empty, …), after one warm-up on each: the machine's
/// drift falls on both alike.
async fn time_reads<F, Fut>(plans: &mut Plans, name: &str, mut read: F) -> Timing
where
    F: FnMut(usize, usize) -> Fut,
    Fut: Future,
{
    for which in BOTH {
        warm_up(plans, name, which, read(which, 0)).await;
    }
    let mut samples = [Vec::with_capacity(SAMPLES), Vec::with_capacity(SAMPLES)];
    for sample in 1..=SAMPLES {
        for which in BOTH {
            let started = Instant::now();
            read(which, sample).await;
            samples[which].push(started.elapsed());
        }
    }
    timing(name.to_owned(), samples)
}

/// Times the rounds of a job that uses up its work, `round(database)` on
/// both databases in turn, after one warm-up round on each.
async fn time_rounds<F, Fut>(plans: &mut Plans, name: String, mut round: F) -> Timing
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = ()>,
{
    for which in BOTH {
        warm_up(plans, &name, which, round(which)).await;
    }
    let mut rounds = [Vec::with_capacity(ROUNDS), Vec::with_capacity(ROUNDS)];
    for _ in 0..ROUNDS {
        for which in BOTH {
            let started = Instant::now();
            round(which).await;
            rounds[which].push(started.elapsed());
        }
    }
    timing(name, rounds)
}

/// Lets the next claim run: the bench's rounds do not merge.
async fn free_the_merge_slot(db: &Db) {
    let mut tx = db.begin().await.expect("begin");
    changegate::with_tx!(&mut tx, |conn| {
        sqlx::query("UPDATE merge_batch SET status = 'SUCCEEDED' WHERE status = 'RUNNING'")
            .execute(conn)
            .await
            .map(|_| ())
    })
    .expect("free the slot");
    tx.commit().await.expect("commit");
}

/// The jobs, each round using up its work: a claim of `MEMBERS`, a relay
/// page, a retention chunk per table; and the reconciliation scan. Each
/// round runs on both databases in turn.
async fn time_jobs(plans: &mut Plans, dbs: &[Db; 2], settings: &[Settings; 2]) -> Vec<Timing> {
    let mut timings = Vec::new();
    let claim = format!("merge-queue claim of {MEMBERS}");
    for which in BOTH {
        let claimed = warm_up(
            plans,
            &claim,
            which,
            claim_batch(&dbs[which], "", ONE_BATCH, &|_| true),
        )
        .await;
        assert!(matches!(claimed, Ok(Claimed::Batch { .. })), "{claimed:?}");
        free_the_merge_slot(&dbs[which]).await;
    }
    let mut rounds = [Vec::new(), Vec::new()];
    for _ in 0..ROUNDS {
        for which in BOTH {
            let db = &dbs[which];
            let started = Instant::now();
            let claimed = claim_batch(db, "", ONE_BATCH, &|_| true)
                .await
                .expect("claim");
            rounds[which].push(started.elapsed());
            assert!(
                matches!(claimed, Claimed::Batch { ref members, .. } if members.len() == MEMBERS as usize),
                "{claimed:?}"
            );
            free_the_merge_slot(db).await;
        }
    }
    timings.push(timing(claim, rounds));

    let projects = settings.each_ref().map(Projects::of);
    timings.push(
        time_reads(plans, "reconciliation scan", |which, _| {
            let (db, projects, window) =
                (&dbs[which], &projects[which], &settings[which].reconcile);
            async move {
                let outcome = reconcile::run_once(db, projects, window.min_age, window.max_age)
                    .await
                    .expect("reconcile");
                assert_eq!(outcome, Outcome::Idle, "nothing is deployed yet");
            }
        })
        .await,
    );

    timings.push(
        time_rounds(plans, format!("relay page of {}", relay::PAGE), |which| {
            let db = &dbs[which];
            async move {
                let outcome = relay::run_once(db, false).await.expect("relay");
                assert!(
                    matches!(outcome, Outcome::Worked { done, .. } if done == u64::from(relay::PAGE)),
                    "{outcome:?}"
                );
            }
        })
        .await,
    );

    for table in [
        Pruned::OperationHistory,
        Pruned::Events,
        Pruned::WebhookDeliveries,
    ] {
        let after = [std::cell::Cell::new(0), std::cell::Cell::new(0)];
        let name = format!("retention chunk of {}: {}", retention::CHUNK, table.table());
        let timed = time_rounds(plans, name, |which| {
            let (db, after) = (&dbs[which], &after[which]);
            async move {
                let up_to = newest_old_id(db, table, RETAINED)
                    .await
                    .expect("newest old id")
                    .expect("old rows");
                let ids = eligible_ids(db, table, RETAINED, (after.get(), up_to), retention::CHUNK)
                    .await
                    .expect("eligible");
                let deleted = delete_ids(db, table, &ids).await.expect("delete");
                assert_eq!(deleted, u64::from(retention::CHUNK), "{}", table.table());
                after.set(*ids.last().expect("a chunk"));
            }
        })
        .await;
        timings.push(timed);
    }
    // A row per merge batch, 20,000 a year: too few on the nearly empty
    // database for timed chunks of 1,000, but their plans are recorded.
    for table in [Pruned::DeployReports, Pruned::CallbackReceipts] {
        let db = &dbs[FULL];
        let name = format!("retention chunk: {} (plans only)", table.table());
        let deleted = plans
            .capture(&name, async {
                let up_to = newest_old_id(db, table, RETAINED)
                    .await
                    .expect("newest old id")
                    .expect("old rows");
                let ids = eligible_ids(db, table, RETAINED, (0, up_to), retention::CHUNK)
                    .await
                    .expect("eligible");
                delete_ids(db, table, &ids).await.expect("delete")
            })
            .await;
        assert!(deleted > 0, "{}", table.table());
    }
    timings
}

/// A changegate started on a database, for the HTTP reads.
struct Served {
    address: String,
    shutdown: tokio_util::sync::CancellationToken,
    server: tokio::task::JoinHandle<anyhow::Result<()>>,
}

async fn serve(settings: Settings, client: &reqwest::Client) -> Served {
    let parts = Parts {
        steps: Some(Arc::new(Idle)),
        ..Parts::default()
    };
    let app = Application::build_with(LiveConfig::new(settings, None, None), parts)
        .await
        .expect("app");
    let address = format!("http://127.0.0.1:{}", app.port());
    let shutdown = app.shutdown_token();
    let server = tokio::spawn(app.run_until_stopped());
    while client
        .get(format!("{address}/readyz"))
        .send()
        .await
        .map(|r| r.status() != 200)
        .unwrap_or(true)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Served {
        address,
        shutdown,
        server,
    }
}

/// The HTTP reads, through a changegate started on each database, the two
/// asked in turn.
async fn time_endpoints(
    plans: &mut Plans,
    settings: [Settings; 2],
    scales: [Scale; 2],
) -> Vec<Timing> {
    changegate::clients::http::install_crypto_provider();
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let [empty, full] = settings;
    let served = [serve(empty, &client).await, serve(full, &client).await];
    // The background jobs' first rounds run at start-up: out of the way.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let addresses = served.each_ref().map(|served| served.address.clone());

    let fetch = |which: usize, user: String, path: String| {
        let (client, address) = (client.clone(), addresses[which].clone());
        async move {
            let answer = client
                .get(format!("{address}{path}"))
                .header("x-auth-request-user", user)
                .send()
                .await
                .expect("answer");
            let status = answer.status();
            let body: serde_json::Value = answer.json().await.expect("json");
            assert_eq!(status, 200, "{path}: {body}");
            body
        }
    };
    // Samples spread over the year: operation `n` of a sample.
    let spread =
        |which: usize, sample: usize| (sample as i64 * 7919 * 127) % scales[which].operations;
    let operation_id = |n: i64| format!("00000000-0000-4000-8000-{n:012}");
    let user = |which: usize, sample: usize| {
        format!("user-{}", spread(which, sample) % scales[which].subjects())
    };

    let mut timings = vec![
        time_reads(plans, "GET /api/v1/operations/{id}", |which, sample| {
            let path = format!("/api/v1/operations/{}", operation_id(spread(which, sample)));
            fetch(which, "admin".to_owned(), path)
        })
        .await,
        time_reads(plans, "GET /api/v1/me/bindings", |which, sample| {
            fetch(which, user(which, sample), "/api/v1/me/bindings".to_owned())
        })
        .await,
    ];
    let listings = [
        ("", "no filter"),
        ("status=VALIDATED", "status (common)"),
        ("status=APPROVAL_SENT", "status (live)"),
        ("status=MR_CREATING", "status (waiting on the merge queue)"),
        ("status=CLOSE_FAILED", "status (none)"),
        ("step=HANDLE_FAILED", "step (failed)"),
        ("step=CLOSE_FAILED", "step (none)"),
        ("olderThanSeconds=3600", "olderThanSeconds=3600"),
        (
            "step=APPROVAL_SENT&olderThanSeconds=3600",
            "step + olderThanSeconds",
        ),
        ("targetKey=target-3", "targetKey"),
        ("subjectId=", "subjectId"),
    ];
    for (query, label) in listings {
        timings.push(
            time_reads(
                plans,
                &format!("GET /admin/v1/operations {label}"),
                |which, sample| {
                    let query = if query == "subjectId=" {
                        format!("subjectId={}", user(which, sample))
                    } else {
                        query.to_owned()
                    };
                    fetch(
                        which,
                        "admin".to_owned(),
                        format!("/admin/v1/operations?{query}"),
                    )
                },
            )
            .await,
        );
    }
    // Cursor paging: each sample reads the page after the previous one.
    let paging = "GET /admin/v1/operations cursor paging";
    let mut cursors = Vec::new();
    for which in BOTH {
        let first = fetch(which, "admin".to_owned(), "/admin/v1/operations".to_owned()).await;
        let second = format!(
            "/admin/v1/operations?cursor={}",
            first["nextCursor"].as_str().expect("a next page")
        );
        let page = warm_up(
            plans,
            paging,
            which,
            fetch(which, "admin".to_owned(), second),
        )
        .await;
        cursors.push(page["nextCursor"].as_str().expect("a next page").to_owned());
    }
    let mut pages = [Vec::new(), Vec::new()];
    for _ in 0..SAMPLES {
        for which in BOTH {
            let started = Instant::now();
            let page = fetch(
                which,
                "admin".to_owned(),
                format!("/admin/v1/operations?cursor={}", cursors[which]),
            )
            .await;
            pages[which].push(started.elapsed());
            cursors[which] = page["nextCursor"].as_str().expect("a next page").to_owned();
        }
    }
    timings.push(timing(paging.to_owned(), pages));
    for served in served {
        served.shutdown.cancel();
        let _ = served.server.await;
    }
    timings
}

/// Times every row on both databases, side by side.
async fn measure(plans: &mut Plans, [empty, full]: [&Prepared; 2]) -> Vec<Timing> {
    let settings = [settings(&empty.url), settings(&full.url)];
    let dbs = [
        db::open(&settings[0].database).await.expect("open"),
        db::open(&settings[1].database).await.expect("open"),
    ];
    let mut timings = time_jobs(plans, &dbs, &settings).await;
    for db in dbs {
        db.close().await;
    }
    timings.extend(time_endpoints(plans, settings, [empty.scale, full.scale]).await);
    timings
}

/// Runs the reads and jobs on both databases of `backend` and prints their
/// times and plans; answers the rows over the target (2x).
async fn run(
    name: &str,
    backend: Backend,
    [empty, full]: [String; 2],
    scale: Scale,
) -> Vec<String> {
    let empty = prepare(empty, backend, Scale::EMPTY).await;
    let full = prepare(full, backend, scale).await;
    let mut plans = Plans::new(&full.url, backend).await;
    let timings = measure(&mut plans, [&empty, &full]).await;
    println!("\n{name}, {scale:?}:\n");
    println!("| measured | empty ms | full ms | full / empty |\n|---|---|---|---|");
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mut over = Vec::new();
    for timing in &timings {
        let [empty, full] = timing.medians;
        let ratio = ms(full) / ms(empty);
        let flag = if ratio > 2.0 { " **over 2x**" } else { "" };
        if ratio > 2.0 {
            over.push(format!("{name}: {} ({ratio:.2}x)", timing.name));
        }
        println!(
            "| {} | {:.2} | {:.2} | {ratio:.2}{flag} |",
            timing.name,
            ms(empty),
            ms(full)
        );
    }
    println!("\n{name} plans on the full database:");
    plans.print().await;
    over
}

async fn admin(server: &str, sql: &str) {
    let mut conn = sqlx::MySqlConnection::connect(server)
        .await
        .expect("connect");
    sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
        .execute(&mut conn)
        .await
        .expect("admin statement");
}

fn main() {
    plans::install();
    let scale = Scale::from_env();
    let only = std::env::var("CHANGEGATE_BENCH_ONLY").unwrap_or_default();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let over = runtime.block_on(async {
        let mut over = Vec::new();
        if only != "mariadb" {
            let dir = tempfile::tempdir().expect("temp dir");
            let url = |name: &str| format!("sqlite://{}", dir.path().join(name).display());
            over.extend(
                run(
                    "SQLite",
                    Backend::Sqlite,
                    [url("empty.db"), url("full.db")],
                    scale,
                )
                .await,
            );
        }
        if only != "sqlite"
            && let Ok(server) = std::env::var("CHANGEGATE_TEST_MYSQL_URL")
        {
            let server = server.trim_end_matches('/').to_owned();
            let names = ["empty", "full"]
                .map(|which| format!("cg_bench_data_scale_{which}_{}", std::process::id()));
            for name in &names {
                admin(&server, &format!("CREATE DATABASE {name}")).await;
            }
            over.extend(
                run(
                    "MariaDB",
                    Backend::MySql,
                    names.clone().map(|name| format!("{server}/{name}")),
                    scale,
                )
                .await,
            );
            for name in &names {
                admin(&server, &format!("DROP DATABASE {name}")).await;
            }
        }
        over
    });
    if !over.is_empty() {
        eprintln!("\nover the target of 2x the nearly empty database:");
        for row in &over {
            eprintln!("  {row}");
        }
        std::process::exit(1);
    }
}
