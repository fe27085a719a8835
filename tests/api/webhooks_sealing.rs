//! Webhook signing secrets at rest: stored sealed under `webhooks.secret_key`,
//! resealed at start-up under a new key (the old one in
//! `webhooks.previous_secret_keys`), plain secrets from before sealing
//! sealed too; a secret no configured key opens fails its deliveries with
//! the reason in the log; MySQL without a key registers nothing and sends
//! nothing; SQLite without one generates a key file next to the database.

use std::time::Duration;

use changegate::db::Db;
use changegate::db::webhook_deliveries::list_for_endpoint;
use changegate::db::webhook_endpoints::{StoredSecrets, insert_endpoint, list_stored_secrets};
use changegate::sealing::key_id;
use changegate::signature::WebhookSecret;
use serde_json::{Value, json};
use standardwebhooks::Webhook;

use crate::helpers::{
    REQUESTER_CONFIG, TestApp, each_backend, mysql_db, spawn_app, sqlite_db, wait_until,
};
use crate::webhooks::{Receiver, SEALING_KEY, add_endpoint, add_events, count_status};

const KEY_A: ([u8; 32], &str) = ([1; 32], "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=");
const KEY_B: ([u8; 32], &str) = ([2; 32], "AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=");
const KEY_C: ([u8; 32], &str) = ([3; 32], "AwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwM=");

/// A service delivering on its own, with `keys` (lines of `[webhooks]`).
async fn service(url: &str, keys: &str) -> TestApp {
    let app = spawn_app(
        url,
        &format!(
            "{REQUESTER_CONFIG}[webhooks]\npoll_interval = \"50ms\"\nallow_private_targets = true\n{keys}"
        ),
    )
    .await;
    app.wait_until_ready().await;
    app
}

async fn register(app: &TestApp, receiver: &Receiver) -> (i64, String) {
    let created = app
        .post_as(
            "admin",
            "/admin/v1/webhook-endpoints",
            &json!({ "url": receiver.url }),
        )
        .await;
    assert_eq!(created.status(), 201);
    let created: Value = created.json().await.unwrap();
    (
        created["id"].as_i64().unwrap(),
        created["secret"].as_str().unwrap().to_owned(),
    )
}

fn assert_sealed_under(stored: &[StoredSecrets], key: &[u8; 32], secrets: &[&str]) {
    let prefix = format!("sealed:v1:{}:", key_id(key));
    for row in stored {
        assert!(row.secret.starts_with(&prefix), "endpoint {}", row.id);
        for secret in secrets {
            let key_text = secret.trim_start_matches("whsec_");
            assert!(!row.secret.contains(key_text), "endpoint {}", row.id);
        }
    }
}

/// Each of `secrets` verifies exactly one of the arrivals, and each arrival
/// verifies with one of them.
fn assert_each_verifies_one(receiver: &Receiver, secrets: &[&str]) {
    let arrivals = receiver.arrivals();
    assert_eq!(arrivals.len(), secrets.len());
    for secret in secrets {
        let verified = arrivals
            .iter()
            .filter(|arrival| {
                Webhook::new(secret)
                    .unwrap()
                    .verify(&arrival.body, &arrival.headers)
                    .is_ok()
            })
            .count();
        assert_eq!(verified, 1, "deliveries signed with {secret:.12}…");
    }
}

