//! The service as a real process, killed with SIGKILL in the middle of a
//! page of deliveries and started again on its port: it takes its earlier
//! life's claims over at once (the claim tokens of its rounds start with its
//! lease owner id), every event reaches the receiver, every arrival of an
//! event carries its one `webhook-id` and the same bytes, and only the page
//! in flight when it died is sent again.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::durability::{free_port, start};
use crate::helpers::{REQUESTER_CONFIG, each_backend};
use crate::webhooks::{Receiver, SEALING_KEY, add_endpoint, add_events, count_status};

const EVENTS: usize = 200;
const CONCURRENCY: usize = 16;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_mid_page_an_instance_sends_again_only_its_page_in_flight_with_the_same_webhook_ids()
{
    for test_db in each_backend().await {
        let receiver = Receiver::start().await;
        // Slow answers: a page is always in flight when the kill lands.
        receiver.seen.delay_ms.store(150, Ordering::SeqCst);
        add_endpoint(&test_db.db, &receiver.url, "").await;
        add_events(&test_db.db, EVENTS).await;
        let port = free_port();
        let address = format!("http://127.0.0.1:{port}");
        let dir = tempfile::tempdir().unwrap();
        let config_path = dir.path().join("changegate.toml");
        std::fs::write(
            &config_path,
            format!(
                "[server]\nlisten = \"127.0.0.1:{port}\"\n[database]\nurl = {:?}\n\
                 [log]\nlevel = \"warn\"\n{REQUESTER_CONFIG}\
                 [webhooks]\npoll_interval = \"20ms\"\nallow_private_targets = true\n\
                 concurrency = {CONCURRENCY}\nrequest_timeout = \"30s\"\n{SEALING_KEY}",
                test_db.url
            ),
        )
        .unwrap();
        let client = crate::helpers::plain_client().build().unwrap();
        let first = start(&config_path, &address, &client).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        // Killed once a quarter is answered and while a page is in flight
        // (received, not yet answered).
        let received = || receiver.seen.received.lock().unwrap().len();
        while receiver.arrivals().len() < EVENTS / 4 || received() == receiver.arrivals().len() {
            assert!(
                Instant::now() < deadline,
                "{}: nothing delivered",
                test_db.name
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        drop(first);
        let killed_at = received();
        assert!(killed_at < EVENTS, "{}: killed too late", test_db.name);

        let restarted = Instant::now();
        let _again = start(&config_path, &address, &client).await;
        while count_status(&test_db.db, "delivered").await < EVENTS as i64 {
            // The claims last 60 s: finishing well within shows they were taken over.
            assert!(
                restarted.elapsed() < Duration::from_secs(30),
                "{}: the dead life's claims were not taken over",
                test_db.name
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        let received = receiver.seen.received.lock().unwrap().clone();
        let mut bodies: HashMap<String, Vec<axum::body::Bytes>> = HashMap::new();
        for (id, body) in &received {
            bodies.entry(id.clone()).or_default().push(body.clone());
        }
        assert_eq!(
            bodies.len(),
            EVENTS,
            "{}: every event arrived",
            test_db.name
        );
        for (id, sent) in &bodies {
            assert!(id.starts_with("msg_"), "{id}");
            assert!(
                sent.iter().all(|body| body == &sent[0]),
                "{}: {id} was sent with different bytes",
                test_db.name
            );
        }
        // What was in flight at the kill is sent again; nothing else is.
        let again = received.len() - EVENTS;
        assert!(
            (1..=CONCURRENCY).contains(&again),
            "{}: {again} deliveries sent again; expected the page in flight (1 to {CONCURRENCY})",
            test_db.name
        );
        eprintln!(
            "{}: killed after {killed_at} arrivals; {again} sent again with the same webhook-id",
            test_db.name
        );
    }
}
