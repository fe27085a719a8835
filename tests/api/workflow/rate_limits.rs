//! GitLab's rate limiter as it answers: a long `Retry-After` is a durable
//! wait (the step is due again after it, no worker held, no call sent
//! meanwhile, kept across a restart), not a failure and not a busy loop.

use std::time::Duration;

use changegate::db::Db;
use changegate::db::operations::get_operation;
use changegate_sim::gitlab::{Endpoint, Fault, FaultKind};

use super::end_to_end::{WorldOptions, world_with};
use super::*;
use crate::helpers::{each_backend, spawn_app};

/// Waits until no worker holds `id`'s step lease.
async fn lease_given_back(db: &Db, id: &str) {
    let sql = "SELECT COUNT(*) FROM operation WHERE operation_id = ? AND lease_owner IS NULL";
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let free: i64 = match db {
            Db::Sqlite(sqlite) => {
                sqlx::query_scalar(sql)
                    .bind(id)
                    .fetch_one(&sqlite.reader)
                    .await
            }
            Db::MySql(mysql) => {
                sqlx::query_scalar(sql)
                    .bind(id)
                    .fetch_one(&mysql.pool)
                    .await
            }
        }
        .unwrap();
        if free == 1 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the step lease of {id} is given back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_retry_after_of_two_minutes_holds_no_worker_and_is_kept_across_a_restart() {
    for test_db in each_backend().await {
        let w = world_with(
            &test_db.url,
            WorldOptions {
                batch_keys: "enabled = false".to_owned(),
                executor_keys: "workers = 1".to_owned(),
                ..WorldOptions::default()
            },
        )
        .await;
        w.gitlab.inject(
            Fault::new(
                Endpoint::CreateBranch,
                FaultKind::RateLimited {
                    retry_after: Duration::from_secs(120),
                },
            )
            .times(1),
        );
        let id = apply(&w.app).await;
        let waiting = wait_for(&w.app, &id, |v| {
            v["message"]
                .as_str()
                .is_some_and(|m| m.contains("rate limit"))
        })
        .await;
        assert_eq!(
            (waiting["status"].as_str(), waiting["next"].as_str()),
            (Some("MR_CREATING"), Some("WAIT")),
            "{}: {waiting}",
            test_db.name
        );
        // The message is written by the step; the due time it waits for
        // is final once the worker gives the lease back.
        lease_given_back(&test_db.db, &id).await;
        let operation = get_operation(&test_db.db, &id).await.unwrap().unwrap();
        let due_in = operation.due_at.unwrap() - operation.created_at;
        assert!(
            due_in >= chrono::TimeDelta::seconds(110),
            "{}: due again after the pause GitLab asked for, not sooner: {due_in}",
            test_db.name
        );

        // One worker is enough for another request's approval meanwhile:
        // the waiting step holds none.
        let other = w
            .app
            .post_as(
                "bob",
                "/api/v1/applications",
                &crate::requests::apply_body("demo.feature-flags"),
            )
            .await
            .json::<Value>()
            .await
            .unwrap()["operationId"]
            .as_str()
            .unwrap()
            .to_owned();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let view: Value = w
                .app
                .get_as("bob", &format!("/api/v1/operations/{other}"))
                .await
                .json()
                .await
                .unwrap();
            if view["status"] == "MR_CREATING" {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{}: the other request's approval did not run: {view}",
                test_db.name
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            w.gitlab.calls(Endpoint::CreateBranch),
            1,
            "{}: no GitLab call while the rate limit's pause runs",
            test_db.name
        );

        // A new instance on the same database keeps the pause too.
        w.app.stop().await.unwrap();
        let app = spawn_app(&test_db.url, &w.config).await;
        app.wait_until_ready().await;
        w.deploy
            .set_callback_url(format!("{}/callbacks/deploy", app.address));
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(
            w.gitlab.calls(Endpoint::CreateBranch),
            1,
            "{}: the restarted instance waits out the pause as well",
            test_db.name
        );

        // Once the pause is over (its due time reached), the step resumes.
        make_due(&test_db.db, &id).await;
        let view = wait_for(&app, &id, |v| {
            v["status"] == "VALIDATED" || v["next"] == "CONTACT_TEAM"
        })
        .await;
        assert_eq!(view["status"], "VALIDATED", "{}: {view}", test_db.name);
        app.stop().await.unwrap();
    }
}

/// Moves the operation's due time to now, as the clock would.
async fn make_due(db: &changegate::db::Db, id: &str) {
    changegate::with_pool!(db, writer, |pool| {
        sqlx::query("UPDATE operation SET due_at = created_at WHERE operation_id = ?")
            .bind(id)
            .execute(pool)
            .await
            .map(|_| ())
    })
    .unwrap();
}
