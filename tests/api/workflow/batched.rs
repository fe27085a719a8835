//! The merge queue end to end, with the simulators: approved requests merged
//! together in one MR, and a batch with one poisoned request bisected until
//! the others are merged and only that one fails.

use std::time::{Duration, Instant};

use changegate_sim::approval::{Decision, DecisionPolicy};
use changegate_sim::gitlab::{Endpoint, MrState};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use serde_json::{Value, json};
use uuid::Uuid;

use super::end_to_end::{World, WorldOptions, world_with};
use crate::helpers::{sqlite_db, train_depth};

/// Approvals held until decided, and no scheduled rounds: the test runs them.
pub(super) fn manual_rounds() -> WorldOptions {
    WorldOptions {
        policy: DecisionPolicy::Manual,
        batch_keys: "interval = \"1h\"".to_owned(),
        ..WorldOptions::default()
    }
}

/// `subject` applies for itself on `team.access` with `level` (each its
/// own requester: the apply rate limit is per person).
pub(super) async fn apply_for(w: &World, subject: &str, level: &str) -> String {
    let answer: Value = w
        .app
        .post_as(
            subject,
            "/api/v1/applications",
            &json!({ "targetKey": "team.access", "subjectId": subject,
                     "params": { "level": level }, "reason": "batched" }),
        )
        .await
        .json()
        .await
        .unwrap();
    answer["operationId"].as_str().unwrap().to_owned()
}

pub(super) async fn view(w: &World, id: &str) -> Value {
    w.app
        .get_as("admin", &format!("/api/v1/operations/{id}"))
        .await
        .json()
        .await
        .unwrap()
}

