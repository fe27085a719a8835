//! Cost stays flat as the data grows: the reads and jobs that run all day,
//! timed on a nearly empty database and on one holding a year of a busy
//! installation, side by side, sample by sample in turn, so the machine's
//! drift falls on both alike (target: the full one within 2x of the empty
//! one), followed by the plan of each one's statements (MariaDB `EXPLAIN`,
//! SQLite `EXPLAIN QUERY PLAN`).
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

use std::sync::Arc;
use std::time::{Duration, Instant};

use changegate::app::{Application, Parts};
use changegate::batch::{Claimed, claim_batch};
use changegate::config::projects::Projects;
use changegate::config::{LiveConfig, Settings, source};
use changegate::db::retention::{Pruned, delete_ids, eligible_ids, newest_old_id};
use changegate::db::{self, Backend, Db, dialect};
use changegate::jobs::{Outcome, reconcile, retention};
use changegate::webhooks::relay;
use changegate::workflow::{StepFuture, Steps};
use sqlx::{AssertSqlSafe, Connection, MySqlConnection, Row, SqliteConnection};

/// A year, the span of the full database's history.
const YEAR_MS: i64 = 365 * 24 * 3600 * 1000;
/// The live work, the same in both databases, newest operations last:
/// failed ones, pending approvals, requests waiting for a merge round and
/// merged ones awaiting their deploy.
const FAILED: i64 = 200;
const AWAITING_APPROVAL: i64 = 500;
const WAITING: i64 = MEMBERS as i64 * ROUNDS as i64;
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
/// Rounds of the jobs that use up their work (claim, relay, retention).
const ROUNDS: usize = 5;
/// Samples of each read.
const SAMPLES: usize = 25;
/// Events still to relay: one relay page per round.
const UNRELAYED: i64 = relay::PAGE as i64 * ROUNDS as i64;
/// The age past which the retention job deletes (the default for events
/// and deliveries; history is kept 400 days by default, which a year of
/// history never reaches).
const RETAINED: Duration = Duration::from_secs(30 * 24 * 3600);
/// Operations inserted per statement while filling.
const FILL_CHUNK: i64 = 100_000;

/// How much a database holds.
#[derive(Debug, Clone, Copy)]
struct Scale {
    operations: i64,
    bindings: i64,
    rows: i64,
}

impl Scale {
    /// Nearly empty: the live work and a little finished history, in the
    /// default's proportions (five operations a relation, ten rows an
    /// operation), so that a subject's listing is as long as on the full one.
    const EMPTY: Self = Self {
        operations: 10 * LIVE,
        bindings: 2 * LIVE,
        rows: 100 * LIVE,
    };

    fn from_env() -> Self {
        let read = |name: &str, default: i64| {
            std::env::var(name).map_or(default, |text| {
                text.replace(['_', ','], "")
                    .parse()
                    .unwrap_or_else(|_| panic!("{name}: a number"))
            })
        };
        let scale = Self {
            operations: read("CHANGEGATE_BENCH_OPERATIONS", 1_000_000),
            bindings: read("CHANGEGATE_BENCH_BINDINGS", 200_000),
            rows: read("CHANGEGATE_BENCH_ROWS", 10_000_000),
        };
        assert!(
            scale.bindings >= LIVE && scale.operations >= scale.bindings,
            "at least {LIVE} bindings and as many operations: {scale:?}"
        );
        scale
    }

    /// History, event and delivery rows per operation (5:3:2 of the rows).
    fn per_operation(self) -> (i64, i64, i64) {
        let share = |tenths: i64| (self.rows * tenths / 10 / self.operations).max(1);
        (share(5), share(3), share(2))
    }

    /// Subjects: with `TARGETS` coprime to it and their product at least
    /// the bindings, relation `r` is the pair (r mod subjects, r mod
    /// targets), distinct for every r below the bindings.
    fn subjects(self) -> i64 {
        ((self.bindings + TARGETS - 1) / TARGETS) | 1
    }
}

/// The few SQL spellings the fill needs that differ between the backends.
#[derive(Clone, Copy)]
struct Fill {
    backend: Backend,
}

impl Fill {
    /// `ms` milliseconds before now.
    fn ago(self, ms: &str) -> String {
        dialect::now_minus_ms(self.backend).replace('?', &format!("({ms})"))
    }

    /// `seconds` after the time in `column`.
    fn after(self, column: &str, seconds: &str) -> String {
        match self.backend {
            Backend::Sqlite => {
                format!("strftime('%Y-%m-%d %H:%M:%f', {column}, '+' || ({seconds}) || ' seconds')")
            }
            Backend::MySql => format!("({column} + INTERVAL ({seconds}) SECOND)"),
        }
    }

