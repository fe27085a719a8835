//! Every outside system on HTTPS with certificates from a CA the test makes:
//! trusted through `tls.ca_file`, the whole flow reaches VALIDATED; without
//! it, the request fails at once (waiting cannot help) and says why, once in
//! the log, counted in metrics and in the dependency health. Each kind of connection failure is told
//! apart by the client.

use changegate::clients::health::{Dependencies, System};
use changegate::clients::http::{
    CallError, Outbound, ProxyRules, SystemClient, Trust, Unreachable,
};
use changegate_sim::gitlab::{GitLabSim, GitLabSimOptions};
use changegate_sim::tls::{ServerTls, TestCa};

use super::end_to_end::{WorldOptions, world_with};
use super::*;
use crate::helpers::Logs;

fn ca_file(ca: &TestCa) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("corporate-ca.pem");
    std::fs::write(&path, ca.ca_pem()).unwrap();
    (dir, path.display().to_string())
}

fn on_https(ca: &TestCa, extra: String) -> WorldOptions {
    WorldOptions {
        extra,
        gitlab: GitLabSimOptions {
            tls: Some(ca.server_tls()),
            ..GitLabSimOptions::default()
        },
        tls: Some(ca.server_tls()),
        ..WorldOptions::default()
    }
}

#[tokio::test]
async fn with_the_ca_in_tls_ca_file_the_whole_flow_runs_on_https_to_validated() {
    let ca = TestCa::new();
    let (_dir, path) = ca_file(&ca);
    let db = crate::helpers::sqlite_db().await;
    let w = world_with(
        &db.url,
        on_https(&ca, format!("[tls]\nca_file = {path:?}\n")),
    )
    .await;
    assert!(w.gitlab.base_url().starts_with("https://"));
    assert!(w.approval.base_url().starts_with("https://"));

    let id = apply(&w.app).await;
    let view = wait_for(&w.app, &id, |v| {
        v["status"] == "VALIDATED" || v["next"] == "CONTACT_TEAM"
    })
    .await;

    assert_eq!(
        (view["status"].as_str(), view["step"]["name"].as_str()),
        (Some("VALIDATED"), Some("DEPLOY_CONFIRMED")),
        "{view}"
    );
    assert_eq!(
        w.approval.requests().len(),
        1,
        "the approval went over HTTPS"
    );
    let iid = view["mergeRequest"]["iid"].as_i64().unwrap();
    let mr = w
        .gitlab
        .merge_request(w.project, u64::try_from(iid).unwrap())
        .unwrap();
    assert_eq!(format!("{:?}", mr.state), "Merged", "{mr:?}");
    assert_eq!(
        mr.approved_by.len(),
        2,
        "both reviewer bots approved: {mr:?}"
    );
    let file = w
        .gitlab
        .file(w.project, "main", "bindings/demo.feature-flags/alice.json")
        .unwrap();
    assert!(file.contains(&id), "{file}");
    let health: Value = w
        .app
        .get_as("admin", "/admin/v1/health/dependencies")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(health["dependencies"][0]["system"], "gitlab");
    assert_eq!(
        health["dependencies"][0]["lastCallSucceeded"], true,
        "{health}"
    );
    assert_eq!(health["dependencies"][1]["system"], "approval");
    assert_eq!(
        health["dependencies"][1]["lastCallSucceeded"], true,
        "{health}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn without_the_ca_the_request_fails_at_once_saying_the_certificate_is_not_trusted() {
    let (logs, _guard) = Logs::capture();
    let ca = TestCa::new();
    let db = crate::helpers::sqlite_db().await;
    // Only GitLab is on HTTPS: the approval goes through, the MR cannot.
    let w = world_with(
        &db.url,
        WorldOptions {
            gitlab: GitLabSimOptions {
                tls: Some(ca.server_tls()),
                ..GitLabSimOptions::default()
            },
            ..WorldOptions::default()
        },
    )
    .await;

    let id = apply(&w.app).await;
    // Waiting cannot make the certificate trusted: the team must act.
    let view = wait_for(&w.app, &id, |v| v["next"] == "CONTACT_TEAM").await;
    assert_eq!(
        (
            view["status"].as_str(),
            view["step"]["name"].as_str(),
            view["message"].as_str()
        ),
        (
            Some("CREATE_FAILED"),
            Some("GITLAB_UNREACHABLE"),
            Some("GitLab's certificate is not trusted")
        ),
        "{view}"
    );
    // A second request fails the same way: still one warning, every failure counted.
    let second = apply_as(&w.app, "bob").await;
    wait_for_as(&w.app, "bob", &second, |v| v["next"] == "CONTACT_TEAM").await;
    let warnings = logs.lines_with(&["WARN", "untrusted_certificate"]);
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0].contains("host=\"127.0.0.1\"") && warnings[0].contains("tls.ca_file"),
        "the warning names the host and the fix: {}",
        warnings[0]
    );
    let metrics = w
        .app
        .client
        .get(format!("{}/metrics", w.app.address))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let failures: f64 = metrics
        .lines()
        .find(|line| {
            line.starts_with("changegate_outbound_failures_total")
                && line.contains("reason=\"untrusted_certificate\"")
                && line.contains("system=\"gitlab\"")
        })
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no failure counted: {metrics}"));
    assert!(failures >= 2.0, "every failed call is counted: {failures}");
    let health: Value = w
        .app
        .get_as("admin", "/admin/v1/health/dependencies")
        .await
        .json()
        .await
        .unwrap();
    let gitlab = &health["dependencies"][0];
    assert_eq!(
        (
            gitlab["lastCallSucceeded"].as_bool(),
            gitlab["lastErrorReason"].as_str(),
            gitlab["lastError"].as_str()
        ),
        (
            Some(false),
            Some("untrusted_certificate"),
            Some("GitLab's certificate is not trusted")
        ),
        "{health}"
    );
    assert!(
        w.gitlab.merge_request(w.project, 1).is_none(),
        "no MR was opened"
    );
}

