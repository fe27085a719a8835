//! Each of GitLab's merge methods (merge commit, semi-linear, fast-forward),
//! alone and in a batch, with `main` still and with `main` moved on: every
//! request ends VALIDATED with its file on `main` exactly as rendered; a rebase
//! is asked for only where the method needs one, and a rebased head merges
//! only once its own pipeline passed.

use std::time::{Duration, Instant};

use changegate::db::batches::get_batch;
use changegate::domain::render::{BindingFile, canonical_json};
use changegate_sim::gitlab::{Endpoint, MergeMethod, MrState, PipelineOutcome};
use serde_json::{Value, json};

use super::batched::{
    apply_for, approve_all, claim_round, manual_rounds, rounds_until_settled, view,
};
use super::end_to_end::{World, WorldOptions, world_with};
use super::gitlab_faults::{approve, mr_first_held, settled, waiting_for_approval};
use super::{apply, move_main_on};
use crate::helpers::{sqlite_db, train_depth};

/// The file changegate renders for `subject` applying for itself on
/// `team.access` (what [`apply_for`] asks) as operation `id`.
fn rendered(subject: &str, level: &str, id: &str) -> String {
    BindingFile {
        subject,
        target: "team.access",
        params: &canonical_json(&json!({ "level": level })),
        expires_at: None,
        operation_id: id,
        requested_by: subject,
    }
    .render()
}

fn use_method(w: &World, method: MergeMethod) {
    w.gitlab
        .update_settings(w.project, |s| s.merge_method = method)
        .unwrap();
}

/// Every request of `subjects` (ids in the same order) is VALIDATED and its
/// file on `main` is byte for byte what was rendered; `main` moved on keeps
/// its own change.
async fn assert_landed(w: &World, subjects: &[String], ids: &[String], moved: bool) {
    let files = w.gitlab.files(w.project, "main").unwrap();
    for (subject, id) in subjects.iter().zip(ids) {
        let seen = view(w, id).await;
        assert_eq!(seen["status"], "VALIDATED", "{subject}: {seen}");
        let path = format!("bindings/team.access/{subject}.json");
        assert_eq!(
            files.get(&path),
            Some(&rendered(subject, "read", id)),
            "{path} on main"
        );
    }
    if moved {
        assert_eq!(files["docs/other.md"], "moved on\n");
    }
}

