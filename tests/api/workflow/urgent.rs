//! The urgent lane (SPEC §12): an operator marks a request urgent (audited,
//! counted); it goes in the next merge round, in a batch of urgent requests
//! only, and lands while an ordinary batch ahead of it hangs and then fails.

use changegate_sim::gitlab::PipelineOutcome;
use serde_json::{Value, json};

use super::batched::{apply_for, approve_all, manual_rounds, rounds_until_settled, view};
use super::end_to_end::{World, world_with};
use super::train::{one_car, pipeline_of, until};
use crate::helpers::each_backend;

async fn mark_urgent(w: &World, id: &str) -> Value {
    let answer = w
        .app
        .post_as(
            "admin",
            &format!("/admin/v1/operations/{id}/urgent"),
            &json!({ "reason": "the outage fix" }),
        )
        .await;
    assert_eq!(answer.status(), 200);
    answer.json().await.unwrap()
}

#[tokio::test]
async fn urgent_requests_overtake_a_batch_whose_pipeline_hangs_and_then_fails() {
    for test_db in each_backend().await {
        let w = world_with(&test_db.url, manual_rounds()).await;
        w.gitlab
            .script_pipelines(w.project, [PipelineOutcome::StuckRunning])
            .unwrap();
        let ordinary = one_car(&w, &[("member0", "read")]).await;
        let hung = pipeline_of(&w, 1).await;

        // One marked urgent while it awaits approval, one once queued.
        let early = apply_for(&w, "member1", "write").await;
        let marked = mark_urgent(&w, &early).await;
        assert_eq!(marked["operation"]["urgent"], true, "{marked}");
        approve_all(&w, std::slice::from_ref(&early)).await;
        let late = apply_for(&w, "member2", "write").await;
        approve_all(&w, std::slice::from_ref(&late)).await;
        until(&w, &late, |v| v["step"]["name"] == "QUEUED").await;
        mark_urgent(&w, &late).await;

        let urgent = [early.clone(), late.clone()];
        let views = rounds_until_settled(&w, &urgent).await;
        for seen in &views {
            assert_eq!(seen["status"], "VALIDATED", "{}: {seen}", test_db.name);
        }
        assert_eq!(views[0]["batchId"], views[1]["batchId"], "one urgent batch");
        assert_ne!(
            views[0]["batchId"],
            view(&w, &ordinary[0]).await["batchId"],
            "{}: never in the ordinary batch",
            test_db.name
        );
        assert_eq!(
            view(&w, &ordinary[0]).await["status"],
            "MR_CREATED",
            "{}: the ordinary batch still waits for its pipeline",
            test_db.name
        );

        // The ordinary batch's pipeline fails at last: it ends somewhere
        // definite, and the urgent merge stands.
        w.gitlab
            .force_pipeline(w.project, hung, PipelineOutcome::Failed)
            .unwrap();
        rounds_until_settled(&w, &ordinary).await;
        let merged: Vec<String> = w
            .gitlab
            .merge_log(w.project)
            .into_iter()
            .map(|merge| merge.source_branch)
            .collect();
        assert!(!merged.is_empty(), "{merged:?}");

        let audit: Value = w
            .app
            .get_as("admin", "/admin/v1/audit")
            .await
            .json()
            .await
            .unwrap();
        let marks = audit["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|entry| entry["action"] == "operation.urgent")
            .count();
        assert_eq!(marks, 2, "{}: {audit}", test_db.name);
        // A revert submitted urgent goes to the lane too; only operators may.
        let refused = w
            .app
            .post_as(
                "member1",
                &format!("/api/v1/operations/{early}/revert"),
                &json!({ "reason": "undo", "urgent": true }),
            )
            .await;
        assert_eq!(refused.status(), 403);
        let revert: Value = w
            .app
            .post_as(
                "admin",
                &format!("/api/v1/operations/{early}/revert"),
                &json!({ "reason": "undo the fix", "urgent": true }),
            )
            .await
            .json()
            .await
            .unwrap();
        let revert = revert["operationId"].as_str().unwrap().to_owned();
        assert_eq!(view(&w, &revert).await["urgent"], true);

        let metrics = w.app.get("/metrics").await.text().await.unwrap();
        assert!(
            metrics
                .lines()
                .any(|line| line.starts_with("changegate_urgent_requests_total")),
            "{metrics}"
        );
    }
}
