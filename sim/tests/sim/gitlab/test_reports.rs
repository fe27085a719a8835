//! A pipeline's test report: empty unless the project's CI publishes one, and
//! then a test case per file of the pipeline's tree, naming it, failed for
//! the file that holds the poisoned content.

use serde_json::Value;

use super::support::{BOT, Fixture};

async fn report(fx: &Fixture, iid: u64) -> Value {
    let id = fx.pipeline_of(iid);
    let answer = fx
        .get(BOT, &format!("{}/pipelines/{id}/test_report", fx.root))
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    answer.body
}

/// Each failed case's `file`.
fn failed_files(report: &Value) -> Vec<&str> {
    report["test_suites"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|suite| suite["test_cases"].as_array().unwrap())
        .filter(|case| case["status"] == "failed")
        .map(|case| case["file"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn a_failed_pipeline_reports_the_file_that_failed_when_the_project_publishes_junit() {
    let fx = Fixture::start().await;
    fx.sim
        .update_settings(fx.project, |s| {
            s.failing_content = Some("BREAKS-CI".to_owned());
        })
        .unwrap();
    let files = [("a.json", "{}\n"), ("b.json", "{\"x\": \"BREAKS-CI\"}\n")];
    let without = fx.open_mr("bot/without", &files).await;
    fx.poll_pipeline(without, "failed").await;
    let empty = report(&fx, without).await;
    assert_eq!(empty["total_count"], 0, "{empty}");
    assert_eq!(empty["test_suites"], serde_json::json!([]));

    fx.sim
        .update_settings(fx.project, |s| s.junit_reports = true)
        .unwrap();
    let with = fx.open_mr("bot/with", &files).await;
    let running = report(&fx, with).await;
    assert_eq!(running["total_count"], 0, "not ended yet: {running}");
    fx.poll_pipeline(with, "failed").await;
    let published = report(&fx, with).await;
    assert_eq!(failed_files(&published), ["./b.json"], "{published}");
    assert_eq!(published["failed_count"], 1);
    let total = published["total_count"].as_u64().unwrap();
    assert!(total >= 2, "a case per file of the tree: {published}");
    assert_eq!(published["success_count"].as_u64().unwrap(), total - 1);

    let clean = fx.open_mr("bot/clean", &[("c.json", "{}\n")]).await;
    fx.poll_pipeline(clean, "success").await;
    let passed = report(&fx, clean).await;
    assert!(passed["total_count"].as_u64().unwrap() > 0, "{passed}");
    assert_eq!(failed_files(&passed), Vec::<&str>::new());

    let unknown = fx
        .get(BOT, &format!("{}/pipelines/999999/test_report", fx.root))
        .await;
    assert_eq!(unknown.status, 404, "{}", unknown.text);
}
