//! The two databases: created by the service's migrations and filled
//! set-based with a year of a busy installation (or a little of it) around
//! the same live work.

use std::time::{Duration, Instant};

use changegate::db::{self, Backend, dialect};
use sqlx::{AssertSqlSafe, Connection, MySqlConnection, Row, SqliteConnection};

use crate::{
    AWAITING_APPROVAL, BATCH_SIZE, FAILED, LIVE, LIVE_SPACING_MS, TARGETS, UNRELAYED, WAITING,
    YEAR_MS, settings,
};

/// Operations inserted per statement while filling.
const FILL_CHUNK: i64 = 100_000;

/// How much a database holds.
#[derive(Debug, Clone, Copy)]
pub struct Scale {
    pub operations: i64,
    pub bindings: i64,
    pub rows: i64,
}

impl Scale {
    /// Nearly empty: the live work and a little finished history, in the
    /// default's proportions (five operations a relation, ten rows an
    /// operation), so that a subject's listing is as long as on the full one.
    pub const EMPTY: Self = Self {
        operations: 10 * LIVE,
        bindings: 2 * LIVE,
        rows: 100 * LIVE,
    };

    pub fn from_env() -> Self {
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
    pub fn subjects(self) -> i64 {
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
pub enum Conn {
    Sqlite(SqliteConnection),
    MySql(MySqlConnection),
}

impl Conn {
    pub async fn connect(url: &str, backend: Backend) -> Self {
        match backend {
            Backend::Sqlite => Self::Sqlite(SqliteConnection::connect(url).await.expect("connect")),
            Backend::MySql => Self::MySql(MySqlConnection::connect(url).await.expect("connect")),
        }
    }

    pub async fn close(self) {
        match self {
            Self::Sqlite(conn) => conn.close().await,
            Self::MySql(conn) => conn.close().await,
        }
        .expect("close");
    }
}

pub async fn exec(conn: &mut Conn, sql: &str) {
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

/// A created database: its URL, and how to reach it for the fill.
pub struct Prepared {
    pub url: String,
    pub scale: Scale,
}

pub async fn prepare(url: String, backend: Backend, scale: Scale) -> Prepared {
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
