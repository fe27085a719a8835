//! A request's place in the merge queue and its expected times: none
//! before the project has history to measure from, then times that follow
//! the train ahead of it.

use serde_json::Value;

use changegate_sim::gitlab::PipelineOutcome;

use super::batched::{apply_for, approve_all, rounds_until_settled, view};
use super::train::{one_car, pipeline_of, train_world, until};
use crate::helpers::{sqlite_db, train_depth};

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
    for n in 1..=3 {
        let id = apply_for(&w, &format!("member{n}"), "read").await;
        approve_all(&w, std::slice::from_ref(&id)).await;
        rounds_until_settled(&w, &[id]).await;
    }

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
    w.gitlab
        .force_pipeline(w.project, pipeline, PipelineOutcome::Success)
        .unwrap();
}

#[tokio::test]
async fn behind_a_bisection_the_estimate_counts_its_halves_and_their_members_get_none() {
    let db = sqlite_db().await;
    let w = train_world(&db.url).await;
    w.gitlab
        .update_settings(w.project, |s| s.failing_content = Some("POISON".to_owned()))
        .unwrap();
    for n in 0..3 {
        let id = apply_for(&w, &format!("member{n}"), "read").await;
        approve_all(&w, std::slice::from_ref(&id)).await;
        rounds_until_settled(&w, &[id]).await;
    }

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
    let behind = apply_for(&w, "member12", "read").await;
    approve_all(&w, std::slice::from_ref(&behind)).await;
    let waiting = until(&w, &behind, |v| v["step"]["name"] == "QUEUED").await;
    assert_eq!(
        (&waiting["queue"]["position"], &waiting["queue"]["of"]),
        (&Value::from(3), &Value::from(3)),
        "{waiting}"
    );
    assert!(waiting["queue"]["expectedMergeAt"].is_string(), "{waiting}");
    assert!(
        waiting["queue"]["basis"]
            .as_str()
            .unwrap()
            .contains("a failed batch ahead is being bisected"),
        "{waiting}"
    );
    let all: Vec<String> = failed.iter().chain([&behind]).cloned().collect();
    let settled = rounds_until_settled(&w, &all).await;
    assert_eq!(settled[2]["status"], "VALIDATED", "{}", settled[2]);
}
