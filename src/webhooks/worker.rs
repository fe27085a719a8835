//! The delivery worker each instance runs: finds due deliveries, claims each
//! by compare-and-swap (exactly one instance wins a row), signs the stored
//! bytes, sends them, and records the answer; retries on a growing, jittered
//! schedule; a per-endpoint circuit breaker, shared through the database,
//! holds deliveries back while an endpoint keeps failing.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use reqwest::StatusCode;
use tokio::task::JoinSet;

use super::retry::{classify, shuffle};
use crate::clients::health::{Dependencies, System};
use crate::clients::http::{CallError, Outbound, SystemClient};
use crate::config::LiveConfig;
use crate::db::Db;
use crate::db::webhook_deliveries::{
    DeliveryRow, Due, Ending, claim, finish, get_delivery, list_due, mark_silent, requeue_expired,
};
use crate::db::webhook_endpoints::{
    EndpointRow, disable_gone, get_endpoint, record_failure, record_success, take_half_open,
};
use crate::jobs::Outcome;
use crate::sealing::{KeyRing, OpenError};
use crate::signature::{
    self, HEADER_ID, HEADER_SIGNATURE, HEADER_TIMESTAMP, SecretError, WebhookSecret,
};
use crate::webhooks::target::{self, GlobalOnly, SystemLookup};

/// How often lost claims are summed up in the log.
const LOST_CLAIMS_LOG_EVERY: Duration = Duration::from_secs(60);

/// The HTTP client for deliveries: no redirects (a 3xx is a failure, and a
/// redirect could lead a signed body elsewhere), the outbound trust, a
/// connect timeout; each request also gets `webhooks.request_timeout`.
/// Unless `allow_private` (`webhooks.allow_private_targets`), every address
/// a target's name resolves to is checked right before connecting, and no
/// proxy is used: a proxy would resolve the name itself, out of reach of
/// the check.
pub fn http_client(
    outbound: &Outbound,
    health: &Dependencies,
    allow_private: bool,
) -> anyhow::Result<SystemClient> {
    SystemClient::new(outbound, health, System::Webhook, |builder| {
        let builder = builder
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(300));
        if allow_private {
            builder
        } else {
            builder
                .no_proxy()
                .dns_resolver(Arc::new(GlobalOnly::new(SystemLookup)))
        }
    })
}

/// One instance's delivery worker. Cheap to clone.
#[derive(Clone)]
pub struct Deliverer {
    inner: Arc<Inner>,
}

struct Inner {
    db: Db,
    config: LiveConfig,
    client: SystemClient,
    keys: Arc<KeyRing>,
    owner: String,
    lost: LostClaims,
}

impl std::fmt::Debug for Deliverer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deliverer")
            .field("owner", &self.inner.owner)
            .finish_non_exhaustive()
    }
}

/// Claims lost to other instances, logged as one sum per minute at info: a
/// lost claim is the proof that a duplicate was prevented, and operators
/// should see it without debug logging, but not once per row.
struct LostClaims {
    since_log: AtomicU64,
    last_log: std::sync::Mutex<Instant>,
    every: Duration,
}

impl LostClaims {
    fn add(&self, lost: u64) {
        if lost > 0 {
            self.since_log.fetch_add(lost, Ordering::Relaxed);
        }
        let Ok(mut last) = self.last_log.lock() else {
            return;
        };
        if last.elapsed() >= self.every {
            let count = self.since_log.swap(0, Ordering::Relaxed);
            if count > 0 {
                tracing::info!(
                    lost = count,
                    "webhook deliveries claimed by another instance first in the last {}s \
                     (not sent here; no duplicate)",
                    last.elapsed().as_secs()
                );
            }
            *last = Instant::now();
        }
    }
}

impl Deliverer {
    /// A worker on `db` identified by a fresh owner id, opening the
    /// endpoints' secrets with `keys`.
    pub fn new(db: Db, config: LiveConfig, client: SystemClient, keys: Arc<KeyRing>) -> Self {
        let owner = format!("cg-{}", uuid::Uuid::new_v4().simple());
        Self::owned_by(db, config, client, keys, owner)
    }

