//! `changegate backup PATH`: a consistent copy of the SQLite database taken
//! while the service writes, which another changegate serves with every
//! request it holds (and its webhook secrets, whose generated key is copied
//! beside it); it never overwrites a file, and for MySQL it says what to use:
//! a `mysqldump --single-transaction` taken under load restores into a new
//! database that changegate serves. Either way each request is answered as
//! the source had it at the moment of the copy: its status, step and next
//! action are those its step history in the source reached by then.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use changegate::app::Parts;
use changegate::db::Db;
use changegate::domain::{BindingStatus, StepStatus, next_action};
use serde_json::{Value, json};

use crate::helpers::{
    MySqlScratch, REQUESTER_CONFIG, TestApp, changegate_command, spawn_app, spawn_app_with,
    sqlite_db,
};
use crate::requests::{RecordingSteps, apply_body};
use crate::webhooks::SEALING_KEY;

fn backup(url: &str, target: &std::path::Path) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    changegate_command()
        .args(["backup", &target.display().to_string()])
        .current_dir(dir.path())
        .env("CHANGEGATE_DATABASE_URL", url)
        .output()
        .expect("changegate runs")
}

async fn operation_ids(db: &changegate::db::Db) -> Vec<String> {
    changegate::with_pool!(db, reader, |pool| {
        sqlx::query_scalar("SELECT operation_id FROM operation ORDER BY operation_id")
            .fetch_all(pool)
            .await
            .unwrap()
    })
}

/// One entry of a request's step history.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
struct Entry {
    id: i64,
    operation_id: String,
    from_step: Option<i32>,
    to_step: i32,
    from_status: Option<String>,
    to_status: Option<String>,
    operation_version: i64,
}

/// Every request's step history, oldest entry first.
async fn histories(db: &Db) -> HashMap<String, Vec<Entry>> {
    let entries: Vec<Entry> = changegate::with_pool!(db, reader, |pool| {
        sqlx::query_as(
            "SELECT id, operation_id, from_step, to_step, from_status, to_status, \
             operation_version FROM operation_history ORDER BY id",
        )
        .fetch_all(pool)
        .await
        .unwrap()
    });
    let mut histories: HashMap<String, Vec<Entry>> = HashMap::new();
    for entry in entries {
        histories
            .entry(entry.operation_id.clone())
            .or_default()
            .push(entry);
    }
    histories
}

/// How many of the source's requests are in `status`.
async fn requests_in(db: &Db, status: &str) -> i64 {
    changegate::with_pool!(db, reader, |pool| {
        sqlx::query_scalar("SELECT COUNT(*) FROM binding WHERE status = ?")
            .bind(status)
            .fetch_one(pool)
            .await
            .unwrap()
    })
}

