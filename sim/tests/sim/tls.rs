//! The simulators over HTTPS with a `TestCa`: every simulator answers a client that trusts
//! only that CA, faults and control APIs included; a client that does not trust it is
//! refused with a certificate error; the CA's broken identities are refused each for its
//! own reason; and callbacks reach an HTTPS receiver when the sender trusts its CA.

use std::time::Duration;

use changegate_sim::approval::{ApprovalSim, ApprovalSimOptions, Decision, DecisionPolicy};
use changegate_sim::callback::{DeliverySettings, generate_secret};
use changegate_sim::deploy::DeploySimOptions;
use changegate_sim::gitlab::{GitLabSim, GitLabSimOptions};
use changegate_sim::stack::{Account, SimStack, StackOptions};
use changegate_sim::tls::{ServerTls, TestCa};
use reqwest::StatusCode;
use rustls::CertificateError;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::approval::request_body;
use crate::receiver::Receiver;

const BOT: &str = "bot-token";

/// A client trusting `ca` and nothing else: not even the platform's roots.
fn trusting(ca: &TestCa) -> reqwest::Client {
    reqwest::Client::builder()
        .tls_backend_preconfigured(ca.client_config())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// The three simulators on HTTPS with `ca`'s identity, as changegate's tests start them.
async fn https_stack(ca: &TestCa) -> SimStack {
    SimStack::start(StackOptions {
        gitlab: GitLabSimOptions {
            tls: Some(ca.server_tls()),
            ..GitLabSimOptions::default()
        },
        approval: ApprovalSimOptions {
            tls: Some(ca.server_tls()),
            policy: DecisionPolicy::Manual,
            ..ApprovalSimOptions::default()
        },
        deploy: DeploySimOptions {
            tls: Some(ca.server_tls()),
            ..DeploySimOptions::default()
        },
        project: "config/repo".to_owned(),
        bot: Account {
            username: "change-bot".to_owned(),
            token: BOT.to_owned(),
        },
        reviewers: Vec::new(),
    })
    .await
    .unwrap()
}

/// The certificate problem somewhere in `err`'s causes, if that is why it failed.
fn certificate_error(err: &reqwest::Error) -> Option<CertificateError> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(next) = cause {
        if let Some(rustls::Error::InvalidCertificate(cert)) = next.downcast_ref() {
            return Some(cert.clone());
        }
        // io::Error's `source` skips the error it wraps: look at that one too.
        cause = match next.downcast_ref::<std::io::Error>() {
            Some(io) if io.get_ref().is_some() => io.get_ref().map(|inner| inner as _),
            _ => next.source(),
        };
    }
    None
}

async fn json(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn every_simulator_serves_https_to_a_client_trusting_only_the_test_ca() {
    let ca = TestCa::new();
    let stack = https_stack(&ca).await;
    let client = trusting(&ca);
    for base_url in [
        stack.gitlab.base_url(),
        stack.approval.base_url(),
        stack.deploy.base_url(),
    ] {
        assert!(base_url.starts_with("https://127.0.0.1:"), "{base_url}");
    }

    let project = format!("{}/projects/config%2Frepo", stack.gitlab.api_url());
    let read = client.get(&project).header("PRIVATE-TOKEN", BOT);
    let (status, body) = json(read.send().await.unwrap()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["path_with_namespace"], "config/repo");
    assert!(body["web_url"].as_str().unwrap().starts_with("https://"));

    // Faults and the control API work over HTTPS as over HTTP.
    let fault = json!({ "kind": "status", "status": 503 });
    let faults = format!("{}/_sim/faults", stack.gitlab.base_url());
    let injected = client.post(&faults).json(&fault).send().await.unwrap();
    assert_eq!(injected.status(), 204);
    let struck = client.get(&project).header("PRIVATE-TOKEN", BOT);
    assert_eq!(struck.send().await.unwrap().status(), 503);
    let spared = client.get(&project).header("PRIVATE-TOKEN", BOT);
    assert_eq!(spared.send().await.unwrap().status(), 200);

    let approvals = format!("{}/approvals", stack.approval.base_url());
    let operation = Uuid::new_v4();
    let created = client.post(&approvals).json(&request_body(operation));
    assert_eq!(created.send().await.unwrap().status(), 201);
    let listed = format!("{}/_sim/approvals", stack.approval.base_url());
    let (_, listed) = json(client.get(listed).send().await.unwrap()).await;
    assert_eq!(listed[0]["operation_id"], operation.to_string());

    let merges = format!("{}/_sim/merges", stack.deploy.base_url());
    let (status, merges) = json(client.get(merges).send().await.unwrap()).await;
    assert_eq!((status.as_u16(), merges), (200, json!([])));

    // `localhost` is in the certificate too.
    let port = stack.gitlab.base_url().rsplit(':').next().unwrap();
    let by_name = format!("https://localhost:{port}/api/v4/projects/config%2Frepo");
    let by_name = client.get(by_name).header("PRIVATE-TOKEN", BOT);
    assert_eq!(by_name.send().await.unwrap().status(), 200);
}

#[tokio::test]
async fn a_client_that_does_not_trust_the_test_ca_is_refused_with_a_certificate_error() {
    let ca = TestCa::new();
    let stack = https_stack(&ca).await;
    let platform_only = crate::client::client();
    for base_url in [
        stack.gitlab.base_url(),
        stack.approval.base_url(),
        stack.deploy.base_url(),
    ] {
        let refused = platform_only
            .get(format!("{base_url}/_sim/requests"))
            .send();
        let err = refused.await.expect_err(base_url);
        assert_eq!(
            certificate_error(&err),
            Some(CertificateError::UnknownIssuer),
            "{base_url}: {err:?}"
        );
    }
    // Nor does the port speak plain HTTP.
    let plain = stack.gitlab.base_url().replace("https://", "http://");
    let plain = platform_only.get(format!("{plain}/_sim/requests")).send();
    assert!(plain.await.is_err());
}

#[tokio::test]
async fn broken_identities_from_the_test_ca_are_refused_each_for_its_own_reason() {
    let ca = TestCa::new();
    let client = trusting(&ca);
    for (tls, expected) in [
        (ca.untrusted_server_tls(), "unknown issuer"),
        (ca.expired_server_tls(), "expired"),
        (ca.wrong_host_server_tls(), "wrong host name"),
    ] {
        let options = GitLabSimOptions {
            tls: Some(tls),
            ..GitLabSimOptions::default()
        };
        let sim = GitLabSim::start(options).await.unwrap();
        let refused = client.get(format!("{}/_sim/requests", sim.base_url()));
        let err = refused.send().await.expect_err(expected);
        let reason = certificate_error(&err).map(|cert| match cert {
            CertificateError::UnknownIssuer => "unknown issuer",
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => "expired",
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                "wrong host name"
            }
            _ => "another certificate problem",
        });
        assert_eq!(reason, Some(expected), "{err:?}");
    }
}

