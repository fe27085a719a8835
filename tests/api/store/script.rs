//! MySQL scripts (`db::script`): a transaction in one round trip is still
//! all or nothing, also when its caller stops waiting, and a failed script
//! leaves no open transaction on a pooled connection for the next user to
//! commit by accident.

use std::time::Duration;

use changegate::db::script::run_transaction;
use changegate::db::statement::{SqlValue, Statement};
use changegate::db::{Db, is_unique_violation};
use sqlx::MySqlPool;

use crate::helpers::{TestDb, mysql_db};

fn insert(value: &str) -> Statement<'_> {
    Statement {
        sql: "INSERT INTO script_probe (v) VALUES (?)".to_owned(),
        values: vec![SqlValue::Text(value)],
    }
}

/// A MariaDB database with an empty `script_probe` table, when configured.
async fn probe_db() -> Option<(TestDb, MySqlPool)> {
    let test_db = mysql_db().await?;
    let Db::MySql(mysql) = &test_db.db else {
        unreachable!("mysql_db is MySQL")
    };
    let pool = mysql.pool.clone();
    sqlx::raw_sql("CREATE TABLE script_probe (v VARCHAR(64) NOT NULL PRIMARY KEY)")
        .execute(&pool)
        .await
        .unwrap();
    Some((test_db, pool))
}

async fn values(pool: &MySqlPool) -> Vec<String> {
    sqlx::query_scalar("SELECT v FROM script_probe ORDER BY v")
        .fetch_all(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_mariadb_server_outside_a_cluster_takes_transactions_as_scripts() {
    let Some(test_db) = mysql_db().await else {
        return;
    };
    assert!(test_db.db.script_pool().is_some());
}

#[tokio::test]
async fn a_failed_statement_rolls_back_the_whole_script_and_is_named() {
    // Held to the end: dropping it drops the database.
    let Some((_database, pool)) = probe_db().await else {
        return;
    };
    let pool = &pool;

    // Text that would end a quoted literal is stored as it is.
    let tricky = "it's a \\' ; DROP TABLE script_probe; -- ✓";
    run_transaction(pool, &[insert("a"), insert(tricky)])
        .await
        .unwrap();
    let failure = run_transaction(pool, &[insert("b"), insert("c"), insert("a"), insert("d")])
        .await
        .unwrap_err();
    assert_eq!(failure.statement, Some(2), "the third statement failed");
    assert!(is_unique_violation(&failure.error), "{:?}", failure.error);
    assert_eq!(values(pool).await, vec!["a".to_owned(), tricky.to_owned()]);

    // Every pooled connection is clean afterwards: a transaction left open
    // would have been committed by this script's START TRANSACTION.
    for round in 0..20 {
        let value = format!("ok-{round:02}");
        run_transaction(pool, &[insert(&value)]).await.unwrap();
    }
    let stored = values(pool).await;
    assert_eq!(stored.len(), 22, "{stored:?}");
    assert!(!stored.iter().any(|v| v == "b" || v == "c"), "{stored:?}");
}

#[tokio::test]
async fn a_script_whose_caller_stops_waiting_is_still_all_or_nothing() {
    // Held to the end: dropping it drops the database.
    let Some((_database, pool)) = probe_db().await else {
        return;
    };
    let pool = &pool;
    let stall = || Statement {
        sql: "DO SLEEP(1)".to_owned(),
        values: Vec::new(),
    };
    // The server has both scripts before their callers give up: one goes on
    // to commit, the other fails after its first INSERT, with its
    // transaction open on a connection that must never serve anyone again.
    let completes = [insert("whole-1"), stall(), insert("whole-2")];
    let fails = [insert("half"), stall(), insert("half")];
    let (completed, failed) = tokio::join!(
        tokio::time::timeout(
            Duration::from_millis(300),
            run_transaction(pool, &completes)
        ),
        tokio::time::timeout(Duration::from_millis(300), run_transaction(pool, &fails)),
    );
    assert!(
        completed.is_err() && failed.is_err(),
        "both callers stopped waiting"
    );

    // Once the server is done with both, later scripts run on every pooled
    // connection; none may commit "half".
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for round in 0..20 {
        let value = format!("ok-{round:02}");
        run_transaction(pool, &[insert(&value)]).await.unwrap();
    }
    let stored = values(pool).await;
    assert!(!stored.iter().any(|v| v == "half"), "{stored:?}");
    let whole = stored.iter().filter(|v| v.starts_with("whole-")).count();
    assert!(whole == 0 || whole == 2, "all or nothing: {stored:?}");
    assert_eq!(stored.len(), 20 + whole, "{stored:?}");
}
