//! The `changegate-sim` binary as a user runs it: free ports, seeded accounts, the summary
//! it prints, HTTPS with a certificate and key, and refusals of bad arguments.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use changegate_sim::callback::generate_secret;
use changegate_sim::tls::TestCa;
use reqwest::Method;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use uuid::Uuid;

use crate::approval::request_body;
use crate::control_client::call;

/// The binary with a clean environment (so no `CHANGEGATE_SIM_*` of the caller leaks in)
/// and free ports.
fn binary(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_changegate-sim"));
    command
        .env_clear()
        .args([
            "--gitlab-port",
            "0",
            "--approval-port",
            "0",
            "--deploy-port",
            "0",
        ])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Reads the summary up to its last line, `deploy.secret`, as key → values.
async fn summary(child: &mut Child) -> BTreeMap<String, Vec<String>> {
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut lines = BufReader::new(stdout).lines();
    let mut summary: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let read = async {
        while let Some(line) = lines.next_line().await.expect("readable stdout") {
            let (key, value) = line.split_once(' ').expect("key value");
            summary
                .entry(key.to_owned())
                .or_default()
                .push(value.trim().to_owned());
            if key == "deploy.secret" {
                return;
            }
        }
        panic!("the summary ended early");
    };
    tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .expect("the summary is printed");
    summary
}

#[tokio::test]
async fn the_binary_seeds_gitlab_and_prints_where_everything_is() {
    let approval_secret = generate_secret();
    let mut child = binary(&[
        "--callback-url",
        "http://127.0.0.1:1/",
        "--bot",
        "robot:robot-token",
        "--reviewer",
        "ann:ann-token",
        "--reviewer",
        "ben:ben-token",
        "--approval-policy",
        "manual",
    ])
    .env("CHANGEGATE_SIM_APPROVAL_SECRET", &approval_secret)
    .spawn()
    .expect("the binary starts");
    let summary = summary(&mut child).await;
    let one = |key: &str| summary[key][0].clone();

    assert_eq!(one("approval.secret"), approval_secret);
    assert!(one("deploy.secret").starts_with("whsec_"));
    assert_eq!(
        one("approval.callbacks"),
        "http://127.0.0.1:1/callbacks/approval"
    );
    assert_eq!(
        one("deploy.callbacks"),
        "http://127.0.0.1:1/callbacks/deploy"
    );
    assert_eq!(one("gitlab.bot"), "robot (token robot-token)");
    assert_eq!(
        summary["gitlab.reviewer"],
        ["ann (token ann-token)", "ben (token ben-token)"]
    );
    assert!(one("gitlab.project").starts_with("config/repo (id "));

    let project = format!("{}/projects/config%2Frepo", one("gitlab.url"));
    let client = crate::client::client();
    let read = client.get(&project).header("PRIVATE-TOKEN", "ann-token");
    let read: serde_json::Value = read.send().await.unwrap().json().await.unwrap();
    assert_eq!(read["approvals_before_merge"], 2);
    let requests = format!("{}/requests", one("gitlab.control"));
    assert_eq!(
        call(Method::GET, &requests, None).await.body[0]["status"],
        200
    );

    let body = request_body(Uuid::new_v4());
    let created = client.post(one("approval.url")).json(&body).send().await;
    assert_eq!(created.unwrap().status(), 201);
    let approvals = format!("{}/approvals", one("approval.control"));
    let approvals = call(Method::GET, &approvals, None).await.body;
    assert_eq!(approvals[0]["decisions"], json!([]));
    let merges = format!("{}/merges", one("deploy.control"));
    assert_eq!(call(Method::GET, &merges, None).await.body, json!([]));

    child.kill().await.expect("the binary stops");
}

#[tokio::test]
async fn with_a_certificate_and_key_every_simulator_serves_https() {
    let ca = TestCa::new();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, ca.server_tls().cert_chain_pem()).unwrap();
    std::fs::write(&key, ca.server_tls().key_pem()).unwrap();
    let mut child = binary(&[
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ])
    .spawn()
    .expect("the binary starts");
    let summary = summary(&mut child).await;

    let client = reqwest::Client::builder()
        .tls_backend_preconfigured(ca.client_config())
        .build()
        .unwrap();
    let project = format!("{}/projects/config%2Frepo", summary["gitlab.url"][0]);
    assert!(project.starts_with("https://127.0.0.1:"), "{project}");
    let read = client.get(&project).header("PRIVATE-TOKEN", "bot-token");
    assert_eq!(read.send().await.unwrap().status(), 200);
    for control in ["approval.control", "deploy.control"] {
        let url = &summary[control][0];
        assert!(url.starts_with("https://127.0.0.1:"), "{url}");
        let answered = client.get(format!("{url}/callbacks")).send().await;
        assert_eq!(answered.unwrap().status(), 200, "{control}");
    }

    child.kill().await.expect("the binary stops");
}

#[tokio::test]
async fn bad_arguments_are_refused_before_anything_starts() {
    for (args, complaint) in [
        (&["--reviewer", "no-token"][..], "NAME:TOKEN"),
        (&["--approval-secret", "whsec_%%%"], "callback secret"),
        (&["--approval-policy", "sometimes"], "sometimes"),
        (&["--tls-cert", "cert.pem"], "--tls-key"),
        (
            &["--tls-cert", "/nonexistent/c", "--tls-key", "k"],
            "/nonexistent/c",
        ),
        (
            &["--callback-ca", "/nonexistent/ca.pem"],
            "/nonexistent/ca.pem",
        ),
    ] {
        let output = binary(args).output().await.expect("the binary runs");
        assert!(!output.status.success(), "{args:?} was accepted");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(complaint), "{args:?}: {stderr}");
    }
}
