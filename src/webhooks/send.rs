//! Sending one claimed page of deliveries: reads back what the claim won
//! (bodies and the endpoints, one round trip each), opens each endpoint's
//! secrets once, sends every delivery concurrently, and records the answers
//! in groups: as soon as [`RECORD_EVERY`] have finished, when none has
//! finished for [`RECORD_WITHIN`] (a slow endpoint does not hold back the
//! others' records), and at the end. Each endpoint's breaker is updated
//! once per page from its answers in the order they came, and not at all
//! when it was healthy and stays so. Each delivery is sent in its own span,
//! linked to the request that submitted the operation it reports.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use tokio::task::JoinSet;
use tracing::{Instrument, Span};

use super::retry::classify;
use crate::clients::http::SystemClient;
use crate::config::WebhookSettings;
use crate::db::Db;
use crate::db::events::trace_parents_of;
use crate::db::webhook_claims::{Attempt, claimed, record};
use crate::db::webhook_deliveries::{DeliveryRow, Ending};
use crate::db::webhook_endpoints::{
    EndpointRow, disable_gone, endpoints_in, record_failures, record_success,
};
use crate::sealing::{KeyRing, OpenError};
use crate::signature::{
    self, HEADER_ID, HEADER_SIGNATURE, HEADER_TIMESTAMP, SecretError, WebhookSecret,
};
use crate::traces::propagation;
use crate::webhooks::target;

/// Finished attempts recorded together.
const RECORD_EVERY: usize = 32;
/// How long finished attempts wait for others before they are recorded.
const RECORD_WITHIN: Duration = Duration::from_millis(100);

/// What a page is sent with.
pub(super) struct Page<'a> {
    pub db: &'a Db,
    pub client: &'a SystemClient,
    pub keys: &'a KeyRing,
    pub hooks: Arc<WebhookSettings>,
}

/// An endpoint a page sends to: its row as read, and its secrets opened.
struct Target {
    endpoint: EndpointRow,
    signatures: Signatures,
}

/// Each endpoint of a page, or why nothing may be sent to it.
type Targets = HashMap<i64, Result<Arc<Target>, String>>;

/// One finished attempt, with what its endpoint's breaker needs.
struct Finished {
    attempt: Attempt,
    endpoint_id: i64,
    status: Option<StatusCode>,
}

impl Page<'_> {
    /// Sends the deliveries among `ids` that the claim holding `token` won.
    pub(super) async fn send(&self, token: &str, ids: &[i64]) -> anyhow::Result<()> {
        let deliveries = claimed(self.db, ids, token).await?;
        let mut endpoint_ids: Vec<i64> = deliveries.iter().map(|row| row.endpoint_id).collect();
        endpoint_ids.sort_unstable();
        endpoint_ids.dedup();
        let targets: Targets = endpoints_in(self.db, &endpoint_ids)
            .await?
            .into_iter()
            .map(|endpoint| (endpoint.id, self.target(endpoint).map(Arc::new)))
            .collect();
        let mut pending = Vec::new();
        let mut breakers = Breakers::default();
        let mut sends = JoinSet::new();
        let spans = self.spans(&deliveries).await?;
        for (delivery, span) in deliveries.into_iter().zip(spans) {
            let target = match targets.get(&delivery.endpoint_id) {
                Some(Ok(target)) => target,
                Some(Err(why)) => {
                    pending.push(failed(&delivery, why.clone()));
                    continue;
                }
                None => {
                    pending.push(failed(&delivery, "endpoint deleted".to_owned()));
                    continue;
                }
            };
            let (client, hooks, target) = (self.client.clone(), self.hooks.clone(), target.clone());
            sends.spawn(
                async move { attempt(&client, &hooks, &target, delivery).await }.instrument(span),
            );
        }
        while !sends.is_empty() {
            let quiet = match tokio::time::timeout(RECORD_WITHIN, sends.join_next()).await {
                Ok(Some(Ok(done))) => {
                    count_attempt(done.attempt.ending);
                    breakers.note(&done);
                    pending.push(done.attempt);
                    false
                }
                Ok(Some(Err(err))) => {
                    tracing::error!("webhook delivery task failed: {err}");
                    false
                }
                Ok(None) => false,
                Err(_) => true,
            };
            if pending.len() >= RECORD_EVERY || quiet {
                self.record(token, &mut pending).await?;
            }
        }
        self.record(token, &mut pending).await?;
        breakers.apply(self.db, &targets, &self.hooks).await
    }

    /// A span per delivery, linked to the request that submitted the
    /// operation whose flip the delivery reports; its trace context is read
    /// only when the spans are exported.
    async fn spans(&self, deliveries: &[DeliveryRow]) -> anyhow::Result<Vec<Span>> {
        let spans: Vec<Span> = deliveries
            .iter()
            .map(|delivery| {
                tracing::debug_span!(
                    "webhook delivery",
                    delivery.id = delivery.id,
                    event.id = delivery.event_id,
                    endpoint.id = delivery.endpoint_id,
                )
            })
            .collect();
        if spans.iter().all(Span::is_disabled) {
            return Ok(spans);
        }
        let event_ids: Vec<i64> = deliveries.iter().map(|row| row.event_id).collect();
        let parents: HashMap<i64, (String, String)> = trace_parents_of(self.db, &event_ids)
            .await?
            .into_iter()
            .map(|(event_id, operation_id, parent)| (event_id, (operation_id, parent)))
            .collect();
        for (delivery, span) in deliveries.iter().zip(&spans) {
            if let Some((operation_id, parent)) = parents.get(&delivery.event_id) {
                propagation::link_stored(span, Some(parent), operation_id);
            }
        }
        Ok(spans)
    }

    /// The endpoint with its secrets opened, or why it gets nothing: an
    /// endpoint registered under another policy is not delivered to, nor one
    /// whose secrets cannot be opened. Logged once per page.
    fn target(&self, endpoint: EndpointRow) -> Result<Target, String> {
        if let Err(why) = target::validate(&endpoint.url, self.hooks.allow_private_targets) {
            let reason = format!("not delivered: {why}");
            tracing::warn!(endpoint_id = endpoint.id, "{reason}");
            return Err(reason);
        }
        match signatures(self.keys, &endpoint) {
            Ok(signatures) => Ok(Target {
                endpoint,
                signatures,
            }),
            Err(why) => {
                let reason = format!("not delivered: the endpoint's signing secret {why}");
                tracing::error!(endpoint_id = endpoint.id, "{reason}");
                Err(reason)
            }
        }
    }

    /// Records `pending` in one statement and empties it.
    async fn record(&self, token: &str, pending: &mut Vec<Attempt>) -> anyhow::Result<()> {
        if pending.is_empty() {
            return Ok(());
        }
        let recorded = record(self.db, token, pending).await?;
        let expired = pending.len() as u64 - recorded;
        if expired > 0 {
            tracing::warn!(
                deliveries = expired,
                "webhook delivery claims expired before their answers were recorded; \
                 they will be sent again"
            );
        }
        pending.clear();
        Ok(())
    }
}

