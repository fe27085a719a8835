//! The numbers people see of merge batches: 1, 2, 3, … per GitLab project,
//! without a gap whatever rolls back (a claim rolled back on purpose, a
//! round with nothing to claim, claims racing for the slot on two
//! instances and for one project's counter from two partitions), each
//! project counting on its own, and batches of an earlier schema numbered
//! by the migration in id order.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use changegate::batch::{Claimed, claim_batch, claim_in};
use changegate::db::batch_queue::enqueue;
use changegate::db::batches::get_batch;
use changegate::db::{Db, MYSQL_MIGRATIONS, SQLITE_MIGRATIONS};
use changegate::store::StoreTx;
use sqlx::migrate::Migrator;
use sqlx::sqlite::SqliteConnectOptions;

use crate::batches::claim_until_empty;
use crate::helpers::{MySqlScratch, database_settings, each_backend, one_at_a_time};

const PROJECT: &str = "config/repo";

/// `count` requests of `project` waiting in `partition`.
async fn enqueue_in(db: &Db, partition: &str, project: &str, count: usize) {
    let mut tx = db.begin().await.unwrap();
    for _ in 0..count {
        let id = uuid::Uuid::new_v4().to_string();
        assert!(
            enqueue(&mut tx, &id, partition, project, None)
                .await
                .unwrap()
        );
    }
    tx.commit().await.unwrap();
    // The claim takes rows created before the database's now (ms precision).
    tokio::time::sleep(Duration::from_millis(5)).await;
}

/// Ends every running batch, so each partition's slot comes free again. A
/// range UPDATE racing claims may be picked as a deadlock victim on InnoDB,
/// which rolls it back whole: `false` then, and the caller tries again.
async fn finish_running(db: &Db) -> bool {
    let finished = changegate::with_pool!(db, writer, |pool| {
        sqlx::query("UPDATE merge_batch SET status = 'SUCCEEDED' WHERE status = 'RUNNING'")
            .execute(pool)
            .await
            .map(drop)
    });
    match finished {
        Ok(()) => true,
        Err(err) if changegate::db::is_retryable_conflict(&err) => false,
        Err(err) => panic!("finishing the running batches: {err}"),
    }
}

/// The numbers of `project`'s batches in id order, and its counter.
async fn numbers_of(db: &Db, project: &str) -> (Vec<i64>, Option<i64>) {
    changegate::with_pool!(db, reader, |pool| {
        let numbers: Vec<Option<i64>> =
            sqlx::query_scalar("SELECT number FROM merge_batch WHERE project = ? ORDER BY id")
                .bind(project)
                .fetch_all(pool)
                .await
                .unwrap();
        let counter: Option<i64> =
            sqlx::query_scalar("SELECT last_number FROM merge_batch_counter WHERE project = ?")
                .bind(project)
                .fetch_optional(pool)
                .await
                .unwrap();
        (numbers.into_iter().map(Option::unwrap).collect(), counter)
    })
}

