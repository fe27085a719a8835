//! Reconciliation of lost deploy callbacks: MERGED bindings in the window
//! below their project's deploy watermark become VALIDATED; young ones and
//! ones above the watermark wait; a deploy of one project moves no other
//! project's watermark; a callback racing the job flips a binding once.

use std::time::Duration;

use changegate::config::projects::Projects;
use changegate::db::Db;
use changegate::db::callbacks::insert_deploy_report;
use changegate::db::history::list_history;
use changegate::db::operations::{get_operation, record_merge_request};
use changegate::domain::{BindingStatus, StepStatus};
use changegate::jobs::Outcome;
use changegate::jobs::reconcile::run_once;

use crate::helpers::{each_backend, one_at_a_time, settings_from};
use crate::store::{TO_MERGED, apply, change, drive};

const MIN_AGE: Duration = Duration::from_secs(600);
const MAX_AGE: Duration = Duration::from_secs(86_400);

/// The projects of a catalog whose one target `t` names none, in a
/// configuration without `gitlab.project`.
fn one_project() -> Projects {
    Projects::of(&settings_from("").0)
}

/// A MERGED operation of MR `iid` for target `t`, last changed an hour ago
/// unless `young`.
async fn merged(db: &Db, subject: &str, iid: i64, young: bool) -> String {
    merged_for(db, "t", subject, iid, young).await
}

/// [`merged`] for `target`.
async fn merged_for(db: &Db, target: &str, subject: &str, iid: i64, young: bool) -> String {
    let (id, version) = drive(db, &apply(subject, target), TO_MERGED).await;
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

/// A successful deploy report of MR `iid` of the project keyed `project`.
async fn deployed(db: &Db, callback_id: &str, project: &str, iid: i64) {
    let mut tx = db.begin().await.unwrap();
    insert_deploy_report(&mut tx, callback_id, project, iid, None, true)
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

async fn step_of(db: &Db, id: &str) -> StepStatus {
    get_operation(db, id).await.unwrap().unwrap().step
}

async fn steps_of(db: &Db, ids: &[&String]) -> Vec<StepStatus> {
    let mut steps = Vec::new();
    for id in ids {
        steps.push(step_of(db, id).await);
    }
    steps
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
            run_once(db, &one_project(), MIN_AGE, MAX_AGE)
                .await
                .unwrap(),
            Outcome::Idle,
            "no deploy known yet"
        );

        deployed(db, "deploy-5", "", 5).await;
        let outcome = run_once(db, &one_project(), MIN_AGE, MAX_AGE)
            .await
            .unwrap();
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
        assert_eq!(
            run_once(db, &one_project(), MIN_AGE, MAX_AGE)
                .await
                .unwrap(),
            Outcome::Idle
        );
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
        deployed(db, "deploy-99", "", 99).await;
        let mut racers = tokio::task::JoinSet::new();
        {
            let db = db.clone();
            racers.spawn(async move {
                run_once(&db, &one_project(), MIN_AGE, MAX_AGE)
                    .await
                    .map(|_| ())
                    .unwrap()
            });
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
        changegate::db::batch_queue::enqueue(&mut tx, &id, "", "Config/Repo", None)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let claimed = changegate::batch::claim_batch(db, "", one_at_a_time(10), &|_| true)
            .await
            .unwrap();
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
        let projects = Projects::of(&settings_from("[gitlab]\nproject = \"Config/Repo\"\n").0);
        let report = |callback_id: &'static str, project: &'static str| async move {
            let mut tx = db.begin().await.unwrap();
            insert_deploy_report(&mut tx, callback_id, project, 1, Some("c0ffee"), true)
                .await
                .unwrap();
            tx.commit().await.unwrap();
        };
        report("deploy-elsewhere", "other/repo").await;
        assert_eq!(
            run_once(db, &projects, MIN_AGE, MAX_AGE).await.unwrap(),
            Outcome::Idle,
            "{}: the same commit deployed in another project says nothing of this one",
            test_db.name
        );

        report("deploy-c0ffee", "config/repo").await;
        let outcome = run_once(db, &projects, MIN_AGE, MAX_AGE).await.unwrap();
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

/// Bindings of `a.flags` (in `team/a`, the default project) and `b.flags`
/// (in `team/b`), whose MRs are numbered apart.
const TWO_PROJECTS: &str = "[gitlab]\nproject = \"team/a\"\n\
    [targets.\"a.flags\"]\n[targets.\"b.flags\"]\nproject = \"team/b\"\n";

#[tokio::test]
async fn each_project_has_its_own_watermark() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        let projects = Projects::of(&settings_from(TWO_PROJECTS).0);
        let a_low = merged_for(db, "a.flags", "a1", 3, false).await;
        let a_high = merged_for(db, "a.flags", "a2", 8, false).await;
        let b_low = merged_for(db, "b.flags", "b1", 1, false).await;
        let b_high = merged_for(db, "b.flags", "b2", 3, false).await;
        let all = [&a_low, &a_high, &b_low, &b_high];
        let (merged, reconciled) = (StepStatus::HandleMerged, StepStatus::DeployReconciled);

        deployed(db, "a-5", "team/a", 5).await;
        assert_eq!(
            run_once(db, &projects, MIN_AGE, MAX_AGE).await.unwrap(),
            Outcome::Worked {
                done: 1,
                full: false
            },
            "{}",
            test_db.name
        );
        assert_eq!(
            steps_of(db, &all).await,
            [reconciled, merged, merged, merged],
            "{}: team/a's !5 includes team/a's !3, not team/b's !1 or !3",
            test_db.name
        );
        let operation = get_operation(db, &a_low).await.unwrap().unwrap();
        assert_eq!(
            operation.message.as_deref(),
            Some("a later deploy (team/a!5) includes this change")
        );

        // Stored before callbacks named projects: the default project's.
        deployed(db, "legacy-9", "", 9).await;
        run_once(db, &projects, MIN_AGE, MAX_AGE).await.unwrap();
        assert_eq!(
            steps_of(db, &all).await,
            [reconciled, reconciled, merged, merged],
            "{}",
            test_db.name
        );

        deployed(db, "b-1", "team/b", 1).await;
        run_once(db, &projects, MIN_AGE, MAX_AGE).await.unwrap();
        assert_eq!(
            steps_of(db, &all).await,
            [reconciled, reconciled, reconciled, merged],
            "{}: team/b's watermark is its own !1",
            test_db.name
        );
        assert_eq!(
            run_once(db, &projects, MIN_AGE, MAX_AGE).await.unwrap(),
            Outcome::Idle
        );
    }
}
