//! What a request's timeline shows beside its steps, with the simulators:
//! the finished run of its MR's pipeline (status, duration, a page that
//! opens), each reviewer bot's approval, a rebase and the pipeline run after
//! it, the merge commit (a page that opens) and the deploy confirmation; for
//! a merge batch, on every member's timeline, each once.

use serde_json::Value;

use super::batched::{apply_for, approve_all, manual_rounds, rounds_until_settled};
use super::end_to_end::{World, world, world_with};
use super::gitlab_faults::{approve, mr_first_held, settled, waiting_for_approval};
use super::{apply, move_main_on, use_semi_linear_history, wait_for};
use crate::helpers::{each_backend, sqlite_db};

async fn entries(w: &World, who: &str, id: &str) -> Vec<Value> {
    let timeline: Value = w
        .app
        .get_as(who, &format!("/api/v1/operations/{id}/timeline"))
        .await
        .json()
        .await
        .unwrap();
    timeline["items"].as_array().unwrap().clone()
}

fn of_kind<'a>(entries: &'a [Value], kind: &str) -> Vec<&'a Value> {
    entries.iter().filter(|e| e["kind"] == kind).collect()
}

fn position(entries: &[Value], kind: &str) -> usize {
    entries
        .iter()
        .position(|e| e["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} entry: {entries:#?}"))
}

/// The page a link leads to answers 200.
async fn opens(url: &str) {
    let answer = reqwest::get(url).await.unwrap();
    assert_eq!(answer.status(), 200, "{url}");
}

/// One finished pipeline run, both bots' approvals, the merge commit and
/// the deploy, in that order, each once.
async fn went_all_the_way(w: &World, who: &str, id: &str, context: &str) -> Vec<Value> {
    let entries = entries(w, who, id).await;
    let pipelines = of_kind(&entries, "PIPELINE");
    assert_eq!(pipelines.len(), 1, "{context}: one run: {entries:#?}");
    let run = pipelines[0];
    assert_eq!(run["detail"], "success", "{context}: {run}");
    assert_eq!(run["actor"], "gitlab");
    let message = run["message"].as_str().unwrap();
    assert!(message.contains("passed ("), "its duration: {message}");
    let url = run["url"].as_str().unwrap();
    assert!(url.contains("/-/pipelines/"), "{url}");
    opens(url).await;

    let approvals: Vec<&str> = of_kind(&entries, "APPROVAL")
        .iter()
        .map(|e| e["actor"].as_str().unwrap())
        .collect();
    assert_eq!(
        approvals,
        ["reviewer bot 1", "reviewer bot 2"],
        "{context}: each bot once: {entries:#?}"
    );

    let merges = of_kind(&entries, "MERGE");
    assert_eq!(merges.len(), 1, "{context}: {entries:#?}");
    let url = merges[0]["url"].as_str().unwrap();
    let sha = merges[0]["detail"].as_str().unwrap();
    assert!(url.ends_with(&format!("/-/commit/{sha}")), "{url}");
    opens(url).await;

    let deploys = of_kind(&entries, "DEPLOY");
    assert_eq!(deploys.len(), 1, "{context}: {entries:#?}");
    assert_eq!(deploys[0]["step"]["name"], "DEPLOY_CONFIRMED");
    assert_eq!(deploys[0]["actor"], "deploy-callback");

    let order = ["PIPELINE", "APPROVAL", "MERGE", "DEPLOY"].map(|kind| position(&entries, kind));
    assert!(order.is_sorted(), "{context}: in order: {entries:#?}");
    entries
}

#[tokio::test]
async fn a_request_timeline_shows_its_pipeline_approvals_merge_commit_and_deploy() {
    for test_db in each_backend().await {
        let w = world(&test_db.url, "").await;
        let id = apply(&w.app).await;
        let view = settled(&w, &id).await;
        assert_eq!(view["status"], "VALIDATED", "{}: {view}", test_db.name);
        let entries = went_all_the_way(&w, "alice", &id, test_db.name).await;
        let iid = view["mergeRequest"]["iid"].as_i64().unwrap();
        let mr = w
            .gitlab
            .merge_request(w.project, u64::try_from(iid).unwrap())
            .unwrap();
        let merged_at = mr.merge_commit_sha.unwrap_or(mr.sha);
        assert_eq!(of_kind(&entries, "MERGE")[0]["detail"], merged_at.as_str());
        // Events leave the step as it was: no entry moves the status but steps.
        for event in entries
            .iter()
            .filter(|e| e["kind"] != "STEP" && e["kind"] != "DEPLOY")
        {
            assert!(event.get("status").is_none(), "{event}");
        }
    }
}

#[tokio::test]
async fn every_member_of_a_merge_batch_has_the_batch_s_events_once() {
    for test_db in each_backend().await {
        let w = world_with(&test_db.url, manual_rounds()).await;
        let mut ids = Vec::new();
        for n in 0..3 {
            ids.push(apply_for(&w, &format!("member{n}"), "read").await);
        }
        approve_all(&w, &ids).await;
        for view in rounds_until_settled(&w, &ids).await {
            assert_eq!(view["status"], "VALIDATED", "{}: {view}", test_db.name);
        }
        let mut shas = Vec::new();
        for (n, id) in ids.iter().enumerate() {
            let entries = went_all_the_way(&w, &format!("member{n}"), id, test_db.name).await;
            shas.push(of_kind(&entries, "MERGE")[0]["detail"].clone());
        }
        assert!(
            shas.iter().all(|sha| *sha == shas[0]),
            "one merge: {shas:?}"
        );
    }
}

#[tokio::test]
async fn a_rebase_and_the_pipeline_run_after_it_are_on_the_timeline() {
    let db = sqlite_db().await;
    let w = world_with(&db.url, mr_first_held()).await;
    use_semi_linear_history(&w);
    let id = apply(&w.app).await;
    waiting_for_approval(&w, &id).await;
    move_main_on(&w);
    approve(&w, &id).await;
    let view = settled(&w, &id).await;
    assert_eq!(view["status"], "VALIDATED", "{view}");
    let entries = entries(&w, "alice", &id).await;
    let rebases = of_kind(&entries, "REBASE");
    assert_eq!(rebases.len(), 1, "{entries:#?}");
    assert!(
        rebases[0]["message"]
            .as_str()
            .unwrap()
            .contains("is behind its target branch"),
        "{entries:#?}"
    );
    let runs: Vec<&str> = of_kind(&entries, "PIPELINE")
        .iter()
        .map(|e| e["url"].as_str().unwrap())
        .collect();
    assert_eq!(runs.len(), 2, "before and after the rebase: {entries:#?}");
    assert_ne!(runs[0], runs[1]);
    let rebase = position(&entries, "REBASE");
    let after = entries
        .iter()
        .rposition(|e| e["kind"] == "PIPELINE")
        .unwrap();
    assert!(
        rebase < after && after < position(&entries, "MERGE"),
        "{entries:#?}"
    );
    wait_for(&w.app, &id, |v| v["status"] == "VALIDATED").await;
}
