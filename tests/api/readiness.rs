//! Start-up never deadlocks on the database (seed 000), and a database that
//! cannot work is reported in one actionable line.

use std::time::Duration;

use changegate::app::Application;
use changegate::config::LiveConfig;

use crate::helpers::{MySqlScratch, settings_from, spawn_app};

#[tokio::test]
async fn starts_not_ready_without_its_database_and_becomes_ready_once_it_exists() {
    let Some(scratch) = MySqlScratch::reserve() else {
        return;
    };
    let app = spawn_app(&scratch.url(), "").await;

    assert_eq!(app.get("/healthz").await.status(), 200);
    let not_ready = app.get("/readyz").await;
    assert_eq!(not_ready.status(), 503);
    let body: serde_json::Value = not_ready.json().await.unwrap();
    assert_eq!(body["code"], "NOT_READY");
    // Still not ready a while later: the retry loop keeps failing quietly.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(app.get("/readyz").await.status(), 503);

    scratch.create_now().await;
    app.wait_until_ready().await;
    assert_eq!(app.get("/healthz").await.status(), 200);
    app.stop().await.expect("graceful stop");
}

#[tokio::test]
async fn an_unreachable_mysql_server_is_not_ready_rather_than_fatal() {
    // Nothing listens on port 1; the service must still start.
    let app = spawn_app("mysql://root@127.0.0.1:1/changegate", "").await;
    assert_eq!(app.get("/healthz").await.status(), 200);
    assert_eq!(app.get("/readyz").await.status(), 503);
    app.stop()
        .await
        .expect("stops while the database retry loop runs");
}

#[tokio::test]
async fn an_unwritable_sqlite_path_is_one_actionable_error() {
    let (settings, _) = settings_from(
        "[server]\nlisten = \"127.0.0.1:0\"\n[database]\nurl = \"sqlite:///proc/changegate/x.db\"\n",
    );
    let err = Application::build(LiveConfig::new(settings, None, None))
        .await
        .err()
        .expect("build fails");
    let message = format!("{err:#}");
    assert!(
        message.contains("cannot open SQLite database /proc/changegate/x.db"),
        "{message}"
    );
    assert!(!message.contains('\n'), "{message}");
}
