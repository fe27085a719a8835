//! The merge queue's database guarantees under real concurrency: one active
//! batch at every instant (I1), every request claimed exactly once (I2), no
//! empty batch, enqueue never blocked by an open claim (I3), idempotent
//! enqueue (I4), and a batch settled once however many settle it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use changegate::batch::{Claimed, MergeQueue, claim_batch, claim_in};
use changegate::clients::approval::ApprovalClient;
use changegate::clients::gitlab::{GitLabClient, RetryPolicy};
use changegate::config::LiveConfig;
use changegate::db::batches::enqueue;
use changegate::db::{Db, DbSlot};
use changegate::store::StoreTx;
use changegate::workflow::Workflow;

use crate::helpers::{each_backend, mysql_db, settings_from};

async fn scalar(db: &Db, sql: &'static str) -> i64 {
    changegate::with_pool!(db, reader, |pool| {
        sqlx::query_scalar(sql).fetch_one(pool).await
    })
    .unwrap()
}

async fn execute(db: &Db, sql: &'static str) {
    changegate::with_pool!(db, writer, |pool| {
        sqlx::query(sql).execute(pool).await.map(|_| ())
    })
    .unwrap();
}

/// `count` waiting requests (ids only: the claim does not need more).
async fn enqueue_many(db: &Db, count: usize) -> Vec<String> {
    let mut ids = Vec::with_capacity(count);
    for chunk in (0..count).collect::<Vec<_>>().chunks(100) {
        let mut tx = db.begin().await.unwrap();
        for _ in chunk {
            let id = uuid::Uuid::new_v4().to_string();
            assert!(enqueue(&mut tx, &id, "", "config/repo").await.unwrap());
            ids.push(id);
        }
        tx.commit().await.unwrap();
    }
    // The claim takes rows created before the database's now (ms precision).
    tokio::time::sleep(Duration::from_millis(5)).await;
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_racing_claimers_keep_one_active_batch_and_claim_every_request_once() {
    for test_db in each_backend().await {
        let db = test_db.db.clone();
        let requests = enqueue_many(&db, 500).await;
        let done = Arc::new(AtomicBool::new(false));

        // Samples the table: never two active batches.
        let sampler = {
            let (db, done) = (db.clone(), done.clone());
            tokio::spawn(async move {
                let mut worst = 0;
                while !done.load(Ordering::Relaxed) {
                    worst = worst.max(
                        scalar(&db, "SELECT COUNT(*) FROM merge_batch WHERE status IN ('RUNNING', 'BLOCKED')").await,
                    );
                    tokio::task::yield_now().await;
                }
                worst
            })
        };
        // Finishes whichever batch is active, so the slot comes free again.
        let finisher = {
            let (db, done) = (db.clone(), done.clone());
            tokio::spawn(async move {
                while !done.load(Ordering::Relaxed) {
                    execute(
                        &db,
                        "UPDATE merge_batch SET status = 'SUCCEEDED' WHERE status = 'RUNNING'",
                    )
                    .await;
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            })
        };
        let mut claimers = tokio::task::JoinSet::new();
        for _ in 0..20 {
            let db = db.clone();
            claimers.spawn(async move {
                let mut outcomes = Vec::new();
                let deadline = Instant::now() + Duration::from_secs(30);
                while Instant::now() < deadline {
                    let outcome = claim_batch(&db, "", 7).await.unwrap();
                    let empty = outcome == Claimed::Empty;
                    outcomes.push(outcome);
                    if empty {
                        break;
                    }
                }
                outcomes
            });
        }
        let outcomes: Vec<Claimed> = claimers.join_all().await.into_iter().flatten().collect();
        done.store(true, Ordering::Relaxed);
        finisher.await.unwrap();
        let worst = sampler.await.unwrap();
        assert!(
            worst <= 1,
            "{}: {worst} active batches at once",
            test_db.name
        );

        let mut claimed: Vec<String> = outcomes
            .iter()
            .filter_map(|o| match o {
                Claimed::Batch { members, .. } => Some(members.clone()),
                _ => None,
            })
            .flatten()
            .collect();
        claimed.sort();
        let mut expected = requests.clone();
        expected.sort();
        assert_eq!(
            claimed, expected,
            "{}: every request claimed exactly once",
            test_db.name
        );
        assert!(
            outcomes.contains(&Claimed::SlotOccupied),
            "{}: the claimers did race for the slot",
            test_db.name
        );
        assert_eq!(
            scalar(
                &db,
                "SELECT COUNT(*) FROM merge_batch_request WHERE batch_id IS NULL"
            )
            .await,
            0
        );
        assert_eq!(
            scalar(
                &db,
                "SELECT COUNT(*) FROM merge_batch b WHERE NOT EXISTS \
                 (SELECT 1 FROM merge_batch_request r WHERE r.batch_id = b.id)"
            )
            .await,
            0,
            "{}: no empty batch was committed",
            test_db.name
        );
        assert_eq!(
            scalar(
                &db,
                "SELECT COUNT(*) FROM merge_batch_history WHERE event = 'CLAIMED'"
            )
            .await,
            500,
            "{}: one membership record per claim",
            test_db.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn enqueues_complete_while_a_claim_transaction_is_held_open() {
    // The locking question is InnoDB's; SQLite has one writer by design.
    let Some(test_db) = mysql_db().await else {
        return;
    };
    let db = test_db.db.clone();
    enqueue_many(&db, 50).await;
    let mut claim = StoreTx::begin(&db).await.unwrap();
    let claimed = claim_in(&mut claim, "", 500).await.unwrap();
    assert!(matches!(claimed, Claimed::Batch { ref members, .. } if members.len() == 50));

    let started = Instant::now();
    let mut enqueuers = tokio::task::JoinSet::new();
    for _ in 0..10 {
        let db = db.clone();
        enqueuers.spawn(async move {
            tokio::time::timeout(Duration::from_secs(10), enqueue_many(&db, 100))
                .await
                .expect("an enqueue waited on the open claim")
        });
    }
    let enqueued: usize = enqueuers.join_all().await.iter().map(Vec::len).sum();
    assert_eq!(enqueued, 1000);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    claim.commit().await.unwrap();
    assert_eq!(
        scalar(
            &db,
            "SELECT COUNT(*) FROM merge_batch_request WHERE batch_id IS NULL"
        )
        .await,
        1000,
        "the new requests wait for the next round"
    );
}

#[tokio::test]
async fn enqueue_is_idempotent_and_an_empty_round_holds_no_slot() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        assert_eq!(claim_batch(db, "", 10).await.unwrap(), Claimed::Empty);
        assert_eq!(
            scalar(db, "SELECT COUNT(*) FROM merge_batch").await,
            0,
            "{}",
            test_db.name
        );
        let mut tx = db.begin().await.unwrap();
        assert!(enqueue(&mut tx, "op-1", "", "p").await.unwrap());
        assert!(
            !enqueue(&mut tx, "op-1", "", "p").await.unwrap(),
            "already queued"
        );
        tx.commit().await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let first = claim_batch(db, "", 10).await.unwrap();
        assert!(matches!(first, Claimed::Batch { ref members, .. } if members == &["op-1"]));
        let mut tx = db.begin().await.unwrap();
        assert!(enqueue(&mut tx, "op-2", "", "p").await.unwrap());
        tx.commit().await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(
            claim_batch(db, "", 10).await.unwrap(),
            Claimed::SlotOccupied,
            "{}: one active batch",
            test_db.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_several_racing_settlers_exactly_one_settles_a_batch() {
    for test_db in each_backend().await {
        let db = test_db.db.clone();
        enqueue_many(&db, 5).await;
        let Claimed::Batch { id, .. } = claim_batch(&db, "", 10).await.unwrap() else {
            panic!("a batch");
        };
        let (settings, _) = settings_from("");
        let config = LiveConfig::new(settings, None, None);
        let slot = DbSlot::ready(db.clone());
        let http = reqwest::Client::new();
        let gitlab = GitLabClient::new(
            http.clone(),
            "http://127.0.0.1:9",
            Duration::from_secs(1),
            RetryPolicy::default(),
        );
        let workflow = Workflow::new(
            slot.clone(),
            config.clone(),
            ApprovalClient::new(http),
            gitlab,
        );
        let queue = MergeQueue::new(slot, config, workflow);
        let mut settlers = tokio::task::JoinSet::new();
        for n in 0..8 {
            let queue = queue.clone();
            settlers.spawn(async move { queue.settle(id, &format!("settler {n}")).await.unwrap() });
        }
        let settled = settlers.join_all().await.into_iter().filter(|s| *s).count();
        assert_eq!(settled, 1, "{}", test_db.name);
        assert_eq!(
            scalar(
                &db,
                "SELECT COUNT(*) FROM merge_batch_history WHERE event = 'RELEASED'"
            )
            .await,
            5,
            "{}: the members were released once",
            test_db.name
        );
        assert_eq!(
            scalar(
                &db,
                "SELECT COUNT(*) FROM merge_batch_request WHERE batch_id IS NULL"
            )
            .await,
            5,
            "{}: and wait for the next round",
            test_db.name
        );
    }
}
