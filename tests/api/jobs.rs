//! Background jobs: due operations go to the workers (step leases decide
//! who runs them), expired bindings get exactly one close.

use std::sync::Arc;
use std::time::Duration;

use changegate::db::leases::{acquire_lease, list_due, release_lease, renew_lease};
use changegate::db::operations::get_operation;
use changegate::domain::{BindingStatus, StepStatus};
use changegate::jobs::Outcome;
use changegate::jobs::dispatch::run_once;
use changegate::workflow::Executor;
use tokio_util::sync::CancellationToken;

use crate::helpers::each_backend;
use crate::requests::RecordingSteps;
use crate::store::{apply, drive};

/// Sets `column` of operation `id` to a time long past.
async fn set_past(db: &changegate::db::Db, id: &str, column: &str) {
    set_past_in(db, "operation", id, column).await;
}

/// Sets `column` of `table`'s row for operation `id` to a time long past.
async fn set_past_in(db: &changegate::db::Db, table: &str, id: &str, column: &str) {
    let sql =
        format!("UPDATE {table} SET {column} = '2001-01-01 00:00:00.000' WHERE operation_id = ?");
    changegate::with_pool!(db, writer, |pool| {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .execute(pool)
            .await
            .map(|_| ())
    })
    .unwrap();
}

#[tokio::test]
async fn due_operations_go_to_the_workers_unless_a_live_lease_holds_them() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        let (due, _) = drive(db, &apply("due", "t"), &[]).await;
        let (orphaned, _) = drive(db, &apply("orphaned", "t"), &[]).await;
        let (leased, _) = drive(db, &apply("leased", "t"), &[]).await;
        let waiting_for_decision = [(StepStatus::ApprovalSent, BindingStatus::ApprovalSent)];
        let (waiting, _) = drive(db, &apply("waiting", "t"), &waiting_for_decision).await;
        let hour = Duration::from_secs(3600);
        assert!(
            acquire_lease(db, &orphaned, "dead-instance", hour)
                .await
                .unwrap()
        );
        set_past(db, &orphaned, "lease_until").await;
        assert!(
            acquire_lease(db, &leased, "live-instance", hour)
                .await
                .unwrap()
        );

        let steps = Arc::new(RecordingSteps::default());
        let mut tasks = tokio::task::JoinSet::new();
        let stop = CancellationToken::new();
        let executor = Executor::start(1, 100, steps.clone(), stop.clone(), &mut tasks);
        let outcome = run_once(db, &executor, "dispatcher").await.unwrap();
        assert_eq!(
            outcome,
            Outcome::Worked {
                done: 2,
                full: false
            },
            "{}",
            test_db.name
        );
        for _ in 0..100 {
            if steps.0.lock().unwrap().len() == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut ran = steps.0.lock().unwrap().clone();
        ran.sort();
        let mut expected = vec![due.clone(), orphaned.clone()];
        expected.sort();
        assert_eq!(
            ran, expected,
            "{}: not {leased} (leased) nor {waiting} (waiting)",
            test_db.name
        );
        stop.cancel();
    }
}

#[tokio::test]
async fn of_many_racing_instances_exactly_one_takes_a_lease_and_a_dead_ones_lease_runs_out() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        let (id, _) = drive(db, &apply("raced", "t"), &[]).await;
        let mut racers = tokio::task::JoinSet::new();
        for racer in 0..32 {
            let (db, id) = (db.clone(), id.clone());
            racers.spawn(async move {
                let owner = format!("instance-{racer}");
                let won = acquire_lease(&db, &id, &owner, Duration::from_secs(3600))
                    .await
                    .unwrap();
                won.then_some(owner)
            });
        }
        let winners: Vec<String> = racers.join_all().await.into_iter().flatten().collect();
        assert_eq!(winners.len(), 1, "{}", test_db.name);
        assert!(
            !acquire_lease(db, &id, "latecomer", Duration::from_secs(1))
                .await
                .unwrap(),
            "{}: a live lease is not taken",
            test_db.name
        );
        assert!(
            list_due(db, "dispatcher", 10).await.unwrap().is_empty(),
            "{}: a leased operation is not due",
            test_db.name
        );
        assert_eq!(
            list_due(db, &winners[0], 10).await.unwrap(),
            std::slice::from_ref(&id),
            "{}: to its holder, which is not running it (it asks), it is due",
            test_db.name
        );
        set_past(db, &id, "lease_until").await;
        assert_eq!(
            list_due(db, "dispatcher", 10).await.unwrap(),
            std::slice::from_ref(&id),
            "{}",
            test_db.name
        );
        assert!(
            acquire_lease(db, &id, "successor", Duration::from_secs(60))
                .await
                .unwrap(),
            "{}: an expired lease is taken over",
            test_db.name
        );
        assert!(
            !renew_lease(db, &id, &winners[0], Duration::from_secs(60))
                .await
                .unwrap(),
            "{}: the old owner cannot renew",
            test_db.name
        );
    }
}

