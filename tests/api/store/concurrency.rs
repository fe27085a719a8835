//! Racing writers, with real concurrency: many tasks over a pool of several
//! connections (MariaDB) or the single SQLite writer.

use changegate::db::Db;
use changegate::db::bindings::get_binding;
use changegate::db::events::list_events;
use changegate::db::history::list_history;
use changegate::domain::{BindingStatus, StepStatus};
use changegate::store::{self, StoreError};

use super::{TO_MERGED, TO_REJECTED, apply, change, drive};
use crate::helpers::each_backend;

const RACERS: usize = 50;

/// Runs `RACERS` submissions of fresh requests for one relation at once.
async fn race_submissions(db: &Db, subject: &str) -> (usize, Vec<StoreError>) {
    let tasks: Vec<_> = (0..RACERS)
        .map(|_| {
            let db = db.clone();
            let request = apply(subject, "t");
            tokio::spawn(async move { store::submit(&db, &request).await })
        })
        .collect();
    let mut wins = 0;
    let mut losses = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => wins += 1,
            Err(err) => losses.push(err),
        }
    }
    (wins, losses)
}

fn all_refused(losses: &[StoreError]) -> bool {
    losses.iter().all(|err| {
        matches!(
            err,
            StoreError::Preempted
                | StoreError::InProgress {
                    status: BindingStatus::ApprovalSending,
                    ..
                }
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_re_applies_yield_exactly_one_reset() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        let (old_id, _) = drive(db, &apply("app-1", "t"), TO_REJECTED).await;

        let (wins, losses) = race_submissions(db, "app-1").await;
        assert_eq!(wins, 1, "{}: {losses:?}", test_db.name);
        assert_eq!(losses.len(), RACERS - 1);
        assert!(all_refused(&losses), "{}: {losses:?}", test_db.name);

        let binding = get_binding(db, "app-1", "t").await.unwrap().unwrap();
        assert_eq!(binding.status, BindingStatus::ApprovalSending);
        let history = list_history(db, &binding.operation_id).await.unwrap();
        assert_eq!(history.len(), 1);
        assert_eq!(
            history[0].from_status.as_deref(),
            Some("REJECTED"),
            "one reset, from the status read"
        );
        assert_ne!(binding.operation_id, old_id);
        let resets = count(db, "SELECT COUNT(*) FROM operation_history WHERE from_status = 'REJECTED' AND to_status = 'APPROVAL_SENDING'").await;
        assert_eq!(resets, 1, "{}", test_db.name);
        // Losers wrote nothing: one operation for the first attempt, one for the winner.
        assert_eq!(
            count(db, "SELECT COUNT(*) FROM operation").await,
            2,
            "{}",
            test_db.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_first_applies_create_one_row() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        let (wins, losses) = race_submissions(db, "app-new").await;
        assert_eq!(wins, 1, "{}: {losses:?}", test_db.name);
        assert!(all_refused(&losses), "{}: {losses:?}", test_db.name);
        assert_eq!(count(db, "SELECT COUNT(*) FROM binding").await, 1);
        assert_eq!(
            count(db, "SELECT COUNT(*) FROM operation").await,
            1,
            "{}",
            test_db.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_flippers_flip_once_and_write_one_event() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        let (id, _) = drive(db, &apply("app-1", "t"), TO_MERGED).await;
        let events_before = list_events(db, &id).await.unwrap().len();

        // The deploy callback and the reconciliation job race, many times over.
        let tasks: Vec<_> = (0..20)
            .map(|i| {
                let db = db.clone();
                let id = id.clone();
                let step = if i % 2 == 0 {
                    StepStatus::DeployConfirmed
                } else {
                    StepStatus::DeployReconciled
                };
                tokio::spawn(async move {
                    store::flip(
                        &db,
                        &id,
                        &[BindingStatus::Merged],
                        BindingStatus::Validated,
                        change(step),
                    )
                    .await
                })
            })
            .collect();
        let mut flips = Vec::new();
        for task in tasks {
            if let Some(flip) = task.await.unwrap().unwrap() {
                flips.push(flip);
            }
        }
        assert_eq!(flips.len(), 1, "{}: {flips:?}", test_db.name);
        assert_eq!(flips[0].to, BindingStatus::Validated);
        let events = list_events(db, &id).await.unwrap();
        assert_eq!(events.len(), events_before + 1, "{}", test_db.name);
        assert_eq!(events.last().unwrap().to_status, "VALIDATED");
        assert_eq!(
            get_binding(db, "app-1", "t").await.unwrap().unwrap().status,
            BindingStatus::Validated
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_guarded_transitions_from_one_version_let_one_through() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        let (id, version) = drive(db, &apply("app-1", "t"), &TO_MERGED[..1]).await;
        let tasks: Vec<_> = (0..RACERS)
            .map(|i| {
                let db = db.clone();
                let id = id.clone();
                let (step, status) = if i % 2 == 0 {
                    (StepStatus::CalledBackApproved, BindingStatus::MrCreating)
                } else {
                    (StepStatus::CalledBackRejected, BindingStatus::Rejected)
                };
                tokio::spawn(async move {
                    store::transition(&db, &id, version, Some(status), change(step)).await
                })
            })
            .collect();
        let mut wins = 0;
        for task in tasks {
            match task.await.unwrap() {
                Ok(done) => {
                    wins += 1;
                    assert!(done.flip.is_some());
                }
                Err(StoreError::Preempted) => {}
                Err(other) => panic!("{}: {other:?}", test_db.name),
            }
        }
        assert_eq!(wins, 1, "{}", test_db.name);
        assert_eq!(
            list_events(db, &id).await.unwrap().len(),
            3,
            "submit, SENT, and the one winner"
        );
    }
}

async fn count(db: &Db, sql: &'static str) -> i64 {
    changegate::with_pool!(db, reader, |pool| {
        sqlx::query_scalar(sql).fetch_one(pool).await
    })
    .unwrap()
}