#[tokio::test]
async fn an_unusable_identity_is_refused_at_start() {
    let ca = TestCa::new();
    let no_key = ServerTls::from_pem(ca.server_tls().cert_chain_pem(), "");
    let no_cert = ServerTls::from_pem("not PEM", ca.server_tls().key_pem());
    for tls in [no_key, no_cert] {
        let options = GitLabSimOptions {
            tls: Some(tls),
            ..GitLabSimOptions::default()
        };
        let refused = GitLabSim::start(options).await.err().map(|err| err.kind());
        assert_eq!(refused, Some(std::io::ErrorKind::InvalidInput));
    }
}

/// An approval simulator whose callbacks go to an HTTPS receiver with `ca`'s identity,
/// trusting `callback_ca_pem` besides the platform's roots; one decision is sent.
async fn decide_over_https(ca: &TestCa, callback_ca_pem: Option<String>) -> (Receiver, Value) {
    let secret = generate_secret();
    let receiver = Receiver::start_https(&secret, &ca.server_tls()).await;
    let sim = ApprovalSim::start(ApprovalSimOptions {
        callback_url: Some(receiver.url("approval")),
        secret,
        policy: DecisionPolicy::Manual,
        callback_ca_pem,
        delivery: DeliverySettings {
            retries: 0,
            ..DeliverySettings::default()
        },
        ..ApprovalSimOptions::default()
    })
    .await
    .unwrap();
    let operation = Uuid::new_v4();
    let approvals = format!("{}/approvals", sim.base_url());
    let created = crate::client::client()
        .post(approvals)
        .json(&request_body(operation));
    assert_eq!(created.send().await.unwrap().status(), 201);
    let attempts = sim.decide(operation, Decision::Approved).await.unwrap();
    (receiver, serde_json::to_value(&attempts).unwrap())
}

#[tokio::test]
async fn callbacks_reach_an_https_receiver_whose_ca_the_sender_trusts() {
    let ca = TestCa::new();
    let (receiver, attempts) = decide_over_https(&ca, Some(ca.ca_pem())).await;
    assert!(receiver.url("approval").starts_with("https://"));
    assert_eq!(attempts[0]["status"], 200, "{attempts}");
    assert_eq!(attempts[0]["answer"], json!({ "code": "OK" }));
    let received = receiver.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].verified, Ok(()));
    assert_eq!(received[0].body["result"], "APPROVED");
}

#[tokio::test]
async fn callbacks_to_an_https_receiver_with_an_unknown_ca_fail_with_the_reason_logged() {
    let ca = TestCa::new();
    let (receiver, attempts) = decide_over_https(&ca, None).await;
    assert_eq!(attempts[0]["status"], Value::Null, "{attempts}");
    let error = attempts[0]["error"].as_str().unwrap();
    assert!(error.contains("UnknownIssuer"), "{error}");
    assert!(receiver.received().is_empty());
}
