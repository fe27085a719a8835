//! `GET /admin/v1/overview`: requests by status, the one longest in each
//! unfinished status, and the last day's outcomes by hour, on both backends;
//! an outcome older than the day is left out, and only operators may look.

use std::collections::BTreeMap;
use std::time::Duration;

use changegate::db::{Db, dialect};
use changegate::domain::{BindingStatus, StepStatus};
use serde_json::Value;
use sqlx::AssertSqlSafe;

use crate::helpers::each_backend;
use crate::requests::requester_app;
use crate::store::{TO_REJECTED, apply, drive};

const TO_HANDLE_FAILED: &[(StepStatus, BindingStatus)] = &[
    (StepStatus::ApprovalSent, BindingStatus::ApprovalSent),
    (StepStatus::CalledBackApproved, BindingStatus::MrCreating),
    (StepStatus::MrCreated, BindingStatus::MrCreated),
    (StepStatus::HandleStarted, BindingStatus::Merging),
    (StepStatus::HandleApproveFailed, BindingStatus::HandleFailed),
];

/// Moves `operation_id`'s history `hours` into the past.
async fn back_date_history(db: &Db, operation_id: &str, hours: i64) {
    let sql = format!(
        "UPDATE operation_history SET created_at = {} WHERE operation_id = ?",
        dialect::now_minus_ms(db.backend())
    );
    changegate::with_pool!(db, writer, |pool| {
        sqlx::query(AssertSqlSafe(sql))
            .bind(hours * 3_600_000)
            .bind(operation_id)
            .execute(pool)
            .await
            .map(drop)
    })
    .unwrap();
}

/// `items` as `key` → the sum of `requests`.
fn totals(items: &Value, key: &str) -> BTreeMap<String, i64> {
    let mut totals = BTreeMap::new();
    for item in items.as_array().unwrap() {
        *totals
            .entry(item[key].as_str().unwrap().to_owned())
            .or_default() += item["requests"].as_i64().unwrap();
    }
    totals
}

#[tokio::test]
async fn operators_see_requests_by_status_the_oldest_and_the_days_outcomes() {
    for test_db in each_backend().await {
        let name = test_db.name;
        let app = requester_app(&test_db.url, "").await;
        let db = &test_db.db;
        let target = "demo.feature-flags";
        let (first_waiting, _) = drive(db, &apply("w1", target), &TO_REJECTED[..1]).await;
        // Times are kept to the millisecond: the second is later.
        tokio::time::sleep(Duration::from_millis(20)).await;
        drive(db, &apply("w2", target), &TO_REJECTED[..1]).await;
        drive(db, &apply("f1", target), TO_HANDLE_FAILED).await;
        drive(db, &apply("r1", target), TO_REJECTED).await;
        let (rejected_long_ago, _) = drive(db, &apply("r2", target), TO_REJECTED).await;
        back_date_history(db, &rejected_long_ago, 25).await;
        drive(db, &apply("s1", target), &[]).await;

        let answer = app.get_as("admin", "/admin/v1/overview").await;
        assert_eq!(answer.status(), 200, "{name}");
        let overview: Value = answer.json().await.unwrap();

        assert_eq!(
            totals(&overview["statuses"], "status"),
            BTreeMap::from([
                ("APPROVAL_SENDING".to_owned(), 1),
                ("APPROVAL_SENT".to_owned(), 2),
                ("HANDLE_FAILED".to_owned(), 1),
                ("REJECTED".to_owned(), 2),
            ]),
            "{name}"
        );
        let oldest: BTreeMap<String, String> = overview["oldest"]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| {
                (
                    item["status"].as_str().unwrap().to_owned(),
                    item["operationId"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        assert_eq!(
            oldest.keys().collect::<Vec<_>>(),
            ["APPROVAL_SENDING", "APPROVAL_SENT", "HANDLE_FAILED"],
            "{name}: finished statuses have no oldest"
        );
        assert_eq!(oldest["APPROVAL_SENT"], first_waiting, "{name}");

        assert_eq!(overview["hours"], 24, "{name}");
        assert_eq!(
            totals(&overview["outcomes"], "status"),
            BTreeMap::from([("HANDLE_FAILED".to_owned(), 1), ("REJECTED".to_owned(), 1)]),
            "{name}: the rejection 25 hours ago is outside the day"
        );
        for item in overview["outcomes"].as_array().unwrap() {
            let hour = item["hour"].as_str().unwrap();
            assert!(hour.ends_with(":00:00.000Z"), "{name}: {hour}");
        }

        let requester = app.get_as("alice", "/admin/v1/overview").await;
        assert_eq!(requester.status(), 403, "{name}");
        app.stop().await.unwrap();
    }
}