    fn div(self, a: &str, b: i64) -> String {
        match self.backend {
            Backend::Sqlite => format!("(({a}) / {b})"),
            Backend::MySql => format!("(({a}) DIV {b})"),
        }
    }
}

/// A UUID-shaped operation id for the number in `n`.
fn operation_id_of(n: &str) -> String {
    format!("'00000000-0000-4000-8000-' || substr('000000000000' || ({n}), -12)")
}

/// The binding status an operation's final step leaves.
const STATUS_OF_STEP: &str = "CASE step_code WHEN 10109 THEN 'HANDLE_FAILED' \
     WHEN 10004 THEN 'APPROVAL_SENT' WHEN 10007 THEN 'MR_CREATING' WHEN 10104 THEN 'MERGED' \
     WHEN 10302 THEN 'REJECTED' WHEN 10204 THEN 'CLOSED' ELSE 'VALIDATED' END";

/// A connection of its own for the fill and the plans: the session
/// settings of the fill stay out of the service's pool.
enum Conn {
    Sqlite(SqliteConnection),
    MySql(MySqlConnection),
}

impl Conn {
    async fn connect(url: &str, backend: Backend) -> Self {
        match backend {
            Backend::Sqlite => Self::Sqlite(SqliteConnection::connect(url).await.expect("connect")),
            Backend::MySql => Self::MySql(MySqlConnection::connect(url).await.expect("connect")),
        }
    }

    async fn close(self) {
        match self {
            Self::Sqlite(conn) => conn.close().await,
            Self::MySql(conn) => conn.close().await,
        }
        .expect("close");
    }
}

async fn exec(conn: &mut Conn, sql: &str) {
    let statement = sqlx::raw_sql(AssertSqlSafe(sql.to_owned()));
    match conn {
        Conn::Sqlite(conn) => statement.execute(conn).await.map(drop),
        Conn::MySql(conn) => statement.execute(conn).await.map(drop),
    }
    .unwrap_or_else(|err| panic!("{err}: {sql}"));
}

