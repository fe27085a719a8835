//! GitLab API calls per merge batch: one batch of 1, 50 and 500 members run
//! by changegate's real merge queue against the simulators (no faults), with
//! the calls it made per GitLab endpoint and in total, and the time from the
//! claim to the last member VALIDATED. Calls should not grow with the
//! members except where GitLab requires it (BENCHMARKS.md says where).
//!
//! ```sh
//! cargo bench --bench gitlab_calls
//! ```

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use changegate::db::Db;
use changegate_sim::gitlab::{Endpoint, GitLabSimOptions};
use serde_json::{Value, json};

#[path = "support/outside.rs"]
mod support;
use support::outside;

const SIZES: [usize; 3] = [1, 50, 500];
const DEADLINE: Duration = Duration::from_secs(300);

/// What one batch cost.
struct Run {
    calls: BTreeMap<String, usize>,
    wall: Duration,
}

/// Bindings of the database in `status`.
async fn count(db: &Db, status: &str) -> usize {
    let count: i64 = changegate::with_pool!(db, reader, |pool| {
        sqlx::query_scalar("SELECT COUNT(*) FROM binding WHERE status = ?")
            .bind(status)
            .fetch_one(pool)
            .await
    })
    .expect("count");
    usize::try_from(count).expect("a count")
}

/// Polls until `members` bindings are in `status`.
async fn wait_for(db: &Db, status: &str, members: usize) {
    let deadline = Instant::now() + DEADLINE;
    while count(db, status).await < members {
        assert!(
            Instant::now() < deadline,
            "{members} never reached {status}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `Endpoint::GetTree` as the control API spells it, `get_tree`.
fn name(endpoint: Endpoint) -> String {
    serde_json::to_value(endpoint)
        .ok()
        .and_then(|value| value.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{endpoint:?}"))
}

async fn run(members: usize) -> Run {
    let world = outside(GitLabSimOptions::default()).await;
    let gitlab = &world.gitlab;
    let dir = tempfile::tempdir().expect("temp dir");
    let database_url = format!("sqlite://{}", dir.path().join("calls.db").display());
    // No scheduled claim: the bench claims the one batch itself, once every
    // member waits for it.
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[database]\nurl = {database_url:?}\n\
         [log]\nlevel = \"warn\"\n[access]\nmode = \"OPEN\"\n[rate_limit]\napply = 0\n\
         [authz.rules]\napply = [\"r\"]\nread = [\"r\"]\noperator = [\"op\"]\n\
         [authz.grants]\n\"r\" = [\"*\"]\n\"op\" = [\"admin\"]\n\
         [targets.\"demo.feature-flags\"]\ndescription = \"bench\"\n\
         [executor]\nworkers = 16\nqueue_capacity = 4096\npoll_interval = \"100ms\"\n\
         [batch]\ninterval = \"1h\"\nmax_requests = 500\n\
         {}",
        world.sections()
    );
    let running = world.start_changegate(&text).await;
    let (address, client) = (&running.address, &running.client);
    let db = &running.db;

    for n in 0..members {
        let answer = client
            .post(format!("{address}/api/v1/applications"))
            .header("x-auth-request-user", format!("user{n}"))
            .json(&json!({ "targetKey": "demo.feature-flags", "reason": "bench" }))
            .send()
            .await
            .expect("apply");
        assert_eq!(answer.status(), 202, "{:?}", answer.text().await);
    }
    wait_for(db, "MR_CREATING", members).await;
    let before = gitlab.requests().len();
    let started = Instant::now();
    let claimed: Value = client
        .post(format!("{address}/admin/v1/batches/run"))
        .header("x-auth-request-user", "admin")
        .json(&json!({}))
        .send()
        .await
        .expect("claim")
        .json()
        .await
        .expect("claim answer");
    assert_eq!(
        claimed["claimed"],
        json!([{ "batchId": 1, "batchNumber": 1, "members": members }]),
        "one batch of every member"
    );
    wait_for(db, "VALIDATED", members).await;
    let wall = started.elapsed();
    assert!(
        gitlab.merge_request(world.project, 2).is_none(),
        "every member merged in the one batch MR"
    );
    let mut calls = BTreeMap::new();
    for request in &gitlab.requests()[before..] {
        *calls.entry(name(request.endpoint)).or_default() += 1;
    }
    running.stop().await;
    Run { calls, wall }
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let runs: Vec<Run> = SIZES
        .iter()
        .map(|members| runtime.block_on(run(*members)))
        .collect();
    let mut endpoints: Vec<&String> = runs.iter().flat_map(|run| run.calls.keys()).collect();
    endpoints.sort();
    endpoints.dedup();
    let header: Vec<String> = SIZES
        .iter()
        .map(|n| format!("{n} member{}", if *n == 1 { "" } else { "s" }))
        .collect();
    println!("| GitLab endpoint | {} |", header.join(" | "));
    println!("|---|{}", "---|".repeat(SIZES.len()));
    for endpoint in endpoints {
        let cells: Vec<String> = runs
            .iter()
            .map(|run| run.calls.get(endpoint).copied().unwrap_or(0).to_string())
            .collect();
        println!("| `{endpoint}` | {} |", cells.join(" | "));
    }
    let totals: Vec<String> = runs
        .iter()
        .map(|run| run.calls.values().sum::<usize>().to_string())
        .collect();
    println!("| **total** | {} |", totals.join(" | "));
    let walls: Vec<String> = runs
        .iter()
        .map(|run| format!("{:.1}", run.wall.as_secs_f64()))
        .collect();
    println!("| claim to all VALIDATED, s | {} |", walls.join(" | "));
}
