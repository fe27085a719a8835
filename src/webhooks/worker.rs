//! The delivery worker each instance runs: finds due deliveries, claims a
//! page of them by one set-based compare-and-swap (exactly one instance wins
//! a row), signs the stored bytes, sends them, and records the answers in
//! groups; retries on a growing, jittered schedule; a per-endpoint circuit
//! breaker, shared through the database, holds deliveries back while an
//! endpoint keeps failing.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::retry::shuffle;
use crate::clients::health::{Dependencies, System};
use crate::clients::http::{Outbound, SystemClient};
use crate::config::LiveConfig;
use crate::db::Db;
use crate::db::webhook_claims::{Due, claim, list_due, requeue_expired, silence};
use crate::db::webhook_endpoints::take_half_open;
use crate::jobs::Outcome;
use crate::sealing::KeyRing;
use crate::webhooks::target::{GlobalOnly, SystemLookup};

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
    rounds: AtomicU32,
    lost: LostClaims,
}

impl std::fmt::Debug for Deliverer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deliverer")
            .field("owner", &self.inner.owner)
            .finish_non_exhaustive()
    }
}

/// Claims lost to other instances, logged as one sum per minute at debug: a
/// lost claim is the proof that a duplicate was prevented, an expected race
/// nobody has to act on. Operators see it as
/// `changegate_webhook_claims_total{outcome="lost"}`; the log line, for
/// whoever debugs, is one per minute, not one per row.
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
                tracing::debug!(
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
                rounds: AtomicU32::new(0),
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
    /// `webhooks.concurrency` due deliveries in one statement (again, with
    /// the next candidates, for any lost to another instance) and sends
    /// them concurrently, recording their answers in groups.
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
        let limit = u64::from(hooks.concurrency);
        let mut due = list_due(db, hooks.concurrency.saturating_mul(4))
            .await
            .context("listing due deliveries")?;
        if settings.webhooks_silent {
            let read: Vec<(i64, i64)> = due.iter().map(|row| (row.id, row.version)).collect();
            let silenced = silence(db, &read).await.context("silencing deliveries")?;
            return Ok(match silenced {
                0 => Outcome::Idle,
                done => Outcome::Worked { done, full: false },
            });
        }
        // Instances polling together would all try the same rows first.
        shuffle(&mut due);
        let lease = hooks.request_timeout + Duration::from_secs(30);
        let token = self.claim_token();
        let mut candidates = due.into_iter();
        let mut probing = HashSet::new();
        let (mut won, mut lost) = (0_u64, 0_u64);
        let mut tried = Vec::new();
        while won < limit {
            let mut page = Vec::new();
            for row in candidates.by_ref() {
                if self.may_send(&row, &mut probing, lease).await? {
                    page.push((row.id, row.version));
                    if page.len() as u64 >= limit - won {
                        break;
                    }
                }
            }
            if page.is_empty() {
                break;
            }
            let claimed = match claim(db, &page, &token, lease).await {
                Ok(claimed) => claimed,
                // Rolled back, nothing changed: as good as lost.
                Err(err) if crate::db::is_retryable_conflict(&err) => 0,
                Err(err) => return Err(err).context("claiming deliveries"),
            };
            won += claimed;
            lost += page.len() as u64 - claimed;
            tried.extend(page.into_iter().map(|(id, _)| id));
        }
        metrics::counter!("changegate_webhook_claims_total", "outcome" => "won").increment(won);
        metrics::counter!("changegate_webhook_claims_total", "outcome" => "lost").increment(lost);
        self.inner.lost.add(lost);
        if won > 0 {
            self.send_claimed(&token, &tried).await?;
        }
        Ok(match won {
            0 => Outcome::Idle,
            done => Outcome::Worked {
                done,
                full: won >= limit,
            },
        })
    }

    /// A lease owner unique to one round of this worker, so the round reads
    /// back exactly the rows its claim won. It starts with the worker's
    /// owner id, so releasing the owner's leases (a prefix match) covers it,
    /// and stays within the column's 64 characters (an owner id has at most
    /// 48; the round counter wraps, long after any lease of that round).
    fn claim_token(&self) -> String {
        let round = self.inner.rounds.fetch_add(1, Ordering::Relaxed);
        format!("{}.{round:x}", self.inner.owner)
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

    /// Sends the deliveries among `ids` that the claim holding `token` won,
    /// and records how each ended (see `send`).
    pub async fn send_claimed(&self, token: &str, ids: &[i64]) -> anyhow::Result<()> {
        let inner = &self.inner;
        super::send::Page {
            db: &inner.db,
            client: &inner.client,
            keys: &inner.keys,
            hooks: Arc::new(inner.config.current().webhooks.clone()),
        }
        .send(token, ids)
        .await
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
    fn lost_claims_are_summed_in_one_debug_line() {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::DEBUG)
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
            lines[0].contains("DEBUG") && lines[0].contains("lost=16"),
            "{text}"
        );
    }
}
