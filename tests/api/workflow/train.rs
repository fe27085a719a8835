//! The merge train end to end, with the simulators: batches in flight at
//! once, each built on the head of the one ahead, merged in train order
//! only; a failing batch is bisected while the one behind it is built again
//! on what is ahead of it, and a failure is blamed only once every batch
//! ahead passed.

use std::time::{Duration, Instant};

use changegate::db::batches::{BatchRow, get_batch};
use changegate_sim::gitlab::{Endpoint, MergeMethod, MrState, PipelineOutcome, PipelineStatus};
use serde_json::Value;

use super::batched::{
    apply_for, approve_all, claim_round, manual_rounds, rounds_until_settled, view,
};
use super::end_to_end::{World, world_with};
use crate::helpers::{sqlite_db, train_depth};

/// A train with merge commits (GitLab's default merge method).
pub(super) async fn train_world(db_url: &str) -> World {
    let w = world_with(db_url, manual_rounds()).await;
    w.gitlab
        .update_settings(w.project, |s| s.merge_method = MergeMethod::Merge)
        .unwrap();
    w
}

/// A train where a file holding `POISON` fails CI, and whose first three
/// pipelines run until the test ends them.
async fn poisoned_train_world(db_url: &str) -> World {
    let w = train_world(db_url).await;
    w.gitlab
        .update_settings(w.project, |s| s.failing_content = Some("POISON".to_owned()))
        .unwrap();
    w.gitlab
        .script_pipelines(w.project, [PipelineOutcome::StuckRunning; 3])
        .unwrap();
    w
}

