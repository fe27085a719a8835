//! The GitLab adapter against the GitLab simulator: the calls of an MR's
//! life, GitLab's error statuses as they are, retries of 429/5xx, and a lost
//! answer reported as "outcome unknown".

use crate::helpers::system_client;
use changegate::clients::health::System;
use std::time::Duration;

use axum::response::IntoResponse;

use changegate::clients::gitlab::{
    FileAction, GitLabClient, GitLabError, RetryPolicy, git_blob_id,
};
use changegate_sim::gitlab::{
    AccessLevel, Endpoint, Fault, FaultKind, GitLabSim, GitLabSimHandle, GitLabSimOptions,
    ProjectId,
};
use secrecy::SecretString;

const PROJECT: &str = "config/repo";

struct Fixture {
    sim: GitLabSimHandle,
    project: ProjectId,
    client: GitLabClient,
    bot: SecretString,
    reviewers: [SecretString; 2],
}

async fn fixture(timeout: Duration) -> Fixture {
    let sim = GitLabSim::start(GitLabSimOptions {
        lost_response_hold: Duration::from_secs(5),
        ..GitLabSimOptions::default()
    })
    .await
    .unwrap();
    let project = sim.create_project(PROJECT);
    for (name, token) in [
        ("change-bot", "bot-token"),
        ("rev-alice", "alice-token"),
        ("rev-bob", "bob-token"),
    ] {
        let user = sim.add_user(name, token);
        sim.add_member(project, user, AccessLevel::Developer)
            .unwrap();
    }
    let retry = RetryPolicy {
        retries: 3,
        backoff: Duration::from_millis(20),
        max_backoff: Duration::from_secs(2),
    };
    let client = GitLabClient::new(
        system_client(System::GitLab),
        sim.base_url(),
        timeout,
        retry,
    );
    let secret = |text: &str| SecretString::from(text.to_owned());
    Fixture {
        sim,
        project,
        client,
        bot: secret("bot-token"),
        reviewers: [secret("alice-token"), secret("bob-token")],
    }
}

fn create(path: &str, content: &str) -> FileAction {
    FileAction {
        action: "create",
        file_path: path.to_owned(),
        content: Some(content.to_owned()),
    }
}

impl Fixture {
    async fn open_mr(&self, branch: &str) -> i64 {
        self.client
            .create_branch(&self.bot, PROJECT, branch, "main")
            .await
            .unwrap();
        let actions = [create(&format!("bindings/{branch}.json"), "{}\n")];
        self.client
            .commit(&self.bot, PROJECT, branch, "add binding", &actions)
            .await
            .unwrap();
        let mr = self
            .client
            .create_merge_request(
                &self.bot,
                PROJECT,
                branch,
                "main",
                "changegate",
                "Changegate-Operation: x",
            )
            .await
            .unwrap();
        mr.iid
    }

