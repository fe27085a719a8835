//! The requester API over real HTTP: layers, submissions, idempotency,
//! hand-off, and the read endpoints.

mod bad_input;
mod idempotency;
mod layers;
mod reads;
mod submit;
mod typed_params;

use std::sync::{Arc, Mutex};

use changegate::app::Parts;

use changegate::observer::Observer;
use changegate::workflow::{StepFuture, Steps};
use serde_json::{Value, json};

use crate::helpers::{REQUESTER_CONFIG, TestApp, spawn_app_with};

/// An app on `db_url` with the requester configuration plus `extra`, whose
/// workers only record what they are given, so requests stay where the API
/// put them (the workflow's own tests drive the steps).
pub async fn requester_app(db_url: &str, extra: &str) -> TestApp {
    requester_app_with(db_url, "", extra).await
}

/// [`requester_app`] with `database_keys` in its `[database]` section.
pub async fn requester_app_with(db_url: &str, database_keys: &str, extra: &str) -> TestApp {
    let parts = Parts {
        steps: Some(Arc::new(RecordingSteps::default())),
        ..Parts::default()
    };
    let config = format!("{database_keys}{REQUESTER_CONFIG}{extra}");
    let app = spawn_app_with(db_url, &config, parts).await;
    app.wait_until_ready().await;
    app
}

/// A minimal valid apply body.
pub fn apply_body(target: &str) -> Value {
    json!({ "targetKey": target, "reason": "testing" })
}

/// Worker steps that record which operations they were given.
#[derive(Default)]
pub struct RecordingSteps(pub Mutex<Vec<String>>);

impl Steps for RecordingSteps {
    fn run(&self, operation_id: String) -> StepFuture {
        self.0.lock().unwrap().push(operation_id);
        Box::pin(async { None })
    }
}

/// An observer that records samples, or panics on every call.
#[derive(Default)]
pub struct RecordingObserver {
    pub panics: bool,
    pub samples: Mutex<Vec<String>>,
}

impl RecordingObserver {
    fn record(&self, sample: String) {
        assert!(!self.panics, "a broken metrics recorder");
        self.samples.lock().unwrap().push(sample);
    }

    pub fn count(&self, prefix: &str) -> usize {
        self.samples
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.starts_with(prefix))
            .count()
    }
}

impl Observer for RecordingObserver {
    fn api_request(&self, route: &str, method: &str, status: u16, _: f64) {
        self.record(format!("api {method} {route} {status}"));
    }
    fn activity_received(&self, activity: &str) {
        self.record(format!("received {activity}"));
    }
    fn activity_succeeded(&self, activity: &str) {
        self.record(format!("succeeded {activity}"));
    }
    fn rate_limited(&self, bucket: &str) {
        self.record(format!("limited {bucket}"));
    }
}

/// Rows in a table, to prove that refused requests wrote nothing.
pub async fn count_rows(db: &changegate::db::Db, table: &str) -> i64 {
    let sql = format!("SELECT COUNT(*) FROM {table}");
    changegate::with_pool!(db, reader, |pool| {
        sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .fetch_one(pool)
            .await
    })
    .unwrap()
}