/// Counts an attempt that was sent; a delivery failed without being sent
/// (its endpoint gone, forbidden or without a usable secret) is not one.
fn count_attempt(ending: Ending) {
    let result = match ending {
        Ending::Delivered => "delivered",
        Ending::RetryIn(_) => "retry",
        Ending::Failed => "failed",
    };
    metrics::counter!("changegate_webhook_attempts_total", "result" => result).increment(1);
}

/// A claimed delivery that is not sent, failed for good with `reason`.
fn failed(delivery: &DeliveryRow, reason: String) -> Attempt {
    Attempt {
        id: delivery.id,
        claimed_version: delivery.version,
        ending: Ending::Failed,
        http_status: None,
        error: Some(reason),
    }
}

/// One signed POST of the stored bytes, and how it ended.
async fn attempt(
    client: &SystemClient,
    hooks: &WebhookSettings,
    target: &Target,
    delivery: DeliveryRow,
) -> Finished {
    let timestamp = chrono::Utc::now().timestamp();
    let request = client
        .request(reqwest::Method::POST, &target.endpoint.url)
        .timeout(hooks.request_timeout)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(HEADER_ID, &delivery.msg_id)
        .header(HEADER_TIMESTAMP, timestamp.to_string())
        .header(HEADER_SIGNATURE, target.signatures.at(timestamp, &delivery))
        .body(delivery.body.clone());
    let answer = client.send(request).await;
    let (ending, status, error) = classify(&answer, &delivery, hooks);
    Finished {
        attempt: Attempt {
            id: delivery.id,
            claimed_version: delivery.version,
            ending,
            http_status: status.map(|status| status.as_u16()),
            error,
        },
        endpoint_id: target.endpoint.id,
        status,
    }
}

/// Each endpoint's answers in one page, in the order they came.
#[derive(Default)]
struct Breakers(HashMap<i64, Tally>);

#[derive(Default)]
struct Tally {
    succeeded: bool,
    failures_since_success: u32,
    gone: bool,
}

impl Breakers {
    fn note(&mut self, done: &Finished) {
        let tally = self.0.entry(done.endpoint_id).or_default();
        if done.status == Some(StatusCode::GONE) {
            tally.gone = true;
        } else if done.attempt.ending == Ending::Delivered {
            tally.succeeded = true;
            tally.failures_since_success = 0;
        } else {
            tally.failures_since_success += 1;
        }
    }

    /// What the page's answers mean for each endpoint: a 410 disables it; a
    /// success resets its breaker (no write when it was healthy), failures
    /// after the last success count towards opening it; the same as
    /// recording each answer in turn.
    async fn apply(
        self,
        db: &Db,
        targets: &Targets,
        hooks: &WebhookSettings,
    ) -> anyhow::Result<()> {
        for (id, tally) in self.0 {
            let Some(Ok(target)) = targets.get(&id) else {
                continue;
            };
            let endpoint = &target.endpoint;
            if tally.gone && disable_gone(db, id).await? {
                tracing::warn!(
                    endpoint_id = id,
                    "webhook endpoint answered 410 Gone; disabled"
                );
            }
            let healthy = endpoint.breaker_state == "closed" && endpoint.breaker_failures == 0;
            if tally.succeeded && !healthy && record_success(db, id).await? {
                tracing::info!(endpoint_id = id, "webhook endpoint breaker closed");
            }
            if tally.failures_since_success > 0
                && record_failures(
                    db,
                    id,
                    tally.failures_since_success,
                    hooks.breaker_failures,
                    hooks.breaker_open_for,
                )
                .await?
            {
                tracing::warn!(
                    endpoint_id = id,
                    "webhook endpoint breaker open for {}: deliveries wait",
                    humantime::format_duration(hooks.breaker_open_for)
                );
            }
        }
        Ok(())
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
