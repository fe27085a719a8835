//! Outbound webhooks, what happens to one delivery: retries on the schedule
//! and after `Retry-After`, 3xx as failure, the last attempt, redelivery,
//! 410 disabling the endpoint, the circuit breaker, and silent mode.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use changegate::db::Db;
use changegate::db::webhook_claims::{self, Due};
use changegate::db::webhook_deliveries::{self, Ending, list_for_endpoint};
use changegate::db::webhook_endpoints::get_endpoint;
use changegate::webhooks::relay;
use changegate::webhooks::worker::Deliverer;
use serde_json::json;

use crate::helpers::{Logs, REQUESTER_CONFIG, each_backend, spawn_app};
use crate::webhooks::{
    Receiver, SEALING_KEY, add_endpoint, add_events, count_status, deliverer, drain, hooks_config,
};

async fn relay_all(db: &Db, silent: bool) {
    while relay::run_once(db, silent).await.unwrap() != changegate::jobs::Outcome::Idle {}
}

/// Runs worker rounds for `period`.
async fn rounds_for(worker: &Deliverer, period: Duration) {
    let until = Instant::now() + period;
    while Instant::now() < until {
        worker.run_once().await.unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn retries_follow_the_schedule_and_retry_after_and_the_last_failure_can_be_redelivered() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        let receiver = Receiver::start().await;
        let (endpoint, _) = add_endpoint(db, &receiver.url, "").await;
        let worker = deliverer(
            db,
            &hooks_config("retry_schedule = [\"0s\", \"50ms\", \"50ms\", \"50ms\"]\n"),
        );
        // 503 and 429 ask for 2 s and 1 s, far longer than the schedule's
        // 50 ms; a redirect is a failure, not followed.
        receiver.script(&[(503, Some(2)), (429, Some(1)), (302, None), (200, None)]);
        add_events(db, 1).await;
        drain(db, &worker, false, Duration::from_secs(15)).await;
        let arrivals = receiver.arrivals();
        let answered: Vec<u16> = arrivals.iter().map(|a| a.answered).collect();
        assert_eq!(answered, [503, 429, 302, 200], "{}", test_db.name);
        assert!(arrivals.iter().all(|a| a.id == arrivals[0].id));
        let gap = |i: usize| arrivals[i + 1].at - arrivals[i].at;
        assert!(gap(0) >= Duration::from_millis(1900), "{:?}", gap(0));
        assert!(gap(1) >= Duration::from_millis(900), "{:?}", gap(1));
        assert!(gap(2) < Duration::from_millis(900), "{:?}", gap(2));
        let log = list_for_endpoint(db, endpoint, None, 10).await.unwrap();
        assert_eq!((log[0].status.as_str(), log[0].attempts), ("delivered", 4));

        // Every attempt fails: the delivery ends `failed`, visible in the log.
        receiver.seen.default_status.store(500, Ordering::SeqCst);
        add_events(db, 1).await;
        drain(db, &worker, false, Duration::from_secs(15)).await;
        let log = list_for_endpoint(db, endpoint, None, 10).await.unwrap();
        assert_eq!(log[0].status, "failed");
        assert_eq!((log[0].attempts, log[0].last_status), (4, Some(500)));
        let failed_id = log[0].id;

        // An operator redelivers it: sent again with the same webhook-id.
        // The service is an instance too: its delivery worker may take the
        // redelivery before this one, so it may reach the loopback
        // receiver as well.
        receiver.seen.default_status.store(200, Ordering::SeqCst);
        let app = spawn_app(
            &test_db.url,
            &format!(
                "{REQUESTER_CONFIG}[webhooks]\nallow_private_targets = true\n\
                 poll_interval = \"1h\"\n{SEALING_KEY}"
            ),
        )
        .await;
        app.wait_until_ready().await;
        let path = format!("/admin/v1/webhook-deliveries/{failed_id}/redeliver");
        assert_eq!(app.post_as("admin", &path, &json!({})).await.status(), 200);
        assert_eq!(app.post_as("admin", &path, &json!({})).await.status(), 409);
        let missing = "/admin/v1/webhook-deliveries/999999/redeliver";
        assert_eq!(
            app.post_as("admin", missing, &json!({})).await.status(),
            404
        );
        drain(db, &worker, false, Duration::from_secs(15)).await;
        let log = list_for_endpoint(db, endpoint, None, 10).await.unwrap();
        assert_eq!((log[0].status.as_str(), log[0].attempts), ("delivered", 1));
        let last = receiver.arrivals().pop().unwrap();
        assert_eq!(last.id, log[0].msg_id);
        let audit = app
            .get_as("admin", "/admin/v1/audit")
            .await
            .text()
            .await
            .unwrap();
        assert!(audit.contains("webhook.delivery.redeliver"));
        app.stop().await.unwrap();
    }
}

