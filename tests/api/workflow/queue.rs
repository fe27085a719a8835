//! A request's place in the merge queue and its expected times: none
//! before the project has history to measure from, then times that follow
//! the train ahead of it.

use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::Value;

use changegate_sim::gitlab::PipelineOutcome;

use super::batched::{apply_for, approve_all, rounds_until_settled, view};
use super::end_to_end::World;
use super::train::{boarded_again, one_car, pipeline_of, pipeline_of_batch, train_world, until};
use crate::helpers::{each_backend, sqlite_db, train_depth};

/// Requests of `member{n}` for each `n`, merged one batch at a time: the
/// history an estimate needs.
async fn merge_one_at_a_time(w: &World, members: RangeInclusive<usize>) {
    for n in members {
        let id = apply_for(w, &format!("member{n}"), "read").await;
        approve_all(w, std::slice::from_ref(&id)).await;
        rounds_until_settled(w, &[id]).await;
    }
}

/// A train where a file holding `POISON` fails CI, with three merged
/// batches to estimate from.
async fn poisoned_world_with_history(db_url: &str) -> World {
    let w = train_world(db_url).await;
    w.gitlab
        .update_settings(w.project, |s| s.failing_content = Some("POISON".to_owned()))
        .unwrap();
    merge_one_at_a_time(&w, 0..=2).await;
    w
}

/// `subject` applies and is approved: its id and its view once it waits
/// on the merge queue, last of `batches` (asserted).
async fn queued_last(w: &World, subject: &str, batches: u64) -> (String, Value) {
    let id = apply_for(w, subject, "read").await;
    approve_all(w, std::slice::from_ref(&id)).await;
    let waiting = until(w, &id, |v| v["step"]["name"] == "QUEUED").await;
    assert_eq!(
        (&waiting["queue"]["position"], &waiting["queue"]["of"]),
        (&Value::from(batches), &Value::from(batches)),
        "{waiting}"
    );
    (id, waiting)
}

fn expected_merge(view: &Value) -> chrono::DateTime<chrono::Utc> {
    let at = view["queue"]["expectedMergeAt"].as_str().unwrap();
    chrono::DateTime::parse_from_rfc3339(at).unwrap().into()
}