/// Applies for `subjects` (each at `level`), approves them, and runs one
/// claim round: they become one new batch at the back of the train.
pub(super) async fn one_car(w: &World, subjects: &[(&str, &str)]) -> Vec<String> {
    let mut ids = Vec::new();
    for (subject, level) in subjects {
        ids.push(apply_for(w, subject, level).await);
    }
    approve_all(w, &ids).await;
    until(w, &ids[0], |v| v["step"]["name"] == "QUEUED").await;
    // Rounds until they are claimed: a train takes a new batch at most
    // every half pipeline (measured), so one round may be too soon.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        claim_round(w).await;
        if view(w, &ids[0]).await["step"]["name"] != "QUEUED" {
            return ids;
        }
        assert!(Instant::now() < deadline, "never claimed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls operation `id` until `done` holds for its view.
pub(super) async fn until(w: &World, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let seen = view(w, id).await;
        if done(&seen) {
            return seen;
        }
        assert!(Instant::now() < deadline, "gave up waiting; last {seen}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The batch operation `id` is in now.
async fn batch_of(w: &World, db: &changegate::db::Db, id: &str) -> BatchRow {
    let batch = view(w, id).await["batchId"].as_i64().unwrap();
    get_batch(db, batch).await.unwrap().unwrap()
}

/// Waits until MR `iid` exists and has a head pipeline; its pipeline's id.
pub(super) async fn pipeline_of(w: &World, iid: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some((pipeline, _)) = w
            .gitlab
            .merge_request(w.project, iid)
            .and_then(|mr| mr.head_pipeline)
        {
            return pipeline;
        }
        assert!(Instant::now() < deadline, "MR !{iid} has no pipeline");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn end_pipeline(w: &World, pipeline: u64, outcome: PipelineOutcome) {
    w.gitlab
        .force_pipeline(w.project, pipeline, outcome)
        .unwrap();
}

fn mr_state(w: &World, iid: u64) -> Option<MrState> {
    w.gitlab.merge_request(w.project, iid).map(|mr| mr.state)
}

/// Lets the merge queue's driver run a few rounds.
async fn some_rounds() {
    tokio::time::sleep(Duration::from_millis(600)).await;
}

#[tokio::test]
async fn three_batches_are_tested_on_top_of_each_other_and_merge_in_order() {
    if train_depth() < 3 {
        return;
    }
    let db = sqlite_db().await;
    let w = train_world(&db.url).await;
    // Every pipeline runs until the test ends it.
    w.gitlab
        .script_pipelines(w.project, [PipelineOutcome::StuckRunning; 3])
        .unwrap();
    let first = one_car(&w, &[("member0", "read"), ("member1", "read")]).await;
    let p1 = pipeline_of(&w, 1).await;
    let second = one_car(&w, &[("member2", "read")]).await;
    let p2 = pipeline_of(&w, 2).await;
    let third = one_car(&w, &[("member3", "read"), ("member4", "read")]).await;
    let p3 = pipeline_of(&w, 3).await;

    // Each batch's branch starts at the head of the batch ahead.
    let cars = [
        batch_of(&w, &db.db, &first[0]).await,
        batch_of(&w, &db.db, &second[0]).await,
        batch_of(&w, &db.db, &third[0]).await,
    ];
    let positions: Vec<i64> = cars.iter().map(|c| c.train_position).collect();
    assert_eq!(positions, [1, 2, 3]);
    assert_eq!(cars[0].ahead_batch_id, None);
    assert_eq!(
        cars[0].base_sha,
        w.gitlab.branch_head(w.project, "main"),
        "the front is built on main"
    );
    for (ahead, behind) in [(&cars[0], &cars[1]), (&cars[1], &cars[2])] {
        assert_eq!(behind.ahead_batch_id, Some(ahead.id));
        assert!(ahead.head_sha.is_some());
        assert_eq!(behind.base_sha, ahead.head_sha, "built on the head ahead");
    }
    // What batch 3 tests is every member's file, the ones ahead included.
    let tested = w
        .gitlab
        .files(w.project, "changegate/merge-batch-3")
        .unwrap();
    for n in 0..5 {
        assert!(tested.contains_key(&format!("bindings/team.access/member{n}.json")));
    }

    // Passed out of order: the batches behind wait for the front.
    end_pipeline(&w, p3, PipelineOutcome::Success);
    end_pipeline(&w, p2, PipelineOutcome::Success);
    let waiting = until(&w, &third[0], |v| {
        v["message"]
            .as_str()
            .is_some_and(|m| m.contains("waiting for 2 batches ahead"))
    })
    .await;
    assert_eq!(waiting["status"], "MR_CREATED", "{waiting}");
    assert_eq!(waiting["batchesAhead"], 2, "{waiting}");
    assert_eq!(view(&w, &first[0]).await["batchesAhead"], 0, "the front");
    some_rounds().await;
    assert_eq!(mr_state(&w, 2), Some(MrState::Opened));
    assert_eq!(mr_state(&w, 3), Some(MrState::Opened));

    end_pipeline(&w, p1, PipelineOutcome::Success);
    let all: Vec<String> = first.iter().chain(&second).chain(&third).cloned().collect();
    let views = rounds_until_settled(&w, &all).await;
    for v in &views {
        assert_eq!(v["status"], "VALIDATED", "{v}");
    }
    for iid in 1..=3 {
        assert_eq!(mr_state(&w, iid), Some(MrState::Merged), "MR !{iid}");
    }
    assert_eq!(mr_state(&w, 4), None, "three pipelines, no rebuild");
    // Each merged on top of the merge of the batch ahead, at the head its
    // pipeline tested.
    let mut landed = Vec::new();
    for id in [&first[0], &second[0], &third[0]] {
        let car = batch_of(&w, &db.db, id).await;
        assert_eq!(car.rebuilds, 0);
        assert_eq!(car.merge_sha, car.head_sha, "merged the tested head");
        landed.push(car);
    }
    for pair in landed.windows(2) {
        let parents = w
            .gitlab
            .commit_parents(w.project, pair[1].merge_commit_sha.as_deref().unwrap())
            .unwrap();
        assert_eq!(
            parents,
            [
                pair[0].merge_commit_sha.clone().unwrap(),
                pair[1].head_sha.clone().unwrap()
            ],
            "batch #{} merged right after #{}",
            pair[1].shown_number(),
            pair[0].shown_number()
        );
    }
    let files = w.gitlab.files(w.project, "main").unwrap();
    for n in 0..5 {
        assert!(files.contains_key(&format!("bindings/team.access/member{n}.json")));
    }
}

#[tokio::test]
async fn a_failing_batch_is_blamed_only_after_the_one_ahead_passed_and_the_one_behind_is_built_again()
 {
    if train_depth() < 3 {
        return;
    }
    let db = sqlite_db().await;
    let w = poisoned_train_world(&db.url).await;
    let first = one_car(&w, &[("member0", "read")]).await;
    let p1 = pipeline_of(&w, 1).await;
    let second = one_car(&w, &[("member1", "read"), ("member2", "POISON")]).await;
    let p2 = pipeline_of(&w, 2).await;
    let third = one_car(&w, &[("member3", "read")]).await;
    let p3 = pipeline_of(&w, 3).await;

    // Batch 2 fails while batch 1's pipeline still runs: it may be batch
    // 1's doing, so nobody is blamed yet.
    end_pipeline(&w, p2, PipelineOutcome::Failed);
    end_pipeline(&w, p3, PipelineOutcome::Failed);
    let held = until(&w, &second[0], |v| {
        v["batch"]["obstacle"]
            .as_str()
            .or(v["obstacle"].as_str())
            .is_some_and(|o| o.contains("waiting for the pipeline of batch #1"))
            || batch_message_waits(v)
    })
    .await;
    assert_eq!(held["status"], "MR_CREATED", "{held}");
    let car = batch_of(&w, &db.db, &second[0]).await;
    assert_eq!(car.status, "RUNNING", "not failed while #1 runs");

    // Batch 1 passes and merges; batch 2 is bisected, batch 3 built again.
    end_pipeline(&w, p1, PipelineOutcome::Success);
    let all: Vec<String> = first.iter().chain(&second).chain(&third).cloned().collect();
    let views = rounds_until_settled(&w, &all).await;
    for (id, v) in all.iter().zip(&views) {
        if *id == second[1] {
            assert_eq!(v["step"]["name"], "CREATE_PIPELINE_FAILED", "{v}");
        } else {
            assert_eq!(v["status"], "VALIDATED", "{v}");
        }
    }
    let rebuilt = batch_of(&w, &db.db, &third[0]).await;
    assert_eq!(rebuilt.rebuilds, 1, "built again once batch #2 failed");
    assert_eq!(mr_state(&w, 3), Some(MrState::Closed), "its first MR");
    let history: Value = w
        .app
        .get_as(
            "admin",
            &format!("/api/v1/operations/{}/timeline", third[0]),
        )
        .await
        .json()
        .await
        .unwrap();
    assert!(
        history.to_string().contains("ahead failed: built again"),
        "the rebuild and its reason are on the timeline: {history}"
    );
    let files = w.gitlab.files(w.project, "main").unwrap();
    assert!(!files.values().any(|content| content.contains("POISON")));
}

#[tokio::test]
async fn a_batch_built_again_cancels_the_pipeline_of_its_last_build() {
    if train_depth() < 2 {
        return;
    }
    let db = sqlite_db().await;
    let w = poisoned_train_world(&db.url).await;
    let failing = one_car(&w, &[("member0", "POISON")]).await;
    let p1 = pipeline_of(&w, 1).await;
    let behind = one_car(&w, &[("member1", "read")]).await;
    let p2 = pipeline_of(&w, 2).await;

    // The front fails while the pipeline of the batch behind it still
    // runs: that batch is built again, and its first pipeline, testing a
    // tree nothing will merge, is canceled with its MR closed.
    end_pipeline(&w, p1, PipelineOutcome::Failed);
    until(&w, &failing[0], |v| {
        v["step"]["name"] == "CREATE_PIPELINE_FAILED"
    })
    .await;
    let car = batch_of(&w, &db.db, &behind[0]).await;
    let rebuilt = until_batch(&db.db, car.id, |b| b.rebuilds == 1 && b.mr_iid.is_some()).await;
    assert_ne!(rebuilt.mr_iid, Some(2), "{rebuilt:?}");
    assert_eq!(mr_state(&w, 2), Some(MrState::Closed));
    assert_eq!(
        w.gitlab.pipeline_status(w.project, p2),
        Some(PipelineStatus::Canceled)
    );
    assert_eq!(w.gitlab.calls(Endpoint::CancelPipeline), 1);
}

#[tokio::test]
async fn a_batch_an_operator_settles_has_its_pipeline_canceled() {
    let db = sqlite_db().await;
    let w = poisoned_train_world(&db.url).await;
    let members = one_car(&w, &[("member0", "read")]).await;
    let pipeline = pipeline_of(&w, 1).await;
    let batch = batch_of(&w, &db.db, &members[0]).await;

    // The operator gives up on the batch while its pipeline runs: the MR is
    // closed, and the pipeline, testing a tree nothing will merge, canceled.
    let settled = w
        .app
        .post_as(
            "admin",
            &format!("/admin/v1/batches/{}/settle", batch.id),
            &serde_json::json!({ "reason": "stuck" }),
        )
        .await;
    assert_eq!(settled.status(), 200);
    assert_eq!(mr_state(&w, 1), Some(MrState::Closed));
    assert_eq!(
        w.gitlab.pipeline_status(w.project, pipeline),
        Some(PipelineStatus::Canceled)
    );
    assert_eq!(w.gitlab.calls(Endpoint::CancelPipeline), 1);
    until(&w, &members[0], |v| v["step"]["name"] == "QUEUED").await;
}

/// Whether the view says its batch holds a failure until the one ahead
/// has passed (the wording of the batch's obstacle).
fn batch_message_waits(view: &Value) -> bool {
    view.to_string()
        .contains("before deciding whose change failed it")
}

#[tokio::test]
async fn the_timeout_sweep_counts_only_a_batchs_own_time_at_the_front_of_the_train() {
    if train_depth() < 2 {
        return;
    }
    let db = sqlite_db().await;
    let mut options = manual_rounds();
    options.batch_keys = "interval = \"1h\"\ntimeout = \"2s\"".to_owned();
    let w = world_with(&db.url, options).await;
    w.gitlab
        .update_settings(w.project, |s| s.merge_method = MergeMethod::Merge)
        .unwrap();
    w.gitlab
        .script_pipelines(w.project, [PipelineOutcome::StuckRunning; 3])
        .unwrap();
    let front = one_car(&w, &[("member0", "read")]).await;
    let stuck = pipeline_of(&w, 1).await;
    let behind = one_car(&w, &[("member1", "read")]).await;
    pipeline_of(&w, 2).await;
    let first = batch_of(&w, &db.db, &front[0]).await;
    // The front runs past batch.timeout and is settled; the batch behind,
    // nearly as old, has not run past it at the front: it is built again
    // (its pipeline stuck too), and settled only once it ran that long as
    // the front.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let settled = get_batch(&db.db, first.id).await.unwrap().unwrap();
        if settled.status != "RUNNING" {
            assert_eq!(settled.status, "FAILED");
            assert_eq!(
                w.gitlab.pipeline_status(w.project, stuck),
                Some(PipelineStatus::Canceled),
                "the settled batch's pipeline runs on"
            );
            break;
        }
        assert!(Instant::now() < deadline, "the front was never settled");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let second = batch_of(&w, &db.db, &behind[0]).await;
    assert_eq!(second.status, "RUNNING", "{second:?}");
    assert_eq!(second.rebuilds, 1, "built again without the batch ahead");
    let all: Vec<String> = front.iter().chain(&behind).cloned().collect();
    for v in rounds_until_settled(&w, &all).await {
        assert_eq!(v["status"], "VALIDATED", "{v}");
    }
}

/// Claim rounds until operation `id` is in a running batch other than
/// `not`: that batch.
pub(super) async fn boarded_again(
    w: &World,
    db: &changegate::db::Db,
    id: &str,
    not: i64,
) -> BatchRow {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        claim_round(w).await;
        if let Some(batch) = view(w, id).await["batchId"].as_i64()
            && batch != not
            && let Some(car) = get_batch(db, batch).await.unwrap()
            && car.status == "RUNNING"
        {
            return car;
        }
        assert!(Instant::now() < deadline, "{id} never boarded again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls batch `id` until `done` holds for its row.
async fn until_batch(
    db: &changegate::db::Db,
    id: i64,
    done: impl Fn(&BatchRow) -> bool,
) -> BatchRow {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let batch = get_batch(db, id).await.unwrap().unwrap();
        if done(&batch) {
            return batch;
        }
        assert!(Instant::now() < deadline, "gave up waiting; last {batch:?}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test]
async fn the_halves_of_a_failed_batch_are_tested_side_by_side_and_requests_board_beside_them() {
    if train_depth() < 4 {
        return;
    }
    let db = sqlite_db().await;
    let w = poisoned_train_world(&db.url).await;
    let failed = one_car(
        &w,
        &[
            ("member0", "POISON"),
            ("member1", "read"),
            ("member2", "read"),
            ("member3", "read"),
        ],
    )
    .await;
    let first = batch_of(&w, &db.db, &failed[0]).await;
    end_pipeline(&w, pipeline_of(&w, 1).await, PipelineOutcome::Failed);
    until_batch(&db.db, first.id, |b| b.status == "FAILED").await;

    // Both halves board in one round, each built on main as it is, not one
    // on the other: only one of them can hold the failing change.
    let main = w.gitlab.branch_head(w.project, "main");
    // The halves split the members as the batch lists them: the clean
    // half is the one without the poisoned request.
    let half_a = boarded_again(&w, &db.db, &failed[0], first.id).await;
    let mut clean = None;
    for member in &failed[1..] {
        let half = boarded_again(&w, &db.db, member, first.id).await;
        if half.id != half_a.id {
            clean = Some((member.clone(), half));
        }
    }
    let (clean_member, half_b) = clean.expect("two halves");
    for half in [&half_a, &half_b] {
        let built = until_batch(&db.db, half.id, |b| b.mr_iid.is_some()).await;
        assert_eq!(built.ahead_batch_id, None, "{built:?}");
        assert_eq!(built.base_sha, main, "built on main: {built:?}");
    }

    // A request approved meanwhile boards at once, on the half that
    // boarded last, while both are untested: not held for the bisection.
    let later = one_request(&w, "member4").await;
    let boarded = boarded_again(&w, &db.db, &later, 0).await;
    let boarded = until_batch(&db.db, boarded.id, |b| b.base_sha.is_some()).await;
    let last_half = [&half_a, &half_b]
        .into_iter()
        .max_by_key(|half| half.train_position)
        .unwrap();
    assert_eq!(boarded.ahead_batch_id, Some(last_half.id), "{boarded:?}");
    for half in [&half_a, &half_b] {
        let half = get_batch(&db.db, half.id).await.unwrap().unwrap();
        assert!(half.untested(), "{half:?}");
    }
    let on_failing_half = last_half.id == half_a.id;

    // The half with the poisoned request fails first. Had the request's
    // batch been built on it, it is built again on the clean half; else it
    // stays as it was. Either way the failed half's halves are built on the
    // request's batch, behind it.
    let pipeline_a = pipeline_of_batch(&w, &db.db, half_a.id).await;
    let pipeline_b = pipeline_of_batch(&w, &db.db, half_b.id).await;
    end_pipeline(&w, pipeline_a, PipelineOutcome::Failed);
    until_batch(&db.db, half_a.id, |b| b.status == "FAILED").await;
    let quarter = boarded_again(&w, &db.db, &failed[0], half_a.id).await;
    assert!(boarded.train_position < quarter.train_position);
    let boarded = until_batch(&db.db, boarded.id, |b| {
        b.ahead_batch_id == Some(half_b.id) && b.base_sha.is_some()
    })
    .await;
    assert_eq!(boarded.rebuilds, i32::from(on_failing_half), "{boarded:?}");
    let quarter = until_batch(&db.db, quarter.id, |b| b.base_sha.is_some()).await;
    assert_eq!(quarter.ahead_batch_id, Some(boarded.id), "{quarter:?}");
    let clean_half = get_batch(&db.db, half_b.id).await.unwrap().unwrap();
    assert!(clean_half.untested(), "{clean_half:?}");

    // The clean half passes and merges, with nothing built on it again.
    end_pipeline(&w, pipeline_b, PipelineOutcome::Success);
    until(&w, &clean_member, |v| v["status"] == "VALIDATED").await;

    let all: Vec<String> = failed.iter().chain([&later]).cloned().collect();
    let views = rounds_until_settled(&w, &all).await;
    for (id, v) in all.iter().zip(&views) {
        if *id == failed[0] {
            assert_eq!(v["step"]["name"], "CREATE_PIPELINE_FAILED", "{v}");
        } else {
            assert_eq!(v["status"], "VALIDATED", "{v}");
        }
    }
    // One MR per batch: 1, its two halves, the later request's (and its
    // second build, had it been built on the failed half), and the two
    // quarters.
    let mrs = 6 + u64::from(on_failing_half);
    assert!(mr_state(&w, mrs).is_some());
    assert_eq!(mr_state(&w, mrs + 1), None, "nothing else was built again");
    let files = w.gitlab.files(w.project, "main").unwrap();
    assert!(!files.values().any(|content| content.contains("POISON")));
}

#[tokio::test]
async fn a_batch_built_on_a_half_that_fails_is_built_again_on_what_is_ahead_of_it() {
    if train_depth() < 4 {
        return;
    }
    let db = sqlite_db().await;
    let w = train_world(&db.url).await;
    // The batch, its two halves and the batch built on the last half run
    // until the test ends them; which half fails is the test's to say.
    w.gitlab
        .script_pipelines(w.project, [PipelineOutcome::StuckRunning; 4])
        .unwrap();
    let failed = one_car(
        &w,
        &[
            ("member0", "read"),
            ("member1", "read"),
            ("member2", "read"),
            ("member3", "read"),
        ],
    )
    .await;
    let first = batch_of(&w, &db.db, &failed[0]).await;
    end_pipeline(&w, pipeline_of(&w, 1).await, PipelineOutcome::Failed);
    until_batch(&db.db, first.id, |b| b.status == "FAILED").await;
    let mut halves = Vec::new();
    for member in &failed {
        let half = boarded_again(&w, &db.db, member, first.id).await;
        if !halves.iter().any(|known: &BatchRow| known.id == half.id) {
            halves.push(half);
        }
    }
    halves.sort_by_key(|half| half.train_position);
    let [first_half, last_half] = [&halves[0], &halves[1]];

    // A request approved meanwhile boards on the last half, untested.
    let later = one_request(&w, "member4").await;
    let boarded = boarded_again(&w, &db.db, &later, 0).await;
    let boarded = until_batch(&db.db, boarded.id, |b| b.base_sha.is_some()).await;
    assert_eq!(boarded.ahead_batch_id, Some(last_half.id), "{boarded:?}");
    let first_pipeline = pipeline_of_batch(&w, &db.db, boarded.id).await;

    // The last half fails: the batch built on it is built again, on the
    // first half, its pipeline started afresh; the first half passes.
    let pipeline_first = pipeline_of_batch(&w, &db.db, first_half.id).await;
    let pipeline_last = pipeline_of_batch(&w, &db.db, last_half.id).await;
    end_pipeline(&w, pipeline_last, PipelineOutcome::Failed);
    let rebuilt = until_batch(&db.db, boarded.id, |b| {
        b.rebuilds == 1 && b.base_sha.is_some()
    })
    .await;
    assert_eq!(rebuilt.ahead_batch_id, Some(first_half.id), "{rebuilt:?}");
    assert_ne!(rebuilt.base_sha, boarded.base_sha, "{rebuilt:?}");
    assert_ne!(
        pipeline_of_batch(&w, &db.db, boarded.id).await,
        first_pipeline
    );
    end_pipeline(&w, pipeline_first, PipelineOutcome::Success);

    // Everyone merges: the first half, the request, and the failed half's
    // members in halves of their own (their pipelines pass).
    let all: Vec<String> = failed.iter().chain([&later]).cloned().collect();
    for (id, v) in all.iter().zip(rounds_until_settled(&w, &all).await) {
        assert_eq!(v["status"], "VALIDATED", "{id}: {v}");
    }
}

/// The pipeline of batch `id`'s MR, once it has one.
pub(super) async fn pipeline_of_batch(w: &World, db: &changegate::db::Db, id: i64) -> u64 {
    let iid = until_batch(db, id, |b| b.mr_iid.is_some())
        .await
        .mr_iid
        .and_then(|iid| u64::try_from(iid).ok())
        .unwrap();
    pipeline_of(w, iid).await
}

/// `subject` applies for read access and is approved: one request waiting
/// to board.
async fn one_request(w: &World, subject: &str) -> String {
    let id = apply_for(w, subject, "read").await;
    approve_all(w, std::slice::from_ref(&id)).await;
    until(w, &id, |v| v["step"]["name"] == "QUEUED").await;
    id
}

#[tokio::test]
async fn a_project_new_to_changegate_is_paced_by_its_pipelines_in_gitlab() {
    if train_depth() < 2 {
        return;
    }
    let db = sqlite_db().await;
    let w = train_world(&db.url).await;
    // Its CI took ten minutes a run: a new batch every five minutes at most.
    let ten_minutes = Duration::from_secs(600);
    w.gitlab
        .record_past_pipelines(w.project, &[ten_minutes; 5])
        .unwrap();
    w.gitlab
        .script_pipelines(w.project, [PipelineOutcome::StuckRunning; 2])
        .unwrap();
    let first = one_car(&w, &[("member0", "read")]).await;
    pipeline_of(&w, 1).await;
    let later = one_request(&w, "member1").await;
    for _ in 0..3 {
        claim_round(&w).await;
        assert_eq!(view(&w, &later).await["step"]["name"], "QUEUED");
    }
    assert_eq!(
        w.gitlab.calls(Endpoint::ListProjectPipelines),
        1,
        "read once, then remembered"
    );
    let car = batch_of(&w, &db.db, &first[0]).await;
    assert_eq!(car.status, "RUNNING");
}