/// Approves every request once the approval system has them all.
pub(super) async fn approve_all(w: &World, ids: &[String]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let uuids: Vec<Uuid> = ids.iter().map(|id| Uuid::parse_str(id).unwrap()).collect();
    while !uuids.iter().all(|id| w.approval.approval(*id).is_some()) {
        assert!(Instant::now() < deadline, "approvals were not requested");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for id in ids {
        w.approval
            .decide(Uuid::parse_str(id).unwrap(), Decision::Approved)
            .await
            .unwrap();
    }
}

/// Runs one claim round, as an operator's `POST /admin/v1/batches/run`.
pub(super) async fn claim_round(w: &World) {
    let run = w
        .app
        .post_as("admin", "/admin/v1/batches/run", &json!({}))
        .await;
    assert_eq!(run.status(), 200);
}

/// Runs merge rounds until every operation of `ids` is settled; their views.
pub(super) async fn rounds_until_settled(w: &World, ids: &[String]) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        claim_round(w).await;
        let mut views = Vec::new();
        for id in ids {
            views.push(view(w, id).await);
        }
        if views
            .iter()
            .all(|v| v["status"] == "VALIDATED" || v["next"] == "CONTACT_TEAM")
        {
            return views;
        }
        assert!(Instant::now() < deadline, "not settled: {views:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn approved_requests_are_merged_together_in_one_mr() {
    let db = sqlite_db().await;
    let w = world_with(&db.url, manual_rounds()).await;
    let mut ids = Vec::new();
    for n in 0..10 {
        ids.push(apply_for(&w, &format!("member{n}"), "read").await);
    }
    approve_all(&w, &ids).await;
    for id in &ids {
        let queued = view(&w, id).await;
        assert_eq!(
            (queued["status"].as_str(), queued["step"]["name"].as_str()),
            (Some("MR_CREATING"), Some("QUEUED")),
            "{queued}"
        );
    }
    let views = rounds_until_settled(&w, &ids).await;
    let iids: Vec<i64> = views
        .iter()
        .map(|v| {
            assert_eq!(v["status"], "VALIDATED", "{v}");
            v["mergeRequest"]["iid"].as_i64().unwrap()
        })
        .collect();
    assert!(iids.iter().all(|iid| *iid == iids[0]), "one MR: {iids:?}");
    let mr = w.gitlab.merge_request(w.project, 1).unwrap();
    assert_eq!(mr.state, MrState::Merged);
    assert_eq!(mr.source_branch, "changegate/merge-batch-1", "{mr:?}");
    let files = w.gitlab.files(w.project, "main").unwrap();
    for n in 0..10 {
        assert!(files.contains_key(&format!("bindings/team.access/member{n}.json")));
    }

    let batches: Value = w
        .app
        .get_as("admin", "/admin/v1/batches")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(batches["items"].as_array().unwrap().len(), 1, "{batches}");
    let batch = &batches["items"][0];
    assert_eq!(batch["status"], "SUCCEEDED");
    for v in &views {
        assert_eq!(v["batchId"], batch["id"], "{v}");
    }
    assert_eq!(
        batch["mergeSha"],
        mr.sha.as_str(),
        "the merged head is pinned"
    );
    let detail: Value = w
        .app
        .get_as("admin", &format!("/admin/v1/batches/{}", batch["id"]))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(detail["members"].as_array().unwrap().len(), 10);
    let merged = detail["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["event"] == "MERGED" && h["detail"] == mr.sha.as_str())
        .count();
    assert_eq!(merged, 10, "{detail}");
    assert_eq!(
        w.app.get_as("alice", "/admin/v1/batches").await.status(),
        403
    );
}

#[tokio::test]
async fn members_whose_files_exist_on_main_are_rewritten_with_tree_reads_not_one_read_each() {
    let db = sqlite_db().await;
    let w = world_with(&db.url, manual_rounds()).await;
    let old: Vec<(String, Option<&str>)> = (0..10)
        .map(|n| {
            (
                format!("bindings/team.access/member{n}.json"),
                Some("{\"old\": true}\n"),
            )
        })
        .collect();
    let changes: Vec<(&str, Option<&str>)> = old.iter().map(|(p, c)| (p.as_str(), *c)).collect();
    w.gitlab
        .push(w.project, w.users[0], "main", &changes)
        .unwrap();
    let mut ids = Vec::new();
    for n in 0..10 {
        ids.push(apply_for(&w, &format!("member{n}"), "read").await);
    }
    approve_all(&w, &ids).await;

    let views = rounds_until_settled(&w, &ids).await;

    for v in &views {
        assert_eq!(v["status"], "VALIDATED", "{v}");
    }
    let files = w.gitlab.files(w.project, "main").unwrap();
    for (n, id) in ids.iter().enumerate() {
        let file = &files[&format!("bindings/team.access/member{n}.json")];
        assert!(
            file.contains(id.as_str()),
            "member{n} is rendered on main: {file}"
        );
    }
    // The read of the target branch before the commit and the check after
    // the merge each list the one directory once, whatever the number of
    // members; the one commit updates every file.
    assert_eq!(
        w.gitlab.calls(Endpoint::CreateCommit),
        1,
        "one commit of updates, none refused"
    );
    // In a train, the new branch (started at a commit, not the target's
    // name) is listed once more before the commit.
    let listings = if train_depth() > 1 { 3 } else { 2 };
    assert_eq!(w.gitlab.calls(Endpoint::GetTree), listings);
    assert_eq!(w.gitlab.calls(Endpoint::GetRawFile), 0);
}

/// The values in `snapshot` of every series of `name` whose labels include
/// `labels`: a counter's count, a gauge's value, a histogram's samples.
fn recorded(snapshot: &[Recorded], name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
    snapshot
        .iter()
        .filter(|(key, ..)| {
            let key = key.key();
            key.name() == name
                && labels.iter().all(|(k, v)| {
                    key.labels()
                        .any(|label| label.key() == *k && label.value() == *v)
                })
        })
        .flat_map(|(.., value)| match value {
            DebugValue::Counter(count) => vec![*count as f64],
            DebugValue::Gauge(value) => vec![value.into_inner()],
            DebugValue::Histogram(samples) => samples.iter().map(|s| s.into_inner()).collect(),
        })
        .collect()
}

/// One series of a [`DebuggingRecorder`] snapshot.
type Recorded = (
    metrics_util::CompositeKey,
    Option<metrics::Unit>,
    Option<metrics::SharedString>,
    DebugValue,
);

#[tokio::test]
async fn one_poisoned_request_is_bisected_out_and_the_other_fifteen_merge() {
    // The app runs on this thread, so this recorder sees its metrics only.
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _recording = metrics::set_default_local_recorder(&recorder);
    let db = sqlite_db().await;
    let w = world_with(&db.url, manual_rounds()).await;
    w.gitlab
        .update_settings(w.project, |settings| {
            settings.failing_content = Some("POISON".to_owned());
        })
        .unwrap();
    let mut ids = Vec::new();
    for n in 0..16 {
        let level = if n == 3 { "POISON" } else { "read" };
        ids.push(apply_for(&w, &format!("member{n}"), level).await);
    }
    approve_all(&w, &ids).await;
    let views = rounds_until_settled(&w, &ids).await;
    for (n, v) in views.iter().enumerate() {
        if n == 3 {
            assert_eq!(
                (
                    v["status"].as_str(),
                    v["step"]["name"].as_str(),
                    v["next"].as_str()
                ),
                (
                    Some("CREATE_FAILED"),
                    Some("CREATE_PIPELINE_FAILED"),
                    Some("CONTACT_TEAM")
                ),
                "{v}"
            );
        } else {
            assert_eq!(v["status"], "VALIDATED", "member {n}: {v}");
        }
    }
    let files = w.gitlab.files(w.project, "main").unwrap();
    assert!(!files.values().any(|content| content.contains("POISON")));

    // The operators' view numbers the nine batches 1 to 9, and names the
    // failed batches each half comes from by their numbers too.
    let listed: Value = w
        .app
        .get_as("admin", "/admin/v1/batches?limit=200")
        .await
        .json()
        .await
        .unwrap();
    let batches = listed["items"].as_array().unwrap();
    let mut numbers: Vec<i64> = batches
        .iter()
        .map(|b| b["number"].as_i64().unwrap())
        .collect();
    numbers.sort_unstable();
    assert_eq!(numbers, (1..=9).collect::<Vec<_>>(), "{listed}");
    // One MR (one pipeline) per batch: the halves of a failed batch are
    // built side by side, so the failing first half sends nothing back to
    // be built again.
    let pipelines = (1..)
        .map_while(|iid| w.gitlab.merge_request(w.project, iid))
        .count();
    let rebuilds: Vec<i64> = batches
        .iter()
        .map(|b| b["rebuilds"].as_i64().unwrap())
        .collect();
    assert_eq!(rebuilds, [0; 9], "{listed}");
    assert_eq!(pipelines, 9, "{pipelines} batch MRs for 16 members");
    let number_of = |id: &Value| {
        batches
            .iter()
            .find(|b| &b["id"] == id)
            .map(|b| &b["number"])
    };
    for batch in batches {
        let group = batch["splitGroup"].as_str().unwrap();
        let path = batch["splitFrom"].as_array().unwrap();
        assert_eq!(
            path.len(),
            group.split('/').filter(|s| !s.is_empty()).count(),
            "{batch}"
        );
        for step in path {
            assert_eq!(
                number_of(&step["batchId"]),
                Some(&step["number"]),
                "{batch}"
            );
        }
    }

    // 16 → 8 + 8 → … → 1 + 1: each failed half is split until the poisoned
    // request fails alone, and each clean half merges.
    let snapshot = snapshotter.snapshot().into_vec();
    let mut sizes = recorded(&snapshot, "changegate_batch_size", &[]);
    sizes.sort_by(f64::total_cmp);
    assert_eq!(sizes, [1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 8.0, 8.0, 16.0]);
    let ended = |outcome| {
        recorded(
            &snapshot,
            "changegate_batches_finished_total",
            &[("outcome", outcome)],
        )
        .iter()
        .sum::<f64>()
    };
    assert_eq!(
        (ended("split"), ended("merged"), ended("failed")),
        (4.0, 4.0, 1.0)
    );
    let approvals_sent = recorded(
        &snapshot,
        "changegate_step_duration_seconds",
        &[("step", "send_approval"), ("result", "ok")],
    );
    assert!(approvals_sent.len() >= 16, "{approvals_sent:?}");
    let calls = |system| {
        recorded(
            &snapshot,
            "changegate_outbound_requests_total",
            &[("system", system), ("result", "ok")],
        )
        .iter()
        .sum::<f64>()
    };
    assert!(calls("approval") >= 16.0, "{}", calls("approval"));
    assert!(calls("gitlab") >= 9.0, "{}", calls("gitlab"));
}

/// A queue after [`bisected`]: the world, its requests in order, each
/// one's view, and how many MRs they took.
pub(super) struct Bisected {
    pub w: World,
    pub ids: Vec<String>,
    pub views: Vec<Value>,
    pub mrs: usize,
}

/// A queue whose bisection stops halving at `max_split_depth`, its project
/// set up by `configure`, with the requests of `levels` (`POISON` fails CI)
/// approved and settled.
pub(super) async fn bisected(
    db_url: &str,
    max_split_depth: u32,
    levels: &[&str],
    configure: impl FnOnce(&World),
) -> Bisected {
    let w = world_with(
        db_url,
        WorldOptions {
            batch_keys: format!("interval = \"1h\"\nmax_split_depth = {max_split_depth}"),
            ..manual_rounds()
        },
    )
    .await;
    w.gitlab
        .update_settings(w.project, |settings| {
            settings.failing_content = Some("POISON".to_owned());
        })
        .unwrap();
    configure(&w);
    let mut ids = Vec::new();
    for (n, level) in levels.iter().enumerate() {
        ids.push(apply_for(&w, &format!("member{n}"), level).await);
    }
    approve_all(&w, &ids).await;
    let views = rounds_until_settled(&w, &ids).await;
    let mrs = (1..)
        .map_while(|iid| w.gitlab.merge_request(w.project, iid))
        .count();
    Bisected { w, ids, views, mrs }
}

#[tokio::test]
async fn one_failing_change_never_fails_another_request_however_deep_the_bisection_goes() {
    // Halved once at most, yet the half holding the poisoned request is
    // halved again while its other half passed: 8 → 4 + 4 → 2 + 2 → 1 + 1.
    for test_db in crate::helpers::each_backend().await {
        let mut levels = ["read"; 8];
        levels[5] = "POISON";
        let Bisected { views, mrs, .. } = bisected(&test_db.url, 1, &levels, |_| {}).await;
        for (n, v) in views.iter().enumerate() {
            let expected = if n == 5 { "CREATE_FAILED" } else { "VALIDATED" };
            assert_eq!(v["status"], expected, "member {n}: {v}");
        }
        assert_eq!(mrs, 7, "8, then 4 + 4, 2 + 2 and 1 + 1");
    }
}

#[tokio::test]
async fn once_both_halves_failed_max_split_depth_bounds_the_bisection() {
    // CI fails whatever it is given: both halves of the first batch fail,
    // so it is not one change, and the depth (1) stops the halving. A half
    // whose other half had not failed yet when it failed is halved once
    // more (at depth 1 the other half may still wait for its pipeline),
    // but no further: 9 MRs at most, where halving every failing batch
    // until one request is left would take 15.
    let test_db = sqlite_db().await;
    let Bisected { views, mrs, .. } = bisected(&test_db.url, 1, &["POISON"; 8], |_| {}).await;
    for (n, v) in views.iter().enumerate() {
        assert_eq!(v["status"], "CREATE_FAILED", "member {n}: {v}");
    }
    assert!(mrs <= 9, "{mrs} MRs");
}

#[tokio::test]
async fn a_frozen_queue_starts_no_round_and_fails_nothing() {
    let db = sqlite_db().await;
    let w = world_with(&db.url, manual_rounds()).await;
    let ids = vec![
        apply_for(&w, "member0", "read").await,
        apply_for(&w, "member1", "read").await,
    ];
    approve_all(&w, &ids).await;

    let put = |body: Value, user: &'static str| {
        let app = &w.app;
        async move {
            app.client
                .put(format!("{}/admin/v1/batches/freeze", app.address))
                .header("x-auth-request-user", user)
                .json(&body)
                .send()
                .await
                .unwrap()
        }
    };
    assert_eq!(put(json!({ "frozen": true }), "alice").await.status(), 403);
    assert_eq!(put(json!({ "frozen": "yes" }), "admin").await.status(), 400);
    let frozen = put(
        json!({ "frozen": true, "reason": "release freeze" }),
        "admin",
    )
    .await;
    assert_eq!(frozen.status(), 200);
    let run = w
        .app
        .post_as("admin", "/admin/v1/batches/run", &json!({}))
        .await;
    assert_eq!(run.status(), 409);
    for id in &ids {
        let waiting = view(&w, id).await;
        assert_eq!(
            (
                waiting["status"].as_str(),
                waiting["step"]["name"].as_str(),
                waiting["next"].as_str()
            ),
            (Some("MR_CREATING"), Some("QUEUED"), Some("WAIT")),
            "{waiting}"
        );
    }
    assert_eq!(put(json!({ "frozen": false }), "admin").await.status(), 200);
    let views = rounds_until_settled(&w, &ids).await;
    assert!(
        views.iter().all(|v| v["status"] == "VALIDATED"),
        "{views:?}"
    );
    let audit: Value = w
        .app
        .get_as("admin", "/admin/v1/audit")
        .await
        .json()
        .await
        .unwrap();
    let actions: Vec<&str> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|entry| entry["action"].as_str())
        .collect();
    assert!(
        actions.contains(&"batch.freeze") && actions.contains(&"batch.thaw"),
        "{actions:?}"
    );
}

