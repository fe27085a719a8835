//! Pipelines as a merge train meets them: each branch's pipeline on its own clock, at
//! the same time as the others; durations drawn per pipeline from a seeded range, the same
//! for a merge request's nth pipeline whatever else ran; and a
//! poisoned file failing every pipeline whose tree holds it, including one of a branch
//! stacked on the branch that brought it.

use std::time::Duration;

use changegate_sim::gitlab::GitLabSimOptions;
use reqwest::Method;
use serde_json::json;

use super::support::{BOT, Fixture, REPORTER};
use crate::control_client::call;

#[tokio::test]
async fn pipelines_of_different_branches_run_at_the_same_time() {
    let duration = Duration::from_millis(400);
    let fx = Fixture::with_options(GitLabSimOptions {
        pipeline_duration: duration,
        ..GitLabSimOptions::default()
    })
    .await;
    let one = fx.open_mr("bot/one", &[("one.json", "1\n")]).await;
    let two = fx.open_mr("bot/two", &[("two.json", "2\n")]).await;
    // created → pending → running, for both.
    for _ in 0..2 {
        for iid in [one, two] {
            fx.get(BOT, &fx.mr_path(iid, "")).await;
        }
    }
    for iid in [one, two] {
        let mr = fx.get(BOT, &fx.mr_path(iid, "")).await;
        assert_eq!(mr.body["head_pipeline"]["status"], "running", "!{iid}");
    }
    tokio::time::sleep(duration + Duration::from_millis(50)).await;
    for iid in [one, two] {
        let mr = fx.get(BOT, &fx.mr_path(iid, "")).await;
        assert_eq!(
            mr.body["head_pipeline"]["status"], "success",
            "!{iid} finished after one pipeline's time, not two"
        );
    }
}

#[tokio::test]
async fn pipeline_durations_are_drawn_within_the_range_from_the_seed() {
    let (low, high) = (Duration::from_secs(5), Duration::from_secs(15));
    let durations = |seed| async move {
        let fx = Fixture::with_options(GitLabSimOptions {
            pipeline_duration: low,
            pipeline_duration_max: Some(high),
            pipeline_seed: seed,
            ..GitLabSimOptions::default()
        })
        .await;
        let mut drawn = Vec::new();
        for n in 0..6 {
            let iid = fx.open_mr(&format!("bot/{n}"), &[("a.json", "{}\n")]).await;
            let id = fx.pipeline_of(iid);
            drawn.push(fx.sim.pipeline_duration(fx.project, id).unwrap());
        }
        drawn
    };
    let first = durations(11).await;
    assert!(first.iter().all(|d| (low..=high).contains(d)), "{first:?}");
    assert!(first.iter().any(|d| *d != first[0]), "they vary: {first:?}");
    assert_eq!(first, durations(11).await, "the same seed, the same draws");
    assert_ne!(first, durations(12).await);
}

/// The duration of the newest pipeline of merge request `iid`.
fn newest_duration(fx: &Fixture, iid: u64) -> Duration {
    fx.sim
        .pipeline_duration(fx.project, fx.pipeline_of(iid))
        .expect("a pipeline")
}

/// Commits `file` on `branch` (an open MR's source branch: a new pipeline).
async fn commit_again(fx: &Fixture, branch: &str, file: &str) {
    let commit = fx
        .post(
            BOT,
            &format!("{}/repository/commits", fx.root),
            json!({ "branch": branch, "commit_message": "bot: again",
                    "actions": [{ "action": "create", "file_path": file, "content": "{}\n" }] }),
        )
        .await;
    assert_eq!(commit.status, 201, "{}", commit.text);
}

#[tokio::test]
async fn a_merge_requests_pipelines_draw_the_same_durations_whatever_order_pipelines_start_in() {
    let options = || GitLabSimOptions {
        pipeline_duration: Duration::from_secs(5),
        pipeline_duration_max: Some(Duration::from_secs(15)),
        pipeline_seed: 11,
        ..GitLabSimOptions::default()
    };
    // !1's first pipeline, !2's, then !1's second.
    let fx = Fixture::with_options(options()).await;
    let one = fx.open_mr("bot/one", &[("one.json", "1\n")]).await;
    let first_of_one = newest_duration(&fx, one);
    let two = fx.open_mr("bot/two", &[("two.json", "2\n")]).await;
    let of_two = newest_duration(&fx, two);
    commit_again(&fx, "bot/one", "again.json").await;
    let second_of_one = newest_duration(&fx, one);
    assert_ne!(first_of_one, second_of_one, "each pipeline draws its own");

    // !1's two pipelines first, then !2's.
    let fx = Fixture::with_options(options()).await;
    let one = fx.open_mr("bot/one", &[("one.json", "1\n")]).await;
    assert_eq!(newest_duration(&fx, one), first_of_one);
    commit_again(&fx, "bot/one", "again.json").await;
    assert_eq!(newest_duration(&fx, one), second_of_one);
    let two = fx.open_mr("bot/two", &[("two.json", "2\n")]).await;
    assert_eq!(newest_duration(&fx, two), of_two);
}

