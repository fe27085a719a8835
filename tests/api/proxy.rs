//! Outbound proxies: GitLab calls reach an in-test CONNECT proxy with the
//! proxy's credentials, a refused tunnel is reported as a proxy failure, and
//! a loopback target never goes through the proxy.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use changegate::clients::gitlab::{GitLabClient, GitLabError, RetryPolicy};
use changegate::clients::health::{Dependencies, System};
use changegate::clients::http::{Outbound, ProxyRules, SystemClient, Trust, Unreachable};
use changegate_sim::gitlab::{GitLabSim, GitLabSimOptions};
use secrecy::SecretString;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// What a proxy was asked: the request line and its headers, per connection.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<Vec<String>>>>);

impl Seen {
    fn requests(&self) -> Vec<Vec<String>> {
        self.0.lock().unwrap().clone()
    }
}

/// A proxy on loopback that records each request head and refuses it with
/// 403, as a corporate proxy refuses a host it does not allow.
async fn refusing_proxy() -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let seen = Seen::default();
    let record = seen.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let record = record.clone();
            tokio::spawn(async move {
                let mut stream = BufReader::new(stream);
                let mut head = Vec::new();
                loop {
                    let mut line = String::new();
                    if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    let line = line.trim_end().to_owned();
                    if line.is_empty() {
                        break;
                    }
                    head.push(line);
                }
                record.0.lock().unwrap().push(head);
                let _ = stream
                    .get_mut()
                    .write_all(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n")
                    .await;
            });
        }
    });
    (format!("http://{address}"), seen)
}

fn gitlab_through(proxies: ProxyRules, base_url: &str, health: &Dependencies) -> GitLabClient {
    let outbound = Outbound::new(Trust::platform_and_pem(b"").unwrap(), proxies);
    let http = SystemClient::new(&outbound, health, System::GitLab, |b| b).unwrap();
    let retry = RetryPolicy {
        retries: 0,
        ..RetryPolicy::default()
    };
    GitLabClient::new(http, base_url, Duration::from_secs(5), retry)
}

#[tokio::test]
async fn gitlab_calls_tunnel_through_the_https_proxy_and_a_refused_tunnel_is_a_proxy_failure() {
    let (proxy, seen) = refusing_proxy().await;
    let with_credentials = proxy.replace("http://", "http://corp-user:corp%20pass@");
    let rules = ProxyRules::new(None, Some(with_credentials), None, None);
    let health = Dependencies::default();
    let gitlab = gitlab_through(rules, "https://gitlab.corp.example", &health);

    let answer = gitlab
        .merge_request(&SecretString::from("bot-token"), "config/repo", 1)
        .await;

    assert!(
        matches!(answer, Err(GitLabError::Unreachable(Unreachable::Proxy))),
        "{answer:?}"
    );
    let requests = seen.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(
        requests[0][0], "CONNECT gitlab.corp.example:443 HTTP/1.1",
        "the tunnel is asked for GitLab's host, not the API path: {requests:?}"
    );
    // base64("corp-user:corp pass")
    assert!(
        requests[0]
            .iter()
            .any(|h| h
                .eq_ignore_ascii_case("proxy-authorization: Basic Y29ycC11c2VyOmNvcnAgcGFzcw==")),
        "the proxy's credentials are sent to the proxy: {requests:?}"
    );
    let report = health.report();
    let gitlab_health = report.iter().find(|d| d.system == "gitlab").unwrap();
    assert_eq!(gitlab_health.last_call_succeeded, Some(false));
    assert_eq!(gitlab_health.last_error_reason, Some("proxy"));
    assert_eq!(
        gitlab_health.last_error.as_deref(),
        Some("the proxy to GitLab failed")
    );
}

#[tokio::test]
async fn a_loopback_gitlab_is_reached_directly_whatever_the_proxy_settings() {
    let sim = GitLabSim::start(GitLabSimOptions::default()).await.unwrap();
    let project = sim.create_project("config/repo");
    let bot = sim.add_user("change-bot", "bot-token");
    sim.add_member(project, bot, changegate_sim::gitlab::AccessLevel::Developer)
        .unwrap();
    let (proxy, seen) = refusing_proxy().await;
    let rules = ProxyRules::new(Some(proxy.clone()), Some(proxy.clone()), Some(proxy), None);
    let health = Dependencies::default();
    let gitlab = gitlab_through(rules, sim.base_url(), &health);

    let answer = gitlab
        .open_merge_requests_from(&SecretString::from("bot-token"), "config/repo", "main")
        .await;

    assert!(answer.is_ok(), "{answer:?}");
    assert!(seen.requests().is_empty(), "{:?}", seen.requests());
    let report = health.report();
    let gitlab_health = report.iter().find(|d| d.system == "gitlab").unwrap();
    assert_eq!(gitlab_health.last_call_succeeded, Some(true));
}
