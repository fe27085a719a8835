//! Database contention never reaches a caller: first applies of distinct
//! users, interleaved with operator approvals and rejections and merge-queue
//! rounds, on one and on three instances over one MariaDB (and on SQLite),
//! answer no 5xx and no RETRY_LATER, and log no WARN or ERROR line.

use std::collections::BTreeMap;
use std::time::Duration;

use changegate_sim::gitlab::{GitLabSimHandle, GitLabSimOptions};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Logs, TestApp, TestDb, mysql_db, sqlite_db};
use crate::requests::requester_app_with;
use crate::webhooks::SEALING_KEY;
use crate::workflow::end_to_end::gitlab_with_bot_and_reviewers;

const APPLIES: usize = 240;

/// Requesters applying at once in the healthy burst: many, as a busy team's
/// are, not every request of the test in the same instant.
const HEALTHY_CALLERS: usize = 32;

/// Fast merge rounds, no rate limit: as much interleaving as can be had.
const BUSY: &str = "[rate_limit]\napply = 0\n[batch]\ninterval = \"100ms\"\n";

/// The default wait for a database connection, as deployed, instead of the
/// tests' 2 s (which fails an outage test fast): on SQLite every write waits
/// its turn for the one writer, and a burst of 480 writes on a loaded
/// machine queues longer than 2 s without any contention to retry.
const DEPLOYED_CONNECT_TIMEOUT: &str = "connect_timeout = \"5s\"\n";

/// What came back, by status and code, for the assertion message.
type Answers = BTreeMap<(u16, String), usize>;

async fn code_of(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    let body = response.json().await.unwrap_or(Value::Null);
    (status, body)
}

/// Applies as `user` with a key of its own, then decides on it as the
/// operator (approve or reject by turn) on another instance.
async fn apply_then_decide(apps: &[TestApp], n: usize) -> Vec<(StatusCode, Value)> {
    let user = format!("user-{n}");
    let applying = &apps[n % apps.len()];
    let applied = applying
        .client
        .post(format!("{}/api/v1/applications", applying.address))
        .header("x-auth-request-user", &user)
        .header("idempotency-key", format!("key-{n}"))
        .json(&json!({ "targetKey": "demo.feature-flags", "reason": "contention" }))
        .send()
        .await
        .expect("the app answers");
    let (status, body) = code_of(applied).await;
    let mut answers = vec![(status, body.clone())];
    let Some(id) = body["operationId"].as_str() else {
        return answers;
    };
    let decision = if n.is_multiple_of(3) {
        "reject"
    } else {
        "approve"
    };
    let deciding = &apps[(n + 1) % apps.len()];
    let decided = deciding
        .post_as(
            "admin",
            &format!("/admin/v1/approvals/{id}/{decision}"),
            &json!({ "reason": "contention" }),
        )
        .await;
    answers.push(code_of(decided).await);
    answers
}

