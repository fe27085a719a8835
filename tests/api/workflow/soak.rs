//! A fault soak of the merge queue: 200 requests merged in batches against a
//! GitLab that often applies a write but gives no usable answer (its proxy's
//! 502/504, or a dropped connection), throttles every endpoint now and then
//! (with and without `Retry-After`), and whose `main` moves on under open
//! MRs. Whatever GitLab answered, every request must end VALIDATED with one
//! MR per batch, one approval per reviewer per MR, and its file on `main`
//! exactly as rendered.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use changegate_sim::gitlab::{
    Endpoint, Fault, FaultKind, GitLabControl, GitLabSimOptions, MrState, PipelineStatus,
    ProjectId, UserId,
};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::end_to_end::{World, WorldOptions, world_with};
use super::use_semi_linear_history;
use crate::helpers::{TestDb, each_backend};

const REQUESTS: usize = 200;
const REVIEWERS: [&str; 2] = ["rev-alice", "rev-bob"];
/// Every endpoint that changes something on GitLab.
const WRITES: [Endpoint; 9] = [
    Endpoint::CreateBranch,
    Endpoint::DeleteBranch,
    Endpoint::CreateCommit,
    Endpoint::CreateMergeRequest,
    Endpoint::UpdateMergeRequest,
    Endpoint::Merge,
    Endpoint::Rebase,
    Endpoint::Approve,
    Endpoint::Unapprove,
];

/// 10% of all calls throttled, as GitLab's rate limiter answers before the
/// request goes further (3% asking for a one-second wait, 4% for none, 3%
/// bare, without any rate-limit header); then
/// 30% of the writes that got past it applied but unanswered, a third each
/// as 502, 504 and a dropped connection. A fault draws only for the calls
/// those before it spared, hence the rising probabilities.
fn inject_faults(gitlab: &GitLabControl) {
    let throttled = [
        (
            FaultKind::RateLimited {
                retry_after: Duration::from_secs(1),
            },
            0.03,
        ),
        (
            FaultKind::RateLimited {
                retry_after: Duration::ZERO,
            },
            0.04 / 0.97,
        ),
        (FaultKind::RateLimitedBare, 0.03 / 0.93),
    ];
    for (kind, probability) in throttled {
        gitlab.inject(Fault::any(kind).probability(probability).times(u32::MAX));
    }
    let unanswered = [
        (FaultKind::AppliedThenStatus(502), 0.1),
        (FaultKind::AppliedThenStatus(504), 0.1 / 0.9),
        (FaultKind::AppliedThenDrop, 0.1 / 0.8),
    ];
    for endpoint in WRITES {
        for (kind, probability) in &unanswered {
            gitlab.inject(
                Fault::new(endpoint, kind.clone())
                    .probability(*probability)
                    .times(u32::MAX),
            );
        }
    }
}

