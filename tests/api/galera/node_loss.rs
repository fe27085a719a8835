//! One node of the cluster killed with SIGKILL for 20 s in the middle of
//! 300 requests, then started again (it rejoins and is Synced). Four
//! instances: one on each node, and a fourth on the killed node that names
//! the other two as `database.failover_hosts`. Every request ends
//! VALIDATED with every external effect once; the instances on the
//! surviving nodes never answer 5xx; the one on the killed node answers
//! only 503 `DATABASE_UNAVAILABLE` with `Retry-After` while its node is
//! down; the one that fails over answers 2xx through the loss after a few
//! seconds at most of 503.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use changegate_sim::callback::DeliverySettings;
use changegate_sim::gitlab::Endpoint;
use reqwest::header::RETRY_AFTER;
use serde_json::{Value, json};

use super::GaleraDb;
use crate::helpers::{TestApp, spawn_app};
use crate::workflow::end_to_end::{WorldOptions, world_with};
use crate::workflow::soak::{assert_each_effect_once, settled_within};

/// `$CHANGEGATE_TEST_GALERA_CTL kill|start N` (1-based) kills node N or
/// starts it again, returning once it is Synced (see .ci/galera-node.sh).
const CTL_VAR: &str = "CHANGEGATE_TEST_GALERA_CTL";

const REQUESTS: usize = 300;
/// A new request this often: the run begins before the kill and goes on
/// after the node is back.
const PACE: Duration = Duration::from_millis(130);
const KILL_AFTER: Duration = Duration::from_secs(8);
const DOWN_FOR: Duration = Duration::from_secs(20);
/// The node killed (0-based): not node 1, where the database is created.
const KILLED: usize = 2;
/// The instances, by index: one per node, then the one that fails over.
const SURVIVORS: [usize; 2] = [0, 1];
const ON_THE_KILLED_NODE: usize = 2;
const FAILING_OVER: usize = 3;
/// How long the failing-over instance may answer 503 after the kill: its
/// check runs every 2 s, and the cluster takes a few seconds to drop the
/// dead node from its view.
const FAILOVER_WITHIN: Duration = Duration::from_secs(10);

/// One answer to a submission.
struct Answer {
    /// Which request (`member{n}`).
    n: usize,
    instance: usize,
    at: Instant,
    status: u16,
    code: String,
    retry_after: bool,
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "instance {}: {} {}{}",
            self.instance,
            self.status,
            self.code,
            if self.retry_after {
                " (Retry-After)"
            } else {
                ""
            }
        )
    }
}

type Answers = Arc<Mutex<Vec<Answer>>>;

