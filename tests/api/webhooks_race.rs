//! Several instances (separate pools on one MariaDB; on SQLite, workers
//! sharing its one writer) deliver many events to a receiver that fails
//! about one request in ten: every delivery ends
//! answered 2xx, and no `webhook-id` arrives again once answered 2xx (nor
//! twice at once). The negative control claims check-then-act, without the
//! compare-and-swap, and does produce duplicates: the test can fail.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use changegate::db::webhook_claims::list_due;
use changegate::db::{self, Db};
use changegate::webhooks::relay;
use changegate::webhooks::worker::Deliverer;
use tokio::sync::Barrier;
use tokio::task::JoinSet;

use crate::helpers::{mysql_db, settings_from};
use crate::webhooks::{Receiver, add_endpoint, add_events, count_status, deliverer, hooks_config};

const INSTANCES: usize = 3;

fn events_wanted() -> usize {
    std::env::var("CHANGEGATE_TEST_WEBHOOK_EVENTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000)
}

/// One pool per instance, small, so that the test leaves MariaDB
/// connections for the tests running beside it.
async fn instances(url: &str) -> Vec<Db> {
    let (settings, problems) = settings_from(&format!(
        "[database]\nurl = {url:?}\nmax_connections = 4\nconnect_timeout = \"5s\"\n"
    ));
    assert!(problems.is_empty(), "{problems:?}");
    let mut pools = Vec::new();
    for _ in 0..INSTANCES {
        pools.push(db::open(&settings.database).await.unwrap());
    }
    pools
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_instances_deliver_every_event_and_never_twice_after_a_success() {
    for test_db in crate::helpers::each_backend().await {
        deliver_with_many_instances(&test_db).await;
    }
}

/// Three delivery workers: on MariaDB three instances, each its own pool;
/// on SQLite (one instance per database file) three workers of one
/// instance, sharing its one writer.
async fn deliver_with_many_instances(test_db: &crate::helpers::TestDb) {
    let total = events_wanted();
    let receiver = Receiver::start().await;
    receiver.seen.fail_percent.store(10, Ordering::SeqCst);
    add_endpoint(&test_db.db, &receiver.url, "").await;
    add_events(&test_db.db, total).await;
    let config = hooks_config(
        "retry_schedule = [\"0s\", \"20ms\", \"20ms\", \"20ms\", \"20ms\", \"20ms\", \"20ms\", \"20ms\", \"20ms\", \"20ms\"]\n\
         concurrency = 32\nbreaker_failures = 1000\n",
    );
    let started = Instant::now();
    let mut running = JoinSet::new();
    let pools = match test_db.name {
        "mysql" => instances(&test_db.url).await,
        _ => vec![test_db.db.clone(); INSTANCES],
    };
    for pool in pools {
        let worker = deliverer(&pool, &config);
        running.spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(240);
            loop {
                // Every instance relays too: the relay's guard is raced as well.
                relay::run_once(&pool, false).await.unwrap();
                worker.run_once().await.unwrap();
                let pending =
                    count_status(&pool, "queued").await + count_status(&pool, "sending").await;
                let relayed_all = changegate::with_pool!(&pool, reader, |p| {
                    sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM event WHERE relayed = FALSE")
                        .fetch_one(p)
                        .await
                })
                .unwrap()
                    == 0;
                if pending == 0 && relayed_all {
                    return;
                }
                assert!(Instant::now() < deadline, "deliveries still pending");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
    }
    while let Some(done) = running.join_next().await {
        done.unwrap();
    }
    let elapsed = started.elapsed();
    let delivered = receiver.seen.delivered.lock().unwrap().len();
    let arrivals = receiver.seen.arrivals.lock().unwrap().len();
    eprintln!(
        "{}: {INSTANCES} instances delivered {delivered} events in {elapsed:?} \
         ({arrivals} requests, the rest of them answered 500)",
        test_db.name
    );
    assert_eq!(delivered, total);
    assert_eq!(count_status(&test_db.db, "delivered").await, total as i64);
    assert_eq!(receiver.seen.duplicates.load(Ordering::SeqCst), 0);
    assert!(arrivals > total, "the receiver failed some requests");
}

/// The claim done wrong: read the status, then update without naming the
/// status and version read. Every instance reads its page before any of
/// them writes, and writes before any of them sends (the barrier stands for
/// the latency a real instance has between the steps), so every one of them
/// sees `queued` and sends what it took.
async fn check_then_act_round(pool: &Db, worker: &Deliverer, in_step: &Barrier) {
    let due = list_due(pool, 32).await.unwrap();
    let mut seen_queued = Vec::new();
    for row in due {
        let status: String = changegate::with_pool!(pool, reader, |p| {
            sqlx::query_scalar("SELECT status FROM webhook_delivery WHERE id = ?")
                .bind(row.id)
                .fetch_one(p)
                .await
        })
        .unwrap();
        if status == "queued" {
            seen_queued.push(row);
        }
    }
    in_step.wait().await;
    // A claim that does not compare cannot tell which instance won a row:
    // every instance writes the same owner and sends what it wrote.
    let token = "check-then-act";
    let mut taken = Vec::new();
    for row in seen_queued {
        changegate::with_pool!(pool, writer, |p| {
            sqlx::query(
                "UPDATE webhook_delivery SET status = 'sending', version = ?, \
                 attempts = attempts + 1, lease_owner = ? WHERE id = ?",
            )
            .bind(row.version + 1)
            .bind(token)
            .bind(row.id)
            .execute(p)
            .await
            .map(|_| ())
        })
        .unwrap();
        taken.push(row.id);
    }
    in_step.wait().await;
    worker.send_claimed(token, &taken).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_control_a_check_then_act_claim_sends_duplicates() {
    let Some(test_db) = mysql_db().await else {
        return;
    };
    let receiver = Receiver::start().await;
    add_endpoint(&test_db.db, &receiver.url, "").await;
    add_events(&test_db.db, 500).await;
    while relay::run_once(&test_db.db, false).await.unwrap() != changegate::jobs::Outcome::Idle {}
    let config = hooks_config("concurrency = 32\nbreaker_failures = 1000\n");
    let in_step = Arc::new(Barrier::new(INSTANCES));
    let mut running = JoinSet::new();
    for pool in instances(&test_db.url).await {
        let worker = deliverer(&pool, &config);
        let in_step = in_step.clone();
        running.spawn(async move { check_then_act_round(&pool, &worker, &in_step).await });
    }
    while let Some(done) = running.join_next().await {
        done.unwrap();
    }
    let duplicates = receiver.seen.duplicates.load(Ordering::SeqCst);
    eprintln!("check-then-act: {duplicates} duplicate arrivals of {INSTANCES} x 32 claims");
    assert!(duplicates > 0, "the racy claim should have sent duplicates");
}

/// The set-based claim itself, raced: several instances (their own pools)
/// claim the same page of 200 due deliveries at the same moment, each with
/// its own token. Every row is won exactly once, the counts the claims
/// answer add up to the page, and each instance reads back exactly the rows
/// it won. On SQLite the claims queue for the one writer; on MariaDB they
/// run at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_claimed_by_several_instances_at_once_is_won_row_by_row_exactly_once() {
    use changegate::db::webhook_claims::{claim, claimed};
    use std::collections::HashSet;

    for test_db in crate::helpers::each_backend().await {
        let receiver = Receiver::start().await;
        add_endpoint(&test_db.db, &receiver.url, "").await;
        add_events(&test_db.db, 200).await;
        while relay::run_once(&test_db.db, false).await.unwrap() != changegate::jobs::Outcome::Idle
        {
        }
        let page: Vec<(i64, i64)> = list_due(&test_db.db, 200)
            .await
            .unwrap()
            .iter()
            .map(|row| (row.id, row.version))
            .collect();
        assert_eq!(page.len(), 200);
        let pools = match test_db.name {
            "mysql" => instances(&test_db.url).await,
            _ => vec![test_db.db.clone(); INSTANCES],
        };
        let start = std::sync::Arc::new(tokio::sync::Barrier::new(INSTANCES));
        let mut racing = JoinSet::new();
        for (n, pool) in pools.into_iter().enumerate() {
            let (page, start) = (page.clone(), start.clone());
            racing.spawn(async move {
                let token = format!("racer-{n}.0");
                start.wait().await;
                let won = claim(&pool, &page, &token, Duration::from_secs(60))
                    .await
                    .unwrap();
                let ids: Vec<i64> = page.iter().map(|(id, _)| *id).collect();
                let rows = claimed(&pool, &ids, &token).await.unwrap();
                (won, rows)
            });
        }
        let mut total = 0;
        let mut seen = HashSet::new();
        for (won, rows) in racing.join_all().await {
            assert_eq!(won as usize, rows.len(), "{}", test_db.name);
            total += won;
            for row in rows {
                assert!(
                    seen.insert(row.id),
                    "{}: row {} won twice",
                    test_db.name,
                    row.id
                );
                assert_eq!(row.status, "sending");
            }
        }
        assert_eq!(total, 200, "{}", test_db.name);
        assert_eq!(seen.len(), 200, "{}", test_db.name);
    }
}