/// Moves `main` on once under each MR whose pipeline has passed, so that it
/// must be rebased (unless it merges before this sees it), until aborted.
fn move_main_under_ready_mrs(
    gitlab: GitLabControl,
    project: ProjectId,
    pusher: UserId,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut moved = HashSet::new();
        loop {
            let ready = (1..)
                .map_while(|iid| gitlab.merge_request(project, iid))
                .filter(|mr| {
                    mr.state == MrState::Opened
                        && matches!(mr.head_pipeline, Some((_, PipelineStatus::Success)))
                })
                .map(|mr| mr.iid);
            for iid in ready.collect::<Vec<_>>() {
                if moved.insert(iid) {
                    let path = format!("docs/moved-under-{iid}.md");
                    gitlab
                        .push(project, pusher, "main", &[(&path, Some("moved on\n"))])
                        .expect("main can be pushed to");
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
}

/// Environment variable with the seed of the simulator's fault draws, to
/// soak with other strikes than the default's.
const SEED_VAR: &str = "CHANGEGATE_SOAK_SEED";

fn fault_seed() -> u64 {
    std::env::var(SEED_VAR).map_or(2024, |seed| {
        seed.parse()
            .unwrap_or_else(|_| panic!("{SEED_VAR} is not a number: {seed}"))
    })
}

/// Batches of ten (so twenty of them), rounds every 300 ms, quick GitLab
/// timeouts.
fn soak_world(seed: u64) -> WorldOptions {
    WorldOptions {
        gitlab_keys: "timeout = \"5s\"".to_owned(),
        batch_keys: "interval = \"300ms\"\nmax_requests = 10".to_owned(),
        gitlab: GitLabSimOptions {
            fault_seed: seed,
            ..GitLabSimOptions::default()
        },
        ..WorldOptions::default()
    }
}

/// `member{n}` applies for itself on `team.access` (each its own requester:
/// the apply rate limit is per person). `RETRY_LATER` is retried, as its
/// contract says: on MariaDB a submission can lose a lock race with the
/// merge queue's transactions, and nothing is recorded then.
async fn apply_for(w: &World, n: usize) -> String {
    let subject = format!("member{n}");
    let body = json!({ "targetKey": "team.access", "subjectId": subject,
                       "params": { "level": "read" }, "reason": "soak" });
    for _ in 0..5 {
        let answer: Value = w
            .app
            .post_as(&subject, "/api/v1/applications", &body)
            .await
            .json()
            .await
            .unwrap();
        if let Some(id) = answer["operationId"].as_str() {
            return id.to_owned();
        }
        assert_eq!(answer["code"], "RETRY_LATER", "member{n}: {answer}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("member{n} was never accepted");
}

/// Polls until every operation is VALIDATED or asks for the team; their views.
pub(crate) async fn settled(w: &World, ids: &[String], backend: &str) -> Vec<Value> {
    settled_within(w, ids, Duration::from_secs(120))
        .await
        .unwrap_or_else(|open| {
            panic!(
                "{backend}: {} requests not settled, e.g. {}",
                open.len(),
                open[0].1
            )
        })
}

/// Polls until every operation is VALIDATED or asks for the team, for at
/// most `within`: their views, or those still open then, with their index.
pub(crate) async fn settled_within(
    w: &World,
    ids: &[String],
    within: Duration,
) -> Result<Vec<Value>, Vec<(usize, Value)>> {
    let deadline = Instant::now() + within;
    loop {
        let mut views = Vec::with_capacity(ids.len());
        for id in ids {
            let view: Value = w
                .app
                .get_as("admin", &format!("/api/v1/operations/{id}"))
                .await
                .json()
                .await
                .unwrap();
            views.push(view);
        }
        let open: Vec<(usize, Value)> = views
            .iter()
            .enumerate()
            .filter(|(_, v)| v["status"] != "VALIDATED" && v["next"] != "CONTACT_TEAM")
            .map(|(index, v)| (index, v.clone()))
            .collect();
        if open.is_empty() {
            return Ok(views);
        }
        if Instant::now() >= deadline {
            return Err(open);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The file changegate renders for `member{n}`'s binding, spelled out.
fn rendered(n: usize, operation_id: &str) -> String {
    format!(
        "{{\n  \"subject\": \"member{n}\",\n  \"target\": \"team.access\",\n  \"params\": {{\n    \"level\": \"read\"\n  }},\n  \"expiresAt\": null,\n  \"operationId\": \"{operation_id}\",\n  \"requestedBy\": \"member{n}\"\n}}\n"
    )
}

async fn batches(w: &World) -> Vec<Value> {
    let listed: Value = w
        .app
        .get_as("admin", "/admin/v1/batches?limit=200")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(listed["nextCursor"], Value::Null, "one page: {listed}");
    listed["items"].as_array().unwrap().clone()
}

/// How often `reviewer` really approved (or unapproved) MR `iid`: calls that
/// reached the endpoint and succeeded, whatever the client was answered.
fn applied(w: &World, endpoint: Endpoint, iid: u64, reviewer: &str) -> usize {
    let suffix = match endpoint {
        Endpoint::Approve => "approve",
        _ => "unapprove",
    };
    let path = format!("/merge_requests/{iid}/{suffix}");
    w.gitlab
        .requests()
        .iter()
        .filter(|r| {
            r.endpoint == endpoint
                && r.path.ends_with(&path)
                && r.user.as_deref() == Some(reviewer)
                && r.handled.is_some_and(|status| (200..300).contains(&status))
        })
        .count()
}

/// Asserts that every external effect of the requests `ids` (`member{n}`'s
/// for `ids[n]`) happened once: one MR per batch and none besides, each MR
/// merged with one approval per reviewer and never unapproved, and each file on
/// `main` exactly as rendered; returns the batches.
pub(crate) async fn assert_each_effect_once(
    w: &World,
    ids: &[String],
    backend: &str,
) -> Vec<Value> {
    let batches = batches(w).await;
    let mrs: Vec<_> = (1..)
        .map_while(|iid| w.gitlab.merge_request(w.project, iid))
        .collect();
    let mut by_branch: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for mr in &mrs {
        by_branch.entry(&mr.source_branch).or_default().push(mr.iid);
    }
    let branches: Vec<String> = batches
        .iter()
        .map(|batch| format!("changegate/merge-batch-{}", batch["number"]))
        .collect();
    for (batch, branch) in batches.iter().zip(&branches) {
        assert_eq!(batch["status"], "SUCCEEDED", "{backend}: {batch}");
        let iid = batch["mergeRequest"]["iid"].as_u64().unwrap();
        assert_eq!(
            by_branch.get(branch.as_str()),
            Some(&vec![iid]),
            "{backend}: exactly one MR from {branch}: {batch}"
        );
    }
    assert_eq!(
        by_branch.len(),
        batches.len(),
        "{backend}: every MR is a batch's: {by_branch:?}"
    );
    for mr in &mrs {
        assert_eq!(mr.state, MrState::Merged, "{backend}: {mr:?}");
        let mut approvers = mr.approved_by.clone();
        approvers.sort();
        assert_eq!(approvers, REVIEWERS, "{backend}: !{}", mr.iid);
        for reviewer in REVIEWERS {
            assert_eq!(
                (
                    applied(w, Endpoint::Approve, mr.iid, reviewer),
                    applied(w, Endpoint::Unapprove, mr.iid, reviewer)
                ),
                (1, 0),
                "{backend}: {reviewer} approved !{} exactly once",
                mr.iid
            );
        }
    }

    let files = w.gitlab.files(w.project, "main").unwrap();
    let bindings: Vec<&String> = files
        .keys()
        .filter(|path| path.starts_with("bindings/"))
        .collect();
    assert_eq!(bindings.len(), ids.len(), "{backend}: {bindings:?}");
    for (n, id) in ids.iter().enumerate() {
        let path = format!("bindings/team.access/member{n}.json");
        assert_eq!(
            files.get(&path),
            Some(&rendered(n, id)),
            "{backend}: {path}"
        );
    }
    batches
}

/// The soak on each backend at once (most of its time is spent waiting).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_requests_merge_through_unanswered_writes_throttling_and_a_moving_main() {
    let mut soaks = tokio::task::JoinSet::new();
    for test_db in each_backend().await {
        soaks.spawn(soak(test_db));
    }
    while let Some(finished) = soaks.join_next().await {
        if let Err(failed) = finished {
            std::panic::resume_unwind(failed.into_panic());
        }
    }
}

async fn soak(test_db: TestDb) {
    let seed = fault_seed();
    let backend = format!("{} (seed {seed})", test_db.name);
    let started = Instant::now();
    let w = world_with(&test_db.url, soak_world(seed)).await;
    // Semi-linear history, so the moving main asks for rebases.
    use_semi_linear_history(&w);
    inject_faults(&w.gitlab);
    let mover = move_main_under_ready_mrs((*w.gitlab).clone(), w.project, w.users[0]);

    let mut ids = Vec::with_capacity(REQUESTS);
    for n in 0..REQUESTS {
        ids.push(apply_for(&w, n).await);
    }
    let views = settled(&w, &ids, &backend).await;
    mover.abort();

    for view in &views {
        assert_eq!(view["status"], "VALIDATED", "{backend}: {view}");
    }
    let batches = assert_each_effect_once(&w, &ids, &backend).await;

    let faulted = |wanted: fn(&FaultKind) -> bool| {
        w.gitlab
            .requests()
            .iter()
            .filter(|r| r.fault.as_ref().is_some_and(wanted))
            .count()
    };
    let dropped = faulted(|kind| *kind == FaultKind::AppliedThenDrop);
    let proxied = faulted(|kind| matches!(kind, FaultKind::AppliedThenStatus(_)));
    let throttled = faulted(|kind| {
        matches!(
            kind,
            FaultKind::RateLimited { .. } | FaultKind::RateLimitedBare
        )
    });
    let rebases = w.gitlab.calls(Endpoint::Rebase);
    eprintln!(
        "{backend}: {} batches, {dropped} dropped, {proxied} proxy 5xx, {throttled} 429s, {rebases} rebases, in {:?}",
        batches.len(),
        started.elapsed()
    );
    assert!(
        dropped > 0 && proxied > 0 && throttled > 0 && rebases > 0,
        "{backend}: the soak met every fault and a moving main"
    );
}
