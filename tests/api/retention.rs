//! Retention: on both backends, with rows back-dated, exactly the rows the
//! settings make eligible are deleted (in several chunks where there are
//! many), a binding's current operation keeps its whole history, each
//! project's deploy watermark stays, unfinished deliveries and unrelayed
//! events stay, `0` keeps a table for ever, and an instance holding the
//! job's lease keeps the others out; every deleted row is counted in
//! `changegate_retention_deleted_total` under its table.

use std::time::Duration;

use changegate::config::RetentionSettings;
use changegate::db::lease_owners::{self, Owners};
use changegate::db::retention::{Pruned, take_job_lease};
use changegate::db::{Db, dialect};
use changegate::jobs::Outcome;
use changegate::jobs::retention::{CHUNK, JOB, run_once};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use sqlx::AssertSqlSafe;

use crate::helpers::each_backend;

const DAY: u64 = 86_400;

fn days(n: u64) -> Option<Duration> {
    Some(Duration::from_secs(n * DAY))
}

fn settings() -> RetentionSettings {
    RetentionSettings {
        events: days(30),
        webhook_deliveries: days(30),
        callback_receipts: days(30),
        deploy_reports: days(90),
        operation_history: days(400),
        audit_log: days(400),
        interval: Duration::from_secs(3600),
    }
}

async fn execute(db: &Db, sql: &str) {
    changegate::with_pool!(db, writer, |pool| {
        sqlx::query(AssertSqlSafe(sql.to_owned()))
            .execute(pool)
            .await
            .map(drop)
            .unwrap()
    });
}

async fn strings(db: &Db, sql: &str) -> Vec<String> {
    changegate::with_pool!(db, reader, |pool| {
        sqlx::query_scalar(AssertSqlSafe(sql.to_owned()))
            .fetch_all(pool)
            .await
            .unwrap()
    })
}

async fn count(db: &Db, table: &str) -> i64 {
    changegate::with_pool!(db, reader, |pool| {
        sqlx::query_scalar(AssertSqlSafe(format!("SELECT COUNT(*) FROM {table}")))
            .fetch_one(pool)
            .await
            .unwrap()
    })
}

/// Moves `column` of the rows of `table` matching `filter` `age_days` back.
async fn back_date(db: &Db, table: &str, column: &str, filter: &str, age_days: u64) {
    let then =
        dialect::now_minus_ms(db.backend()).replace('?', &(age_days * DAY * 1000).to_string());
    execute(
        db,
        &format!("UPDATE {table} SET {column} = {then} WHERE {filter}"),
    )
    .await;
}