#[tokio::test]
async fn a_poll_makes_the_operation_due_later_unless_someone_moved_it_meanwhile() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        let (id, version) = drive(db, &apply("polled", "t"), &[]).await;
        assert!(
            acquire_lease(db, &id, "me", Duration::from_secs(60))
                .await
                .unwrap()
        );
        release_lease(db, &id, "me", version, Some(Duration::from_secs(3600)))
            .await
            .unwrap();
        let polled = get_operation(db, &id).await.unwrap().unwrap();
        assert_eq!(polled.attempts, 1, "{}", test_db.name);
        assert!(
            list_due(db, "dispatcher", 10).await.unwrap().is_empty(),
            "{}",
            test_db.name
        );

        // A step write makes it due at once again, and counts polls from zero.
        let moved = changegate::store::transition(
            db,
            &id,
            version,
            None,
            crate::store::change(StepStatus::ApprovalSending),
        )
        .await
        .unwrap();
        assert!(
            acquire_lease(db, &id, "me", Duration::from_secs(60))
                .await
                .unwrap()
        );
        release_lease(db, &id, "me", version, Some(Duration::from_secs(3600)))
            .await
            .unwrap();
        let after = get_operation(db, &id).await.unwrap().unwrap();
        assert_eq!(
            (after.attempts, after.version),
            (0, moved.operation_version),
            "{}: a stale poll does not push the due time",
            test_db.name
        );
        assert_eq!(
            list_due(db, "dispatcher", 10).await.unwrap(),
            [id],
            "{}",
            test_db.name
        );
    }
}

#[tokio::test]
async fn an_expired_binding_gets_exactly_one_close_opened_by_changegate() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        let (id, version) = drive(db, &apply("expiring", "t"), crate::store::TO_MERGED).await;
        changegate::store::transition(
            db,
            &id,
            version,
            Some(BindingStatus::Validated),
            crate::store::change(StepStatus::DeployConfirmed),
        )
        .await
        .unwrap();
        let (_, _) = drive(db, &apply("lasting", "t"), crate::store::TO_MERGED).await;
        changegate::with_pool!(db, writer, |pool| {
            sqlx::query(
                "UPDATE binding SET expires_at = '2001-01-01 00:00:00.000' WHERE subject_id = ?",
            )
            .bind("expiring")
            .execute(pool)
            .await
            .map(|_| ())
        })
        .unwrap();

        let steps = Arc::new(RecordingSteps::default());
        let mut tasks = tokio::task::JoinSet::new();
        let stop = CancellationToken::new();
        let executor = Executor::start(1, 10, steps.clone(), stop.clone(), &mut tasks);
        let first = changegate::jobs::expiry::run_once(db, &executor)
            .await
            .unwrap();
        assert_eq!(
            first,
            Outcome::Worked {
                done: 1,
                full: false
            },
            "{}",
            test_db.name
        );
        let again = changegate::jobs::expiry::run_once(db, &executor)
            .await
            .unwrap();
        assert_eq!(again, Outcome::Idle, "{}: exactly one close", test_db.name);

        let binding = changegate::db::bindings::get_binding(db, "expiring", "t")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(binding.status, BindingStatus::Closing);
        let close = changegate::db::operations::get_operation(db, &binding.operation_id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (close.step, close.requested_by.as_str()),
            (StepStatus::CloseExpired, "changegate")
        );
        let lasting = changegate::db::bindings::get_binding(db, "lasting", "t")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            lasting.status,
            BindingStatus::Merged,
            "not expired, not touched"
        );
        stop.cancel();
    }
}