#[tokio::test]
async fn a_project_with_its_own_pipeline_duration_runs_its_pipelines_that_long() {
    let fx = Fixture::with_options(GitLabSimOptions {
        pipeline_duration: Duration::from_secs(5),
        pipeline_duration_max: Some(Duration::from_secs(15)),
        ..GitLabSimOptions::default()
    })
    .await;
    let own = Duration::from_secs(600);
    fx.sim
        .update_settings(fx.project, |s| s.pipeline_duration = Some(own))
        .unwrap();
    for n in 0..3 {
        let iid = fx.open_mr(&format!("bot/{n}"), &[("a.json", "{}\n")]).await;
        let id = fx.pipeline_of(iid);
        assert_eq!(fx.sim.pipeline_duration(fx.project, id), Some(own));
    }
}

#[tokio::test]
async fn pipeline_durations_can_change_over_the_control_api() {
    let fx = Fixture::start().await;
    let url = format!("{}/_sim/pipeline_durations", fx.sim.base_url());
    let set = call(
        Method::PUT,
        &url,
        Some(json!({ "min_ms": 200, "max_ms": 300 })),
    )
    .await;
    assert_eq!(set.status, 204);
    let iid = fx.open_mr("bot/one", &[("a.json", "{}\n")]).await;
    let id = fx.pipeline_of(iid);
    let seen = call(
        Method::GET,
        &format!(
            "{}/_sim/projects/config%2Frepo/pipelines/{id}",
            fx.sim.base_url()
        ),
        None,
    )
    .await;
    let ms = seen.body["duration_ms"].as_u64().unwrap();
    assert!((200..=300).contains(&ms), "{}", seen.body);
    let upside_down = call(
        Method::PUT,
        &url,
        Some(json!({ "min_ms": 300, "max_ms": 200 })),
    )
    .await;
    assert_eq!(upside_down.status, 400);
}

#[tokio::test]
async fn a_poisoned_file_fails_the_pipelines_of_its_branch_and_of_a_branch_stacked_on_it() {
    let fx = Fixture::start().await;
    fx.sim
        .update_settings(fx.project, |s| {
            s.failing_content = Some("BREAKS-CI".to_owned());
        })
        .unwrap();
    let poisoned = fx
        .open_mr("bot/a", &[("a.json", "{\"x\": \"BREAKS-CI\"}\n")])
        .await;
    fx.poll_pipeline(poisoned, "failed").await;

    // Stacked on the poisoned head, with only clean files of its own.
    let a_head = fx.sim.branch_head(fx.project, "bot/a").unwrap();
    let created = fx
        .post(
            BOT,
            &format!("{}/repository/branches", fx.root),
            json!({ "branch": "bot/b", "ref": a_head }),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text);
    let committed = fx
        .post(
            BOT,
            &format!("{}/repository/commits", fx.root),
            json!({
                "branch": "bot/b",
                "commit_message": "bot: clean",
                "actions": [{ "action": "create", "file_path": "b.json", "content": "{}\n" }],
            }),
        )
        .await;
    assert_eq!(committed.status, 201, "{}", committed.text);
    let stacked = fx
        .post(
            BOT,
            &format!("{}/merge_requests", fx.root),
            json!({ "source_branch": "bot/b", "target_branch": "main", "title": "bot: b" }),
        )
        .await;
    let stacked = stacked.body["iid"].as_u64().unwrap();
    fx.poll_pipeline(stacked, "failed").await;

    // The same clean file on a branch from main passes.
    let clean = fx.open_mr("bot/c", &[("b.json", "{}\n")]).await;
    fx.poll_pipeline(clean, "success").await;
}

#[tokio::test]
async fn a_pipeline_in_flight_is_canceled_and_a_finished_one_is_left_as_it_was() {
    let fx = Fixture::with_options(GitLabSimOptions {
        pipeline_duration: Duration::from_secs(600),
        ..GitLabSimOptions::default()
    })
    .await;
    let running = fx.open_mr("bot/running", &[("one.json", "1\n")]).await;
    fx.poll_pipeline(running, "running").await;
    let id = fx.pipeline_of(running);
    let cancel = format!("{}/pipelines/{id}/cancel", fx.root);
    // Who may not push may not cancel.
    let refused = fx.post(REPORTER, &cancel, json!({})).await;
    assert_eq!(refused.status, 403, "{}", refused.text);
    let canceled = fx.post(BOT, &cancel, json!({})).await;
    assert_eq!(canceled.status, 200, "{}", canceled.text);
    assert_eq!(canceled.str("status"), "canceled");
    assert_eq!(canceled.body["id"], id);
    let mr = fx.get(BOT, &fx.mr_path(running, "")).await;
    assert_eq!(mr.body["head_pipeline"]["status"], "canceled");

    // A finished pipeline is answered 200 as it is, not canceled.
    let fast = Fixture::start().await;
    let done = fast.open_mr("bot/done", &[("two.json", "2\n")]).await;
    fast.poll_pipeline(done, "success").await;
    let id = fast.pipeline_of(done);
    let again = fast
        .post(
            BOT,
            &format!("{}/pipelines/{id}/cancel", fast.root),
            json!({}),
        )
        .await;
    assert_eq!((again.status, again.str("status")), (200, "success"));
    let unknown = fast
        .post(
            BOT,
            &format!("{}/pipelines/999999/cancel", fast.root),
            json!({}),
        )
        .await;
    assert_eq!(unknown.status, 404, "{}", unknown.text);
}