/// A call to a GitLab simulator serving `tls`, trusting only `ca`.
async fn call_gitlab_serving(ca: &TestCa, tls: ServerTls) -> Result<reqwest::Response, CallError> {
    let sim = GitLabSim::start(GitLabSimOptions {
        tls: Some(tls),
        ..GitLabSimOptions::default()
    })
    .await
    .unwrap();
    call(ca, &format!("{}/api/v4/version", sim.base_url())).await
}

async fn call(ca: &TestCa, url: &str) -> Result<reqwest::Response, CallError> {
    let outbound = Outbound::new(
        Trust::only_pem(ca.ca_pem().as_bytes()).unwrap(),
        ProxyRules::default(),
    );
    let client =
        SystemClient::new(&outbound, &Dependencies::default(), System::GitLab, |b| b).unwrap();
    client
        .send(
            client
                .request(reqwest::Method::GET, url)
                .timeout(Duration::from_secs(5)),
        )
        .await
}

fn failure_of(answer: Result<reqwest::Response, CallError>) -> Option<Unreachable> {
    match answer {
        Err(CallError::Unreachable { failure, .. }) => Some(failure),
        other => panic!("expected a connection failure, got {other:?}"),
    }
}

#[tokio::test]
async fn each_kind_of_connection_failure_is_told_apart() {
    let ca = TestCa::new();
    assert!(call_gitlab_serving(&ca, ca.server_tls()).await.is_ok());
    assert_eq!(
        failure_of(call_gitlab_serving(&ca, ca.untrusted_server_tls()).await),
        Some(Unreachable::UntrustedCertificate)
    );
    assert_eq!(
        failure_of(call_gitlab_serving(&ca, ca.expired_server_tls()).await),
        Some(Unreachable::ExpiredCertificate)
    );
    assert_eq!(
        failure_of(call_gitlab_serving(&ca, ca.wrong_host_server_tls()).await),
        Some(Unreachable::WrongHostName)
    );
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    assert_eq!(
        failure_of(call(&ca, &format!("https://127.0.0.1:{port}/")).await),
        Some(Unreachable::Refused)
    );
    assert_eq!(
        failure_of(call(&ca, "https://gitlab.invalid/").await),
        Some(Unreachable::Dns)
    );
    // A plain-HTTP server behind an https:// URL: TLS, not a certificate.
    let plain = GitLabSim::start(GitLabSimOptions::default()).await.unwrap();
    let url = plain.base_url().replace("http://", "https://");
    assert_eq!(failure_of(call(&ca, &url).await), Some(Unreachable::Tls));
}