#[tokio::test]
async fn gone_disables_the_endpoint_and_its_other_deliveries_wait() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        let receiver = Receiver::start().await;
        let (endpoint, _) = add_endpoint(db, &receiver.url, "").await;
        let worker = deliverer(db, &hooks_config(""));
        receiver.script(&[(410, None)]);
        add_events(db, 1).await;
        drain(db, &worker, false, Duration::from_secs(10)).await;
        let row = get_endpoint(db, endpoint).await.unwrap().unwrap();
        assert!(!row.enabled, "{}", test_db.name);
        assert_eq!(row.disabled_reason.as_deref(), Some("410 Gone"));
        assert_eq!(count_status(db, "failed").await, 1);
        // A disabled endpoint gets no new deliveries and sends none.
        add_events(db, 1).await;
        relay_all(db, false).await;
        rounds_for(&worker, Duration::from_millis(100)).await;
        assert_eq!(receiver.arrivals().len(), 1);
    }
}

#[tokio::test]
async fn the_breaker_opens_on_a_dead_endpoint_half_opens_and_closes_on_recovery() {
    let (logs, _guard) = Logs::capture();
    for test_db in each_backend().await {
        let db = &test_db.db;
        let receiver = Receiver::start().await;
        let (endpoint, _) = add_endpoint(db, &receiver.url, "").await;
        let worker = deliverer(
            db,
            &hooks_config(
                "retry_schedule = [\"0s\", \"10ms\", \"10ms\", \"10ms\", \"10ms\", \"10ms\", \"10ms\", \"10ms\"]\n\
                 breaker_failures = 3\nbreaker_open_for = \"400ms\"\nconcurrency = 4\n",
            ),
        );
        let before = logs.lines_with(&["breaker"]).len();
        receiver.seen.default_status.store(500, Ordering::SeqCst);
        add_events(db, 20).await;
        relay_all(db, false).await;
        // The first rounds fail until the breaker opens; then nothing is sent.
        rounds_for(&worker, Duration::from_millis(150)).await;
        let state = get_endpoint(db, endpoint).await.unwrap().unwrap();
        assert_eq!(state.breaker_state, "open", "{}", test_db.name);
        let while_open = receiver.arrivals().len();
        assert!((3..=8).contains(&while_open), "{while_open}");
        rounds_for(&worker, Duration::from_millis(150)).await;
        assert_eq!(receiver.arrivals().len(), while_open, "deliveries wait");
        assert_eq!(count_status(db, "failed").await, 0, "none dropped");

        // Once open_for has passed, exactly one probe; it fails: open again.
        tokio::time::sleep(Duration::from_millis(300)).await;
        rounds_for(&worker, Duration::from_millis(100)).await;
        assert_eq!(receiver.arrivals().len(), while_open + 1);
        let state = get_endpoint(db, endpoint).await.unwrap().unwrap();
        assert_eq!(state.breaker_state, "open");

        // The endpoint recovers: the next probe closes the breaker and
        // everything waiting is delivered.
        receiver.seen.default_status.store(200, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(400)).await;
        drain(db, &worker, false, Duration::from_secs(10)).await;
        assert_eq!(count_status(db, "delivered").await, 20);
        let state = get_endpoint(db, endpoint).await.unwrap().unwrap();
        assert_eq!(state.breaker_state, "closed");

        // One line per state change, none per delivery held back.
        let lines = logs.lines_with(&["breaker"]);
        let lines = &lines[before..];
        let opened = lines.iter().filter(|l| l.contains("breaker open")).count();
        let half = lines.iter().filter(|l| l.contains("half-open")).count();
        let closed = lines
            .iter()
            .filter(|l| l.contains("breaker closed"))
            .count();
        assert_eq!((opened, half, closed), (2, 2, 1), "{lines:#?}");
    }
}

#[tokio::test]
async fn silent_mode_records_deliveries_as_silent_and_ending_it_sends_only_new_events() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        let receiver = Receiver::start().await;
        let (endpoint, _) = add_endpoint(db, &receiver.url, "").await;
        let speaking = deliverer(db, &hooks_config(""));
        let silent_config = {
            let (mut settings, problems) = crate::helpers::settings_from(
                "[webhooks]\nallow_private_targets = true\npoll_interval = \"1h\"\nsilent = true\n",
            );
            assert!(problems.is_empty());
            settings.webhooks_silent = true;
            changegate::config::LiveConfig::new(settings, None, None)
        };
        let silent = deliverer(db, &silent_config);

        // Queued before silent mode began: silenced when their turn comes.
        add_events(db, 2).await;
        relay_all(db, false).await;
        rounds_for(&silent, Duration::from_millis(50)).await;
        // Events during silent mode are recorded silent by the relay.
        add_events(db, 3).await;
        relay_all(db, true).await;
        rounds_for(&silent, Duration::from_millis(50)).await;
        assert!(receiver.arrivals().is_empty(), "{}", test_db.name);
        assert_eq!(count_status(db, "silent").await, 5);

        // Silent mode ends: only what happens from now on is sent.
        add_events(db, 1).await;
        drain(db, &speaking, false, Duration::from_secs(10)).await;
        rounds_for(&speaking, Duration::from_millis(50)).await;
        assert_eq!(receiver.arrivals().len(), 1);
        assert_eq!(count_status(db, "silent").await, 5);
        let log = list_for_endpoint(db, endpoint, None, 10).await.unwrap();
        assert_eq!(log[0].status, "delivered");
    }
}