#[tokio::test]
async fn a_queued_request_has_no_estimate_until_merges_were_measured_then_one_behind_the_train() {
    let db = sqlite_db().await;
    let w = train_world(&db.url).await;

    let first = apply_for(&w, "member0", "read").await;
    approve_all(&w, std::slice::from_ref(&first)).await;
    let queued = until(&w, &first, |v| v["step"]["name"] == "QUEUED").await;
    assert_eq!(queued["queue"]["position"], 1, "{queued}");
    assert_eq!(queued["queue"]["of"], 1, "{queued}");
    assert!(queued["queue"].get("expectedMergeAt").is_none(), "{queued}");
    assert!(
        queued["queue"]["basis"]
            .as_str()
            .unwrap()
            .starts_with("no estimate yet"),
        "{queued}"
    );
    rounds_until_settled(&w, std::slice::from_ref(&first)).await;
    assert!(
        view(&w, &first).await.get("queue").is_none(),
        "merged: not queued"
    );

    // History: three more merged batches.
    merge_one_at_a_time(&w, 1..=3).await;

    w.gitlab
        .script_pipelines(w.project, [PipelineOutcome::StuckRunning; 2])
        .unwrap();
    let front = one_car(&w, &[("member10", "read")]).await;
    let running = until(&w, &front[0], |v| v["status"] == "MR_CREATED").await;
    assert_eq!(running["queue"]["position"], 1, "{running}");
    assert!(running["queue"]["batch"].as_i64().is_some(), "{running}");
    assert!(
        running["queue"]["basis"]
            .as_str()
            .unwrap()
            .contains("medians of the last 4 merged batches"),
        "{running}"
    );
    assert!(
        running["queue"]["basis"]
            .as_str()
            .unwrap()
            .ends_with("; if every batch ahead, and its own, passes CI"),
        "the estimate says what it takes for granted: {running}"
    );
    assert!(
        running["queue"]["expectedDeployAt"].is_string(),
        "{running}"
    );
    if train_depth() < 2 {
        return;
    }
    let behind = one_car(&w, &[("member11", "read")]).await;
    let pipeline = pipeline_of(&w, 6).await;
    let second = until(&w, &behind[0], |v| v["status"] == "MR_CREATED").await;
    assert_eq!(second["queue"]["position"], 2, "{second}");
    assert_eq!(second["queue"]["of"], 2, "{second}");
    let front_view = view(&w, &front[0]).await;
    assert!(
        expected_merge(&second) > expected_merge(&front_view),
        "behind the front: {second} {front_view}"
    );
    // The operators' list places them as their own pages do.
    let listed: Value = w
        .app
        .get_as("admin", "/admin/v1/operations")
        .await
        .json()
        .await
        .unwrap();
    let place_of = |id: &str| {
        listed["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|item| item["operationId"] == id)
            .map(|item| item["queue"]["position"].clone())
    };
    assert_eq!(place_of(&front[0]), Some(Value::from(1)), "{listed}");
    assert_eq!(place_of(&behind[0]), Some(Value::from(2)), "{listed}");
    w.gitlab
        .force_pipeline(w.project, pipeline, PipelineOutcome::Success)
        .unwrap();
}

#[tokio::test]
async fn behind_a_bisection_the_estimate_counts_its_halves_and_their_members_get_none() {
    let db = sqlite_db().await;
    let w = poisoned_world_with_history(&db.url).await;

    // A batch of two whose pipeline fails: split in halves that wait for
    // the next round, one of which holds the change that fails CI.
    let failed = one_car(&w, &[("member10", "read"), ("member11", "POISON")]).await;
    for id in &failed {
        let halved = until(&w, id, |v| v["step"]["name"] == "HANDLE_BATCH_RETRY").await;
        assert!(halved["queue"].get("expectedMergeAt").is_none(), "{halved}");
        assert!(
            halved["queue"]["basis"]
                .as_str()
                .unwrap()
                .contains("being bisected"),
            "{halved}"
        );
    }

    // A request approved now boards after both halves, and its estimate
    // says it counts the failing half ahead of it.
    let (behind, waiting) = queued_last(&w, "member12", 3).await;
    assert!(waiting["queue"]["expectedMergeAt"].is_string(), "{waiting}");
    assert!(
        waiting["queue"]["basis"]
            .as_str()
            .unwrap()
            .contains("a failed batch ahead is being bisected"),
        "{waiting}"
    );
    assert!(
        waiting["queue"]["basis"]
            .as_str()
            .unwrap()
            .ends_with("; every other batch taken to pass CI"),
        "{waiting}"
    );
    let all: Vec<String> = failed.iter().chain([&behind]).cloned().collect();
    let settled = rounds_until_settled(&w, &all).await;
    assert_eq!(settled[2]["status"], "VALIDATED", "{}", settled[2]);
}

#[tokio::test]
async fn once_the_change_that_failed_is_alone_and_failed_the_half_left_is_expected_to_merge() {
    if train_depth() < 2 {
        return;
    }
    let db = sqlite_db().await;
    let w = poisoned_world_with_history(&db.url).await;

    // A batch of two fails; its halves of one request each are tested side
    // by side. The poisoned one fails for good, as the change alone; the
    // other's pipeline runs on (the three scripted pipelines are the
    // batch's and its halves').
    w.gitlab
        .script_pipelines(w.project, [PipelineOutcome::StuckRunning; 3])
        .unwrap();
    let failed = one_car(&w, &[("member10", "read"), ("member11", "POISON")]).await;
    let first = view(&w, &failed[0]).await["batchId"].as_i64().unwrap();
    let clean = boarded_again(&w, &db.db, &failed[0], first).await;
    until(&w, &failed[1], |v| {
        v["step"]["name"] == "CREATE_PIPELINE_FAILED"
    })
    .await;

    // The bisection is over: the half left is clean, and a request
    // waiting behind it is not expected to wait for it to fail.
    let (behind, waiting) = queued_last(&w, "member12", 2).await;
    let basis = waiting["queue"]["basis"].as_str().unwrap();
    assert!(basis.starts_with("medians of"), "{waiting}");
    assert!(!basis.contains("being bisected"), "{waiting}");

    let pipeline = pipeline_of_batch(&w, &db.db, clean.id).await;
    w.gitlab
        .force_pipeline(w.project, pipeline, PipelineOutcome::Success)
        .unwrap();
    let settled = rounds_until_settled(&w, &[failed[0].clone(), behind]).await;
    for v in settled {
        assert_eq!(v["status"], "VALIDATED", "{v}");
    }
}

#[tokio::test]
async fn a_request_read_while_it_is_claimed_and_merged_is_shown_in_one_place_until_it_leaves() {
    for test_db in each_backend().await {
        let w = train_world(&test_db.url).await;
        merge_one_at_a_time(&w, 0..=2).await;
        // Each request waits alone in front of an empty train, and is
        // read over and over while a claim round takes it and its batch
        // merges: every view shows it waiting first of one or in its
        // batch, never waiting behind a batch that holds it, and once it
        // is shown out of the queue it stays out.
        for n in 10..40 {
            let (id, _) = queued_last(&w, &format!("member{n}"), 1).await;
            let settled = AtomicBool::new(false);
            let reading = async {
                let mut seen = Vec::new();
                while !settled.load(Ordering::Acquire) {
                    seen.push(view(&w, &id).await);
                }
                seen
            };
            let settling = async {
                rounds_until_settled(&w, std::slice::from_ref(&id)).await;
                settled.store(true, Ordering::Release);
            };
            let (seen, ()) = tokio::join!(reading, settling);
            let shown: Vec<Option<&Value>> = seen.iter().map(|view| view.get("queue")).collect();
            let left = shown
                .iter()
                .position(Option::is_none)
                .unwrap_or(shown.len());
            if let Some(back) = shown[left..].iter().position(Option::is_some) {
                panic!(
                    "{}: shown out of the queue, then in it again: {} then {}",
                    test_db.name,
                    seen[left],
                    seen[left + back]
                );
            }
            for (queue, view) in shown.iter().zip(&seen).take(left) {
                let queue = queue.expect("shown in the queue");
                let place = (&queue["position"], &queue["of"]);
                let first_of_one = (&Value::from(1), &Value::from(1));
                assert_eq!(place, first_of_one, "{}: {view}", test_db.name);
            }
        }
    }
}