/// Merge-queue rounds asked for by an operator, on every instance in turn,
/// until `applies` are done.
async fn batch_rounds(apps: &[TestApp], done: tokio_util::sync::CancellationToken) -> Answers {
    let mut answers = Answers::new();
    let mut turn = 0;
    while !done.is_cancelled() {
        let app = &apps[turn % apps.len()];
        let (status, body) = code_of(
            app.post_as("admin", "/admin/v1/batches/run", &json!({}))
                .await,
        )
        .await;
        let code = body["code"].as_str().unwrap_or_default().to_owned();
        *answers.entry((status.as_u16(), code)).or_default() += 1;
        turn += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    answers
}

async fn contend(test_db: &TestDb, instances: usize) {
    contend_on(&vec![test_db.url.clone(); instances], test_db.name).await;
}

/// [`contend`] with one instance on each of `urls` (nodes of one database):
/// each request is applied for on one instance and decided on the next.
pub async fn contend_on(urls: &[String], backend: &str) {
    contend_with(urls, backend, "", APPLIES).await;
}

/// [`contend_on`] with `extra` configuration sections, and at most
/// `callers` requesters applying at once.
async fn contend_with(urls: &[String], backend: &str, extra: &str, callers: usize) {
    let instances = urls.len();
    let mut apps = Vec::new();
    for url in urls {
        let config = format!("{BUSY}{extra}");
        apps.push(requester_app_with(url, DEPLOYED_CONNECT_TIMEOUT, &config).await);
    }
    let apps = std::sync::Arc::new(apps);
    let done = tokio_util::sync::CancellationToken::new();
    let rounds = tokio::spawn({
        let (apps, done) = (apps.clone(), done.clone());
        async move { batch_rounds(&apps, done).await }
    });
    let callers = std::sync::Arc::new(tokio::sync::Semaphore::new(callers));
    let tasks: Vec<_> = (0..APPLIES)
        .map(|n| {
            let (apps, callers) = (apps.clone(), callers.clone());
            tokio::spawn(async move {
                let _turn = callers.acquire().await.expect("never closed");
                apply_then_decide(&apps, n).await
            })
        })
        .collect();
    let mut answers = Answers::new();
    let mut accepted = 0;
    for task in tasks {
        let outcome = task.await.unwrap();
        if outcome[0].0 == StatusCode::ACCEPTED && outcome[0].1["code"] == "ACCEPTED" {
            accepted += 1;
        }
        for (status, body) in outcome {
            let code = body["code"].as_str().unwrap_or_default().to_owned();
            *answers.entry((status.as_u16(), code)).or_default() += 1;
        }
    }
    done.cancel();
    let rounds = rounds.await.unwrap();
    let context = format!("{backend} with {instances} instance(s): {answers:?}, rounds {rounds:?}");
    for ((status, code), _) in answers.iter().chain(&rounds) {
        assert!(*status < 500, "no 5xx: {context}");
        assert_ne!(code, "RETRY_LATER", "no RETRY_LATER: {context}");
    }
    assert_eq!(
        accepted, APPLIES,
        "every first apply is accepted: {context}"
    );
    let decided = answers.get(&(200, "OK".to_owned())).copied();
    assert_eq!(decided, Some(APPLIES), "every decision lands: {context}");
    for app in std::sync::Arc::into_inner(apps).expect("all tasks ended") {
        app.stop().await.expect("graceful stop");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn first_applies_and_decisions_on_one_instance_never_see_contention() {
    contend(&sqlite_db().await, 1).await;
    if let Some(test_db) = mysql_db().await {
        contend(&test_db, 1).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn first_applies_and_decisions_on_three_instances_never_see_contention() {
    if let Some(test_db) = mysql_db().await {
        contend(&test_db, 3).await;
    }
}

/// The same burst from [`HEALTHY_CALLERS`] requesters at a time, with
/// every system it calls healthy (GitLab answering, the webhook key given),
/// writes not one WARN or ERROR line: the races it
/// runs into (steps preempted by another worker, claims lost, retried
/// deadlocks, lock waits) are expected and counted, and an operator paging
/// on those levels must not be woken by them. On a runtime of its own whose
/// every thread logs to the capture, so the capture sees every instance's
/// tasks and nothing of the tests running beside it.
#[test]
fn a_healthy_burst_of_concurrent_applies_logs_no_warning_or_error() {
    let (logs, dispatch) = Logs::dispatch_at(tracing::Level::WARN);
    let _capture = tracing::dispatcher::set_default(&dispatch);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .on_thread_start(move || {
            // For the thread's whole life, which ends with the runtime's.
            std::mem::forget(tracing::dispatcher::set_default(&dispatch));
        })
        .build()
        .unwrap();
    runtime.block_on(async {
        let healthy = |gitlab: &GitLabSimHandle| {
            format!(
                "[gitlab]\nbase_url = {:?}\nproject = \"config/repo\"\nbot_token = \"bot-token\"\n\
                 reviewer_tokens = [\"alice-token\", \"bob-token\"]\n[webhooks]\n{SEALING_KEY}",
                gitlab.base_url()
            )
        };
        let (gitlab, ..) = gitlab_with_bot_and_reviewers(GitLabSimOptions::default()).await;
        let sqlite = sqlite_db().await;
        contend_with(
            std::slice::from_ref(&sqlite.url),
            sqlite.name,
            &healthy(&gitlab),
            HEALTHY_CALLERS,
        )
        .await;
        if let Some(test_db) = mysql_db().await {
            let (gitlab, ..) = gitlab_with_bot_and_reviewers(GitLabSimOptions::default()).await;
            let urls = vec![test_db.url.clone(); 3];
            contend_with(&urls, test_db.name, &healthy(&gitlab), HEALTHY_CALLERS).await;
        }
    });
    drop(runtime);
    let lines = logs.lines();
    assert!(
        lines.is_empty(),
        "{} WARN/ERROR lines:\n{}",
        lines.len(),
        lines.join("\n")
    );
}
