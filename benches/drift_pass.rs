//! One pass of the drift job over N live bindings in 10 directories (one
//! target each), against the GitLab simulator holding every binding's file
//! as changegate renders it, with 1% of them edited by hand: GitLab calls,
//! the pass's time, and what it read from the database. Its GitLab calls
//! must grow only with directories and their pages (100 entries a page),
//! and its time per binding stay within 2x from 10,000 to 100,000.
//!
//! ```sh
//! cargo bench --bench drift_pass                        # 10,000 and 100,000 on SQLite
//! CHANGEGATE_TEST_MYSQL_URL=mysql://root@127.0.0.1:3306 cargo bench --bench drift_pass   # + MariaDB
//! cargo bench --bench drift_pass -- 10000               # one size
//! ```

use std::time::{Duration, Instant};

use changegate::clients::gitlab::{GitLabClient, RetryPolicy};
use changegate::clients::health::{Dependencies, System};
use changegate::clients::http::{
    Outbound, ProxyRules, SystemClient, Trust, install_crypto_provider,
};
use changegate::config::{Settings, source};
use changegate::db::drift::{list_findings, live_operations};
use changegate::db::{self, Db};
use changegate::drift::pass;
use changegate::files::layout::FileChange;
use changegate::workflow::file_change;
use changegate_sim::gitlab::{AccessLevel, Endpoint, GitLabSim, GitLabSimOptions};

const DIRECTORIES: usize = 10;
const ROWS_PER_INSERT: usize = 500;

fn settings(database_url: &str, gitlab_url: &str) -> Settings {
    let mut text = format!(
        "[database]\nurl = {database_url:?}\n[gitlab]\nbase_url = {gitlab_url:?}\n\
         project = \"config/repo\"\nbot_token = \"bot-token\"\n"
    );
    for target in 0..DIRECTORIES {
        text.push_str(&format!(
            "[targets.\"t{target}\"]\ndescription = \"bench\"\n"
        ));
    }
    let table = source::parse(&text).expect("toml");
    Settings::from_table(&table, None).0
}

/// `bindings` VALIDATED bindings, spread over the targets, written as the
/// store writes them, in multi-row inserts.
async fn seed(db: &Db, bindings: usize) {
    for start in (0..bindings).step_by(ROWS_PER_INSERT) {
        let rows: Vec<usize> = (start..(start + ROWS_PER_INSERT).min(bindings)).collect();
        let id = |n: usize| format!("00000000-0000-4000-8000-{n:012}");
        let operations: Vec<String> = rows
            .iter()
            .map(|n| {
                format!(
                    "('{}', 'APPLY', 's{n}', 't{}', 's{n}', 'approval_first', 10304, '{{}}', 'bench')",
                    id(*n),
                    n % DIRECTORIES
                )
            })
            .collect();
        let bindings: Vec<String> = rows
            .iter()
            .map(|n| {
                format!(
                    "('s{n}', 't{}', '{}', 'VALIDATED', 's{n}', '{{}}')",
                    n % DIRECTORIES,
                    id(*n)
                )
            })
            .collect();
        let statements = [
            format!(
                "INSERT INTO operation (operation_id, kind, subject_id, target_key, requested_by, \
                 flow_order, step_code, params, reason) VALUES {}",
                operations.join(", ")
            ),
            format!(
                "INSERT INTO binding (subject_id, target_key, operation_id, status, requested_by, \
                 params) VALUES {}",
                bindings.join(", ")
            ),
        ];
        for sql in statements {
            changegate::with_pool!(db, writer, |pool| {
                sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                    .execute(pool)
                    .await
                    .map(drop)
            })
            .expect("seed");
        }
    }
}

fn gitlab(url: &str) -> GitLabClient {
    let outbound = Outbound::new(
        Trust::platform_and_pem(b"").expect("platform roots"),
        ProxyRules::default(),
    );
    let client = SystemClient::new(&outbound, &Dependencies::default(), System::GitLab, |b| b)
        .expect("an HTTP client");
    GitLabClient::new(client, url, Duration::from_secs(60), RetryPolicy::default())
}