    /// Polls until the MR's pipeline passed; returns its head SHA.
    async fn passed(&self, iid: i64) -> String {
        for _ in 0..50 {
            let mr = self
                .client
                .merge_request(&self.bot, PROJECT, iid)
                .await
                .unwrap();
            if mr
                .head_pipeline
                .as_ref()
                .is_some_and(|p| p.status == "success")
            {
                return mr.sha.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the pipeline never passed");
    }
}

#[tokio::test]
async fn an_mr_goes_from_branch_to_merged_and_the_file_lands_on_main() {
    let fx = fixture(Duration::from_secs(5)).await;
    let iid = fx.open_mr("cg-1").await;
    let sha = fx.passed(iid).await;
    for reviewer in &fx.reviewers {
        fx.client.approve(reviewer, PROJECT, iid).await.unwrap();
    }
    let approvals = fx.client.approvals(&fx.bot, PROJECT, iid).await.unwrap();
    assert!(approvals.includes("rev-alice") && approvals.includes("rev-bob"));
    let merged = fx.client.merge(&fx.bot, PROJECT, iid, &sha).await.unwrap();
    assert_eq!(merged.state, "merged");
    assert_eq!(
        fx.sim
            .file(fx.project, "main", "bindings/cg-1.json")
            .as_deref(),
        Some("{}\n")
    );
}

#[tokio::test]
async fn gitlab_refusals_keep_their_real_status() {
    let fx = fixture(Duration::from_secs(5)).await;
    let iid = fx.open_mr("cg-2").await;
    let exists = fx
        .client
        .create_branch(&fx.bot, PROJECT, "cg-2", "main")
        .await
        .unwrap_err();
    assert_eq!(exists.status().map(|s| s.as_u16()), Some(400), "{exists}");

    let sha = fx.passed(iid).await;
    let too_early = fx
        .client
        .merge(&fx.bot, PROJECT, iid, &sha)
        .await
        .unwrap_err();
    assert_eq!(
        too_early.status().map(|s| s.as_u16()),
        Some(405),
        "not approved yet: {too_early}"
    );

    fx.client
        .approve(&fx.reviewers[0], PROJECT, iid)
        .await
        .unwrap();
    let again = fx
        .client
        .approve(&fx.reviewers[0], PROJECT, iid)
        .await
        .unwrap_err();
    assert_eq!(
        again.status().map(|s| s.as_u16()),
        Some(401),
        "GitLab's quirk: a repeated approval is 401"
    );
    assert!(!again.outcome_unknown());
}

#[tokio::test]
async fn rate_limits_are_retried_and_a_5xx_only_for_reads() {
    let fx = fixture(Duration::from_secs(5)).await;
    fx.sim.inject(
        Fault::new(
            Endpoint::CreateBranch,
            FaultKind::RateLimited {
                retry_after: Duration::from_secs(1),
            },
        )
        .times(1),
    );
    let started = std::time::Instant::now();
    fx.client
        .create_branch(&fx.bot, PROJECT, "cg-3", "main")
        .await
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "Retry-After was honoured"
    );
    assert_eq!(fx.sim.calls(Endpoint::CreateBranch), 2);

    // A write answered 5xx may have been applied: not sent again here.
    fx.sim
        .inject(Fault::new(Endpoint::CreateCommit, FaultKind::Status(503)).times(1));
    let actions = [FileAction {
        action: "create",
        file_path: "a.json".to_owned(),
        content: Some("{}\n".to_owned()),
    }];
    let unknown = fx
        .client
        .commit(&fx.bot, PROJECT, "cg-3", "one", &actions)
        .await
        .unwrap_err();
    assert!(unknown.outcome_unknown(), "{unknown:?}");
    assert_eq!(fx.sim.calls(Endpoint::CreateCommit), 1);

    fx.sim
        .inject(Fault::new(Endpoint::GetMergeRequest, FaultKind::Status(500)).times(10));
    let gave_up = fx
        .client
        .merge_request(&fx.bot, PROJECT, 1)
        .await
        .unwrap_err();
    assert_eq!(gave_up.status().map(|s| s.as_u16()), Some(500));
    assert!(gave_up.outcome_unknown());
    assert_eq!(
        fx.sim.calls(Endpoint::GetMergeRequest),
        4,
        "one attempt and three retries"
    );
}

#[tokio::test]
async fn a_directory_is_listed_with_git_blob_ids_at_a_branch() {
    let fx = fixture(Duration::from_secs(5)).await;
    fx.open_mr("cg-5").await;
    let on_branch = fx
        .client
        .blobs_in(&fx.bot, PROJECT, "bindings", "cg-5")
        .await
        .unwrap();
    assert_eq!(
        on_branch.get("bindings/cg-5.json").map(String::as_str),
        Some(git_blob_id("{}\n").as_str()),
        "{on_branch:?}"
    );
    // git hash-object of "{}\n"
    assert_eq!(
        git_blob_id("{}\n"),
        "0967ef424bce6791893e9a57bb952f80fd536e93"
    );
    let on_main = fx
        .client
        .blobs_in(&fx.bot, PROJECT, "bindings", "main")
        .await
        .unwrap();
    assert!(on_main.is_empty(), "no such directory on main: {on_main:?}");
    let no_ref = fx
        .client
        .blobs_in(&fx.bot, PROJECT, "bindings", "no-such-branch")
        .await
        .unwrap();
    assert!(no_ref.is_empty(), "{no_ref:?}");
}

#[tokio::test]
async fn a_lost_answer_is_a_timeout_although_gitlab_applied_it() {
    let fx = fixture(Duration::from_millis(300)).await;
    fx.sim
        .inject(Fault::new(Endpoint::CreateBranch, FaultKind::LostResponse).times(1));
    let lost = fx
        .client
        .create_branch(&fx.bot, PROJECT, "cg-4", "main")
        .await
        .unwrap_err();
    assert!(matches!(lost, GitLabError::Timeout), "{lost}");
    assert!(lost.outcome_unknown());
    assert!(
        fx.sim.branch_head(fx.project, "cg-4").is_some(),
        "the branch exists: re-read before acting again"
    );
}

#[tokio::test]
async fn a_long_retry_after_is_handed_back_at_once_instead_of_slept() {
    let fx = fixture(Duration::from_secs(5)).await;
    fx.sim.inject(
        Fault::new(
            Endpoint::GetMergeRequest,
            FaultKind::RateLimited {
                retry_after: Duration::from_secs(120),
            },
        )
        .times(1),
    );
    let started = std::time::Instant::now();
    let throttled = fx
        .client
        .merge_request(&fx.bot, PROJECT, 1)
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let wait = throttled
        .throttled_for()
        .expect("the pause GitLab asked for");
    assert!(
        wait > Duration::from_secs(110) && wait <= Duration::from_secs(120),
        "{wait:?}"
    );
    assert!(throttled.is_transient(), "the step waits and polls again");
    // Until the pause is over, no call goes out, whichever account asks.
    let again = fx.client.approvals(&fx.bot, PROJECT, 1).await.unwrap_err();
    assert!(again.throttled_for().is_some(), "{again:?}");
    assert!(fx.client.quiet_for().is_some());
    assert_eq!(fx.sim.calls(Endpoint::GetMergeRequest), 1);
    assert_eq!(fx.sim.calls(Endpoint::GetApprovals), 0);
}

#[tokio::test]
async fn without_retry_after_the_rate_limit_reset_is_honoured() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = answered.clone();
    let app = axum::Router::new().fallback(move || {
        let count = count.clone();
        async move {
            if count.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                let reset = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_secs()
                    + 2;
                (
                    axum::http::StatusCode::TOO_MANY_REQUESTS,
                    [("ratelimit-reset", reset.to_string())],
                    "Retry later",
                )
                    .into_response()
            } else {
                axum::Json(serde_json::json!([])).into_response()
            }
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let client = GitLabClient::new(
        system_client(System::GitLab),
        &format!("http://{address}"),
        Duration::from_secs(5),
        RetryPolicy::default(),
    );
    let started = std::time::Instant::now();
    let open = client
        .open_merge_requests_from(&SecretString::from("t".to_owned()), PROJECT, "b")
        .await
        .unwrap();
    assert!(open.is_empty());
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "waited for the reset: {:?}",
        started.elapsed()
    );
    assert_eq!(answered.load(std::sync::atomic::Ordering::SeqCst), 2);
}

#[tokio::test]
async fn the_free_and_premium_approvals_bodies_both_read_with_what_each_tells() {
    let f = fixture(Duration::from_secs(5)).await;
    let iid = f.open_mr("cg-approvals").await;
    let [alice, _] = &f.reviewers;

    let free = f.client.approvals(alice, PROJECT, iid).await.unwrap();
    assert!(!free.user_has_approved && !free.refuses_caller());
    assert_eq!(free.user_can_approve, Some(true));
    assert_eq!(
        free.approvals_left, None,
        "Free counts no required approvals"
    );

    f.sim
        .update_settings(f.project, |s| {
            s.tier = changegate_sim::gitlab::Tier::Ee;
            s.eligible_approvers = Some(Vec::new());
        })
        .unwrap();
    let premium = f.client.approvals(alice, PROJECT, iid).await.unwrap();
    assert_eq!(premium.approvals_left, Some(2));
    assert_eq!(premium.user_can_approve, Some(false));
    assert!(premium.refuses_caller());
    assert_eq!(premium.rules_left(), "Approvers");
}

/// A GitLab whose `HEAD` of a file carries `X-Gitlab-Blob-Id`, as GitLab's
/// does (the simulator's does not): a file whose blob id is cached is not
/// read again; a new blob id is read once; a missing file reads nothing.
#[tokio::test]
async fn a_previewed_file_is_read_once_per_blob_id() {
    use axum::http::{Method, StatusCode, Uri};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let content = Arc::new(Mutex::new(Some("one\n".to_owned())));
    let reads = Arc::new(AtomicUsize::new(0));
    let (served, counted) = (content.clone(), reads.clone());
    let app = axum::Router::new().fallback(move |method: Method, uri: Uri| {
        let (served, counted) = (served.clone(), counted.clone());
        async move {
            let Some(text) = served.lock().unwrap().clone() else {
                return (
                    StatusCode::NOT_FOUND,
                    "{\"message\":\"404 File Not Found\"}",
                )
                    .into_response();
            };
            if uri.path().ends_with("/raw") {
                counted.fetch_add(1, Ordering::SeqCst);
                return text.into_response();
            }
            assert_eq!(method, Method::HEAD, "{uri}");
            assert_eq!(uri.query(), Some("ref=main"));
            (StatusCode::OK, [("x-gitlab-blob-id", git_blob_id(&text))]).into_response()
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let client = GitLabClient::new(
        system_client(System::GitLab),
        &format!("http://{address}"),
        Duration::from_secs(5),
        RetryPolicy::default(),
    );
    let bot = SecretString::from("t".to_owned());
    let read = || client.cached_file(&bot, PROJECT, "bindings/a.json", "main");

    assert_eq!(read().await.unwrap().as_deref(), Some("one\n"));
    assert_eq!(read().await.unwrap().as_deref(), Some("one\n"));
    assert_eq!(
        reads.load(Ordering::SeqCst),
        1,
        "the second came from the cache"
    );
    *content.lock().unwrap() = Some("two\n".to_owned());
    assert_eq!(read().await.unwrap().as_deref(), Some("two\n"));
    assert_eq!(reads.load(Ordering::SeqCst), 2, "a new blob is read");
    *content.lock().unwrap() = None;
    assert_eq!(read().await.unwrap(), None);
    assert_eq!(reads.load(Ordering::SeqCst), 2);
}
