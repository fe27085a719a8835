//! Start-up never deadlocks on the database (seed 000), and a database that
//! cannot work is reported in one actionable line.

use std::time::Duration;

use changegate::app::Application;
use changegate::config::LiveConfig;

use crate::helpers::{Logs, MySqlScratch, settings_from, spawn_app};

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

/// Probes while the service starts are answered 503 and logged once, at
/// info, when readiness changes: an orchestrator probing every second must
/// not write an error line per probe. (The database's own failure is one
/// warning of its connection loop.)
#[tokio::test]
async fn probes_while_not_ready_log_one_info_line_not_one_error_per_probe() {
    let (logs, _capture) = Logs::capture();
    let app = spawn_app("mysql://root@127.0.0.1:1/changegate", "").await;
    for _ in 0..5 {
        assert_eq!(app.get("/readyz").await.status(), 503);
    }
    app.stop().await.expect("stops");
    let changes = logs.lines_with(&["INFO", "not ready: /readyz answers 503"]);
    assert_eq!(changes.len(), 1, "{:?}", logs.lines());
    assert!(logs.lines_with(&["ERROR"]).is_empty(), "{:?}", logs.lines());
    assert!(
        logs.lines_with(&["/readyz", "WARN"]).is_empty(),
        "{:?}",
        logs.lines()
    );
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

/// A TCP relay to the MariaDB test server that can be cut (every connection
/// through it dropped, new ones refused) and restored on the same port, as
/// a database node that goes away and comes back.
struct Relay {
    port: u16,
    cut: tokio_util::sync::CancellationToken,
}

impl Relay {
    async fn start(port: u16, upstream: std::net::SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = tokio_util::sync::CancellationToken::new();
        let stop = cut.clone();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    () = stop.cancelled() => return,
                    accepted = listener.accept() => accepted,
                };
                let Ok((mut client, _)) = accepted else {
                    continue;
                };
                let stop = stop.clone();
                tokio::spawn(async move {
                    let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await else {
                        return;
                    };
                    tokio::select! {
                        () = stop.cancelled() => {}
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                    }
                });
            }
        });
        Self { port, cut }
    }

    fn cut(&self) {
        self.cut.cancel();
    }
}

#[tokio::test]
async fn a_database_gone_away_answers_503_with_retry_after_never_500_and_heals_without_a_restart() {
    let Some(scratch) = MySqlScratch::create().await else {
        return;
    };
    let server = MySqlScratch::server_url().unwrap();
    let upstream =
        tokio::net::lookup_host((server.host_str().unwrap(), server.port().unwrap_or(3306)))
            .await
            .unwrap()
            .next()
            .unwrap();
    let relay = Relay::start(0, upstream).await;
    let mut through_relay = url::Url::parse(&scratch.url()).unwrap();
    through_relay.set_port(Some(relay.port)).unwrap();
    let app = spawn_app(through_relay.as_str(), crate::helpers::REQUESTER_CONFIG).await;
    app.wait_until_ready().await;
    let apply = |n: usize| {
        serde_json::json!({ "targetKey": "team.access", "subjectId": format!("user{n}"),
                            "params": { "level": "read" }, "reason": "outage" })
    };
    let submit = |n: usize| {
        let (client, url) = (
            app.client.clone(),
            format!("{}/api/v1/applications", app.address),
        );
        async move {
            client
                .post(url)
                .header("x-auth-request-user", format!("user{n}"))
                .json(&apply(n))
                .send()
                .await
                .unwrap()
        }
    };
    for n in 0..5 {
        assert!(submit(n).await.status().is_success());
    }

    relay.cut();
    for n in 100..105 {
        let answer = submit(n).await;
        assert_eq!(
            answer.status(),
            503,
            "never a 500 while the database is away"
        );
        assert_eq!(
            answer
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_owned()),
            Some("5".to_owned())
        );
        let body: serde_json::Value = answer.json().await.unwrap();
        assert_eq!(body["code"], "DATABASE_UNAVAILABLE", "{body}");
    }
    assert_eq!(app.get("/readyz").await.status(), 503);
    assert_eq!(app.get("/healthz").await.status(), 200);

    // Back on the same address: the same process serves again.
    let _back = Relay::start(relay.port, upstream).await;
    app.wait_until_ready().await;
    for n in 200..210 {
        assert!(submit(n).await.status().is_success(), "healed");
    }
    app.stop().await.unwrap();
}