#[tokio::test]
async fn the_progress_gauges_count_unfinished_requests_by_status_and_step_and_age_the_oldest() {
    use changegate::jobs::progress::ProgressGauges;

    const SENT: &[(StepStatus, BindingStatus)] =
        &[(StepStatus::ApprovalSent, BindingStatus::ApprovalSent)];
    const QUEUED: &[(StepStatus, BindingStatus)] = &[
        (StepStatus::ApprovalSent, BindingStatus::ApprovalSent),
        (StepStatus::Queued, BindingStatus::MrCreating),
    ];
    const REJECTED: &[(StepStatus, BindingStatus)] = &[
        (StepStatus::ApprovalSent, BindingStatus::ApprovalSent),
        (StepStatus::CalledBackRejected, BindingStatus::Rejected),
    ];
    for test_db in each_backend().await {
        let db = &test_db.db;
        let (old, _) = drive(db, &apply("a", "t"), SENT).await;
        drive(db, &apply("b", "t"), SENT).await;
        drive(db, &apply("c", "t"), QUEUED).await;
        drive(db, &apply("d", "t"), REJECTED).await;
        set_past_in(db, "binding", &old, "updated_at").await;

        let mut gauges = ProgressGauges::default();
        let mut rows = gauges.run_once(db).await.unwrap();
        rows.sort_by(|a, b| a.status.cmp(&b.status));

        let counts: Vec<(&str, i32, i64)> = rows
            .iter()
            .map(|r| (r.status.as_str(), r.step_code, r.requests))
            .collect();
        assert_eq!(
            counts,
            [
                ("APPROVAL_SENT", StepStatus::ApprovalSent.code(), 2),
                ("MR_CREATING", StepStatus::Queued.code(), 1),
            ],
            "{}: finished requests are not counted",
            test_db.name
        );
        let years = 20 * 365 * 24 * 3600 * 1000_i64;
        assert!(
            rows[0].oldest_ms > years,
            "{}: the oldest waits since 2001: {}",
            test_db.name,
            rows[0].oldest_ms
        );
        assert!(
            (0..60_000).contains(&rows[1].oldest_ms),
            "{}: just queued: {}",
            test_db.name,
            rows[1].oldest_ms
        );
    }
}

#[tokio::test]
async fn the_progress_gauges_count_enabled_webhook_endpoints_by_breaker_state() {
    use changegate::db::webhook_endpoints::{record_failures, take_half_open};
    use changegate::jobs::progress::ProgressGauges;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    use crate::webhooks::add_endpoint;

    // A recorder of this thread, which runs the test's runtime: the gauges
    // this test sets only.
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _recording = metrics::set_default_local_recorder(&recorder);
    let hold = Duration::from_secs(600);
    for test_db in each_backend().await {
        let db = &test_db.db;
        add_endpoint(db, "https://closed.example/hook", "").await;
        let (open, _) = add_endpoint(db, "https://open.example/hook", "").await;
        let (half_open, _) = add_endpoint(db, "https://half-open.example/hook", "").await;
        let (disabled, _) = add_endpoint(db, "https://disabled.example/hook", "").await;
        for id in [open, half_open, disabled] {
            let open_for = if id == half_open {
                Duration::ZERO
            } else {
                hold
            };
            assert!(record_failures(db, id, 1, 1, open_for).await.unwrap());
        }
        assert!(take_half_open(db, half_open, hold).await.unwrap());
        changegate::with_pool!(db, writer, |pool| {
            sqlx::query("UPDATE webhook_endpoint SET enabled = FALSE WHERE id = ?")
                .bind(disabled)
                .execute(pool)
                .await
                .map(|_| ())
        })
        .unwrap();

        ProgressGauges::default().run_once(db).await.unwrap();
        let mut gauges: Vec<(String, f64)> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter(|(key, ..)| key.key().name() == "changegate_webhook_endpoints")
            .map(|(key, _, _, value)| {
                let breaker = key.key().labels().next().unwrap().value().to_owned();
                match value {
                    DebugValue::Gauge(endpoints) => (breaker, endpoints.into_inner()),
                    other => panic!("not a gauge: {other:?}"),
                }
            })
            .collect();
        gauges.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            gauges,
            [
                ("closed".to_owned(), 1.0),
                ("half_open".to_owned(), 1.0),
                ("open".to_owned(), 1.0)
            ],
            "{}: the disabled endpoint's open breaker is not counted",
            test_db.name
        );
    }
}