    /// A worker claiming deliveries as `owner` (an id of this instance's
    /// run, see [`crate::instance::Instance`]).
    pub fn owned_by(
        db: Db,
        config: LiveConfig,
        client: SystemClient,
        keys: Arc<KeyRing>,
        owner: String,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                db,
                config,
                client,
                keys,
                owner,
                lost: LostClaims {
                    since_log: AtomicU64::new(0),
                    last_log: std::sync::Mutex::new(Instant::now()),
                    every: LOST_CLAIMS_LOG_EVERY,
                },
            }),
        }
    }

    /// The id this worker writes as the lease owner.
    pub fn owner(&self) -> &str {
        &self.inner.owner
    }

    /// One round: requeues expired claims, then claims up to
    /// `webhooks.concurrency` due deliveries and sends them concurrently.
    pub async fn run_once(&self) -> anyhow::Result<Outcome> {
        let db = &self.inner.db;
        let settings = self.inner.config.current();
        let hooks = &settings.webhooks;
        let requeued = requeue_expired(db)
            .await
            .context("requeueing expired claims")?;
        if requeued > 0 {
            tracing::warn!(
                requeued,
                "webhook deliveries whose claim expired are queued again"
            );
        }
        let limit = hooks.concurrency;
        let mut due = list_due(db, limit.saturating_mul(4))
            .await
            .context("listing due deliveries")?;
        // Instances polling together would all try the same rows first.
        shuffle(&mut due);
        let lease = hooks.request_timeout + Duration::from_secs(30);
        let (mut won, mut lost, mut silenced) = (0_u64, 0_u64, 0_u64);
        let mut probing = HashSet::new();
        let mut sends = JoinSet::new();
        for row in due {
            if won >= u64::from(limit) {
                break;
            }
            if settings.webhooks_silent {
                if mark_silent(db, row.id, row.version).await? {
                    silenced += 1;
                }
                continue;
            }
            if !self.may_send(&row, &mut probing, lease).await? {
                continue;
            }
            match claim(db, row.id, row.version, &self.inner.owner, lease).await {
                Ok(true) => {
                    won += 1;
                    let worker = self.clone();
                    sends.spawn(
                        async move { worker.deliver_claimed(row.id, row.version + 1).await },
                    );
                }
                Ok(false) => lost += 1,
                // Rolled back, nothing changed: as good as lost.
                Err(err) if crate::db::is_retryable_conflict(&err) => lost += 1,
                Err(err) => return Err(err).context("claiming a delivery"),
            }
        }
        metrics::counter!("changegate_webhook_claims_total", "outcome" => "won").increment(won);
        metrics::counter!("changegate_webhook_claims_total", "outcome" => "lost").increment(lost);
        self.inner.lost.add(lost);
        while let Some(joined) = sends.join_next().await {
            match joined {
                Ok(Ok(())) => {}
                Ok(Err(err)) => tracing::warn!("webhook delivery not recorded: {err:#}"),
                Err(err) => tracing::error!("webhook delivery task failed: {err}"),
            }
        }
        Ok(match won + silenced {
            0 => Outcome::Idle,
            done => Outcome::Worked {
                done,
                full: won >= u64::from(limit),
            },
        })
    }

    /// Whether the endpoint's breaker lets `row` through: always when
    /// closed; when open (and due for a probe), only for the one instance and
    /// the one delivery that turn it half-open.
    async fn may_send(
        &self,
        row: &Due,
        probing: &mut HashSet<i64>,
        lease: Duration,
    ) -> anyhow::Result<bool> {
        if row.breaker_state == "closed" {
            return Ok(true);
        }
        if probing.contains(&row.endpoint_id) {
            return Ok(false);
        }
        if !take_half_open(&self.inner.db, row.endpoint_id, lease).await? {
            return Ok(false);
        }
        probing.insert(row.endpoint_id);
        tracing::info!(
            endpoint_id = row.endpoint_id,
            "webhook endpoint breaker half-open: sending one probe"
        );
        Ok(true)
    }

    /// Sends a delivery this worker has claimed (its version after the claim
    /// is `claimed_version`) and records how it ended.
    pub async fn deliver_claimed(&self, id: i64, claimed_version: i64) -> anyhow::Result<()> {
        let db = &self.inner.db;
        let hooks = self.inner.config.current().webhooks.clone();
        let delivery = get_delivery(db, id)
            .await?
            .context("claimed delivery vanished")?;
        let Some(endpoint) = get_endpoint(db, delivery.endpoint_id).await? else {
            finish(
                db,
                id,
                claimed_version,
                Ending::Failed,
                None,
                Some("endpoint deleted"),
            )
            .await?;
            return Ok(());
        };
        // An endpoint registered under another policy is not delivered to.
        if let Err(why) = target::validate(&endpoint.url, hooks.allow_private_targets) {
            let reason = format!("not delivered: {why}");
            finish(db, id, claimed_version, Ending::Failed, None, Some(&reason)).await?;
            tracing::warn!(delivery_id = id, endpoint_id = endpoint.id, "{reason}");
            return Ok(());
        }
        let signatures = match signatures(&self.inner.keys, &endpoint) {
            Ok(signatures) => signatures,
            Err(why) => {
                let reason = format!("not delivered: the endpoint's signing secret {why}");
                finish(db, id, claimed_version, Ending::Failed, None, Some(&reason)).await?;
                tracing::error!(delivery_id = id, endpoint_id = endpoint.id, "{reason}");
                return Ok(());
            }
        };
        let answer = self
            .send(&endpoint, &delivery, &signatures, hooks.request_timeout)
            .await;
        let (ending, status, error) = classify(&answer, &delivery, &hooks);
        let recorded = finish(
            db,
            id,
            claimed_version,
            ending,
            status.map(|s| s.as_u16()),
            error.as_deref(),
        )
        .await?;
        if !recorded {
            tracing::warn!(
                delivery_id = id,
                "webhook delivery claim expired before its answer was recorded; it will be sent again"
            );
        }
        let result = match ending {
            Ending::Delivered => "delivered",
            Ending::RetryIn(_) => "retry",
            Ending::Failed => "failed",
        };
        metrics::counter!("changegate_webhook_attempts_total", "result" => result).increment(1);
        if status == Some(StatusCode::GONE) {
            if disable_gone(db, endpoint.id).await? {
                tracing::warn!(
                    endpoint_id = endpoint.id,
                    "webhook endpoint answered 410 Gone; disabled"
                );
            }
        } else if ending == Ending::Delivered {
            // A healthy endpoint (the common case) costs no write here.
            let healthy = endpoint.breaker_state == "closed" && endpoint.breaker_failures == 0;
            if !healthy && record_success(db, endpoint.id).await? {
                tracing::info!(endpoint_id = endpoint.id, "webhook endpoint breaker closed");
            }
        } else if record_failure(
            db,
            endpoint.id,
            hooks.breaker_failures,
            hooks.breaker_open_for,
        )
        .await?
        {
            tracing::warn!(
                endpoint_id = endpoint.id,
                "webhook endpoint breaker open for {}: deliveries wait",
                humantime::format_duration(hooks.breaker_open_for)
            );
        }
        Ok(())
    }

    /// One signed POST of the stored bytes.
    async fn send(
        &self,
        endpoint: &EndpointRow,
        delivery: &DeliveryRow,
        signatures: &Signatures,
        timeout: Duration,
    ) -> Result<reqwest::Response, CallError> {
        let timestamp = chrono::Utc::now().timestamp();
        let signatures = signatures.at(timestamp, delivery);
        let client = &self.inner.client;
        let request = client
            .request(reqwest::Method::POST, &endpoint.url)
            .timeout(timeout)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(HEADER_ID, &delivery.msg_id)
            .header(HEADER_TIMESTAMP, timestamp.to_string())
            .header(HEADER_SIGNATURE, signatures)
            .body(delivery.body.clone());
        client.send(request).await
    }
}

