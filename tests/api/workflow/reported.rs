//! A batch whose pipeline fails, in a project whose CI publishes a JUnit
//! report naming each file it checks: the members whose files the report
//! names are split off at the first level of the bisection, and the others
//! pass at their next pipeline. Without a readable report the batch is
//! halved in queue order.

use changegate::db::Db;
use changegate::db::batches::get_batch;
use changegate_sim::gitlab::{Endpoint, Fault, FaultKind};
use serde_json::Value;

use super::batched::{Bisected, bisected};
use super::gitlab_faults::timeline;
use crate::helpers::{each_backend, train_depth};

/// How eight requests settled.
struct Settled {
    /// Each request's view.
    views: Vec<Value>,
    /// How many MRs they took.
    mrs: usize,
    /// The message each request's timeline shows for its retry.
    retries: Vec<String>,
}

/// Eight requests, the sixth poisoned, bisected with
/// `batch.max_split_depth = 1`; the project publishes test reports, and
/// `report_fault` breaks reading them.
async fn settled(db_url: &str, report_fault: Option<FaultKind>) -> Settled {
    let mut levels = ["read"; 8];
    levels[5] = "POISON";
    let Bisected { w, ids, views, mrs } = bisected(db_url, 1, &levels, |w| {
        w.gitlab
            .update_settings(w.project, |settings| settings.junit_reports = true)
            .unwrap();
        if let Some(kind) = report_fault {
            w.gitlab
                .inject(Fault::new(Endpoint::GetPipelineTestReport, kind).times(100));
        }
    })
    .await;
    let mut retries = Vec::new();
    for id in &ids {
        let steps = timeline(&w, "admin", id).await;
        let retry = steps
            .iter()
            .find(|(step, _)| step == "HANDLE_BATCH_RETRY")
            .unwrap_or_else(|| panic!("{id} was retried: {steps:?}"));
        retries.push(retry.1.clone());
    }
    Settled {
        views,
        mrs,
        retries,
    }
}

/// The place in the train of the batch a request's view names.
async fn train_position(db: &Db, view: &Value) -> i64 {
    let batch = view["batchId"].as_i64().expect("in a batch");
    get_batch(db, batch).await.unwrap().unwrap().train_position
}

fn assert_only_the_poisoned_request_failed(views: &[Value]) {
    for (n, v) in views.iter().enumerate() {
        let expected = if n == 5 { "CREATE_FAILED" } else { "VALIDATED" };
        assert_eq!(v["status"], expected, "member {n}: {v}");
    }
}

#[tokio::test]
async fn the_request_a_failed_pipelines_test_report_names_is_split_off_at_once() {
    for test_db in each_backend().await {
        let Settled {
            views,
            mrs,
            retries,
        } = settled(&test_db.url, None).await;
        assert_only_the_poisoned_request_failed(&views);
        assert_eq!(mrs, 3, "8, then the named request alone and the other 7");
        for (n, retry) in retries.iter().enumerate() {
            let why = if n == 5 {
                "its test report names this request's file: retried apart from the others"
            } else {
                "its test report names another request's file: retried without it"
            };
            assert!(retry.ends_with(why), "member {n}: {retry}");
        }
        if train_depth() > 1 {
            // Side by side, the named half boards first though the other
            // holds the requests queued before it: what boards next is
            // built on the half expected to pass.
            let named = train_position(&test_db.db, &views[5]).await;
            let others = train_position(&test_db.db, &views[0]).await;
            assert!(named < others, "named at {named}, the others at {others}");
        }
    }
}

#[tokio::test]
async fn a_test_report_that_cannot_be_read_leaves_the_batch_halved_in_queue_order() {
    for test_db in each_backend().await {
        let Settled {
            views,
            mrs,
            retries,
        } = settled(&test_db.url, Some(FaultKind::Status(500))).await;
        assert_only_the_poisoned_request_failed(&views);
        assert_eq!(mrs, 7, "8, then 4 + 4, 2 + 2 and 1 + 1");
        for retry in &retries {
            assert!(retry.ends_with("retried in a smaller batch"), "{retry}");
        }
    }
}
