//! The merge train against one batch at a time: 120 requests arriving over
//! 30 s (one every 250 ms), every pipeline taking 10 s, merge commits, with
//! no failing request and with one whose file fails CI. For each run, from
//! the step history, `QUEUED` → `MERGED` p50 and p95 as multiples of the
//! pipeline, the pipelines run (one per MR, plus one per rebase) and the
//! GitLab calls. changegate runs in-process with its real workflow against
//! the three simulators on loopback, on SQLite; the project has run five
//! pipelines of 10 s before (its CI history in GitLab).
//!
//! Then the queue's expected times: the same arrivals at `max_in_flight = 4`
//! with pipelines of 5–15 s (drawn per merge request) and one failing
//! request, after three requests merged one at a time (the history an
//! estimate needs), the project's five past pipelines spread over 5–15 s; each request's `expectedMergeAt` as shown when it became
//! `QUEUED` against when it merged, as a fraction of its wait. Once with
//! one project, and once with every fourth request for another project
//! sharing the train (`config/other`, its pipelines 20 s, three of its
//! requests merged first too). The errors are then split: requests shown
//! their time before the first batch failed that merged after it (what no
//! history foretells), and the others. The failing runs are played twice:
//! once as a project whose CI publishes no test report (the failed batch is
//! halved in queue order), once as one whose JUnit report names each file
//! it checks (the failing file's request is split off at once).
//!
//! ```sh
//! cargo bench --bench merge_train            # both parts
//! cargo bench --bench merge_train -- train   # the train runs only
//! cargo bench --bench merge_train -- eta     # the expected times only
//! ```

use std::time::{Duration, Instant};

use chrono::NaiveDateTime;

use changegate::db::Db;
use changegate_sim::gitlab::{Endpoint, GitLabSimOptions, MergeMethod};
use serde_json::json;

#[path = "support/outside.rs"]
mod support;
use support::outside;

const REQUESTS: usize = 120;
const ARRIVAL: Duration = Duration::from_millis(250);
const PIPELINE: Duration = Duration::from_secs(10);
/// The request whose file fails CI, in the runs that have one.
const POISONED: usize = 40;

struct Measured {
    p50: f64,
    p95: f64,
    pipelines: usize,
    calls: usize,
    merged: usize,
    /// |expected − actual| / wait, of each request shown an expected time.
    estimate_errors: Vec<f64>,
    /// The same, of those shown their time before the first failure that
    /// merged after it (their car failed, was built again, or waited
    /// behind the bisection): what no history foretells.
    caught_by_failure_errors: Vec<f64>,
    /// The same, of the others.
    other_errors: Vec<f64>,
    /// Requests shown no expected time when they became `QUEUED`.
    unestimated: usize,
}

/// Requests merged one at a time before the expected-time run's arrivals:
/// the merged batches an estimate needs.
const HISTORY: usize = changegate::batch::MIN_HISTORY;

/// Pipelines of 5–15 s, drawn per pipeline, for the expected-time run.
const VARIED: (Duration, Duration) = (Duration::from_secs(5), Duration::from_secs(15));

/// The project's CI history in the expected-time run, in seconds: five
/// pipelines spread over [`VARIED`] as its draws are (at the first, third,
/// fifth, seventh and ninth tenths).
const PAST_VARIED: [u64; 5] = [6, 8, 10, 12, 14];

/// The project sharing the train in the shared expected-time run, and how
/// long its pipelines take.
const OTHER: &str = "config/other";
const OTHER_PIPELINE: Duration = Duration::from_secs(20);

/// What a run plays.
#[derive(Clone, Copy)]
struct Scenario {
    depth: u32,
    /// Request [`POISONED`]'s file fails CI.
    failing: bool,
    /// Pipelines drawn from [`VARIED`], after a history of [`HISTORY`]
    /// merged requests (per project).
    varied: bool,
    /// Every fourth request is for [`OTHER`], sharing the train.
    shared: bool,
    /// The project's CI publishes a JUnit report naming each file it
    /// checks, so a failed pipeline's report names the failing file.
    reported: bool,
}