struct Measured {
    calls: usize,
    pass: Duration,
    /// The same listings alone, read again just after the pass: the
    /// simulator's share of the pass's time.
    listings: Duration,
    findings: usize,
}

async fn measure(database_url: &str, bindings: usize) -> Measured {
    let sim = GitLabSim::start(GitLabSimOptions::default())
        .await
        .expect("simulator");
    let project = sim.create_project("config/repo");
    let bot = sim.add_user("change-bot", "bot-token");
    sim.add_member(project, bot, AccessLevel::Developer)
        .expect("member");
    let settings = settings(database_url, sim.base_url());
    let db = db::open(&settings.database).await.expect("open");
    seed(&db, bindings).await;

    // The branch holds every rendering, 1% of them edited by hand.
    let files: Vec<(String, String)> = live_operations(&db)
        .await
        .expect("live")
        .iter()
        .enumerate()
        .map(
            |(n, operation)| match file_change(&settings, operation).expect("renders") {
                FileChange::Whole {
                    path,
                    content: Some(content),
                } if n % 100 == 0 => (path, format!("{content} ")),
                FileChange::Whole {
                    path,
                    content: Some(content),
                } => (path, content),
                other => panic!("a whole file: {other:?}"),
            },
        )
        .collect();
    let changes: Vec<(&str, Option<&str>)> = files
        .iter()
        .map(|(path, content)| (path.as_str(), Some(content.as_str())))
        .collect();
    sim.push(project, bot, "main", &changes).expect("push");

    let client = gitlab(sim.base_url());
    let token = secrecy::SecretString::from("bot-token");
    let list_all = || async {
        for directory in 0..DIRECTORIES {
            client
                .blobs_in(
                    &token,
                    "config/repo",
                    &format!("bindings/t{directory}"),
                    "main",
                )
                .await
                .expect("listing");
        }
    };
    // The simulator builds a listing once per commit and directory; built
    // here, so the pass and the listings timed after it read the same.
    list_all().await;
    let before = sim.calls(Endpoint::GetTree);
    let started = Instant::now();
    let drifted = pass(&db, &settings, &client).await.expect("pass");
    let took = started.elapsed();
    let calls = sim.calls(Endpoint::GetTree) - before;
    let started = Instant::now();
    list_all().await;
    let listings = started.elapsed();
    let findings = list_findings(&db).await.expect("findings").len();
    assert_eq!(drifted, findings);
    assert_eq!(findings, bindings.div_ceil(100), "1% edited");
    db.close().await;
    Measured {
        calls,
        pass: took,
        listings,
        findings,
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

fn report(name: &str, bindings: usize, measured: &Measured) {
    let own = measured.pass.saturating_sub(measured.listings);
    println!(
        "| {name} | {bindings} | {DIRECTORIES} | {} | {:.2} | {:.2} | {:.1} | {} |",
        measured.calls,
        measured.pass.as_secs_f64(),
        measured.listings.as_secs_f64(),
        own.as_secs_f64() * 1e6 / bindings as f64,
        measured.findings
    );
}

fn main() {
    install_crypto_provider();
    let sizes: Vec<usize> = match std::env::args().skip(1).find_map(|a| a.parse().ok()) {
        Some(size) => vec![size],
        None => vec![10_000, 100_000],
    };
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        println!(
            "| database | bindings | directories | GitLab calls | pass s | of which listings s | changegate's µs per binding | findings |"
        );
        println!("|---|---|---|---|---|---|---|---|");
        for bindings in sizes {
            let dir = tempfile::tempdir().expect("temp dir");
            let url = format!("sqlite://{}", dir.path().join("drift.db").display());
            report("SQLite", bindings, &measure(&url, bindings).await);
            if let Ok(server) = std::env::var("CHANGEGATE_TEST_MYSQL_URL") {
                let server = server.trim_end_matches('/').to_owned();
                let name = format!("cg_drift_{}_{bindings}", std::process::id());
                admin(&server, &format!("CREATE DATABASE {name}")).await;
                let measured = measure(&format!("{server}/{name}"), bindings).await;
                admin(&server, &format!("DROP DATABASE {name}")).await;
                report("MariaDB", bindings, &measured);
            }
        }
    });
}