/// Fills the tables the migrations created with `scale`'s rows, set-based:
/// `INSERT … SELECT` over a number table, in chunks of operations.
async fn fill(conn: &mut Conn, backend: Backend, scale: Scale) {
    let f = Fill { backend };
    let Scale {
        operations: ops,
        bindings,
        ..
    } = scale;
    let (history, events, deliveries) = scale.per_operation();
    let subjects = scale.subjects();
    let first_live = ops - LIVE;
    let spacing = (YEAR_MS - LIVE * LIVE_SPACING_MS) / (ops - LIVE).max(1);

    exec(
        conn,
        "CREATE TABLE bench_digit (d BIGINT NOT NULL PRIMARY KEY)",
    )
    .await;
    exec(
        conn,
        "INSERT INTO bench_digit VALUES (0),(1),(2),(3),(4),(5),(6),(7),(8),(9)",
    )
    .await;
    exec(
        conn,
        "CREATE TABLE bench_seq (n BIGINT NOT NULL PRIMARY KEY)",
    )
    .await;
    let digits = ops.to_string().len();
    let from = (0..digits)
        .map(|i| format!("bench_digit d{i}"))
        .collect::<Vec<_>>()
        .join(", ");
    let number = (0..digits)
        .map(|i| format!("d{i}.d * {}", 10_i64.pow(i as u32)))
        .collect::<Vec<_>>()
        .join(" + ");
    exec(
        conn,
        &format!("INSERT INTO bench_seq SELECT {number} FROM {from} WHERE {number} < {ops}"),
    )
    .await;

    // Operations: the finished year, then the live work a minute apart.
    let age = format!(
        "CASE WHEN n >= {first_live} THEN ({ops} - n) * {LIVE_SPACING_MS} \
         ELSE {} + ({first_live} - n) * {spacing} END",
        LIVE * LIVE_SPACING_MS
    );
    let live = |upto: i64| format!("n < {}", first_live + upto);
    let step = format!(
        "CASE WHEN n >= {first_live} THEN CASE WHEN {} THEN 10109 WHEN {} THEN 10004 \
         WHEN {} THEN 10007 ELSE 10104 END \
         WHEN n % 50 = 0 THEN 10109 WHEN n % 50 = 1 THEN 10302 WHEN n % 50 = 2 THEN 10204 \
         ELSE 10304 END",
        live(FAILED),
        live(FAILED + AWAITING_APPROVAL),
        live(FAILED + AWAITING_APPROVAL + WAITING)
    );
    let batch = format!("{} + 1", f.div("n", BATCH_SIZE));
    let relation = format!("(n % {bindings})");
    for start in (0..ops).step_by(FILL_CHUNK as usize) {
        exec(
            conn,
            &format!(
                "INSERT INTO operation (id, operation_id, kind, subject_id, target_key, requested_by, \
                 flow_order, step_code, params, reason, mr_iid, mr_url, version, created_at, updated_at) \
                 SELECT n + 1, {id}, CASE WHEN step = 10204 THEN 'CLOSE' ELSE 'APPLY' END, \
                 'user-' || ({relation} % {subjects}), 'target-' || ({relation} % {TARGETS}), \
                 'user-' || ({relation} % {subjects}), 'approval_first', step, \
                 '{{\"flag\":\"on\",\"ttl\":\"7d\"}}', 'bench fill: a year of changes', \
                 CASE WHEN step IN (10304, 10104, 10204, 10109) THEN {batch} END, \
                 CASE WHEN step IN (10304, 10104, 10204, 10109) \
                 THEN 'https://gitlab.example.com/config/repo/-/merge_requests/' || ({batch}) END, \
                 5, {created}, {updated} \
                 FROM (SELECT n, {step} AS step FROM bench_seq WHERE n >= {start} AND n < {end}) s",
                id = operation_id_of("n"),
                created = f.ago(&age),
                updated = f.ago(&format!("{age} - 30000")),
                end = (start + FILL_CHUNK).min(ops),
            ),
        )
        .await;
    }

    // Each relation's binding belongs to its newest operation.
    exec(
        conn,
        &format!(
            "INSERT INTO binding (subject_id, target_key, operation_id, status, requested_by, params, \
             version, created_at, updated_at) \
             SELECT subject_id, target_key, operation_id, {STATUS_OF_STEP}, requested_by, params, 5, \
             created_at, updated_at FROM operation WHERE id > {} ORDER BY id",
            ops - bindings
        ),
    )
    .await;

    // Merge batches of the year, all merged; the deploy pipeline reported
    // every one before the live work (the live merged ones await theirs).
    let batches = (ops - 1) / BATCH_SIZE + 1;
    let watermark = first_live / BATCH_SIZE;
    let batch_time = f.ago(&format!(
        "CASE WHEN n * {BATCH_SIZE} >= {first_live} THEN ({ops} - n * {BATCH_SIZE}) * {LIVE_SPACING_MS} \
         ELSE {} + ({first_live} - n * {BATCH_SIZE}) * {spacing} END",
        LIVE * LIVE_SPACING_MS
    ));
    exec(
        conn,
        &format!(
            "INSERT INTO merge_batch (id, status, partition_key, project, phase, mr_iid, merge_sha, \
             merge_commit_sha, version, created_at, updated_at) \
             SELECT n + 1, 'SUCCEEDED', '', 'config/repo', 'MERGING', n + 1, 'sha-' || (n + 1), \
             'merge-' || (n + 1), 6, {batch_time}, {batch_time} FROM bench_seq WHERE n < {batches}"
        ),
    )
    .await;
    exec(
        conn,
        &format!(
            "INSERT INTO deploy_report (callback_id, project, mr_iid, sha, status, received_at) \
             SELECT 'deploy-' || (n + 1), '', n + 1, 'merge-' || (n + 1), 'success', {batch_time} \
             FROM bench_seq WHERE n < {watermark}"
        ),
    )
    .await;
    exec(
        conn,
        &format!(
            "INSERT INTO callback_receipt (source, callback_id, received_at) \
             SELECT 'deploy', 'deploy-' || (n + 1), {batch_time} FROM bench_seq WHERE n < {watermark}"
        ),
    )
    .await;
    // Every merged request's membership, and the waiting set.
    exec(
        conn,
        "INSERT INTO merge_batch_request (operation_id, partition_key, project, batch_id, \
             merged_sha, created_at) \
             SELECT operation_id, '', 'config/repo', CASE WHEN step_code = 10007 THEN NULL ELSE mr_iid END, \
             CASE WHEN step_code = 10007 THEN NULL ELSE 'merge-' || mr_iid END, created_at \
             FROM operation WHERE step_code = 10007 OR (mr_iid IS NOT NULL AND kind = 'APPLY') ORDER BY id",
    )
    .await;

    exec(
        conn,
        "INSERT INTO webhook_endpoint (id, url, description, event_types, secret) VALUES \
         (1, 'https://hooks.example.com/changegate', 'bench', '', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw')",
    )
    .await;

    let total_events = ops * events;
    for start in (0..ops).step_by(FILL_CHUNK as usize) {
        let end = (start + FILL_CHUNK).min(ops);
        let chunk = format!("o.id > {start} AND o.id <= {end}");
        let last = format!("k.n = {}", history - 1);
        exec(
            conn,
            &format!(
                "INSERT INTO operation_history (operation_id, from_step, to_step, from_status, \
                 to_status, operation_version, actor, message, created_at) \
                 SELECT o.operation_id, CASE WHEN k.n > 0 THEN 10000 + k.n END, \
                 CASE WHEN {last} THEN o.step_code ELSE 10001 + k.n END, \
                 CASE WHEN k.n > 0 THEN 'APPROVAL_SENDING' END, \
                 CASE WHEN {last} THEN {status} ELSE 'APPROVAL_SENDING' END, k.n + 1, \
                 CASE WHEN k.n = 0 THEN o.requested_by ELSE 'worker' END, NULL, {at} \
                 FROM operation o CROSS JOIN bench_seq k WHERE {chunk} AND k.n < {history} \
                 ORDER BY o.id, k.n",
                status = STATUS_OF_STEP.replace("step_code", "o.step_code"),
                at = f.after("o.created_at", "k.n"),
            ),
        )
        .await;
        let event_id = format!("(o.id - 1) * {events} + k.n + 1");
        exec(
            conn,
            &format!(
                "INSERT INTO event (id, event_type, operation_id, subject_id, target_key, from_status, \
                 to_status, payload, created_at, relayed) \
                 SELECT {event_id}, 'binding.status_changed', o.operation_id, o.subject_id, \
                 o.target_key, CASE WHEN k.n > 0 THEN 'APPROVAL_SENDING' END, {status}, \
                 '{{\"operationId\":\"' || o.operation_id || '\",\"subjectId\":\"' || o.subject_id || \
                 '\",\"targetKey\":\"' || o.target_key || '\",\"from\":null,\"to\":\"VALIDATED\",\
                 \"step\":{{\"code\":10304,\"name\":\"DEPLOY_CONFIRMED\"}}}}', {at}, \
                 CASE WHEN {event_id} > {unrelayed_from} THEN FALSE ELSE TRUE END \
                 FROM operation o CROSS JOIN bench_seq k WHERE {chunk} AND k.n < {events} \
                 ORDER BY o.id, k.n",
                status = STATUS_OF_STEP.replace("step_code", "o.step_code"),
                at = f.after("o.created_at", "k.n"),
                unrelayed_from = total_events - UNRELAYED,
            ),
        )
        .await;
        // Deliveries of the relayed events: finished but for the newest.
        let delivered_event = format!("(o.id - 1) * {events} + k.n % {events} + 1");
        exec(
            conn,
            &format!(
                "INSERT INTO webhook_delivery (endpoint_id, event_id, event_type, msg_id, body, status, \
                 version, attempts, next_attempt_at, last_status, created_at, updated_at) \
                 SELECT 1, {delivered_event}, 'binding.status_changed', \
                 'msg_' || ({delivered_event}) || '_1', \
                 '{{\"type\":\"binding.status_changed\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\
                 \"data\":{{\"eventId\":' || ({delivered_event}) || ',\"operationId\":\"' || o.operation_id || \
                 '\",\"subjectId\":\"' || o.subject_id || '\",\"targetKey\":\"' || o.target_key || \
                 '\",\"from\":null,\"to\":\"VALIDATED\",\"step\":{{\"code\":10304,\"name\":\"DEPLOY_CONFIRMED\"}}}}}}', \
                 CASE WHEN o.id > {queued_from} THEN 'queued' WHEN o.id % 100 = 0 THEN 'failed' \
                 ELSE 'delivered' END, 2, 1, {at}, 204, {at}, {at} \
                 FROM operation o CROSS JOIN bench_seq k WHERE {chunk} AND k.n < {deliveries} \
                 AND {delivered_event} <= {unrelayed_from} ORDER BY o.id, k.n",
                at = f.after("o.created_at", "k.n + 1"),
                queued_from = (total_events - UNRELAYED) / events - 50,
                unrelayed_from = total_events - UNRELAYED,
            ),
        )
        .await;
    }
    exec(conn, "DROP TABLE bench_seq").await;
    exec(conn, "DROP TABLE bench_digit").await;
}

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
const BOTH: [usize; 2] = [0, 1];

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