/// Another project sharing the train, with the same members.
fn other_project(world: &support::Outside) {
    let gitlab = &world.gitlab;
    let project = support::project_with_members(gitlab, OTHER);
    gitlab
        .update_settings(project, |s| {
            s.merge_method = MergeMethod::Merge;
            s.pipeline_duration = Some(OTHER_PIPELINE);
        })
        .expect("project settings");
    gitlab
        .record_past_pipelines(project, &[OTHER_PIPELINE; 5])
        .expect("CI history");
}

async fn run(scenario: Scenario, database_url: &str) -> Measured {
    let Scenario {
        depth,
        failing,
        varied,
        shared,
        reported,
    } = scenario;
    let (shortest, longest) = if varied {
        (VARIED.0, Some(VARIED.1))
    } else {
        (PIPELINE, None)
    };
    let world = outside(GitLabSimOptions {
        pipeline_duration: shortest,
        pipeline_duration_max: longest,
        pipeline_seed: 7,
        pipeline_steps_per_poll: 3,
        ..GitLabSimOptions::default()
    })
    .await;
    let (gitlab, project) = (&world.gitlab, world.project);
    gitlab
        .update_settings(project, |s| {
            s.merge_method = MergeMethod::Merge;
            s.failing_content = Some("POISON".to_owned());
            s.junit_reports = reported;
        })
        .expect("project settings");
    // A team's project has run CI before changegate: its last pipelines
    // took the pipeline's time, or were spread as the drawn ones are.
    let past = if varied {
        PAST_VARIED.map(Duration::from_secs).to_vec()
    } else {
        vec![PIPELINE; 5]
    };
    gitlab
        .record_past_pipelines(project, &past)
        .expect("CI history");
    let mut targets = vec!["team.access"];
    let mut other_target = String::new();
    if shared {
        other_project(&world);
        targets.push("team.other");
        other_target = format!(
            "[targets.\"team.other\"]\ndescription = \"bench\"\nparams = [\"level\"]\nproject = {OTHER:?}\n"
        );
    }
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[database]\nurl = {database_url:?}\nmax_connections = 20\n\
         [log]\nlevel = \"error\"\n[access]\nmode = \"OPEN\"\n[rate_limit]\napply = 0\n\
         [authz.rules]\napply = [\"r\"]\nread = [\"r\"]\n[authz.grants]\n\"r\" = [\"*\"]\n\
         [targets.\"team.access\"]\ndescription = \"bench\"\nparams = [\"level\"]\n{other_target}\
         [executor]\nworkers = 16\npoll_interval = \"200ms\"\n\
         [batch]\ninterval = \"1s\"\nmax_in_flight = {depth}\n\
         {}",
        world.sections()
    );
    let running = world.start_changegate(&text).await;
    let (address, client) = (&running.address, &running.client);

    let db = &running.db;
    // The expected times are those of a queue with history: three requests
    // merge one after another first, so the arrivals are estimated from
    // the first (a project's first three batches get none).
    let history = if varied { HISTORY } else { 0 };
    let warm_up = history * targets.len();
    for n in 0..warm_up {
        let target = targets[n / history.max(1)];
        apply(client, address, target, &format!("earlier{n}"), "read").await;
        let deadline = Instant::now() + Duration::from_secs(120);
        while settled(db).await <= n && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let mut arrivals = tokio::time::interval(ARRIVAL);
    let mut watchers: tokio::task::JoinSet<(String, Option<NaiveDateTime>)> =
        tokio::task::JoinSet::new();
    for n in 0..REQUESTS {
        arrivals.tick().await;
        let level = if failing && n == POISONED {
            "POISON"
        } else {
            "read"
        };
        let target = targets[usize::from(n % 4 == 3) % targets.len()];
        let id = apply(client, address, target, &format!("user{n}"), level).await;
        watchers.spawn(first_estimate(client.clone(), address.clone(), n, id));
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    while settled(db).await < warm_up + REQUESTS && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let shown = watchers.join_all().await;
    let runs = queued_and_merged(db).await;
    let mut waits: Vec<f64> = runs
        .values()
        .map(|(queued, merged)| seconds(*queued, *merged))
        .collect();
    waits.sort_by(f64::total_cmp);
    let first_failure = first_failure(db).await;
    let mut estimate_errors = Vec::new();
    let mut caught_by_failure_errors = Vec::new();
    let mut other_errors = Vec::new();
    let mut unestimated = 0;
    for (id, expected) in shown {
        let Some((queued, merged)) = runs.get(id.as_str()) else {
            continue;
        };
        match expected {
            Some(expected) => {
                let wait = seconds(*queued, *merged).max(1.0);
                let error = seconds(*merged, expected).abs() / wait;
                estimate_errors.push(error);
                let failed_meanwhile =
                    first_failure.is_some_and(|failed| *queued < failed && failed < *merged);
                if failed_meanwhile {
                    caught_by_failure_errors.push(error);
                } else {
                    other_errors.push(error);
                }
            }
            None => unestimated += 1,
        }
    }
    estimate_errors.sort_by(f64::total_cmp);
    caught_by_failure_errors.sort_by(f64::total_cmp);
    other_errors.sort_by(f64::total_cmp);
    let mrs = (1..)
        .map_while(|iid| gitlab.merge_request(project, iid))
        .count();
    let measured = Measured {
        p50: percentile(&waits, 0.50) / PIPELINE.as_secs_f64(),
        p95: percentile(&waits, 0.95) / PIPELINE.as_secs_f64(),
        pipelines: mrs + gitlab.calls(Endpoint::Rebase),
        calls: gitlab.requests().len(),
        merged: waits.len(),
        estimate_errors,
        caught_by_failure_errors,
        other_errors,
        unestimated,
    };
    running.stop().await;
    measured
}

/// `user` applies for themself to `target` at `level`: the operation's id.
async fn apply(
    client: &reqwest::Client,
    address: &str,
    target: &str,
    user: &str,
    level: &str,
) -> String {
    let answer = client
        .post(format!("{address}/api/v1/applications"))
        .header("x-auth-request-user", user)
        .json(&json!({ "targetKey": target, "subjectId": user,
                       "params": { "level": level }, "reason": "bench" }))
        .send()
        .await
        .expect("apply");
    assert_eq!(answer.status(), 202);
    let answer: serde_json::Value = answer.json().await.expect("answer");
    answer["operationId"].as_str().expect("id").to_owned()
}

/// Requests that merged or failed: nothing more happens to them in the
/// merge queue (a bisection fails a request beside one whose file fails CI
/// only once both halves of a failed batch failed and
/// `batch.max_split_depth` is reached).
async fn settled(db: &Db) -> usize {
    let count: i64 = changegate::with_pool!(db, reader, |pool| {
        sqlx::query_scalar(
            "SELECT COUNT(*) FROM binding WHERE status IN \
             ('MERGED', 'VALIDATED', 'CREATE_FAILED', 'HANDLE_FAILED')",
        )
        .fetch_one(pool)
        .await
    })
    .expect("count");
    usize::try_from(count).unwrap_or_default()
}

/// When a batch first failed (split for bisection, or failed), from the
/// batches' membership log.
async fn first_failure(db: &Db) -> Option<NaiveDateTime> {
    changegate::with_pool!(db, reader, |pool| {
        sqlx::query_scalar(
            "SELECT MIN(created_at) FROM merge_batch_history WHERE event IN ('SPLIT', 'FAILED')",
        )
        .fetch_one(pool)
        .await
    })
    .expect("membership log")
}

/// Each merged request's first `QUEUED` (10007) and its `HANDLE_MERGED`
/// (10104), from the step history (database time, UTC).
async fn queued_and_merged(
    db: &Db,
) -> std::collections::HashMap<String, (NaiveDateTime, NaiveDateTime)> {
    let rows: Vec<(String, i64, NaiveDateTime)> = changegate::with_pool!(db, reader, |pool| {
        sqlx::query_as(
            "SELECT operation_id, to_step, created_at FROM operation_history \
             WHERE to_step IN (10007, 10104) ORDER BY id",
        )
        .fetch_all(pool)
        .await
    })
    .expect("history");
    let mut queued = std::collections::HashMap::new();
    let mut runs = std::collections::HashMap::new();
    for (operation, step, at) in rows {
        if step == 10007 {
            queued.entry(operation).or_insert(at);
        } else if let Some(since) = queued.get(&operation) {
            runs.insert(operation, (*since, at));
        }
    }
    runs
}

fn seconds(from: NaiveDateTime, to: NaiveDateTime) -> f64 {
    (to - from).as_seconds_f64()
}

/// The `expectedMergeAt` operation `id` shows its requester when it is
/// first seen waiting on the merge queue (`None`: no estimate then).
async fn first_estimate(
    client: reqwest::Client,
    address: String,
    requester: usize,
    id: String,
) -> (String, Option<NaiveDateTime>) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        let view: serde_json::Value = match client
            .get(format!("{address}/api/v1/operations/{id}"))
            .header("x-auth-request-user", format!("user{requester}"))
            .send()
            .await
        {
            Ok(answer) => answer.json().await.unwrap_or_default(),
            Err(_) => serde_json::Value::Null,
        };
        if let Some(queue) = view.get("queue") {
            let expected = queue["expectedMergeAt"]
                .as_str()
                .and_then(|at| chrono::DateTime::parse_from_rfc3339(at).ok())
                .map(|at| at.naive_utc());
            return (id, expected);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (id, None)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        // `-- train` or `-- eta` runs one part only.
        let only: Option<String> = std::env::args()
            .skip(1)
            .find(|a| a == "train" || a == "eta");
        if only.as_deref() != Some("eta") {
            train_runs().await;
        }
        if only.as_deref() != Some("train") {
            estimate_run().await;
        }
    });
}

