//! Reconciliation of lost deploy callbacks: MERGED bindings in the window
//! below the deploy watermark become VALIDATED; young ones and ones above
//! the watermark wait; a callback racing the job flips a binding once.

use std::time::Duration;

use changegate::db::Db;
use changegate::db::callbacks::insert_deploy_report;
use changegate::db::history::list_history;
use changegate::db::operations::{get_operation, record_merge_request};
use changegate::domain::{BindingStatus, StepStatus};
use changegate::jobs::Outcome;
use changegate::jobs::reconcile::run_once;

use crate::helpers::each_backend;
use crate::store::{TO_MERGED, apply, change, drive};

const MIN_AGE: Duration = Duration::from_secs(600);
const MAX_AGE: Duration = Duration::from_secs(86_400);

/// A MERGED operation of MR `iid`, last changed an hour ago unless `young`.
async fn merged(db: &Db, subject: &str, iid: i64, young: bool) -> String {
    let (id, version) = drive(db, &apply(subject, "t"), TO_MERGED).await;
    assert_eq!(
        record_merge_request(db, &id, version, iid, None)
            .await
            .unwrap(),
        1
    );
    if !young {
        changegate::with_pool!(db, writer, |pool| {
            sqlx::query(
                "UPDATE binding SET updated_at = '2000-01-01 00:00:00.000' WHERE operation_id = ?",
            )
            .bind(&id)
            .execute(pool)
            .await
            .map(|_| ())
        })
        .unwrap();
        // In the window: an hour ago by the database clock.
        let sql = match db.backend() {
            changegate::db::Backend::Sqlite => {
                "UPDATE binding SET updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now', '-3600 seconds') WHERE operation_id = ?"
            }
            changegate::db::Backend::MySql => {
                "UPDATE binding SET updated_at = CURRENT_TIMESTAMP(3) - INTERVAL 1 HOUR WHERE operation_id = ?"
            }
        };
        changegate::with_pool!(db, writer, |pool| {
            sqlx::query(sql).bind(&id).execute(pool).await.map(|_| ())
        })
        .unwrap();
    }
    id
}

async fn deployed(db: &Db, callback_id: &str, iid: i64) {
    let mut tx = db.begin().await.unwrap();
    insert_deploy_report(&mut tx, callback_id, iid, None, true)
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

async fn step_of(db: &Db, id: &str) -> StepStatus {
    get_operation(db, id).await.unwrap().unwrap().step
}

#[tokio::test]
async fn lost_deploy_callbacks_below_the_watermark_are_closed_out_once() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        let lost_1 = merged(db, "a", 1, false).await;
        let lost_2 = merged(db, "b", 2, false).await;
        let young = merged(db, "c", 3, true).await;
        let above = merged(db, "d", 9, false).await;
        assert_eq!(
            run_once(db, MIN_AGE, MAX_AGE).await.unwrap(),
            Outcome::Idle,
            "no deploy known yet"
        );

        deployed(db, "deploy-5", 5).await;
        let outcome = run_once(db, MIN_AGE, MAX_AGE).await.unwrap();
        assert_eq!(
            outcome,
            Outcome::Worked {
                done: 2,
                full: false
            },
            "{}",
            test_db.name
        );
        for id in [&lost_1, &lost_2] {
            assert_eq!(
                step_of(db, id).await,
                StepStatus::DeployReconciled,
                "{}",
                test_db.name
            );
        }
        assert_eq!(
            step_of(db, &young).await,
            StepStatus::HandleMerged,
            "may still get its callback"
        );
        assert_eq!(
            step_of(db, &above).await,
            StepStatus::HandleMerged,
            "not deployed yet"
        );
        assert_eq!(run_once(db, MIN_AGE, MAX_AGE).await.unwrap(), Outcome::Idle);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_callback_racing_the_job_flips_each_binding_once() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        let mut ids = Vec::new();
        for n in 0..20 {
            ids.push(merged(db, &format!("s{n}"), n + 1, false).await);
        }
        deployed(db, "deploy-99", 99).await;
        let mut racers = tokio::task::JoinSet::new();
        {
            let db = db.clone();
            racers.spawn(async move { run_once(&db, MIN_AGE, MAX_AGE).await.map(|_| ()).unwrap() });
        }
        for id in &ids {
            let (db, id) = (db.clone(), id.clone());
            racers.spawn(async move {
                changegate::store::flip(
                    &db,
                    &id,
                    &[BindingStatus::Merged],
                    BindingStatus::Validated,
                    change(StepStatus::DeployConfirmed),
                )
                .await
                .map(|_| ())
                .unwrap();
            });
        }
        racers.join_all().await;
        for id in &ids {
            let flips = list_history(db, id)
                .await
                .unwrap()
                .iter()
                .filter(|h| h.to_status.as_deref() == Some("VALIDATED"))
                .count();
            assert_eq!(flips, 1, "{}: {id}", test_db.name);
        }
    }
}

#[tokio::test]
async fn a_deploy_naming_a_batch_merge_commit_validates_its_members_exactly() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        // Merged a moment ago (too young for the watermark rule), in a batch.
        let id = merged(db, "e", 7, true).await;
        let mut tx = db.begin().await.unwrap();
        changegate::db::batches::enqueue(&mut tx, &id, "", "config/repo")
            .await
            .unwrap();
        tx.commit().await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let claimed = changegate::batch::claim_batch(db, "", 10).await.unwrap();
        assert!(
            matches!(claimed, changegate::batch::Claimed::Batch { .. }),
            "{claimed:?}"
        );
        changegate::with_pool!(db, writer, |pool| {
            sqlx::query("UPDATE merge_batch SET status = 'SUCCEEDED', merge_commit_sha = 'c0ffee'")
                .execute(pool)
                .await
                .map(|_| ())
        })
        .unwrap();
        let mut tx = db.begin().await.unwrap();
        insert_deploy_report(&mut tx, "deploy-c0ffee", 1, Some("c0ffee"), true)
            .await
            .unwrap();
        tx.commit().await.unwrap();

        let outcome = run_once(db, MIN_AGE, MAX_AGE).await.unwrap();
        assert_eq!(
            outcome,
            Outcome::Worked {
                done: 1,
                full: false
            },
            "{}",
            test_db.name
        );
        let operation = get_operation(db, &id).await.unwrap().unwrap();
        assert_eq!(
            (operation.step, operation.message.as_deref()),
            (
                StepStatus::DeployReconciled,
                Some("a deploy names its merge commit")
            )
        );
    }
}
