//! An operator's Retry of a request whose pipeline failed runs the pipeline
//! again (a flaky CI run is what Retry is for), instead of re-reading the
//! same failed pipeline and failing at once.

use changegate_sim::gitlab::{Endpoint, Fault, FaultKind, PipelineOutcome};

use super::end_to_end::{World, WorldOptions, world_with};
use super::*;
use crate::helpers::each_backend;

async fn unbatched(db_url: &str) -> World {
    world_with(
        db_url,
        WorldOptions {
            batch_keys: "enabled = false".to_owned(),
            ..WorldOptions::default()
        },
    )
    .await
}

async fn retry(w: &World, id: &str) -> Value {
    let answer = w
        .app
        .post_as(
            "admin",
            &format!("/admin/v1/operations/{id}/retry"),
            &serde_json::json!({ "reason": "flaky CI run" }),
        )
        .await;
    assert_eq!(answer.status(), 200);
    answer.json().await.unwrap()
}

async fn pipeline_failed(w: &World) -> String {
    w.gitlab
        .script_pipelines(w.project, [PipelineOutcome::Failed])
        .unwrap();
    let id = apply(&w.app).await;
    let failed = wait_for(&w.app, &id, |v| v["next"] == "CONTACT_TEAM").await;
    assert_eq!(
        (failed["status"].as_str(), failed["step"]["name"].as_str()),
        (Some("CREATE_FAILED"), Some("CREATE_PIPELINE_FAILED")),
        "{failed}"
    );
    id
}

#[tokio::test]
async fn retry_after_a_failed_pipeline_runs_it_again_and_the_request_lands() {
    for test_db in each_backend().await {
        let w = unbatched(&test_db.url).await;
        let id = pipeline_failed(&w).await;

        let answer = retry(&w, &id).await;
        assert_eq!(
            answer["operation"]["step"]["name"], "PIPELINE_RETRYING",
            "{}: {answer}",
            test_db.name
        );
        let view = wait_for(&w.app, &id, |v| {
            v["status"] == "VALIDATED" || v["next"] == "CONTACT_TEAM"
        })
        .await;

        assert_eq!(view["status"], "VALIDATED", "{}: {view}", test_db.name);
        assert_eq!(
            w.gitlab.calls(Endpoint::RetryPipeline),
            1,
            "{}",
            test_db.name
        );
        assert_eq!(
            w.gitlab.calls(Endpoint::CreateMergeRequest),
            1,
            "{}: the same MR, its pipeline run again",
            test_db.name
        );
    }
}

#[tokio::test]
async fn a_pipeline_retry_whose_answer_was_lost_is_not_asked_twice() {
    let db = crate::helpers::sqlite_db().await;
    let w = unbatched(&db.url).await;
    let id = pipeline_failed(&w).await;
    w.gitlab
        .inject(Fault::new(Endpoint::RetryPipeline, FaultKind::AppliedThenStatus(502)).times(1));

    retry(&w, &id).await;
    let view = wait_for(&w.app, &id, |v| {
        v["status"] == "VALIDATED" || v["next"] == "CONTACT_TEAM"
    })
    .await;

    assert_eq!(view["status"], "VALIDATED", "{view}");
    assert_eq!(
        w.gitlab.calls(Endpoint::RetryPipeline),
        1,
        "the MR showed the pipeline running again"
    );
}

#[tokio::test]
async fn a_pipeline_that_fails_again_after_a_retry_says_so_again() {
    let db = crate::helpers::sqlite_db().await;
    let w = unbatched(&db.url).await;
    let id = pipeline_failed(&w).await;
    w.gitlab
        .script_pipelines(w.project, [PipelineOutcome::Failed])
        .unwrap();

    retry(&w, &id).await;
    let view = wait_for(&w.app, &id, |v| {
        v["next"] == "CONTACT_TEAM" && v["step"]["name"] != "PIPELINE_RETRYING"
    })
    .await;

    assert_eq!(view["step"]["name"], "CREATE_PIPELINE_FAILED", "{view}");
    assert_eq!(w.gitlab.calls(Endpoint::RetryPipeline), 1);
}