/// The rows of every pruned table, each named by what it is (its text
/// column), some old and some new.
async fn fill(db: &Db) {
    execute(
        db,
        "INSERT INTO event (event_type, operation_id, subject_id, target_key, to_status, payload, relayed) \
         VALUES ('t', 'old-relayed', 's', 'k', 'VALIDATED', '{}', TRUE), \
                ('t', 'old-unrelayed', 's', 'k', 'VALIDATED', '{}', FALSE), \
                ('t', 'new-relayed', 's', 'k', 'VALIDATED', '{}', TRUE)",
    )
    .await;
    back_date(db, "event", "created_at", "operation_id LIKE 'old-%'", 31).await;

    execute(
        db,
        "INSERT INTO webhook_delivery (endpoint_id, event_id, event_type, msg_id, body, status) \
         VALUES (1, 1, 't', 'old-delivered', '{}', 'delivered'), (1, 2, 't', 'old-failed', '{}', 'failed'), \
                (1, 3, 't', 'old-silent', '{}', 'silent'), (1, 4, 't', 'old-queued', '{}', 'queued'), \
                (1, 5, 't', 'old-sending', '{}', 'sending'), (1, 6, 't', 'new-delivered', '{}', 'delivered')",
    )
    .await;
    back_date(
        db,
        "webhook_delivery",
        "updated_at",
        "msg_id LIKE 'old-%'",
        31,
    )
    .await;

    // More than a chunk: deleted over several statements.
    let receipts = CHUNK as usize * 2 + 500;
    for chunk in (0..receipts).collect::<Vec<_>>().chunks(500) {
        let rows: Vec<String> = chunk
            .iter()
            .map(|n| format!("('approval', 'old-{n}')"))
            .collect();
        execute(
            db,
            &format!(
                "INSERT INTO callback_receipt (source, callback_id) VALUES {}",
                rows.join(", ")
            ),
        )
        .await;
    }
    back_date(db, "callback_receipt", "received_at", "1 = 1", 31).await;
    execute(
        db,
        "INSERT INTO callback_receipt (source, callback_id) VALUES ('deploy', 'new')",
    )
    .await;

    execute(
        db,
        "INSERT INTO deploy_report (callback_id, project, mr_iid, status) \
         VALUES ('old-below-watermark', 'a', 3, 'success'), ('old-watermark-a', 'a', 5, 'success'), \
                ('old-failed-above', 'a', 7, 'failed'), ('old-watermark-b', 'b', 2, 'success'), \
                ('new-b', 'b', 1, 'success')",
    )
    .await;
    back_date(
        db,
        "deploy_report",
        "received_at",
        "callback_id LIKE 'old-%'",
        91,
    )
    .await;

    execute(
        db,
        "INSERT INTO binding (subject_id, target_key, operation_id, status, requested_by, params) \
         VALUES ('s', 'k', 'current', 'VALIDATED', 's', '{}')",
    )
    .await;
    execute(
        db,
        "INSERT INTO operation_history (operation_id, to_step, operation_version, actor, message) \
         VALUES ('current', 1, 1, 'a', 'old-of-current'), ('moved-on', 1, 1, 'a', 'old-of-moved-on'), \
                ('moved-on', 2, 2, 'a', 'new-of-moved-on')",
    )
    .await;
    back_date(
        db,
        "operation_history",
        "created_at",
        "message LIKE 'old-%'",
        401,
    )
    .await;

    execute(
        db,
        "INSERT INTO audit_log (actor, action, subject, params) \
         VALUES ('old', 'a', 's', '{}'), ('new', 'a', 's', '{}')",
    )
    .await;
    back_date(db, "audit_log", "created_at", "actor = 'old'", 401).await;
}

/// Each table's `changegate_retention_deleted_total`.
fn deleted_counters(snapshotter: &Snapshotter) -> Vec<(String, u64)> {
    let mut counters: Vec<(String, u64)> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == "changegate_retention_deleted_total")
        .map(|(key, _, _, value)| {
            let table = key.key().labels().next().unwrap().value().to_owned();
            match value {
                DebugValue::Counter(deleted) => (table, deleted),
                other => panic!("not a counter: {other:?}"),
            }
        })
        .collect();
    counters.sort();
    counters
}

/// The rows of every pruned table, as [`deleted_counters`] lists them.
async fn table_counts(db: &Db) -> Vec<(String, u64)> {
    let mut counts = Vec::new();
    for table in Pruned::ALL {
        let rows = count(db, table.table()).await;
        counts.push((table.table().to_owned(), u64::try_from(rows).unwrap()));
    }
    counts.sort();
    counts
}