async fn train_runs() {
    println!(
        "| run | max_in_flight | QUEUED→MERGED p50 (pipelines) | p95 (pipelines) | merged | pipelines run | GitLab calls |"
    );
    println!("|---|---|---|---|---|---|---|");
    let runs = [
        ("no failing request", false, false),
        ("one failing request", true, false),
        ("one failing request, named by a test report", true, true),
    ];
    for (name, failing, reported) in runs {
        for depth in [1, 4] {
            let dir = tempfile::tempdir().expect("temp dir");
            let url = format!("sqlite://{}", dir.path().join("train.db").display());
            let scenario = Scenario {
                depth,
                failing,
                varied: false,
                shared: false,
                reported,
            };
            let m = run(scenario, &url).await;
            println!(
                "| {name} | {depth} | {:.2} | {:.2} | {} | {} | {} |",
                m.p50, m.p95, m.merged, m.pipelines, m.calls
            );
        }
    }
}

async fn estimate_run() {
    println!();
    println!(
        "| expected times (max_in_flight 4, pipelines 5–15 s, one failing request): |expectedMergeAt − merged| / wait | median error | p90 error | requests with an estimate | without |"
    );
    println!("|---|---|---|---|---|");
    let mut split = Vec::new();
    let runs = [
        ("one project", false, false),
        (
            "a quarter of the requests for another project (pipelines 20 s)",
            true,
            false,
        ),
        (
            "one project, the failing file named by a test report",
            false,
            true,
        ),
        (
            "shared, the failing file named by a test report",
            true,
            true,
        ),
    ];
    for (name, shared, reported) in runs {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}", dir.path().join("eta.db").display());
        let scenario = Scenario {
            depth: 4,
            failing: true,
            varied: true,
            shared,
            reported,
        };
        let m = run(scenario, &url).await;
        println!(
            "| {name} | {:.0}% | {:.0}% | {} | {} |",
            100.0 * percentile(&m.estimate_errors, 0.50),
            100.0 * percentile(&m.estimate_errors, 0.90),
            m.estimate_errors.len(),
            m.unestimated
        );
        split.push((name, m));
    }
    println!();
    println!(
        "| the same runs | requests waiting when the first batch failed | of them over 50% | over 50% among the others | the others' median | p90 |"
    );
    println!("|---|---|---|---|---|---|");
    for (name, m) in &split {
        let over_half = |errors: &[f64]| errors.iter().filter(|e| **e > 0.5).count();
        let others = &m.other_errors;
        println!(
            "| {name} | {} | {} | {} | {:.0}% | {:.0}% |",
            m.caught_by_failure_errors.len(),
            over_half(&m.caught_by_failure_errors),
            over_half(others),
            100.0 * percentile(others, 0.50),
            100.0 * percentile(others, 0.90),
        );
    }
}