#[tokio::test]
async fn a_new_key_reseals_every_secret_at_start_and_a_forgotten_one_fails_deliveries_saying_why() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        let receiver = Receiver::start().await;
        let key = |(_, text): ([u8; 32], &str)| format!("secret_key = {text:?}\n");

        let app = service(&test_db.url, &key(KEY_A)).await;
        let (registered, secret) = register(&app, &receiver).await;
        app.stop().await.unwrap();
        assert_sealed_under(
            &list_stored_secrets(db).await.unwrap(),
            &KEY_A.0,
            &[&secret],
        );
        // An endpoint stored before secrets were sealed.
        let plain = WebhookSecret::generate().expose();
        let mut tx = db.begin().await.unwrap();
        let legacy = insert_endpoint(&mut tx, &receiver.url, "", "", &plain)
            .await
            .unwrap();
        tx.commit().await.unwrap();

        let rotated = format!("{}previous_secret_keys = [{:?}]\n", key(KEY_B), KEY_A.1);
        let app = service(&test_db.url, &rotated).await;
        wait_until("every secret sealed under the new key", async || {
            let stored = list_stored_secrets(db).await.unwrap();
            let prefix = format!("sealed:v1:{}:", key_id(&KEY_B.0));
            stored.iter().all(|row| row.secret.starts_with(&prefix))
        })
        .await;
        assert_sealed_under(
            &list_stored_secrets(db).await.unwrap(),
            &KEY_B.0,
            &[&secret, &plain],
        );
        add_events(db, 1).await;
        wait_until("both endpoints delivered to", async || {
            receiver.seen.delivered.lock().unwrap().len() == 2
        })
        .await;
        assert_each_verifies_one(&receiver, &[&secret, &plain]);
        app.stop().await.unwrap();

        // Neither A nor B configured any more: nothing can sign.
        let app = service(&test_db.url, &key(KEY_C)).await;
        add_events(db, 1).await;
        wait_until("the new deliveries failed", async || {
            count_status(db, "failed").await == 2
        })
        .await;
        for endpoint in [registered, legacy] {
            let log = list_for_endpoint(db, endpoint, None, 10).await.unwrap();
            let reason = log[0].last_error.clone().unwrap_or_default();
            assert_eq!(log[0].status, "failed");
            assert!(
                reason.contains("cannot be opened") && reason.contains(&key_id(&KEY_B.0)),
                "{reason}"
            );
        }
        assert_eq!(receiver.arrivals().len(), 2, "nothing unsigned was sent");
        assert_sealed_under(&list_stored_secrets(db).await.unwrap(), &KEY_B.0, &[]);
        app.stop().await.unwrap();
    }
}

#[tokio::test]
async fn without_a_key_mysql_registers_no_endpoint_and_sends_nothing_until_one_is_set() {
    let Some(test_db) = mysql_db().await else {
        return;
    };
    let db: &Db = &test_db.db;
    let receiver = Receiver::start().await;
    let app = service(&test_db.url, "").await;
    let refused = app
        .post_as(
            "admin",
            "/admin/v1/webhook-endpoints",
            &json!({ "url": receiver.url }),
        )
        .await;
    assert_eq!(refused.status(), 409);
    let refused: Value = refused.json().await.unwrap();
    assert_eq!(refused["code"], "CONFLICT");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("webhooks.secret_key"),
        "{refused}"
    );
    let (_, secret) = add_endpoint(db, &receiver.url, "").await;
    add_events(db, 2).await;
    // Several delivery rounds go by: the deliveries wait, unsent.
    wait_until("the deliveries queued", async || {
        count_status(db, "queued").await == 2
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(receiver.arrivals().is_empty());
    assert_eq!(count_status(db, "queued").await, 2);
    app.stop().await.unwrap();

    let app = service(&test_db.url, SEALING_KEY).await;
    wait_until("the waiting deliveries sent", async || {
        receiver.seen.delivered.lock().unwrap().len() == 2
    })
    .await;
    for arrival in receiver.arrivals() {
        Webhook::new(&secret)
            .unwrap()
            .verify(&arrival.body, &arrival.headers)
            .expect("signed with the endpoint's secret");
    }
    app.stop().await.unwrap();
}

#[tokio::test]
async fn without_a_key_sqlite_generates_one_next_to_the_database_and_keeps_it() {
    let test_db = sqlite_db().await;
    let database = changegate::db::sqlite_file(&test_db.url).unwrap();
    let key_file = changegate::webhooks::sealed::key_file_of(&database);
    let receiver = Receiver::start().await;
    let app = service(&test_db.url, "").await;
    let (_, secret) = register(&app, &receiver).await;
    app.stop().await.unwrap();
    let written = std::fs::read_to_string(&key_file).expect("a key file next to the database");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "readable by its owner only");
    }
    let key: [u8; 32] = base64_decoded(&written);
    assert_sealed_under(
        &list_stored_secrets(&test_db.db).await.unwrap(),
        &key,
        &[&secret],
    );

    // Restarted: the same key opens what it sealed.
    let app = service(&test_db.url, "").await;
    add_events(&test_db.db, 1).await;
    wait_until("delivered after the restart", async || {
        receiver.seen.delivered.lock().unwrap().len() == 1
    })
    .await;
    assert_each_verifies_one(&receiver, &[&secret]);
    assert_eq!(std::fs::read_to_string(&key_file).unwrap(), written);
    app.stop().await.unwrap();
}

fn base64_decoded(text: &str) -> [u8; 32] {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .unwrap()
        .try_into()
        .unwrap()
}
