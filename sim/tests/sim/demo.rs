//! The one-command demo: changegate and the three simulators start together,
//! wired by `config/demo.toml`, and answer on loopback.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The demo's ports and its output up to "ready".
struct Started {
    child: tokio::process::Child,
    service: u16,
    gitlab: u16,
    printed: String,
}

/// Starts the demo on free ports in `dir`; when it stops before it is
/// ready, `Err` with what it wrote.
async fn start_demo(dir: &std::path::Path) -> Result<Started, String> {
    let (service, gitlab, approval, deploy) = (free_port(), free_port(), free_port(), free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_changegate-demo"))
        .args(["--gitlab-port", &gitlab.to_string()])
        .args(["--approval-port", &approval.to_string()])
        .args(["--deploy-port", &deploy.to_string()])
        .current_dir(dir)
        .env_clear()
        // The shipped demo config with its ports moved aside, through the
        // documented environment overrides.
        .env("CHANGEGATE_LISTEN", format!("127.0.0.1:{service}"))
        .env(
            "CHANGEGATE__GITLAB__BASE_URL",
            format!("http://127.0.0.1:{gitlab}"),
        )
        .env(
            "CHANGEGATE__APPROVAL__URL",
            format!("http://127.0.0.1:{approval}/approvals"),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut printed = String::new();
    let ready = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            printed.push_str(&line);
            printed.push('\n');
            if line.starts_with("ready") {
                return true;
            }
        }
        false
    };
    let ready = tokio::time::timeout(Duration::from_secs(30), ready)
        .await
        .expect("the demo gets ready");
    if !ready {
        let mut errors = String::new();
        if let Some(mut stderr) = child.stderr.take() {
            use tokio::io::AsyncReadExt;
            let _ = stderr.read_to_string(&mut errors).await;
        }
        return Err(format!("{printed}{errors}"));
    }
    Ok(Started {
        child,
        service,
        gitlab,
        printed,
    })
}

/// [`start_demo`] until it is ready: a port found free may be taken by a
/// parallel test before the demo binds it; the demo then stops at once, and
/// is started again on other ports.
async fn start_demo_retrying(dir: &std::path::Path) -> Started {
    let mut attempts = Vec::new();
    loop {
        match start_demo(dir).await {
            Ok(started) => return started,
            Err(output) if attempts.len() < 2 => attempts.push(output),
            Err(output) => panic!("the demo stopped before it was ready: {attempts:?} {output}"),
        }
    }
}

#[tokio::test]
async fn the_demo_starts_changegate_and_the_simulators_wired_together() {
    let dir = tempfile::tempdir().unwrap();
    let started = start_demo_retrying(dir.path()).await;
    let Started {
        mut child,
        service,
        gitlab,
        printed,
    } = started;
    assert!(
        printed.contains(&format!("http://127.0.0.1:{service}")),
        "{printed}"
    );
    assert!(
        printed.contains(&format!("http://127.0.0.1:{gitlab}/api/v4")),
        "{printed}"
    );

    let client = crate::client::builder().no_proxy().build().unwrap();
    let targets: serde_json::Value = client
        .get(format!("http://127.0.0.1:{service}/api/v1/targets"))
        .header("x-auth-request-user", "alice")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(targets[0]["key"], "demo.feature-flags");
    let project = client
        .get(format!(
            "http://127.0.0.1:{gitlab}/api/v4/projects/config%2Frepo"
        ))
        .header("private-token", "bot-token")
        .send()
        .await
        .unwrap();
    assert_eq!(
        project.status(),
        200,
        "the bot token of config/demo.toml works on the GitLab simulator"
    );
    assert!(
        dir.path().join("data/demo.db").exists(),
        "changegate runs on its embedded database"
    );
    child.kill().await.unwrap();
}

#[tokio::test]
async fn each_run_of_the_demo_starts_from_a_fresh_database_as_its_simulators_do() {
    let dir = tempfile::tempdir().unwrap();
    let client = crate::client::builder().no_proxy().build().unwrap();
    let mut first = start_demo_retrying(dir.path()).await;
    let applied = client
        .post(format!(
            "http://127.0.0.1:{}/api/v1/applications",
            first.service
        ))
        .header("x-auth-request-user", "alice")
        .json(&serde_json::json!({ "targetKey": "demo.feature-flags", "reason": "first run" }))
        .send()
        .await
        .unwrap();
    assert_eq!(applied.status(), 202);
    let applied: serde_json::Value = applied.json().await.unwrap();
    let operation = applied["operationId"].as_str().unwrap().to_owned();
    first.child.kill().await.unwrap();

    let mut second = start_demo_retrying(dir.path()).await;
    assert!(
        second.printed.contains("fresh demo database"),
        "{}",
        second.printed
    );
    let status = client
        .get(format!(
            "http://127.0.0.1:{}/api/v1/operations/{operation}",
            second.service
        ))
        .header("x-auth-request-user", "alice")
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 404, "the first run's request is gone with its MRs");
    let bindings: serde_json::Value = client
        .get(format!(
            "http://127.0.0.1:{}/api/v1/me/bindings",
            second.service
        ))
        .header("x-auth-request-user", "alice")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(bindings["items"], serde_json::json!([]));
    second.child.kill().await.unwrap();
}
