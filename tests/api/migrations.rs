//! Instances started together on a fresh database migrate one after the
//! other: every `changegate migrate` succeeds, every `serve` becomes ready at
//! its first try, and no migration is ever reported as partially applied.

use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use changegate::db::{MYSQL_MIGRATIONS, SQLITE_MIGRATIONS};
use sqlx::Connection;

use crate::helpers::{MySqlScratch, changegate_command, plain_client};
use crate::reload::{Logs, free_port};

/// Fresh databases per test; each round has a new chance to interleave.
const ROUNDS: usize = 10;
/// Instances started together in each round.
const INSTANCES: usize = 3;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Starts `changegate migrate` `INSTANCES` times at once on `url` and waits for all.
fn migrate_together(url: &str, dir: &std::path::Path) -> Vec<Output> {
    let children: Vec<Child> = (0..INSTANCES)
        .map(|_| {
            changegate_command()
                .arg("migrate")
                .current_dir(dir)
                .env("CHANGEGATE_DATABASE_URL", url)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    children
        .into_iter()
        .map(|child| child.wait_with_output().unwrap())
        .collect()
}

fn assert_all_migrated(outputs: &[Output], round: usize) {
    for output in outputs {
        let stderr = text(&output.stderr);
        assert!(output.status.success(), "round {round}: {stderr}");
        assert!(
            text(&output.stdout).contains("migrations applied"),
            "round {round}: {}",
            text(&output.stdout)
        );
    }
}

/// How many migrations the database records, and how many of them as applied.
const RECORDED: &str = "SELECT COUNT(*), CAST(SUM(success) AS SIGNED) FROM _sqlx_migrations";

fn embedded(migrations: &sqlx::migrate::Migrator) -> i64 {
    i64::try_from(migrations.iter().count()).unwrap()
}

#[tokio::test]
async fn concurrent_migrates_on_a_fresh_mariadb_database_all_succeed() {
    let dir = tempfile::tempdir().unwrap();
    for round in 0..ROUNDS {
        let Some(scratch) = MySqlScratch::create().await else {
            return;
        };
        let outputs = migrate_together(&scratch.url(), dir.path());
        assert_all_migrated(&outputs, round);
        let mut conn = sqlx::MySqlConnection::connect(&scratch.url())
            .await
            .unwrap();
        let all = embedded(&MYSQL_MIGRATIONS);
        let recorded: (i64, i64) = sqlx::query_as(RECORDED).fetch_one(&mut conn).await.unwrap();
        assert_eq!(recorded, (all, all), "round {round}");
        conn.close().await.unwrap();
    }
}

#[tokio::test]
async fn concurrent_migrates_on_a_fresh_sqlite_file_all_succeed() {
    for round in 0..ROUNDS {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("data/cg.db").display());
        let outputs = migrate_together(&url, dir.path());
        assert_all_migrated(&outputs, round);
        let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
        let all = embedded(&SQLITE_MIGRATIONS);
        let recorded: (i64, i64) = sqlx::query_as(RECORDED).fetch_one(&mut conn).await.unwrap();
        assert_eq!(recorded, (all, all), "round {round}");
        conn.close().await.unwrap();
    }
}

/// Polls `port`'s `/readyz` until it answers 200.
async fn wait_until_ready(port: u16, logs: &Logs, round: usize) {
    let client = plain_client()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let readyz = format!("http://127.0.0.1:{port}/readyz");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(response) = client.get(&readyz).send().await
            && response.status() == 200
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "round {round}: instance on port {port} never became ready:\n{}",
            logs.text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn services_started_together_on_a_fresh_mariadb_database_all_become_ready() {
    let dir = tempfile::tempdir().unwrap();
    for round in 0..ROUNDS {
        let Some(scratch) = MySqlScratch::create().await else {
            return;
        };
        let instances: Vec<(u16, Logs)> = (0..INSTANCES)
            .map(|_| {
                let port = free_port();
                let child = changegate_command()
                    .arg("serve")
                    .current_dir(dir.path())
                    .env("CHANGEGATE_DATABASE_URL", scratch.url())
                    .env("CHANGEGATE_LISTEN", format!("127.0.0.1:{port}"))
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap();
                (port, Logs::start(child))
            })
            .collect();
        for (port, logs) in &instances {
            wait_until_ready(*port, logs, round).await;
        }
        for (_, logs) in &instances {
            // A failed first try would show as the retry loop's warning.
            for unexpected in ["partially applied", "database not ready"] {
                assert!(
                    !logs.contains(unexpected),
                    "round {round}: {unexpected:?} logged:\n{}",
                    logs.text()
                );
            }
        }
        // The services stop before their database is dropped.
        drop(instances);
        drop(scratch);
    }
}

/// The lock row as a holder left it: expiring `seconds` from now (negative:
/// already expired). Answers its expiry, by the database clock.
async fn leave_lock_row(url: &str, seconds: i64) -> chrono::NaiveDateTime {
    let mut conn = sqlx::MySqlConnection::connect(url).await.unwrap();
    sqlx::query(
        "CREATE TABLE changegate_migration_lock (id INT NOT NULL PRIMARY KEY, \
         holder VARCHAR(191) NULL, expires_at DATETIME(3) NULL)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO changegate_migration_lock VALUES \
         (1, 'migrate-elsewhere', CURRENT_TIMESTAMP(3) + INTERVAL ? SECOND)",
    )
    .bind(seconds)
    .execute(&mut conn)
    .await
    .unwrap();
    let expires_at = sqlx::query_scalar("SELECT expires_at FROM changegate_migration_lock")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    expires_at
}

/// An expired lock row (its holder crashed) is taken at once; a live one
/// is waited for until it expires. Told by the database clock, not by how
/// long the command took on a loaded machine: the first migration is
/// applied after a live lock's expiry, and an expired one holds nothing
/// off (a waiter would give up only after ten minutes).
#[tokio::test]
async fn a_crashed_holders_lock_expires_and_a_live_one_is_waited_for() {
    let dir = tempfile::tempdir().unwrap();
    for (left_for, waits) in [(-30, false), (3, true)] {
        let Some(scratch) = MySqlScratch::create().await else {
            return;
        };
        let expires_at = leave_lock_row(&scratch.url(), left_for).await;
        let started = Instant::now();
        let output = changegate_command()
            .arg("migrate")
            .current_dir(dir.path())
            .env("CHANGEGATE_DATABASE_URL", scratch.url())
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", text(&output.stderr));
        let mut conn = sqlx::MySqlConnection::connect(&scratch.url())
            .await
            .unwrap();
        // `installed_on` keeps whole seconds.
        let applied_after_expiry: bool = sqlx::query_scalar(
            "SELECT MIN(installed_on) >= CAST(? AS DATETIME(0)) FROM _sqlx_migrations",
        )
        .bind(expires_at)
        .fetch_one(&mut conn)
        .await
        .unwrap();
        if waits {
            assert!(
                applied_after_expiry,
                "a lock expiring in {left_for} s is waited for until {expires_at}"
            );
        } else {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "an expired lock holds nothing off: migrate took {:?}",
                started.elapsed()
            );
        }
        let holder: Option<String> =
            sqlx::query_scalar("SELECT holder FROM changegate_migration_lock WHERE id = 1")
                .fetch_one(&mut conn)
                .await
                .unwrap();
        assert_eq!(holder, None, "released after migrating");
        conn.close().await.unwrap();
    }
}