/// Waits until `done(db)` holds.
async fn wait_until<F: AsyncFn(&Db) -> bool>(db: &Db, what: &str, done: F) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done(db).await {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// With the built-in approval provider a request moves from
/// APPROVAL_SENDING to APPROVAL_SENT and waits there for an operator: the
/// source has settled once none is left sending.
async fn settled(db: &Db) -> bool {
    requests_in(db, "APPROVAL_SENDING").await == 0
}

/// Whether a request has settled already: the copy then holds at least
/// one the source does not move after it.
async fn one_settled(db: &Db) -> bool {
    requests_in(db, "APPROVAL_SENT").await > 0
}

/// `app`'s answer for each of `ids`, as the operator sees it.
async fn views(app: &TestApp, ids: &[String]) -> HashMap<String, Value> {
    let mut views = HashMap::new();
    for id in ids {
        let answer = app
            .get_as("admin", &format!("/api/v1/operations/{id}"))
            .await;
        let status = answer.status();
        assert_eq!(status, 200, "{id}: {}", answer.text().await.unwrap());
        let view: Value = answer.json().await.unwrap();
        assert_eq!(view["operationId"], id.as_str());
        views.insert(id.clone(), view);
    }
    views
}

/// A service on a restored copy whose workers are held: it answers every
/// request as the copy holds it, instead of as it has taken it on since.
async fn serving_the_copy(url: &str, config: &str) -> TestApp {
    let parts = Parts {
        steps: Some(Arc::new(RecordingSteps::default())),
        ..Parts::default()
    };
    let app = spawn_app_with(url, config, parts).await;
    app.wait_until_ready().await;
    app
}

/// What the source had at the moment of the copy, and what the copy says.
struct Moment {
    /// The source's history once it settled, per request.
    source: HashMap<String, Vec<Entry>>,
    /// Its answers then.
    source_views: HashMap<String, Value>,
    /// The copy's history, per request.
    copy: HashMap<String, Vec<Entry>>,
}

impl Moment {
    /// Each of the copy's requests (`views`, from a service on the copy)
    /// is answered as the source had it when the copy was taken: its
    /// history there is the beginning of the source's (writes to one
    /// request are ordered, so its entries are too, even where the entries
    /// of several requests commit out of id order), and its status, step
    /// and next action are where that beginning left it. A request the
    /// source has not moved since is answered exactly as the source
    /// answers it.
    fn assert_served_as_of_the_copy(&self, views: &HashMap<String, Value>, backend: &str) {
        let mut unmoved = 0;
        for (id, view) in views {
            let copied = &self.copy[id];
            let source = &self.source[id];
            assert!(
                !copied.is_empty() && source.starts_with(copied),
                "{backend}: {id} copied with {copied:?}, the source wrote {source:?}"
            );
            let step = copied.last().unwrap().to_step;
            let status = copied
                .iter()
                .rev()
                .find_map(|entry| entry.to_status.clone())
                .unwrap();
            let next = next_action(
                status.parse::<BindingStatus>().unwrap(),
                StepStatus::from_code(step).unwrap(),
            );
            assert_eq!(
                (&view["status"], &view["step"]["code"], &view["next"]),
                (&json!(status), &json!(step), &json!(next.as_str())),
                "{backend}: {id} as of the copy"
            );
            if copied.len() == source.len() {
                unmoved += 1;
                let answered = &self.source_views[id];
                for field in ["status", "step", "next", "message", "updatedAt"] {
                    assert_eq!(view[field], answered[field], "{backend}: {id}'s {field}");
                }
            }
        }
        assert!(unmoved > 0, "{backend}: every copied request moved since");
        eprintln!(
            "{backend}: {} requests copied, {unmoved} of them as the source has them now",
            views.len()
        );
    }
}

/// A service on `url` with one webhook endpoint registered (a sealed
/// secret the copy must carry).
async fn service_with_an_endpoint(url: &str, config: &str) -> Arc<TestApp> {
    let app = Arc::new(spawn_app(url, config).await);
    app.wait_until_ready().await;
    let created = app
        .post_as(
            "admin",
            "/admin/v1/webhook-endpoints",
            &json!({ "url": "https://hooks.example.com/a" }),
        )
        .await;
    assert_eq!(created.status(), 201);
    app
}

/// Applications submitted one after another until stopped.
struct Load {
    writing: Arc<AtomicBool>,
    writer: tokio::task::JoinHandle<usize>,
}

impl Load {
    /// Starts submitting to `app`, and lets a few requests in first.
    async fn start(app: &Arc<TestApp>) -> Self {
        let writing = Arc::new(AtomicBool::new(true));
        let writer = tokio::spawn({
            let (app, writing) = (app.clone(), writing.clone());
            async move {
                let mut n = 0;
                while writing.load(Ordering::SeqCst) {
                    let body = apply_body("demo.feature-flags");
                    let answer = app
                        .post_as(&format!("user{n}"), "/api/v1/applications", &body)
                        .await;
                    let status = answer.status();
                    assert_eq!(status, 202, "{}", answer.text().await.unwrap());
                    n += 1;
                }
                n
            }
        });
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        Self { writing, writer }
    }

    /// Stops it; answers how many were submitted.
    async fn stop(self) -> usize {
        self.writing.store(false, Ordering::SeqCst);
        self.writer.await.unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_taken_under_load_serves_every_request_it_holds() {
    let test_db = sqlite_db().await;
    let config = format!("{REQUESTER_CONFIG}[webhooks]\npoll_interval = \"1h\"\n");
    let app = service_with_an_endpoint(&test_db.url, &config).await;
    let load = Load::start(&app).await;
    wait_until(&test_db.db, "a request settled", one_settled).await;
    let before = operation_ids(&test_db.db).await;
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("copy.db");
    let (url, copy_path) = (test_db.url.clone(), target.clone());
    let output = tokio::task::spawn_blocking(move || backup(&url, &copy_path))
        .await
        .unwrap();
    let after = operation_ids(&test_db.db).await;
    let written = load.stop().await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        written > 0 && after.len() > before.len(),
        "the service wrote during the copy"
    );

    let copy_url = format!("sqlite://{}", target.display());
    let copy = changegate::db::open(&crate::helpers::database_settings(&copy_url))
        .await
        .unwrap();
    let integrity: String = changegate::with_pool!(&copy, reader, |pool| {
        sqlx::query_scalar("PRAGMA integrity_check")
            .fetch_one(pool)
            .await
            .unwrap()
    });
    assert_eq!(integrity, "ok");
    let copied = operation_ids(&copy).await;
    assert!(
        before.iter().all(|id| copied.contains(id)) && copied.iter().all(|id| after.contains(id)),
        "the copy is one moment of the database: {} before, {} copied, {} after",
        before.len(),
        copied.len(),
        after.len()
    );
    let database = changegate::db::sqlite_file(&test_db.url).unwrap();
    let key = changegate::webhooks::sealed::key_file_of(&database);
    assert_eq!(
        std::fs::read(changegate::webhooks::sealed::key_file_of(&target)).unwrap(),
        std::fs::read(key).unwrap(),
        "the generated webhook key travels with the copy"
    );
    wait_until(&test_db.db, "the source settled", settled).await;
    let source_views = views(&app, &copied).await;
    Arc::into_inner(app).unwrap().stop().await.unwrap();
    let moment = Moment {
        source: histories(&test_db.db).await,
        source_views,
        copy: histories(&copy).await,
    };

    let restored = serving_the_copy(&copy_url, &config).await;
    moment.assert_served_as_of_the_copy(&views(&restored, &copied).await, "sqlite");
    restored.stop().await.unwrap();

    let again = backup(&test_db.url, &target);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));
    let mysql = backup(
        "mysql://root@127.0.0.1:1/changegate",
        &dir.path().join("x.db"),
    );
    assert!(!mysql.status.success());
    assert!(String::from_utf8_lossy(&mysql.stderr).contains("mysqldump --single-transaction"));
}

