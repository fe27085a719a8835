//! The plans of the statements the measured reads and jobs actually send.
//!
//! One untimed run of each on the full database is captured: sqlx reports
//! every statement it runs as a `sqlx::query` event, and those inside the
//! server's `request` span or the bench's `captured` span (not a background
//! job's) are its statements. Each is then explained on the full database:
//! SQLite's `EXPLAIN QUERY PLAN` of the statement as sent, its parameters
//! unbound (the planner does not look at them without STAT4 statistics,
//! which the service never gathers); MariaDB's `EXPLAIN` of the statement
//! with the values it ran with, as the server's general log recorded them,
//! since the optimizer chooses by the values.

use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use changegate::db::Backend;
use regex::Regex;
use sqlx::{AssertSqlSafe, Connection, MySqlConnection, Row};
use tracing::field::{Field, Visit};
use tracing::{Event, Instrument, Subscriber};
use tracing_subscriber::filter::dynamic_filter_fn;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, Registry};

use crate::fill::Conn;

/// Whether a capture is running: outside one, sqlx does not even format
/// its statement events, and the timings pay nothing.
static CAPTURING: AtomicBool = AtomicBool::new(false);
/// The statements seen during the running capture, in order.
static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Installs the process's subscriber: it records sqlx's statements during
/// a capture and nothing else.
pub fn install() {
    let during_capture = dynamic_filter_fn(|metadata, _| {
        CAPTURING.load(Ordering::Relaxed)
            && (metadata.target() == "sqlx::query"
                || matches!(metadata.name(), "request" | "captured"))
    });
    Registry::default()
        .with(Statements.with_filter(during_capture))
        .try_init()
        .expect("the bench's subscriber");
}

struct Statements;

impl<S> Layer<S> for Statements
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        if event.metadata().target() != "sqlx::query" {
            return;
        }
        let measured = ctx.event_scope(event).is_some_and(|mut scope| {
            scope.any(|span| matches!(span.name(), "request" | "captured"))
        });
        if !measured {
            return;
        }
        let mut sql = Sql::default();
        event.record(&mut sql);
        // sqlx leaves `db.statement` empty when the summary is the whole
        // statement.
        let text = if sql.statement.trim().is_empty() {
            sql.summary
        } else {
            sql.statement
        };
        SEEN.lock()
            .expect("statements")
            .push(text.trim().to_owned());
    }
}

#[derive(Default)]
struct Sql {
    summary: String,
    statement: String,
}

impl Visit for Sql {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "summary" => self.summary = value.to_owned(),
            "db.statement" => self.statement = value.to_owned(),
            _ => {}
        }
    }

    fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
}

/// A statement as the code wrote it and as it ran.
struct Statement {
    written: String,
    ran: String,
}

/// The captured statements of each measured thing, on one full database.
pub struct Plans {
    url: String,
    backend: Backend,
    /// MariaDB: the connection that switches the general log on and off and
    /// reads it, with the settings it found, restored at the end.
    general_log: Option<(MySqlConnection, String, String)>,
    captured: Vec<(String, Vec<Statement>)>,
}

impl Plans {
    /// On MariaDB, switches the general log on, writing nowhere until a
    /// capture: the server decides when it prepares a statement whether its
    /// executions are logged with their values, so it must be on before
    /// the measured statements are first prepared.
    pub async fn new(url: &str, backend: Backend) -> Self {
        let general_log = match backend {
            Backend::Sqlite => None,
            Backend::MySql => {
                let mut conn = MySqlConnection::connect(url).await.expect("connect");
                let row = sqlx::raw_sql("SELECT @@global.general_log, @@global.log_output")
                    .fetch_one(&mut conn)
                    .await
                    .expect("general log settings");
                let on = row.get::<i64, _>(0).to_string();
                let output = row.get::<String, _>(1);
                sqlx::raw_sql("SET GLOBAL log_output = 'NONE', general_log = 1")
                    .execute(&mut conn)
                    .await
                    .expect("general log on");
                Some((conn, on, output))
            }
        };
        Self {
            url: url.to_owned(),
            backend,
            general_log,
            captured: Vec::new(),
        }
    }

    /// Runs `work` (on the full database), recording under `name` the
    /// statements it sends.
    pub async fn capture<F: Future>(&mut self, name: &str, work: F) -> F::Output {
        if let Some((conn, ..)) = &mut self.general_log {
            for sql in [
                "TRUNCATE mysql.general_log",
                "SET GLOBAL log_output = 'TABLE'",
            ] {
                sqlx::raw_sql(AssertSqlSafe(sql))
                    .execute(&mut *conn)
                    .await
                    .expect(sql);
            }
        }
        SEEN.lock().expect("statements").clear();
        CAPTURING.store(true, Ordering::Relaxed);
        let output = work.instrument(tracing::info_span!("captured")).await;
        CAPTURING.store(false, Ordering::Relaxed);
        let written = std::mem::take(&mut *SEEN.lock().expect("statements"));
        let logged = match &mut self.general_log {
            None => Vec::new(),
            Some((conn, ..)) => {
                sqlx::raw_sql("SET GLOBAL log_output = 'NONE'")
                    .execute(&mut *conn)
                    .await
                    .expect("general log written nowhere");
                sqlx::raw_sql(
                    "SELECT argument FROM mysql.general_log \
                     WHERE command_type IN ('Execute', 'Query')",
                )
                .fetch_all(&mut *conn)
                .await
                .expect("general log")
                .iter()
                .map(|row| String::from_utf8_lossy(&row.get::<Vec<u8>, _>(0)).into_owned())
                .collect()
            }
        };
        let mut statements: Vec<Statement> = Vec::new();
        for written in written.into_iter().filter(|sql| planned(sql)) {
            if statements.iter().any(|known| known.written == written) {
                continue;
            }
            let ran = match self.backend {
                Backend::Sqlite => written.clone(),
                Backend::MySql => with_values(&written, &logged)
                    .unwrap_or_else(|| panic!("not in the general log: {written}")),
            };
            statements.push(Statement { written, ran });
        }
        self.captured.push((name.to_owned(), statements));
        output
    }