async fn node_ctl(action: &'static str, node: usize) {
    let ctl = std::env::var(CTL_VAR)
        .unwrap_or_else(|_| panic!("{CTL_VAR} is not set: run .ci/galera.sh"));
    let number = (node + 1).to_string();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(ctl)
            .args([action, &number])
            .output()
    })
    .await
    .unwrap()
    .unwrap();
    assert!(
        output.status.success(),
        "{action} node {}: {}",
        node + 1,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `member{n}` applies for itself on `team.access` with an operation id of
/// its own, sent again when told to retry (after `Retry-After` for a 503),
/// as SPEC §2.1 allows; every answer goes into `answers`.
async fn submit(
    client: reqwest::Client,
    address: String,
    instance: usize,
    n: usize,
    answers: Answers,
) -> String {
    let operation_id = uuid::Uuid::new_v4().to_string();
    let subject = format!("member{n}");
    let body = json!({ "operationId": operation_id, "targetKey": "team.access",
                       "subjectId": subject, "params": { "level": "read" },
                       "reason": "node loss" });
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let response = client
            .post(format!("{address}/api/v1/applications"))
            .header("x-auth-request-user", &subject)
            .json(&body)
            .send()
            .await
            .expect("the instance answers");
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
        let answer: Value = response.json().await.unwrap_or(Value::Null);
        let code = answer["code"].as_str().unwrap_or_default().to_owned();
        answers.lock().unwrap().push(Answer {
            n,
            instance,
            at: Instant::now(),
            status,
            code: code.clone(),
            retry_after: retry_after.is_some(),
        });
        let pause = match (status, code.as_str()) {
            (202, "ACCEPTED" | "DUPLICATE_SUBMIT") => return operation_id,
            (409, "RETRY_LATER") => Duration::from_millis(100),
            (503, _) => Duration::from_secs(retry_after.unwrap_or(1)),
            _ => panic!("{subject} on instance {instance}: {status} {answer}"),
        };
        assert!(
            Instant::now() < deadline,
            "{subject} on instance {instance}: still not accepted"
        );
        tokio::time::sleep(pause).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_killed_for_20_s_mid_run_loses_no_request_and_repeats_no_effect() {
    let Some(cluster) = GaleraDb::create_alone().await else {
        return;
    };
    let started = Instant::now();
    let w = world_with(
        &cluster.url(0),
        WorldOptions {
            // As the manual advises on Galera (docs/src/how-to/mysql.md,
            // High availability): longer than the cluster's
            // pause while it drops a dead node (evs.suspect_timeout, 5 s),
            // so requests on the surviving nodes wait it out.
            database_keys: "connect_timeout = \"10s\"".to_owned(),
            gitlab_keys: "timeout = \"5s\"".to_owned(),
            batch_keys: "interval = \"300ms\"\nmax_requests = 10".to_owned(),
            // The callbacks go to the instance on node 1, which the
            // cluster's pause while it drops the dead node holds up too.
            delivery: DeliverySettings {
                timeout: Duration::from_secs(10),
                retries: 20,
                retry_backoff: Duration::from_millis(200),
            },
            ..WorldOptions::default()
        },
    )
    .await;
    let mut others = Vec::new();
    for node in 1..cluster.nodes() {
        others.push(spawn_app(&cluster.url(node), &w.config).await);
    }
    let failover_hosts = format!(
        "failover_hosts = [{:?}, {:?}]\n",
        cluster.address(0),
        cluster.address(1)
    );
    others.push(spawn_app(&cluster.url(KILLED), &(failover_hosts + &w.config)).await);
    for app in &others {
        app.wait_until_ready().await;
    }
    let addresses: Vec<String> = std::iter::once(&w.app)
        .chain(&others)
        .map(|app| app.address.clone())
        .collect();

    let client = crate::helpers::plain_client()
        .timeout(Duration::from_secs(40))
        .build()
        .unwrap();
    let answers = Answers::default();
    let submitting = tokio::spawn({
        let answers = answers.clone();
        async move {
            let mut submissions = Vec::with_capacity(REQUESTS);
            for n in 0..REQUESTS {
                let instance = n % addresses.len();
                submissions.push(tokio::spawn(submit(
                    client.clone(),
                    addresses[instance].clone(),
                    instance,
                    n,
                    answers.clone(),
                )));
                tokio::time::sleep(PACE).await;
            }
            submissions
        }
    });
    tokio::time::sleep(KILL_AFTER).await;
    let down_from = Instant::now();
    node_ctl("kill", KILLED).await;
    tokio::time::sleep(DOWN_FOR).await;
    node_ctl("start", KILLED).await;
    let back_at = Instant::now();
    let mut ids = Vec::with_capacity(REQUESTS);
    for submission in submitting.await.unwrap() {
        ids.push(submission.await.unwrap());
    }

    let views = match settled_within(&w, &ids, Duration::from_secs(120)).await {
        Ok(views) => views,
        Err(open) => {
            let answers = std::mem::take(&mut *answers.lock().unwrap());
            let report =
                unsettled(&cluster, &others, &ids, &open, &answers, down_from, back_at).await;
            panic!("{} requests not settled:\n{report}", open.len());
        }
    };
    for view in &views {
        assert_eq!(view["status"], "VALIDATED", "{view}");
    }
    let batches = assert_each_effect_once(&w, &ids, "galera").await.len();
    let commits = w
        .gitlab
        .requests()
        .iter()
        .filter(|r| {
            r.endpoint == Endpoint::CreateCommit
                && r.handled.is_some_and(|status| (200..300).contains(&status))
        })
        .count();
    assert_eq!(commits, batches, "one commit per batch");

    let answers = answers.lock().unwrap();
    let of = |instance: usize| answers.iter().filter(move |a| a.instance == instance);
    let unavailable = |a: &Answer| a.status == 503 && a.code == "DATABASE_UNAVAILABLE";
    for instance in SURVIVORS {
        let failed: Vec<_> = of(instance)
            .filter(|a| a.status >= 500)
            .map(|a| timed(a, down_from, back_at))
            .collect();
        assert!(
            failed.is_empty(),
            "a surviving instance answered {failed:#?}"
        );
    }
    for instance in [ON_THE_KILLED_NODE, FAILING_OVER] {
        let wrong: Vec<_> = of(instance)
            .filter(|a| a.status >= 500 && !(unavailable(a) && a.retry_after))
            .map(|a| timed(a, down_from, back_at))
            .collect();
        assert!(
            wrong.is_empty(),
            "5xx other than 503 with Retry-After: {wrong:#?}"
        );
    }
    let while_down = |a: &&Answer| a.at > down_from && a.at < back_at;
    assert!(
        of(ON_THE_KILLED_NODE).filter(while_down).any(unavailable),
        "the instance on the killed node noticed: {:?}",
        of(ON_THE_KILLED_NODE).collect::<Vec<_>>()
    );
    let late: Vec<_> = of(ON_THE_KILLED_NODE)
        .filter(|a| unavailable(a) && a.at > back_at + Duration::from_secs(5))
        .map(|a| timed(a, down_from, back_at))
        .collect();
    assert!(late.is_empty(), "503 once the node was back: {late:#?}");
    let failed_over_at = down_from + FAILOVER_WITHIN;
    let slow: Vec<_> = of(FAILING_OVER)
        .filter(|a| unavailable(a) && a.at > failed_over_at)
        .map(|a| timed(a, down_from, back_at))
        .collect();
    assert!(slow.is_empty(), "503 after failing over: {slow:#?}");
    assert!(
        of(FAILING_OVER)
            .filter(|a| a.at > failed_over_at && a.at < back_at)
            .any(|a| a.status == 202),
        "the failing-over instance accepted requests while the node was down"
    );
    let tally = |instance: usize| {
        let all: Vec<_> = of(instance).collect();
        let refused = all.iter().filter(|a| unavailable(a)).count();
        format!("{} answers, {refused} unavailable", all.len())
    };
    eprintln!(
        "galera node loss: {batches} batches; node down for {:?}; instance on the killed node {}, failing over {}; in {:?}",
        back_at - down_from,
        tally(ON_THE_KILLED_NODE),
        tally(FAILING_OVER),
        started.elapsed()
    );
}

/// `answer` with when it came against the kill and the return.
fn timed(answer: &Answer, down_from: Instant, back_at: Instant) -> String {
    let since = |mark: Instant| {
        if answer.at >= mark {
            format!("+{:.2?}", answer.at - mark)
        } else {
            format!("-{:.2?}", mark - answer.at)
        }
    };
    format!(
        "{answer:?} for member{}, kill {}, back {}",
        answer.n,
        since(down_from),
        since(back_at)
    )
}

/// What an intermittent failure needs to be understood: for each request
/// not settled, its view (through the instance on node 1), what the other
/// instances answer for it, who answered its submissions and when (against
/// the kill and the return), and what each node holds of its batch.
async fn unsettled(
    cluster: &GaleraDb,
    others: &[TestApp],
    ids: &[String],
    open: &[(usize, Value)],
    answers: &[Answer],
    down_from: Instant,
    back_at: Instant,
) -> String {
    let mut report = String::new();
    for (n, view) in open {
        report.push_str(&format!("member{n}: {view}\n"));
        for (index, app) in others.iter().enumerate() {
            let path = format!("/api/v1/operations/{}", ids[*n]);
            let seen = app
                .get_as("admin", &path)
                .await
                .text()
                .await
                .unwrap_or_default();
            report.push_str(&format!("  instance {}: {seen}\n", index + 1));
        }
        for answer in answers.iter().filter(|a| a.n == *n) {
            report.push_str(&format!("  {}\n", timed(answer, down_from, back_at)));
        }
    }
    let mut batches: Vec<i64> = open
        .iter()
        .filter_map(|(_, view)| view["batchId"].as_i64())
        .collect();
    batches.sort_unstable();
    batches.dedup();
    for node in 0..cluster.nodes() {
        let rows = batch_rows(&cluster.url(node), &batches).await;
        report.push_str(&format!(
            "node {} holds of batches {batches:?}: {rows}\n",
            node + 1
        ));
    }
    report
}

/// Batches `ids` as the node at `url` holds them (id, number, status, phase).
async fn batch_rows(url: &str, ids: &[i64]) -> String {
    if ids.is_empty() {
        return "none asked".to_owned();
    }
    let mut conn = match <sqlx::MySqlConnection as sqlx::Connection>::connect(url).await {
        Ok(conn) => conn,
        Err(err) => return format!("unreachable: {err}"),
    };
    let list = ids
        .iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let sql = format!("SELECT id, number, status, phase FROM merge_batch WHERE id IN ({list})");
    match sqlx::query_as::<_, (i64, Option<i64>, String, String)>(sqlx::AssertSqlSafe(sql))
        .fetch_all(&mut conn)
        .await
    {
        Ok(rows) => format!("{rows:?}"),
        Err(err) => format!("unreadable: {err}"),
    }
}