#[tokio::test]
async fn a_copy_leaves_the_schema_as_it_found_it_and_needs_a_database() {
    // A backup comes before an upgrade's migrations: taking it must not
    // apply them. A file whose schema is not changegate's stands for one
    // an older release left.
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("older.db");
    let url = format!("sqlite://{}?mode=rwc", source.display());
    {
        use sqlx::Connection;
        let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
        sqlx::query("CREATE TABLE kept (id INTEGER PRIMARY KEY)")
            .execute(&mut conn)
            .await
            .unwrap();
        conn.close().await.unwrap();
    }
    let target = dir.path().join("copy.db");
    let output = backup(&format!("sqlite://{}", source.display()), &target);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for file in [&source, &target] {
        let tables = sqlite_tables(file).await;
        assert_eq!(tables, ["kept"], "{} was not migrated", file.display());
    }

    let missing = dir.path().join("missing.db");
    let output = backup(
        &format!("sqlite://{}", missing.display()),
        &dir.path().join("copy-of-nothing.db"),
    );
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("there is no database at"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!missing.exists(), "no database is made to be copied");
}

async fn sqlite_tables(file: &std::path::Path) -> Vec<String> {
    use sqlx::Connection;
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", file.display()))
        .await
        .unwrap();
    let tables = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    tables
}

/// `mysqldump --single-transaction` of database `name` into `file`.
fn dump(server: &[String], name: &str, file: &std::path::Path) -> std::process::Output {
    std::process::Command::new("mysqldump")
        .args(server)
        .arg("--single-transaction")
        .arg(format!("--result-file={}", file.display()))
        .arg(name)
        .output()
        .expect("mysqldump runs (MariaDB's client tools)")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mysqldump_taken_under_load_restores_into_a_database_changegate_serves() {
    let Some(source) = MySqlScratch::create().await else {
        return;
    };
    let config = format!("{REQUESTER_CONFIG}[webhooks]\npoll_interval = \"1h\"\n{SEALING_KEY}");
    let app = service_with_an_endpoint(&source.url(), &config).await;
    let source_db = changegate::db::open(&crate::helpers::database_settings(&source.url()))
        .await
        .unwrap();
    let load = Load::start(&app).await;
    wait_until(&source_db, "a request settled", one_settled).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("changegate.sql");
    let dumped = {
        let (args, name, file) = (source.client_args(), source.name().to_owned(), file.clone());
        tokio::task::spawn_blocking(move || dump(&args, &name, &file))
            .await
            .unwrap()
    };
    assert!(load.stop().await > 0);
    assert!(
        dumped.status.success(),
        "{}",
        String::from_utf8_lossy(&dumped.stderr)
    );
    wait_until(&source_db, "the source settled", settled).await;
    let every_id = operation_ids(&source_db).await;
    let source_views = views(&app, &every_id).await;
    Arc::into_inner(app).unwrap().stop().await.unwrap();

    let target = MySqlScratch::create().await.unwrap();
    let restored = std::process::Command::new("mysql")
        .args(target.client_args())
        .arg(target.name())
        .stdin(std::fs::File::open(&file).unwrap())
        .output()
        .expect("mysql runs");
    assert!(
        restored.status.success(),
        "{}",
        String::from_utf8_lossy(&restored.stderr)
    );
    let restored_db = changegate::db::open(&crate::helpers::database_settings(&target.url()))
        .await
        .unwrap();
    let copied = operation_ids(&restored_db).await;
    assert!(!copied.is_empty());
    let bindings: i64 = changegate::with_pool!(&restored_db, reader, |pool| {
        sqlx::query_scalar(
            "SELECT COUNT(*) FROM operation o JOIN binding b ON b.operation_id = o.operation_id",
        )
        .fetch_one(pool)
        .await
        .unwrap()
    });
    assert_eq!(
        bindings as usize,
        copied.len(),
        "each operation with its binding"
    );
    let moment = Moment {
        source: histories(&source_db).await,
        source_views,
        copy: histories(&restored_db).await,
    };

    let app = serving_the_copy(&target.url(), &config).await;
    moment.assert_served_as_of_the_copy(&views(&app, &copied).await, "mysql");
    let endpoints: Value = app
        .get_as("admin", "/admin/v1/webhook-endpoints")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(endpoints["items"].as_array().unwrap().len(), 1);
    app.stop().await.unwrap();
}