#[tokio::test]
async fn a_request_force_failed_while_it_waits_for_a_round_is_never_merged() {
    for test_db in crate::helpers::each_backend().await {
        let w = world_with(&test_db.url, manual_rounds()).await;
        let ids = vec![
            apply_for(&w, "member0", "read").await,
            apply_for(&w, "member1", "read").await,
        ];
        approve_all(&w, &ids).await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while view(&w, &ids[0]).await["step"]["name"] != "QUEUED" {
            assert!(Instant::now() < deadline, "{}: never queued", test_db.name);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        let failed = w
            .app
            .post_as(
                "admin",
                &format!("/admin/v1/operations/{}/fail", ids[0]),
                &json!({ "reason": "wrong request" }),
            )
            .await;
        assert_eq!(failed.status(), 200, "{}", test_db.name);
        let views = rounds_until_settled(&w, &ids[1..]).await;

        assert_eq!(views[0]["status"], "VALIDATED", "{}", test_db.name);
        let stopped = view(&w, &ids[0]).await;
        assert_eq!(
            (stopped["status"].as_str(), stopped["next"].as_str()),
            (Some("ABANDONED"), Some("REAPPLY")),
            "{}: {stopped}",
            test_db.name
        );
        let files = w.gitlab.files(w.project, "main").unwrap();
        assert!(
            files.contains_key("bindings/team.access/member1.json"),
            "{}",
            test_db.name
        );
        assert!(
            !files.contains_key("bindings/team.access/member0.json"),
            "{}: the stopped request's file never reaches main",
            test_db.name
        );
        assert_eq!(
            stopped["batchId"],
            Value::Null,
            "{}: {stopped}",
            test_db.name
        );
    }
}

#[tokio::test]
async fn retry_of_a_member_whose_batch_failed_puts_it_back_in_the_queue_and_it_lands() {
    for test_db in crate::helpers::each_backend().await {
        let w = world_with(&test_db.url, manual_rounds()).await;
        w.gitlab
            .update_settings(w.project, |settings| {
                settings.failing_content = Some("POISON".to_owned());
            })
            .unwrap();
        let ids = vec![apply_for(&w, "member0", "POISON").await];
        approve_all(&w, &ids).await;
        let failed = rounds_until_settled(&w, &ids).await;
        assert_eq!(
            (failed[0]["status"].as_str(), failed[0]["next"].as_str()),
            (Some("CREATE_FAILED"), Some("CONTACT_TEAM")),
            "{}: {}",
            test_db.name,
            failed[0]
        );
        // CI fixed meanwhile: the operator retries the request.
        w.gitlab
            .update_settings(w.project, |settings| settings.failing_content = None)
            .unwrap();

        let retried = w
            .app
            .post_as(
                "admin",
                &format!("/admin/v1/operations/{}/retry", ids[0]),
                &json!({ "reason": "CI fixed" }),
            )
            .await;
        assert_eq!(retried.status(), 200, "{}", test_db.name);
        let retried: Value = retried.json().await.unwrap();
        assert_eq!(
            (
                retried["operation"]["status"].as_str(),
                retried["operation"]["step"]["name"].as_str(),
                retried["operation"]["next"].as_str()
            ),
            (Some("MR_CREATING"), Some("QUEUED"), Some("WAIT")),
            "{}: {retried}",
            test_db.name
        );
        let views = rounds_until_settled(&w, &ids).await;

        assert_eq!(
            views[0]["status"], "VALIDATED",
            "{}: {}",
            test_db.name, views[0]
        );
        assert_ne!(
            views[0]["batchId"], failed[0]["batchId"],
            "{}: merged in a new batch",
            test_db.name
        );
        assert_eq!(
            w.gitlab.merge_request(w.project, 1).map(|mr| mr.state),
            Some(MrState::Closed),
            "{}: the failed batch's MR stays closed",
            test_db.name
        );
    }
}