/// One event's delivery to a new endpoint at a receiver, claimed as
/// `token` for `lease`; the row as it was before the claim.
async fn one_claimed_delivery(db: &Db, token: &str, lease: Duration) -> (Receiver, Due) {
    let receiver = Receiver::start().await;
    add_endpoint(db, &receiver.url, "").await;
    add_events(db, 1).await;
    relay_all(db, false).await;
    let row = webhook_claims::list_due(db, 10).await.unwrap().remove(0);
    let won = webhook_claims::claim(db, &[(row.id, row.version)], token, lease)
        .await
        .unwrap();
    assert_eq!(won, 1);
    (receiver, row)
}

#[tokio::test]
async fn a_dead_instances_claim_runs_out_and_another_instance_delivers_it() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        // An instance claims the delivery and dies before sending it.
        let (receiver, row) =
            one_claimed_delivery(db, "dead-instance.0", Duration::from_secs(2)).await;
        let other = deliverer(db, &hooks_config(""));
        // Well inside the lease, also on a loaded machine.
        rounds_for(&other, Duration::from_millis(50)).await;
        assert!(receiver.arrivals().is_empty(), "held while the lease lasts");
        tokio::time::sleep(Duration::from_millis(2100)).await;
        drain(db, &other, false, Duration::from_secs(10)).await;
        assert_eq!(receiver.arrivals().len(), 1, "{}", test_db.name);
        // The dead instance's late answer matches nothing.
        let late = webhook_claims::record(
            db,
            "dead-instance.0",
            &[webhook_claims::Attempt {
                id: row.id,
                claimed_version: row.version + 1,
                ending: Ending::Failed,
                http_status: None,
                error: Some("late".to_owned()),
            }],
        )
        .await
        .unwrap();
        assert_eq!(late, 0);
        assert_eq!(count_status(db, "delivered").await, 1);
    }
}

/// Recording is sent again after a lost lock race, and maybe after a
/// commit whose answer was lost: a second recording of the same answers
/// matches nothing and changes nothing, and neither does one by a round
/// other than the claim's.
#[tokio::test]
async fn recording_an_answer_again_or_from_another_round_changes_nothing() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        let token = "instance.7";
        let (_receiver, row) = one_claimed_delivery(db, token, Duration::from_secs(60)).await;
        let answer = |ending: Ending, status: Option<u16>| webhook_claims::Attempt {
            id: row.id,
            claimed_version: row.version + 1,
            ending,
            http_status: status,
            error: None,
        };
        let by_another_round =
            webhook_claims::record(db, "instance.8", &[answer(Ending::Failed, None)])
                .await
                .unwrap();
        assert_eq!(by_another_round, 0, "{}", test_db.name);
        assert_eq!(count_status(db, "sending").await, 1, "{}", test_db.name);
        let first = webhook_claims::record(db, token, &[answer(Ending::Delivered, Some(204))])
            .await
            .unwrap();
        assert_eq!(first, 1, "{}", test_db.name);
        let recorded = webhook_deliveries::get_delivery(db, row.id)
            .await
            .unwrap()
            .expect("the delivery");
        let again = webhook_claims::record(db, token, &[answer(Ending::Failed, Some(500))])
            .await
            .unwrap();
        assert_eq!(again, 0, "{}", test_db.name);
        let after = webhook_deliveries::get_delivery(db, row.id)
            .await
            .unwrap()
            .expect("the delivery");
        assert_eq!(
            after, recorded,
            "{}: the replay changed nothing",
            test_db.name
        );
        assert_eq!(count_status(db, "delivered").await, 1, "{}", test_db.name);
    }
}

#[tokio::test]
async fn an_endpoint_the_policy_now_forbids_is_not_delivered_to_and_the_log_says_why() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        let receiver = Receiver::start().await;
        // Registered while private targets were allowed; now they are not.
        let (endpoint, _) = add_endpoint(db, &receiver.url, "").await;
        let (settings, problems) = crate::helpers::settings_from(
            "[webhooks]\nallow_private_targets = false\npoll_interval = \"1h\"\n",
        );
        assert!(problems.is_empty(), "{problems:?}");
        let worker = deliverer(
            db,
            &changegate::config::LiveConfig::new(settings, None, None),
        );
        add_events(db, 1).await;
        drain(db, &worker, false, Duration::from_secs(10)).await;
        assert!(receiver.arrivals().is_empty(), "{}", test_db.name);
        let log = list_for_endpoint(db, endpoint, None, 10).await.unwrap();
        assert_eq!(log[0].status, "failed", "{}", test_db.name);
        assert!(
            log[0].last_error.as_deref().is_some_and(
                |e| e.contains("not delivered") && e.contains("not globally reachable")
            ),
            "{}: {:?}",
            test_db.name,
            log[0].last_error
        );
    }
}
