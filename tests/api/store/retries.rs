//! Store writes that lose a lock race are begun again, whole, inside the
//! store: a real InnoDB deadlock on MariaDB, SQLite busy past its timeout,
//! and a race lost on every attempt, which gives up with the error.

use std::time::Duration;

use changegate::db::{self, Conflict, Contended, Db, RETRIES};
use changegate::domain::{BindingStatus, StepStatus};
use changegate::store::{self, StoreError, move_members};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use sqlx::Connection;

use super::{apply, change};
use crate::helpers::{TestDb, database_settings, mysql_db, settings_from, sqlite_db};

/// A counter's name, its labels and its value.
type CounterValue = (String, Vec<(String, String)>, u64);

/// Counter values, as one snapshot took them.
struct Counters(Vec<CounterValue>);

impl Counters {
    /// The value of counter `name` with `labels`, 0 when it was never touched.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.0
            .iter()
            .filter(|(found, found_labels, _)| {
                found == name
                    && labels.iter().all(|(label, value)| {
                        found_labels.iter().any(|(l, v)| l == label && v == value)
                    })
            })
            .map(|(.., count)| count)
            .sum()
    }

    fn retries(&self, reason: &str) -> u64 {
        self.get("changegate_store_retries_total", &[("reason", reason)])
    }

    fn exhausted(&self) -> u64 {
        self.get("changegate_store_retries_exhausted_total", &[])
    }
}

/// Runs `test` on a runtime of this thread with a recorder of its own, so
/// the counters it reads are this test's only.
fn with_counters<T>(test: impl AsyncFnOnce() -> T) -> (T, Counters) {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let outcome = metrics::with_local_recorder(&recorder, || runtime.block_on(test()));
    // A snapshot takes the counts (it resets them): one, read many times.
    let counters = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| match value {
            DebugValue::Counter(count) => {
                let key = key.key();
                let labels = key
                    .labels()
                    .map(|label| (label.key().to_owned(), label.value().to_owned()))
                    .collect();
                Some((key.name().to_owned(), labels, count))
            }
            _ => None,
        })
        .collect();
    (outcome, Counters(counters))
}

/// Two new operations, in id order.
async fn two_operations(db: &Db) -> (String, String) {
    let (first, second) = (apply("alice", "t"), apply("bob", "t"));
    store::submit(db, &first).await.unwrap();
    store::submit(db, &second).await.unwrap();
    let mut ids = [
        first.operation_id.as_string(),
        second.operation_id.as_string(),
    ];
    ids.sort();
    let [low, high] = ids;
    (low, high)
}

/// One store transaction over both operations: it locks `low`, then `high`.
async fn move_both(db: &Db, ids: &[String]) -> Result<Vec<String>, StoreError> {
    changegate::write_tx!(db, |tx| {
        move_members(
            tx,
            ids,
            &[BindingStatus::ApprovalSending],
            None,
            change(StepStatus::ApprovalSent),
            None,
        )
        .await
    })
    .await
}

async fn step_of(db: &Db, id: &str) -> i32 {
    changegate::with_pool!(db, reader, |pool| {
        sqlx::query_scalar("SELECT step_code FROM operation WHERE operation_id = ?")
            .bind(id)
            .fetch_one(pool)
            .await
    })
    .unwrap()
}

#[test]
fn a_deadlock_victim_is_written_again_whole_and_succeeds() {
    let (done, counters) = with_counters(async || {
        let Some(test_db) = mysql_db().await else {
            return false;
        };
        let db = &test_db.db;
        let (low, high) = two_operations(db).await;

        // Another writer holds `high` and has written much, so InnoDB picks
        // the store's lighter transaction as the victim of the deadlock.
        let mut other = sqlx::MySqlConnection::connect(&test_db.url).await.unwrap();
        sqlx::raw_sql("BEGIN").execute(&mut other).await.unwrap();
        for _ in 0..20 {
            sqlx::raw_sql(
                "INSERT INTO audit_log (actor, action, subject, params) \
                 SELECT 'test', 'bulk', 'weight', '{}' FROM operation_history",
            )
            .execute(&mut other)
            .await
            .unwrap();
        }
        sqlx::query("SELECT id FROM operation WHERE operation_id = ? FOR UPDATE")
            .bind(&high)
            .fetch_one(&mut other)
            .await
            .unwrap();

        let ids = vec![low.clone(), high.clone()];
        let store_db = db.clone();
        let store_write = tokio::spawn(async move { move_both(&store_db, &ids).await });
        // The store transaction locks `low` and waits for `high`.
        tokio::time::sleep(Duration::from_millis(500)).await;
        // Now the other writer wants `low`: a cycle, and InnoDB breaks it.
        sqlx::query("SELECT id FROM operation WHERE operation_id = ? FOR UPDATE")
            .bind(&low)
            .fetch_one(&mut other)
            .await
            .expect("the heavier transaction is not the victim");
        sqlx::query("UPDATE operation SET message = 'other' WHERE operation_id = ?")
            .bind(&low)
            .execute(&mut other)
            .await
            .unwrap();
        sqlx::raw_sql("COMMIT").execute(&mut other).await.unwrap();

        let moved = store_write.await.unwrap().expect("the store retried");
        assert_eq!(moved, vec![low.clone(), high.clone()]);
        for id in [&low, &high] {
            assert_eq!(step_of(db, id).await, StepStatus::ApprovalSent.code());
        }
        true
    });
    if done {
        let deadlocks = counters.retries("deadlock");
        assert!(deadlocks >= 1, "the retry is counted: {deadlocks}");
        assert_eq!(counters.exhausted(), 0);
    }
}

