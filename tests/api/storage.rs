//! Storage foundations on every backend: migrations, the database clock,
//! database-enforced uniqueness, and concurrent writers.

use std::time::Duration;

use changegate::db::{self, Db, dialect};
use changegate::{with_pool, with_tx};

use crate::helpers::each_backend;

async fn insert_binding(
    db: &Db,
    subject: &str,
    target: &str,
    operation: &str,
) -> Result<(), sqlx::Error> {
    let sql = "INSERT INTO binding (subject_id, target_key, operation_id, status, requested_by, params) \
               VALUES (?, ?, ?, 'APPROVAL_SENDING', ?, '{}')";
    with_pool!(db, writer, |pool| {
        sqlx::query(sql)
            .bind(subject)
            .bind(target)
            .bind(operation)
            .bind(subject)
            .execute(pool)
            .await
            .map(|_| ())
    })
}

#[tokio::test]
async fn migrations_are_idempotent_and_leave_the_database_ready() {
    for test_db in each_backend().await {
        test_db.db.migrate().await.expect("second run is a no-op");
        test_db
            .db
            .check_ready(true)
            .await
            .expect("ready after migrations");
        let tables: i64 = with_pool!(&test_db.db, reader, |pool| {
            sqlx::query_scalar(
                "SELECT COUNT(*) FROM operation o, binding b, operation_history h WHERE 1 = 0",
            )
            .fetch_one(pool)
            .await
        })
        .expect("state store tables exist");
        assert_eq!(tables, 0, "{}", test_db.name);
    }
}

#[tokio::test]
async fn one_binding_per_relation_is_enforced_by_the_database() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        insert_binding(db, "alice", "payments.api.allowlist", "op-1")
            .await
            .unwrap();
        insert_binding(db, "alice", "other.target", "op-2")
            .await
            .unwrap();
        let duplicate = insert_binding(db, "alice", "payments.api.allowlist", "op-3")
            .await
            .expect_err("second row for the same relation");
        assert!(
            db::is_unique_violation(&duplicate),
            "{}: {duplicate}",
            test_db.name
        );
        // Keys compare byte for byte on both backends.
        insert_binding(db, "Alice", "payments.api.allowlist", "op-4")
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn times_come_from_the_database_clock_with_milliseconds() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        let before = db.now().await.unwrap();
        insert_binding(db, "s1", "t", "op-a").await.unwrap();
        tokio::time::sleep(Duration::from_millis(15)).await;
        insert_binding(db, "s2", "t", "op-b").await.unwrap();
        let stamps: Vec<chrono::NaiveDateTime> = with_pool!(db, reader, |pool| {
            sqlx::query_scalar("SELECT created_at FROM binding ORDER BY id")
                .fetch_all(pool)
                .await
        })
        .unwrap();
        let gap = stamps[1] - stamps[0];
        assert!(
            gap >= chrono::TimeDelta::milliseconds(10) && gap < chrono::TimeDelta::seconds(5),
            "{}: rows 15 ms apart are {gap} apart",
            test_db.name
        );
        assert!(
            stamps[0] >= before,
            "{}: default comes from the database clock",
            test_db.name
        );

        // Rows are older than the database's now once its clock has passed
        // the second row's millisecond (the SELECT may run in that very one).
        while db.now().await.unwrap() < stamps[1] + chrono::TimeDelta::milliseconds(1) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let sql = format!(
            "SELECT COUNT(*) FROM binding WHERE created_at < {}",
            dialect::now_ms(db.backend())
        );
        let older: i64 = with_pool!(db, reader, |pool| {
            sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                .fetch_one(pool)
                .await
        })
        .unwrap();
        assert_eq!(older, 2, "{}", test_db.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_concurrent_writers_all_succeed() {
    for test_db in each_backend().await {
        let writes: Vec<_> = (0..64)
            .map(|i| {
                let db = test_db.db.clone();
                tokio::spawn(async move {
                    insert_binding(&db, &format!("subject-{i}"), "t", &format!("op-{i}")).await
                })
            })
            .collect();
        for write in writes {
            write
                .await
                .expect("task")
                .expect("write succeeds without busy errors");
        }
        let count: i64 = with_pool!(&test_db.db, reader, |pool| {
            sqlx::query_scalar("SELECT COUNT(*) FROM binding")
                .fetch_one(pool)
                .await
        })
        .unwrap();
        assert_eq!(count, 64, "{}", test_db.name);
    }
}

/// SQLite rolls a transaction back by itself when its COMMIT fails on an I/O
/// error (storage read-only or full). The pool's one writer must still take
/// the next transaction: sqlx, whose own ROLLBACK then fails, would count it
/// in a transaction for ever and refuse every later BEGIN.
#[tokio::test]
async fn the_sqlite_writer_takes_new_transactions_after_a_failed_commit() {
    let test_db = crate::helpers::sqlite_db().await;
    let mut tx = test_db.db.begin().await.unwrap();
    // What SQLite does when the COMMIT's write fails, done by hand.
    with_tx!(&mut tx, |conn| sqlx::raw_sql("ROLLBACK")
        .execute(conn)
        .await
        .map(|_| ()))
    .unwrap();
    assert!(tx.commit().await.is_err(), "nothing is left to commit");
    let tx = test_db
        .db
        .begin()
        .await
        .expect("the writer begins a transaction again");
    tx.commit().await.unwrap();
}