#[tokio::test]
async fn exactly_the_eligible_rows_go_and_current_history_and_watermarks_stay() {
    for test_db in each_backend().await {
        // A recorder of this thread, which runs the test's runtime and so
        // the job: the counters of this backend's run only.
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let _recording = metrics::set_default_local_recorder(&recorder);
        let db = &test_db.db;
        let name = test_db.name;
        fill(db).await;

        // Another instance runs it: this one does nothing.
        assert!(
            take_job_lease(db, JOB, "other", Duration::from_secs(60))
                .await
                .unwrap()
        );
        assert_eq!(
            run_once(db, &settings(), "me").await.unwrap(),
            Outcome::Idle
        );
        assert_eq!(
            count(db, "callback_receipt").await,
            CHUNK as i64 * 2 + 501,
            "{name}"
        );
        changegate::db::retention::release_job_lease(db, JOB, "other")
            .await
            .unwrap();

        let kept_audit = RetentionSettings {
            audit_log: None,
            ..settings()
        };
        let rows_before = table_counts(db).await;
        let outcome = run_once(db, &kept_audit, "me").await.unwrap();
        assert!(
            matches!(outcome, Outcome::Worked { .. }),
            "{name}: {outcome:?}"
        );
        // Every deleted row is counted, under its table.
        let rows_after = table_counts(db).await;
        let gone: Vec<(String, u64)> = rows_before
            .iter()
            .zip(&rows_after)
            .map(|((table, before), (_, after))| (table.clone(), before - after))
            .collect();
        let counters = deleted_counters(&snapshotter);
        let counted: Vec<(String, u64)> = gone
            .iter()
            .map(|(table, _)| {
                let deleted = counters
                    .iter()
                    .find(|(named, _)| named == table)
                    .map_or(0, |(_, total)| *total);
                (table.clone(), deleted)
            })
            .collect();
        assert_eq!(
            counted, gone,
            "{name}: the deleted rows are counted per table"
        );
        assert!(gone.iter().any(|(_, rows)| *rows > 0), "{name}");

        let mut events = strings(db, "SELECT operation_id FROM event ORDER BY id").await;
        events.sort();
        assert_eq!(events, ["new-relayed", "old-unrelayed"], "{name}");
        assert_eq!(
            strings(db, "SELECT msg_id FROM webhook_delivery ORDER BY id").await,
            ["old-queued", "old-sending", "new-delivered"],
            "{name}"
        );
        assert_eq!(
            strings(db, "SELECT callback_id FROM callback_receipt").await,
            ["new"],
            "{name}"
        );
        assert_eq!(
            strings(db, "SELECT callback_id FROM deploy_report ORDER BY id").await,
            ["old-watermark-a", "old-watermark-b", "new-b"],
            "{name}"
        );
        assert_eq!(
            strings(db, "SELECT message FROM operation_history ORDER BY id").await,
            ["old-of-current", "new-of-moved-on"],
            "{name}"
        );
        assert_eq!(
            count(db, "audit_log").await,
            2,
            "{name}: audit_log = 0 keeps it"
        );

        // The audit log's turn; nothing else is left to delete.
        assert_eq!(
            run_once(db, &settings(), "me").await.unwrap(),
            Outcome::Worked {
                done: 1,
                full: false
            },
            "{name}"
        );
        assert_eq!(
            strings(db, "SELECT actor FROM audit_log").await,
            ["new"],
            "{name}"
        );
        assert_eq!(
            run_once(db, &settings(), "me").await.unwrap(),
            Outcome::Idle,
            "{name}"
        );
    }
}

/// A run stopped mid-way (SIGTERM cancels the job between chunks) gives its
/// retention lease back with its other leases, so another instance takes
/// the job up at once instead of after the lease runs out.
#[tokio::test]
async fn a_stopped_run_gives_its_retention_lease_back() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        let name = test_db.name;
        let lease = Duration::from_secs(600);
        assert!(
            take_job_lease(db, JOB, "seat-7-life-3-r", lease)
                .await
                .unwrap()
        );
        assert!(
            !take_job_lease(db, JOB, "seat-8-life-1-r", lease)
                .await
                .unwrap(),
            "{name}: held"
        );

        let other_run = Owners {
            prefix: "seat-7-life-4-",
            keep: None,
        };
        let released = lease_owners::release(db, &other_run).await.unwrap();
        assert_eq!(released.jobs, 0, "{name}: another run's lease stays");

        let this_run = Owners {
            prefix: "seat-7-life-3-",
            keep: None,
        };
        let released = lease_owners::release(db, &this_run).await.unwrap();
        assert_eq!(released.jobs, 1, "{name}");
        assert!(released.any(), "{name}");
        assert!(
            take_job_lease(db, JOB, "seat-8-life-1-r", lease)
                .await
                .unwrap(),
            "{name}: free at once"
        );
    }
}