/// The secrets that sign a delivery to one endpoint: the current one, and
/// the previous one too while its rotation grace lasts.
struct Signatures(Vec<WebhookSecret>);

/// Why an endpoint's secrets cannot sign.
#[derive(Debug, thiserror::Error)]
enum SigningError {
    #[error("cannot be opened: {0}")]
    Sealed(#[from] OpenError),
    #[error("is not a webhook secret: {0}")]
    Invalid(#[from] SecretError),
}

fn signatures(keys: &KeyRing, endpoint: &EndpointRow) -> Result<Signatures, SigningError> {
    let mut secrets = vec![WebhookSecret::parse(&keys.open(&endpoint.secret)?)?];
    let grace = endpoint
        .previous_secret_until
        .is_some_and(|until| until > chrono::Utc::now().naive_utc());
    if let (true, Some(previous)) = (grace, &endpoint.previous_secret) {
        secrets.push(WebhookSecret::parse(&keys.open(previous)?)?);
    }
    Ok(Signatures(secrets))
}

impl Signatures {
    /// The `webhook-signature` value at `timestamp`: `v1,<sig>` per secret,
    /// space-separated as Standard Webhooks allows.
    fn at(&self, timestamp: i64, delivery: &DeliveryRow) -> String {
        self.0
            .iter()
            .map(|secret| {
                signature::sign(
                    secret,
                    &delivery.msg_id,
                    timestamp,
                    delivery.body.as_bytes(),
                )
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Describes the delivery counters and starts them at zero.
pub fn describe_metrics() {
    metrics::describe_counter!(
        "changegate_webhook_claims_total",
        "Webhook delivery claims, by outcome: won (this instance sends it), lost (another instance does)."
    );
    metrics::describe_counter!(
        "changegate_webhook_attempts_total",
        "Webhook delivery attempts, by result: delivered, retry (failed, tried again later), failed (the last attempt failed)."
    );
    for outcome in ["won", "lost"] {
        metrics::counter!("changegate_webhook_claims_total", "outcome" => outcome).increment(0);
    }
    for result in ["delivered", "retry", "failed"] {
        metrics::counter!("changegate_webhook_attempts_total", "result" => result).increment(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Default)]
    struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| std::io::ErrorKind::Other)?
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lost_claims_are_summed_in_one_info_line() {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || writer.clone())
            .finish();
        let lost = LostClaims {
            since_log: AtomicU64::new(0),
            last_log: std::sync::Mutex::new(Instant::now()),
            every: Duration::from_millis(30),
        };
        tracing::subscriber::with_default(subscriber, || {
            for _ in 0..5 {
                lost.add(3);
            }
            std::thread::sleep(Duration::from_millis(40));
            lost.add(1);
            lost.add(0);
        });
        let text = String::from_utf8_lossy(&captured.0.lock().expect("not poisoned")).into_owned();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "{text}");
        assert!(
            lines[0].contains("INFO") && lines[0].contains("lost=16"),
            "{text}"
        );
    }
}