/// The number a claim gave, when it made a batch.
fn number(claimed: &Claimed) -> Option<i64> {
    match claimed {
        Claimed::Batch { number, .. } => Some(*number),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn batch_numbers_have_no_gaps_after_claims_that_roll_back_or_race() {
    for test_db in each_backend().await {
        let name = test_db.name;
        let db = test_db.db.clone();
        // A second instance: its own pool on the same database.
        let other = changegate::db::open(&database_settings(&test_db.url))
            .await
            .unwrap();

        // A claim rolled back on purpose after it was numbered, and rounds
        // with nothing to claim: none of them uses up a number.
        enqueue_in(&db, "", PROJECT, 3).await;
        let mut tx = StoreTx::begin(&db).await.unwrap();
        let claimed = claim_in(&mut tx, "", one_at_a_time(10), &|_| true)
            .await
            .unwrap();
        assert_eq!(number(&claimed), Some(1), "{name}: {claimed:?}");
        tx.rollback().await.unwrap();
        let first = claim_batch(&db, "", one_at_a_time(10), &|_| true)
            .await
            .unwrap();
        let Claimed::Batch { id, number: 1, .. } = first else {
            panic!("{name}: the first committed batch is #1: {first:?}");
        };
        assert_eq!(
            get_batch(&db, id).await.unwrap().unwrap().number,
            Some(1),
            "{name}"
        );
        assert!(finish_running(&db).await);
        for _ in 0..3 {
            assert_eq!(
                claim_batch(&db, "", one_at_a_time(10), &|_| true)
                    .await
                    .unwrap(),
                Claimed::Empty
            );
        }

        // Claimers on both instances race for two partitions that hold
        // requests of the same project: within a partition for its slot,
        // across them for the project's counter (two of its batches may be
        // claimed at once).
        for partition in ["", PROJECT] {
            enqueue_in(&db, partition, PROJECT, 120).await;
        }
        let done = Arc::new(AtomicBool::new(false));
        let finisher = {
            let (db, done) = (db.clone(), done.clone());
            tokio::spawn(async move {
                while !done.load(Ordering::Relaxed) {
                    finish_running(&db).await;
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            })
        };
        let mut claimers = tokio::task::JoinSet::new();
        for n in 0..16 {
            let db = if n % 2 == 0 {
                db.clone()
            } else {
                other.clone()
            };
            let partition = if n % 4 < 2 { "" } else { PROJECT };
            claimers.spawn(async move { claim_until_empty(&db, partition).await });
        }
        let outcomes: Vec<Claimed> = claimers.join_all().await.into_iter().flatten().collect();
        done.store(true, Ordering::Relaxed);
        finisher.await.unwrap();
        assert!(
            outcomes.contains(&Claimed::SlotOccupied),
            "{name}: the claimers did race for the slot"
        );

        // Numbers go by the order in which claims take the counter, which
        // ids, taken when a claim starts, need not follow.
        let (mut numbers, counter) = numbers_of(&db, PROJECT).await;
        numbers.sort_unstable();
        let count = i64::try_from(numbers.len()).unwrap();
        assert_eq!(
            numbers,
            (1..=count).collect::<Vec<_>>(),
            "{name}: numbered 1..{count}, each once"
        );
        assert_eq!(counter, Some(count), "{name}");
        let mut claimed: Vec<i64> = outcomes.iter().filter_map(number).collect();
        claimed.sort_unstable();
        assert_eq!(
            claimed,
            (2..=count).collect::<Vec<_>>(),
            "{name}: each claim was told its batch's number"
        );
        if name == "mysql" {
            // What the numbers are for: InnoDB's AUTO_INCREMENT skipped the
            // ids of the inserts that rolled back or hit the slot.
            let (batches, last_id): (i64, i64) = changegate::with_pool!(&db, reader, |pool| {
                sqlx::query_as("SELECT COUNT(*), MAX(id) FROM merge_batch")
                    .fetch_one(pool)
                    .await
            })
            .unwrap();
            assert!(last_id > batches, "ids have gaps: {last_id} for {batches}");
        }
        other.close().await;
    }
}

#[tokio::test]
async fn each_project_numbers_its_batches_from_one_whatever_their_partition() {
    for test_db in each_backend().await {
        let name = test_db.name;
        let db = &test_db.db;
        let mut claimed = Vec::new();
        // One partition for every project (`batch.partition_by_project`
        // off): the oldest waiting request's project goes first.
        for project in ["team/a", "team/b", "team/a", "team/a", "team/b"] {
            enqueue_in(db, "", project, 2).await;
            claimed.push(
                claim_batch(db, "", one_at_a_time(10), &|_| true)
                    .await
                    .unwrap(),
            );
            assert!(finish_running(db).await);
        }
        // Then one partition per project: the numbers go on.
        for project in ["team/b", "team/a"] {
            enqueue_in(db, project, project, 1).await;
            claimed.push(
                claim_batch(db, project, one_at_a_time(10), &|_| true)
                    .await
                    .unwrap(),
            );
        }
        let mut seen = Vec::new();
        for outcome in &claimed {
            let Claimed::Batch { id, number, .. } = outcome else {
                panic!("{name}: {outcome:?}");
            };
            let batch = get_batch(db, *id).await.unwrap().unwrap();
            assert_eq!(batch.number, Some(*number), "{name}");
            seen.push((batch.project, *number));
        }
        let expected = [
            ("team/a", 1),
            ("team/b", 1),
            ("team/a", 2),
            ("team/a", 3),
            ("team/b", 2),
            ("team/b", 3),
            ("team/a", 4),
        ]
        .map(|(project, number)| (project.to_owned(), number));
        assert_eq!(seen, expected, "{name}");
    }
}

/// The embedded migrations before `version`, as the release before it
/// shipped them.
fn migrations_before(embedded: &Migrator, version: i64) -> Migrator {
    let mut migrator = Migrator::with_migrations(
        embedded
            .iter()
            .filter(|m| m.version < version)
            .cloned()
            .collect(),
    );
    // MariaDB refuses the migrator's GET_LOCK(name, -1); this test migrates alone.
    migrator.set_locking(false);
    migrator
}

/// Batches as releases before migration 0020 left them: ids with gaps,
/// projects interleaved.
const EARLIER_BATCHES: &str = "INSERT INTO merge_batch (id, status, partition_key, project) VALUES \
     (1, 'SUCCEEDED', '', 'team/a'), (5, 'FAILED', '', 'team/b'), (11, 'SUCCEEDED', '', 'team/a'), \
     (16, 'SUCCEEDED', '', 'team/b'), (19, 'FAILED', '', 'team/a'), (22, 'SUCCEEDED', '', 'team/a'), \
     (30, 'RUNNING', '', 'team/a')";

#[tokio::test]
async fn the_migration_numbers_earlier_batches_per_project_in_id_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut urls = vec![(
        "sqlite",
        format!("sqlite://{}", dir.path().join("cg.db").display()),
    )];
    let scratch = MySqlScratch::create().await;
    urls.extend(scratch.as_ref().map(|s| ("mysql", s.url())));
    for (name, url) in urls {
        if name == "sqlite" {
            let options = SqliteConnectOptions::from_str(&url)
                .unwrap()
                .create_if_missing(true);
            let pool = sqlx::SqlitePool::connect_with(options).await.unwrap();
            migrations_before(&SQLITE_MIGRATIONS, 20)
                .run(&pool)
                .await
                .unwrap();
            sqlx::query(EARLIER_BATCHES).execute(&pool).await.unwrap();
            pool.close().await;
        } else {
            let pool = sqlx::MySqlPool::connect(&url).await.unwrap();
            migrations_before(&MYSQL_MIGRATIONS, 20)
                .run(&pool)
                .await
                .unwrap();
            sqlx::query(EARLIER_BATCHES).execute(&pool).await.unwrap();
            pool.close().await;
        }
        let db = changegate::db::open(&database_settings(&url))
            .await
            .unwrap();
        let numbered: Vec<(i64, String, Option<i64>)> =
            changegate::with_pool!(&db, reader, |pool| {
                sqlx::query_as("SELECT id, project, number FROM merge_batch ORDER BY id")
                    .fetch_all(pool)
                    .await
            })
            .unwrap();
        let expected = [
            (1, "team/a", 1),
            (5, "team/b", 1),
            (11, "team/a", 2),
            (16, "team/b", 2),
            (19, "team/a", 3),
            (22, "team/a", 4),
            (30, "team/a", 5),
        ]
        .map(|(id, project, number)| (id, project.to_owned(), Some(number)));
        assert_eq!(numbered, expected, "{name}");
        assert_eq!(numbers_of(&db, "team/a").await.1, Some(5), "{name}");
        assert_eq!(numbers_of(&db, "team/b").await.1, Some(2), "{name}");

        // A batch an instance of the previous release claims meanwhile has
        // no number (its SQL knows none) and goes by its id; the next claim
        // of this release counts on from the migration's numbers.
        changegate::with_pool!(&db, writer, |pool| {
            sqlx::query(
                "INSERT INTO merge_batch (id, status, partition_key, project) \
                 VALUES (31, 'SUCCEEDED', '', 'team/a')",
            )
            .execute(pool)
            .await
            .map(drop)
        })
        .unwrap();
        let unnumbered = get_batch(&db, 31).await.unwrap().unwrap();
        assert_eq!(
            (unnumbered.number, unnumbered.shown_number()),
            (None, 31),
            "{name}"
        );
        enqueue_in(&db, "x", "team/a", 1).await;
        let claimed = claim_batch(&db, "x", one_at_a_time(10), &|_| true)
            .await
            .unwrap();
        assert_eq!(number(&claimed), Some(6), "{name}: {claimed:?}");
        db.close().await;
    }
}