/// The same SQLite file with a busy timeout of 100 ms.
async fn impatient(test_db: &TestDb) -> Db {
    let (settings, problems) = settings_from(&format!(
        "[database]\nurl = {:?}\nconnect_timeout = \"100ms\"\n",
        test_db.url
    ));
    assert!(problems.is_empty(), "{problems:?}");
    db::open(&settings.database).await.unwrap()
}

/// A second connection to the SQLite file that holds its write lock.
async fn hold_write_lock(test_db: &TestDb) -> sqlx::SqliteConnection {
    let settings = database_settings(&test_db.url);
    let mut holder = sqlx::SqliteConnection::connect(&settings.url)
        .await
        .unwrap();
    sqlx::raw_sql("BEGIN IMMEDIATE")
        .execute(&mut holder)
        .await
        .unwrap();
    holder
}

#[test]
fn sqlite_busy_past_the_busy_timeout_is_retried_until_the_lock_is_free() {
    let ((), counters) = with_counters(async || {
        let test_db = sqlite_db().await;
        let (low, high) = two_operations(&test_db.db).await;
        let db = impatient(&test_db).await;
        let mut holder = hold_write_lock(&test_db).await;
        let store_db = db.clone();
        let ids = vec![low.clone(), high.clone()];
        let store_write = tokio::spawn(async move { move_both(&store_db, &ids).await });
        // Longer than one busy timeout, shorter than all the retries.
        tokio::time::sleep(Duration::from_millis(250)).await;
        sqlx::raw_sql("COMMIT").execute(&mut holder).await.unwrap();

        let moved = store_write.await.unwrap().expect("the store retried");
        assert_eq!(moved, vec![low.clone(), high]);
        assert_eq!(step_of(&db, &low).await, StepStatus::ApprovalSent.code());
    });
    let busy = counters.retries("busy");
    assert!(busy >= 1, "the retries are counted: {busy}");
    assert_eq!(counters.exhausted(), 0);
}

#[test]
fn a_write_that_loses_every_race_gives_up_with_the_conflict_and_counts_it() {
    let ((), counters) = with_counters(async || {
        let test_db = sqlite_db().await;
        let (low, high) = two_operations(&test_db.db).await;
        let db = impatient(&test_db).await;
        let mut holder = hold_write_lock(&test_db).await;

        let failed = move_both(&db, &[low.clone(), high])
            .await
            .expect_err("the lock is never free");
        assert_eq!(failed.conflict(), Some(Conflict::Busy), "{failed:?}");

        sqlx::raw_sql("ROLLBACK")
            .execute(&mut holder)
            .await
            .unwrap();
        assert_eq!(
            step_of(&db, &low).await,
            StepStatus::Accepted.code(),
            "nothing was written"
        );
    });
    assert_eq!(counters.retries("busy"), RETRIES as u64);
    assert_eq!(counters.exhausted(), 1);
}

/// InnoDB reports a deadlock or lock-wait timeout on a table's AUTO-INC
/// lock as 1467 (`Failed to read auto-increment value from storage
/// engine`): the server's own error, raised by `SIGNAL` here, is retried
/// like a deadlock and counted under its own reason.
#[test]
fn an_auto_increment_lock_failure_is_retried_like_a_deadlock() {
    let (attempts, counters) = with_counters(async || {
        let test_db = mysql_db().await?;
        let Db::MySql(mysql) = &test_db.db else {
            unreachable!("a MariaDB test database");
        };
        let pool = &mysql.pool;
        let mut attempts = 0;
        db::retrying(|| {
            attempts += 1;
            let first = attempts == 1;
            async move {
                if first {
                    sqlx::raw_sql(
                        "SIGNAL SQLSTATE 'HY000' SET MYSQL_ERRNO = 1467, \
                         MESSAGE_TEXT = 'Failed to read auto-increment value from storage engine'",
                    )
                    .execute(pool)
                    .await?;
                }
                sqlx::query_scalar::<_, i64>("SELECT 1")
                    .fetch_one(pool)
                    .await
            }
        })
        .await
        .expect("retried past the lock failure");
        Some(attempts)
    });
    let Some(attempts) = attempts else {
        return;
    };
    assert_eq!(attempts, 2, "one failure, then the write again");
    assert_eq!(counters.retries("autoinc_lock"), 1);
    assert_eq!(counters.exhausted(), 0);
}