/// Polls operation `id` (as an operator: the requesters are others than
/// alice) until `done` holds for its view.
async fn until(w: &World, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let seen = view(w, id).await;
        if done(&seen) {
            return seen;
        }
        assert!(
            Instant::now() < deadline,
            "gave up waiting; last seen {seen}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn finished(view: &Value) -> bool {
    view["status"] == "VALIDATED" || view["next"] == "CONTACT_TEAM"
}

/// Ends the running head pipeline of MR `iid` with success.
fn pass_head_pipeline(w: &World, iid: u64) {
    let mr = w.gitlab.merge_request(w.project, iid).unwrap();
    let (pipeline, _) = mr.head_pipeline.unwrap();
    w.gitlab
        .force_pipeline(w.project, pipeline, PipelineOutcome::Success)
        .unwrap();
}

/// With each merge method, unbatched: one request as it comes, then one whose
/// MR is behind `main` when its pipeline passes.
async fn single_requests_land_with(method: MergeMethod) {
    let db = sqlite_db().await;
    let w = world_with(
        &db.url,
        WorldOptions {
            batch_keys: "enabled = false".to_owned(),
            ..WorldOptions::default()
        },
    )
    .await;
    use_method(&w, method);
    let subjects = ["member0".to_owned(), "member1".to_owned()];
    let mut ids = vec![apply_for(&w, &subjects[0], "read").await];
    until(&w, &ids[0], finished).await;
    assert_landed(&w, &subjects[..1], &ids, false).await;

    w.gitlab
        .script_pipelines(w.project, [PipelineOutcome::StuckRunning])
        .unwrap();
    ids.push(apply_for(&w, &subjects[1], "read").await);
    let opened = until(&w, &ids[1], |v| v["status"] == "MR_CREATED").await;
    let iid = u64::try_from(opened["mergeRequest"]["iid"].as_i64().unwrap()).unwrap();
    move_main_on(&w);
    pass_head_pipeline(&w, iid);
    until(&w, &ids[1], finished).await;

    assert_landed(&w, &subjects, &ids, true).await;
    assert_rebases(&w, method);
}

/// With each merge method, batched: a batch as it comes, then a batch whose
/// MR is behind `main` by the time it merges.
async fn batches_land_with(method: MergeMethod) {
    let db = sqlite_db().await;
    let w = world_with(&db.url, manual_rounds()).await;
    use_method(&w, method);
    let subjects: Vec<String> = (0..6).map(|n| format!("member{n}")).collect();
    let mut ids = Vec::new();
    for subject in &subjects[..3] {
        ids.push(apply_for(&w, subject, "read").await);
    }
    approve_all(&w, &ids).await;
    rounds_until_settled(&w, &ids).await;
    assert_landed(&w, &subjects[..3], &ids, false).await;

    let mut later = Vec::new();
    for subject in &subjects[3..] {
        later.push(apply_for(&w, subject, "read").await);
    }
    approve_all(&w, &later).await;
    // Its pipeline runs until `main` has moved on.
    w.gitlab
        .script_pipelines(w.project, [PipelineOutcome::StuckRunning])
        .unwrap();
    claim_round(&w).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while w.gitlab.merge_request(w.project, 2).is_none() {
        assert!(Instant::now() < deadline, "the second batch opened no MR");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    move_main_on(&w);
    pass_head_pipeline(&w, 2);
    rounds_until_settled(&w, &later).await;
    let batch = view(&w, &later[0]).await["batchId"].as_i64().unwrap();
    let batch = get_batch(&db.db, batch).await.unwrap().unwrap();
    assert_eq!(
        batch.merge_commit_sha,
        w.gitlab.branch_head(w.project, "main"),
        "{method:?}: the batch records the commit its merge put on main"
    );

    ids.extend(later);
    assert_landed(&w, &subjects, &ids, true).await;
    if rebuilds_when_main_moves(method) {
        // Built again on the moved main, as a new MR whose own pipeline
        // tested what main now holds; the first is closed, nothing rebased.
        assert_eq!(batch.rebuilds, 1, "{method:?}");
        assert_eq!(
            w.gitlab.merge_request(w.project, 2).map(|mr| mr.state),
            Some(MrState::Closed)
        );
        assert_eq!(
            w.gitlab.merge_request(w.project, 3).map(|mr| mr.state),
            Some(MrState::Merged)
        );
        assert_eq!(w.gitlab.calls(Endpoint::Rebase), 0, "{method:?}");
    } else {
        assert_eq!(batch.rebuilds, 0, "{method:?}");
        assert_eq!(
            w.gitlab.merge_request(w.project, 2).map(|mr| mr.state),
            Some(MrState::Merged)
        );
        assert_rebases(&w, method);
    }
}

/// In a merge train (more than one batch in flight), a batch whose target
/// moved is built again on it, unless the project's history is semi-linear,
/// where the train runs one batch at a time, as before.
fn rebuilds_when_main_moves(method: MergeMethod) -> bool {
    train_depth() > 1 && method != MergeMethod::RebaseMerge
}

/// Merge commits never need a rebase; the linear methods rebase the MR that
/// fell behind.
fn assert_rebases(w: &World, method: MergeMethod) {
    let rebases = w.gitlab.calls(Endpoint::Rebase);
    match method {
        MergeMethod::Merge => assert_eq!(rebases, 0, "no rebase with merge commits"),
        _ => assert_eq!(rebases, 1, "{method:?} rebases the MR behind main"),
    }
}

#[tokio::test]
async fn with_merge_commits_single_requests_land_without_a_rebase() {
    single_requests_land_with(MergeMethod::Merge).await;
}

#[tokio::test]
async fn with_semi_linear_history_single_requests_land_after_a_rebase() {
    single_requests_land_with(MergeMethod::RebaseMerge).await;
}

#[tokio::test]
async fn with_fast_forward_merges_single_requests_land_after_a_rebase() {
    single_requests_land_with(MergeMethod::Ff).await;
}

#[tokio::test]
async fn with_merge_commits_batches_land_without_a_rebase() {
    batches_land_with(MergeMethod::Merge).await;
}

#[tokio::test]
async fn with_semi_linear_history_batches_land_after_a_rebase() {
    batches_land_with(MergeMethod::RebaseMerge).await;
}

#[tokio::test]
async fn with_fast_forward_merges_batches_land_after_a_rebase() {
    batches_land_with(MergeMethod::Ff).await;
}

/// A rebased MR, under a method that needs one and without "Pipelines must
/// succeed" (so GitLab would merge at once): it is not merged while the new
/// head's pipeline runs, and merges at that head once it passed.
async fn a_rebased_head_waits_for_its_own_pipeline(method: MergeMethod) {
    let db = sqlite_db().await;
    let w = world_with(&db.url, mr_first_held()).await;
    w.gitlab
        .update_settings(w.project, |s| {
            s.pipelines_must_succeed = false;
            s.merge_method = method;
        })
        .unwrap();
    // The MR's first pipeline passes; the rebased head's keeps running.
    w.gitlab
        .script_pipelines(
            w.project,
            [PipelineOutcome::Success, PipelineOutcome::StuckRunning],
        )
        .unwrap();
    let id = apply(&w.app).await;
    let iid = u64::try_from(waiting_for_approval(&w, &id).await).unwrap();
    let first_head = w.gitlab.merge_request(w.project, iid).unwrap().sha;
    move_main_on(&w);
    approve(&w, &id).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while w.gitlab.merge_request(w.project, iid).unwrap().sha == first_head {
        assert!(Instant::now() < deadline, "{method:?}: no rebase");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mr = w.gitlab.merge_request(w.project, iid).unwrap();
    assert_eq!(
        mr.state,
        MrState::Opened,
        "{method:?}: merged while CI runs"
    );
    assert_eq!(w.gitlab.calls(Endpoint::Merge), 0, "{method:?}");

    pass_head_pipeline(&w, iid);
    let done: Value = settled(&w, &id).await;
    assert_eq!(done["status"], "VALIDATED", "{method:?}: {done}");
    let merged = w.gitlab.merge_request(w.project, iid).unwrap();
    assert_eq!(merged.sha, mr.sha, "{method:?}: merged at the rebased head");
    if method == MergeMethod::Ff {
        assert_eq!(w.gitlab.branch_head(w.project, "main"), Some(mr.sha));
    }
}

#[tokio::test]
async fn with_semi_linear_history_a_rebased_head_merges_only_after_its_own_pipeline() {
    a_rebased_head_waits_for_its_own_pipeline(MergeMethod::RebaseMerge).await;
}

#[tokio::test]
async fn with_fast_forward_merges_a_rebased_head_merges_only_after_its_own_pipeline() {
    a_rebased_head_waits_for_its_own_pipeline(MergeMethod::Ff).await;
}

#[tokio::test]
async fn an_mr_not_mergeable_by_the_deadline_waits_on_and_merges_once_it_can() {
    let db = sqlite_db().await;
    let w = world_with(
        &db.url,
        WorldOptions {
            extra: "[workflow]\nflow_order = \"mr_first\"\nshort_polls = 2\n\
                    short_poll_interval = \"50ms\"\nlong_polls = 0\n"
                .to_owned(),
            ..mr_first_held()
        },
    )
    .await;
    w.gitlab
        .update_settings(w.project, |s| {
            s.pipelines_must_succeed = false;
            // Semi-linear history: the moved main asks for a rebase.
            s.merge_method = MergeMethod::RebaseMerge;
        })
        .unwrap();
    w.gitlab
        .script_pipelines(
            w.project,
            [PipelineOutcome::Success, PipelineOutcome::StuckRunning],
        )
        .unwrap();
    let id = apply(&w.app).await;
    let iid = u64::try_from(waiting_for_approval(&w, &id).await).unwrap();
    move_main_on(&w);
    approve(&w, &id).await;

    // The rebased head's pipeline runs past the deadline: unknown, not failed.
    let pending = until(&w, &id, |v| {
        v["step"]["name"] == "MERGE_CHECKS_PENDING" || finished(v)
    })
    .await;
    assert_eq!(
        (pending["status"].as_str(), pending["next"].as_str()),
        (Some("MERGING"), Some("WAIT")),
        "{pending}"
    );
    assert!(
        pending["message"]
            .as_str()
            .unwrap()
            .contains("keeps checking"),
        "{pending}"
    );

    pass_head_pipeline(&w, iid);
    let done: Value = settled(&w, &id).await;
    assert_eq!(done["status"], "VALIDATED", "{done}");
}