/// Times `read(database, sample)` on both databases in turn, sample by
/// sample (empty, full, empty, …), after one warm-up on each: the machine's
/// drift falls on both alike.
async fn time_reads<F, Fut>(name: &str, mut read: F) -> Timing
where
    F: FnMut(usize, usize) -> Fut,
    Fut: Future,
{
    for which in BOTH {
        read(which, 0).await;
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

/// The jobs, each round using up its work: a claim of `MEMBERS`, a relay
/// page, a retention chunk per table; and the reconciliation scan. Each
/// round runs on both databases in turn.
async fn time_jobs(dbs: &[Db; 2], settings: &[Settings; 2]) -> Vec<Timing> {
    let mut timings = Vec::new();
    let mut rounds = [Vec::new(), Vec::new()];
    for _ in 0..ROUNDS {
        for which in BOTH {
            let db = &dbs[which];
            let started = Instant::now();
            let claimed = claim_batch(db, "", MEMBERS).await.expect("claim");
            rounds[which].push(started.elapsed());
            assert!(
                matches!(claimed, Claimed::Batch { ref members, .. } if members.len() == MEMBERS as usize),
                "{claimed:?}"
            );
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
    }
    timings.push(timing(format!("merge-queue claim of {MEMBERS}"), rounds));

    let projects = settings.each_ref().map(Projects::of);
    timings.push(
        time_reads("reconciliation scan", |which, _| {
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

    let mut rounds = [Vec::new(), Vec::new()];
    for _ in 0..ROUNDS {
        for which in BOTH {
            let started = Instant::now();
            let outcome = relay::run_once(&dbs[which], false).await.expect("relay");
            rounds[which].push(started.elapsed());
            assert!(
                matches!(outcome, Outcome::Worked { done, .. } if done == u64::from(relay::PAGE)),
                "{outcome:?}"
            );
        }
    }
    timings.push(timing(format!("relay page of {}", relay::PAGE), rounds));

    for table in [
        Pruned::OperationHistory,
        Pruned::Events,
        Pruned::WebhookDeliveries,
    ] {
        let mut rounds = [Vec::new(), Vec::new()];
        let mut after = [0, 0];
        for _ in 0..ROUNDS {
            for which in BOTH {
                let db = &dbs[which];
                let started = Instant::now();
                let up_to = newest_old_id(db, table, RETAINED)
                    .await
                    .expect("newest old id")
                    .expect("old rows");
                let ids =
                    eligible_ids(db, table, RETAINED, (after[which], up_to), retention::CHUNK)
                        .await
                        .expect("eligible");
                let deleted = delete_ids(db, table, &ids).await.expect("delete");
                rounds[which].push(started.elapsed());
                assert_eq!(deleted, u64::from(retention::CHUNK), "{}", table.table());
                after[which] = *ids.last().expect("a chunk");
            }
        }
        timings.push(timing(
            format!("retention chunk of {}: {}", retention::CHUNK, table.table()),
            rounds,
        ));
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
async fn time_endpoints(settings: [Settings; 2], scales: [Scale; 2]) -> Vec<Timing> {
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
        time_reads("GET /api/v1/operations/{id}", |which, sample| {
            let path = format!("/api/v1/operations/{}", operation_id(spread(which, sample)));
            fetch(which, "admin".to_owned(), path)
        })
        .await,
        time_reads("GET /api/v1/me/bindings", |which, sample| {
            fetch(which, user(which, sample), "/api/v1/me/bindings".to_owned())
        })
        .await,
    ];
    let listings = [
        ("", "no filter"),
        ("status=VALIDATED", "status (common)"),
        ("status=APPROVAL_SENT", "status (live)"),
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
    let mut cursors = Vec::new();
    for which in BOTH {
        let first = fetch(which, "admin".to_owned(), "/admin/v1/operations".to_owned()).await;
        cursors.push(
            first["nextCursor"]
                .as_str()
                .expect("a next page")
                .to_owned(),
        );
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
    timings.push(timing(
        "GET /admin/v1/operations cursor paging".to_owned(),
        pages,
    ));
    for served in served {
        served.shutdown.cancel();
        let _ = served.server.await;
    }
    timings
}

/// A created database: its URL, and how to reach it for the fill.
struct Prepared {
    url: String,
    scale: Scale,
}

async fn prepare(url: String, backend: Backend, scale: Scale) -> Prepared {
    let settings = settings(&url);
    // The service's migrations create the schema.
    db::open(&settings.database)
        .await
        .expect("open")
        .close()
        .await;
    let started = Instant::now();
    let mut conn = Conn::connect(&url, backend).await;
    match backend {
        Backend::MySql => {
            exec(
                &mut conn,
                "SET SESSION time_zone = '+00:00', \
                 sql_mode = CONCAT(@@sql_mode, ',PIPES_AS_CONCAT')",
            )
            .await;
        }
        Backend::Sqlite => exec(&mut conn, "PRAGMA synchronous = OFF").await,
    }
    fill(&mut conn, backend, scale).await;
    // InnoDB keeps its statistics up to date by itself over time; after a
    // bulk fill they are brought up to date at once, as a year of writes
    // would have. The service never runs ANALYZE on SQLite, so neither
    // does the bench: its plans must hold without statistics.
    if backend == Backend::MySql {
        exec(
            &mut conn,
            "ANALYZE TABLE operation, binding, operation_history, event, webhook_delivery, \
             merge_batch, merge_batch_request, deploy_report, callback_receipt",
        )
        .await;
        settle(&mut conn).await;
    }
    conn.close().await;
    eprintln!(
        "filled {scale:?} in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Prepared { url, scale }
}

/// Waits (up to five minutes) until InnoDB has written out the fill's dirty
/// pages and purged its undo history: a year-old installation is not in
/// the middle of a bulk load, and the first rounds measured right after
/// one paid for that background work (a claim of 500 once took 618 ms
/// there, 44 ms in the next run).
async fn settle(conn: &mut Conn) {
    let Conn::MySql(conn) = conn else {
        return;
    };
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let rows = sqlx::raw_sql(
            "SHOW GLOBAL STATUS WHERE Variable_name IN \
             ('Innodb_buffer_pool_pages_dirty', 'Innodb_history_list_length')",
        )
        .fetch_all(&mut *conn)
        .await
        .expect("InnoDB status");
        let pending: u64 = rows
            .iter()
            .map(|row| row.get::<String, _>(1).parse::<u64>().unwrap_or(0))
            .sum();
        if pending < 1000 || Instant::now() > deadline {
            eprintln!("InnoDB settled: {pending} dirty pages and undo records left");
            return;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Times every row on both databases, side by side.
async fn measure([empty, full]: [&Prepared; 2]) -> Vec<Timing> {
    let settings = [settings(&empty.url), settings(&full.url)];
    let dbs = [
        db::open(&settings[0].database).await.expect("open"),
        db::open(&settings[1].database).await.expect("open"),
    ];
    let mut timings = time_jobs(&dbs, &settings).await;
    for db in dbs {
        db.close().await;
    }
    timings.extend(time_endpoints(settings, [empty.scale, full.scale]).await);
    timings
}

/// The statements to explain, as `src/db` builds them, with literal values.
fn explained(backend: Backend, scale: Scale) -> Vec<(&'static str, String)> {
    let now = dialect::now_ms(backend);
    let ago = |ms: i64| dialect::now_minus_ms(backend).replace('?', &ms.to_string());
    let id = format!("00000000-0000-4000-8000-{:012}", scale.operations / 2);
    let first = dialect::outer_first_join(backend);
    let joined = |from: &str, filter: &str| {
        format!(
            "SELECT o.id FROM {from} ON b.operation_id = o.operation_id \
             WHERE 1 = 1{filter} ORDER BY o.id DESC LIMIT 51"
        )
    };
    let listing_from = |operations: &str, filter: &str| {
        joined(&format!("{operations} LEFT JOIN binding b"), filter)
    };
    let listing = |filter: &str| listing_from("operation o", filter);
    let step_walk = match backend {
        Backend::Sqlite => "operation o",
        Backend::MySql => "operation o FORCE INDEX (ix_operation_step_id)",
    };
    let by_primary_key = match backend {
        Backend::Sqlite => "NOT INDEXED",
        Backend::MySql => "FORCE INDEX (PRIMARY)",
    };
    let retention = |table: Pruned, age: &str, still: &str, for_good: &str| {
        let name = table.table();
        let joined = if table == Pruned::OperationHistory {
            "LEFT JOIN binding b ON b.operation_id = operation_history.operation_id"
        } else {
            ""
        };
        let delete_hint = if backend == Backend::Sqlite {
            "NOT INDEXED"
        } else {
            ""
        };
        [
            format!(
                "SELECT id FROM {name} WHERE {age} < {cutoff} ORDER BY {age} DESC, id DESC LIMIT 1",
                cutoff = ago(RETAINED.as_millis() as i64),
            ),
            format!(
                "SELECT {name}.id FROM {name} {by_primary_key} {joined} \
                 WHERE {name}.id > 0 AND {name}.id <= 1000000 AND {name}.{age} < {cutoff} \
                 AND {still} AND {for_good} ORDER BY {name}.id LIMIT 1000",
                cutoff = ago(RETAINED.as_millis() as i64),
            ),
            format!("DELETE FROM {name} {delete_hint} WHERE id IN (1, 2, 3) AND {still}"),
        ]
    };
    let mut statements = vec![
        (
            "GET /api/v1/operations/{id}",
            format!(
                "SELECT o.id, b.status, r.batch_id, mb.obstacle FROM operation o \
                 LEFT JOIN binding b ON b.operation_id = o.operation_id \
                 LEFT JOIN merge_batch_request r ON r.operation_id = o.operation_id \
                 LEFT JOIN merge_batch mb ON mb.id = r.batch_id WHERE o.operation_id = '{id}'"
            ),
        ),
        (
            "GET /api/v1/operations/{id} (superseded: last status)",
            format!(
                "SELECT to_status FROM operation_history WHERE operation_id = '{id}' \
                 AND to_status IS NOT NULL ORDER BY id DESC LIMIT 1"
            ),
        ),
        (
            "GET /api/v1/me/bindings",
            "SELECT id FROM binding WHERE requested_by = 'user-1' AND id < 9223372036854775807 \
             ORDER BY id DESC LIMIT 21"
                .to_owned(),
        ),
        ("ops list: no filter", listing("")),
        (
            "ops list: status, how many bindings have it",
            "SELECT COUNT(*) FROM (SELECT 1 FROM binding WHERE status = 'APPROVAL_SENT' LIMIT 1000) found"
                .to_owned(),
        ),
        (
            "ops list: status held by few bindings",
            joined(
                &format!("binding b {first} operation o"),
                " AND b.status = 'APPROVAL_SENT'",
            ),
        ),
        (
            "ops list: status held by many bindings",
            joined(
                &format!("operation o {first} binding b"),
                " AND b.status = 'VALIDATED'",
            ),
        ),
        (
            "ops list: step",
            listing_from(step_walk, " AND o.step_code = 10109"),
        ),
        (
            "ops list: olderThanSeconds",
            listing(&format!(" AND o.updated_at < {}", ago(3_600_000))),
        ),
        ("ops list: targetKey", listing(" AND o.target_key = 'target-3'")),
        ("ops list: subjectId", listing(" AND o.subject_id = 'user-1'")),
        ("ops list: cursor", listing(" AND o.id < 500000")),
        (
            "ops list: last statuses of superseded rows",
            format!(
                "SELECT operation_id, to_status FROM operation_history \
                 WHERE operation_id IN ('{id}', '00000000-0000-4000-8000-000000000001') \
                 AND to_status IS NOT NULL ORDER BY id"
            ),
        ),
        (
            "ops list: batches of the page",
            format!(
                "SELECT r.operation_id, r.batch_id, b.obstacle FROM merge_batch_request r \
                 JOIN merge_batch b ON b.id = r.batch_id WHERE r.operation_id IN ('{id}')"
            ),
        ),
        (
            "claim: oldest waiting",
            format!(
                "SELECT id FROM merge_batch_request WHERE partition_key = '' AND batch_id IS NULL \
                 AND created_at < {now} ORDER BY id LIMIT 1"
            ),
        ),
        (
            "claim: waiting group",
            format!(
                "SELECT id FROM merge_batch_request WHERE partition_key = '' AND batch_id IS NULL \
                 AND created_at < {now} AND project = 'config/repo' AND split_group = '' \
                 ORDER BY id LIMIT 500"
            ),
        ),
        (
            "claim: members' operations and bindings (by operation id)",
            format!(
                "SELECT operation_id, step_code, version FROM operation \
                 WHERE operation_id IN ('{id}') ORDER BY operation_id"
            ),
        ),
        (
            "reconciliation: watermarks, the next project",
            "SELECT MIN(project) FROM deploy_report WHERE status = 'success' AND project > ''"
                .to_owned(),
        ),
        (
            "reconciliation: watermarks, a project's highest MR",
            "SELECT MAX(mr_iid) FROM deploy_report WHERE status = 'success' \
             AND project = 'config/repo'"
                .to_owned(),
        ),
        (
            "reconciliation: merged below the watermark",
            format!(
                "SELECT b.operation_id FROM binding b JOIN operation o ON o.operation_id = b.operation_id \
                 WHERE b.status = 'MERGED' AND b.updated_at > {} AND b.updated_at < {} \
                 AND b.target_key NOT IN ('x') AND o.mr_iid IS NOT NULL AND o.mr_iid <= 1000 \
                 ORDER BY b.updated_at LIMIT 500",
                ago(86_400_000),
                ago(600_000)
            ),
        ),
        (
            "reconciliation: merged by deployed commit",
            format!(
                "SELECT DISTINCT r.operation_id FROM deploy_report d \
                 JOIN merge_batch m ON m.merge_commit_sha = d.sha \
                 JOIN merge_batch_request r ON r.batch_id = m.id \
                 JOIN binding b ON b.operation_id = r.operation_id \
                 WHERE d.status = 'success' AND b.status = 'MERGED' AND b.updated_at > {} \
                 AND (d.project = LOWER(m.project) OR (d.project = '' AND LOWER(m.project) = 'config/repo')) \
                 LIMIT 500",
                ago(86_400_000)
            ),
        ),
        (
            "relay: anything pending",
            "SELECT id FROM event WHERE relayed = FALSE LIMIT 1".to_owned(),
        ),
        (
            "relay: page",
            "SELECT id FROM event WHERE relayed = FALSE ORDER BY id LIMIT 200".to_owned(),
        ),
    ];
    let [newest, eligible, delete] = retention(
        Pruned::OperationHistory,
        "created_at",
        "1 = 1",
        "b.id IS NULL",
    );
    statements.push(("retention operation_history: newest old id", newest));
    statements.push(("retention operation_history: chunk", eligible));
    statements.push(("retention operation_history: delete", delete));
    let [newest, eligible, delete] =
        retention(Pruned::Events, "created_at", "relayed = TRUE", "1 = 1");
    statements.push(("retention event: newest old id", newest));
    statements.push(("retention event: chunk", eligible));
    statements.push(("retention event: delete", delete));
    let [newest, eligible, delete] = retention(
        Pruned::WebhookDeliveries,
        "updated_at",
        "status IN ('delivered', 'failed', 'silent')",
        "1 = 1",
    );
    statements.push(("retention webhook_delivery: newest old id", newest));
    statements.push(("retention webhook_delivery: chunk", eligible));
    statements.push(("retention webhook_delivery: delete", delete));
    let [newest, eligible, delete] = retention(
        Pruned::DeployReports,
        "received_at",
        "1 = 1",
        "NOT (status = 'success' AND mr_iid >= (SELECT MAX(w.mr_iid) FROM deploy_report w \
         WHERE w.status = 'success' AND w.project = deploy_report.project))",
    );
    statements.push(("retention deploy_report: newest old id", newest));
    statements.push(("retention deploy_report: chunk", eligible));
    statements.push(("retention deploy_report: delete", delete));
    statements
}

/// Each statement's plan, one line per step.
async fn explain(url: &str, backend: Backend, scale: Scale) {
    let mut conn = Conn::connect(url, backend).await;
    for (name, sql) in explained(backend, scale) {
        println!("\n{name}:\n");
        match &mut conn {
            Conn::MySql(conn) => {
                let rows = sqlx::raw_sql(AssertSqlSafe(format!("EXPLAIN {sql}")))
                    .fetch_all(&mut *conn)
                    .await
                    .unwrap_or_else(|err| panic!("{err}: {sql}"));
                println!("| table | type | key | rows | Extra |\n|---|---|---|---|---|");
                for row in rows {
                    let text = |column: &str| {
                        let text = row.try_get::<Option<String>, _>(column).ok().flatten();
                        let signed = || row.try_get::<Option<i64>, _>(column).ok().flatten();
                        let unsigned = || row.try_get::<Option<u64>, _>(column).ok().flatten();
                        text.or_else(|| signed().map(|n| n.to_string()))
                            .or_else(|| unsigned().map(|n| n.to_string()))
                            .unwrap_or_default()
                    };
                    println!(
                        "| {} | {} | {} | {} | {} |",
                        text("table"),
                        text("type"),
                        text("key"),
                        text("rows"),
                        text("Extra")
                    );
                }
            }
            Conn::Sqlite(conn) => {
                let rows = sqlx::raw_sql(AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}")))
                    .fetch_all(&mut *conn)
                    .await
                    .unwrap_or_else(|err| panic!("{err}: {sql}"));
                for row in rows {
                    println!("    {}", row.get::<String, _>("detail"));
                }
            }
        }
    }
    conn.close().await;
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
    let timings = measure([&empty, &full]).await;
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
    explain(&full.url, backend, scale).await;
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
