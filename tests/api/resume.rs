//! Stalled operations are handed back to the workers; waiting ones are not.

use std::sync::Arc;
use std::time::Duration;

use changegate::domain::{BindingStatus, StepStatus};
use changegate::jobs::Outcome;
use changegate::jobs::resume::{STALLED_AFTER, run_once};
use changegate::workflow::Executor;
use tokio_util::sync::CancellationToken;

use crate::helpers::each_backend;
use crate::requests::RecordingSteps;
use crate::store::{apply, drive};

#[tokio::test]
async fn operations_stalled_at_an_automatic_step_are_queued_again() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        let (stalled, _) = drive(db, &apply("stalled", "t"), &[]).await;
        let (fresh, _) = drive(db, &apply("fresh", "t"), &[]).await;
        let waiting_for_decision = [(StepStatus::ApprovalSent, BindingStatus::ApprovalSent)];
        let (waiting, _) = drive(db, &apply("waiting", "t"), &waiting_for_decision).await;
        for id in [&stalled, &waiting] {
            changegate::with_pool!(db, writer, |pool| {
                sqlx::query("UPDATE operation SET updated_at = '2001-01-01 00:00:00.000' WHERE operation_id = ?")
                    .bind(id)
                    .execute(pool)
                    .await
                    .map(|_| ())
            })
            .unwrap();
        }

        let steps = Arc::new(RecordingSteps::default());
        let mut tasks = tokio::task::JoinSet::new();
        let stop = CancellationToken::new();
        let executor = Executor::start(1, 10, steps.clone(), stop.clone(), &mut tasks);
        let outcome = run_once(db, &executor, STALLED_AFTER).await.unwrap();
        assert_eq!(
            outcome,
            Outcome::Worked {
                done: 1,
                full: false
            },
            "{}",
            test_db.name
        );
        for _ in 0..100 {
            if !steps.0.lock().unwrap().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            *steps.0.lock().unwrap(),
            [stalled.as_str()],
            "{}: not {fresh} (fresh) nor {waiting} (waiting)",
            test_db.name
        );
        stop.cancel();
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