    /// Prints each measured thing's statements with their plans, a
    /// Markdown table each.
    pub async fn print(self) {
        if let Some((mut conn, on, output)) = self.general_log {
            let restore = format!("SET GLOBAL general_log = {on}, log_output = '{output}'");
            for sql in ["TRUNCATE mysql.general_log".to_owned(), restore] {
                sqlx::raw_sql(AssertSqlSafe(sql))
                    .execute(&mut conn)
                    .await
                    .expect("general log emptied and its settings restored");
            }
            conn.close().await.expect("close");
        }
        let mut conn = Conn::connect(&self.url, self.backend).await;
        for (name, statements) in &self.captured {
            println!("\n#### {name}\n\n| statement | plan |\n|---|---|");
            for statement in statements {
                let steps = plan(&mut conn, &statement.ran).await;
                println!(
                    "| `{}` | {} |",
                    shortened(&statement.written).replace('|', "\\|"),
                    steps.join("<br>").replace('|', "\\|")
                );
            }
        }
        conn.close().await;
    }
}

/// The statements that have a plan: not transaction control, session
/// settings or plain `INSERT … VALUES`.
fn planned(sql: &str) -> bool {
    let upper = sql.trim_start().to_ascii_uppercase();
    ["SELECT", "WITH", "UPDATE", "DELETE"]
        .iter()
        .any(|verb| upper.starts_with(verb))
        || (upper.starts_with("INSERT") && upper.contains("SELECT "))
}

/// The general log's record of `written` run with values: the first one
/// whose text is the statement with each `?` replaced by a value (not the
/// statement itself, as an execution of a statement prepared before the
/// log was on is recorded).
fn with_values(written: &str, logged: &[String]) -> Option<String> {
    let pattern = written
        .split('?')
        .map(regex::escape)
        .collect::<Vec<_>>()
        .join("(?:.*?)");
    let pattern = Regex::new(&format!("(?s)^{pattern}$")).expect("pattern");
    logged
        .iter()
        .find(|text| (*text != written || !written.contains('?')) && pattern.is_match(text))
        .cloned()
}

/// The plan's steps: MariaDB's `EXPLAIN` rows (table: access type, key,
/// estimated rows; Extra), SQLite's `EXPLAIN QUERY PLAN` lines.
async fn plan(conn: &mut Conn, sql: &str) -> Vec<String> {
    match conn {
        Conn::MySql(conn) => {
            let rows = sqlx::raw_sql(AssertSqlSafe(format!("EXPLAIN {sql}")))
                .fetch_all(&mut *conn)
                .await
                .unwrap_or_else(|err| panic!("{err}: {sql}"));
            let mut steps = Vec::new();
            for row in rows {
                let text = |column: &str| {
                    let text = row.try_get::<Option<String>, _>(column).ok().flatten();
                    let signed = || row.try_get::<Option<i64>, _>(column).ok().flatten();
                    let unsigned = || row.try_get::<Option<u64>, _>(column).ok().flatten();
                    text.or_else(|| signed().map(|n| n.to_string()))
                        .or_else(|| unsigned().map(|n| n.to_string()))
                        .unwrap_or_default()
                };
                let extra = text("Extra");
                steps.push(match text("table").as_str() {
                    "" => extra,
                    table => {
                        let read = format!(
                            "{table}: {} {} ({} rows)",
                            text("type"),
                            text("key"),
                            text("rows")
                        );
                        if extra.is_empty() {
                            read
                        } else {
                            format!("{read}; {extra}")
                        }
                    }
                });
            }
            steps
        }
        Conn::Sqlite(conn) => {
            let rows = sqlx::raw_sql(AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}")))
                .fetch_all(&mut *conn)
                .await
                .unwrap_or_else(|err| panic!("{err}: {sql}"));
            rows.iter()
                .map(|row| row.get::<String, _>("detail"))
                .collect()
        }
    }
}

/// The statement on one line, long lists of parameters or numbers
/// (`IN (?, ?, …)`) counted instead of written out, at most 600 characters.
fn shortened(sql: &str) -> String {
    let line = sql.split_whitespace().collect::<Vec<_>>().join(" ");
    let list = Regex::new(r"(\?|\d+)(?:, ?(?:\?|\d+)){3,}").expect("pattern");
    let line = list.replace_all(&line, |found: &regex::Captures| {
        let items = found[0].split(',').count();
        format!("{}, … ({items} in all)", &found[1])
    });
    match line.char_indices().nth(600) {
        Some((end, _)) => format!("{} …", &line[..end]),
        None => line.into_owned(),
    }
}
