//! Signed callback delivery shared by the approval and deploy simulators: serialise the body
//! once, sign those exact bytes with the official `standardwebhooks` crate, POST them, retry
//! transient failures, and log every attempt with the status the receiver answered.
//!
//! Secrets are Standard Webhooks `whsec_<base64>` strings, the form changegate's
//! configuration takes, so one string can be pasted into both.

use std::fmt;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chrono::Utc;
use reqwest::header::CONTENT_TYPE;
use serde::Serialize;
use serde_json::Value;
use standardwebhooks::{
    HEADER_WEBHOOK_ID, HEADER_WEBHOOK_SIGNATURE, HEADER_WEBHOOK_TIMESTAMP, Webhook,
};
use uuid::Uuid;

/// The prefix of a Standard Webhooks secret.
const SECRET_PREFIX: &str = "whsec_";
/// 256 bits, SHA-256's output size: a longer HMAC key adds no strength.
const GENERATED_SECRET_BYTES: usize = 32;

/// A fresh random `whsec_<base64>` secret from the operating system's generator.
///
/// # Panics
/// If the operating system has no random source, where no secret could be safe anyway.
pub fn generate_secret() -> String {
    let mut key = [0; GENERATED_SECRET_BYTES];
    getrandom::fill(&mut key).expect("the operating system provides random bytes");
    format!("{SECRET_PREFIX}{}", STANDARD.encode(key))
}

/// Parses a `whsec_<base64>` (or bare base64) secret the way the official library does,
/// refusing an empty key, which would sign with no secret at all.
fn webhook(secret: &str) -> std::io::Result<Webhook> {
    let invalid = |what: &str| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("callback secret {what}"),
        )
    };
    let key = secret.trim();
    if key.strip_prefix(SECRET_PREFIX).unwrap_or(key).is_empty() {
        return Err(invalid("is empty"));
    }
    Webhook::new(key).map_err(|_| invalid("is not whsec_ followed by base64"))
}

/// How callbacks are sent.
#[derive(Clone, Debug)]
pub struct DeliverySettings {
    /// Per-attempt timeout, connecting included.
    pub timeout: Duration,
    /// Further attempts after a transport error, a 5xx or a 429; 4xx answers are final.
    pub retries: u32,
    /// Pause before retry `n` is `n` times this.
    pub retry_backoff: Duration,
}

impl Default for DeliverySettings {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(5),
            retries: 2,
            retry_backoff: Duration::from_millis(100),
        }
    }
}

/// One attempt at delivering a callback.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CallbackDelivery {
    /// The body's `callbackId`, also sent as `webhook-id`; repeated on retries and duplicates.
    pub callback_id: Uuid,
    /// The JSON body sent.
    pub body: Value,
    /// 1 for the first attempt of this send, then counting retries.
    pub attempt: u32,
    /// The receiver's status; `None` when no answer came (no URL, refused, timed out).
    pub status: Option<u16>,
    /// The receiver's JSON answer (e.g. `{"code": "DUPLICATE"}`); `Null` when there was
    /// none or it was not JSON.
    pub answer: Value,
    /// What went wrong at the transport level, if anything.
    pub error: Option<String>,
    /// Signed with a random secret by the bad-signature fault.
    pub bad_signature: bool,
}

/// The attempts made so far; lives in the sender, which a simulator's tasks and its handle
/// share.
#[derive(Debug, Default)]
pub(crate) struct DeliveryLog(Mutex<Vec<CallbackDelivery>>);

impl DeliveryLog {
    fn lock(&self) -> MutexGuard<'_, Vec<CallbackDelivery>> {
        self.0.lock().expect("callback log poisoned")
    }

    /// Every attempt so far, in order.
    pub fn snapshot(&self) -> Vec<CallbackDelivery> {
        self.lock().clone()
    }

    /// Waits until at least `count` attempts are logged or `timeout` passes, then returns
    /// the log.
    pub async fn wait_for(&self, count: usize, timeout: Duration) -> Vec<CallbackDelivery> {
        wait_for_len(count, timeout, || self.snapshot()).await
    }
}

/// Polls `snapshot` until it holds at least `count` entries or `timeout` passes, and returns
/// the last one; callers check the length themselves, so running out of time is no error.
pub(crate) async fn wait_for_len<T>(
    count: usize,
    timeout: Duration,
    snapshot: impl Fn() -> Vec<T>,
) -> Vec<T> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let entries = snapshot();
        if entries.len() >= count || tokio::time::Instant::now() >= deadline {
            return entries;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Sends signed callbacks and logs the attempts.
pub(crate) struct Sender {
    client: reqwest::Client,
    secret: String,
    webhook: Webhook,
    settings: DeliverySettings,
    log: DeliveryLog,
}

impl fmt::Debug for Sender {
    // The secret stays out: handles are logged and printed in test failures.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sender")
            .field("settings", &self.settings)
            .field("log", &self.log)
            .finish_non_exhaustive()
    }
}

impl Sender {
    /// A sender with its own HTTP client, bounded by `settings.timeout` and trusting the
    /// platform's roots plus `extra_ca_pem`; fails on a secret that is not `whsec_<base64>`
    /// or a CA bundle that holds no certificate.
    pub fn new(
        secret: String,
        settings: DeliverySettings,
        extra_ca_pem: Option<&str>,
    ) -> std::io::Result<Self> {
        let webhook = webhook(&secret)?;
        let client = crate::tls::client_builder(extra_ca_pem)?
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout)
            .build()
            .map_err(std::io::Error::other)?;
        Ok(Self {
            client,
            secret,
            webhook,
            settings,
            log: DeliveryLog::default(),
        })
    }

    /// The `whsec_` secret callbacks are signed with.
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// The attempt log.
    pub fn log(&self) -> &DeliveryLog {
        &self.log
    }

    /// Delivers one callback to `url`, retrying transient failures; returns this send's
    /// attempts. `bad_signature` signs with a throwaway secret, as a misconfigured sender
    /// would. Without a URL the attempt is logged as unanswered.
    pub async fn send(
        &self,
        url: Option<&str>,
        callback_id: Uuid,
        body: &Value,
        bad_signature: bool,
    ) -> Vec<CallbackDelivery> {
        // Serialised once: these exact bytes are signed and sent on every attempt.
        let bytes = serde_json::to_vec(body).expect("a JSON value serialises");
        let throwaway;
        let signer = if bad_signature {
            throwaway = webhook(&generate_secret()).expect("a generated secret parses");
            &throwaway
        } else {
            &self.webhook
        };
        let mut attempts = Vec::new();
        for attempt in 1..=self.settings.retries + 1 {
            if attempt > 1 {
                tokio::time::sleep(self.settings.retry_backoff * (attempt - 1)).await;
            }
            let (status, answer, error) = match url {
                Some(url) => self.post(url, signer, callback_id, &bytes).await,
                None => (None, Value::Null, Some("no callback URL".to_owned())),
            };
            let delivery = CallbackDelivery {
                callback_id,
                body: body.clone(),
                attempt,
                status,
                answer,
                error,
                bad_signature,
            };
            tracing::debug!(?delivery, "simulator callback attempt");
            self.log.lock().push(delivery.clone());
            attempts.push(delivery);
            let transient = url.is_some() && status.is_none_or(|s| s == 429 || s >= 500);
            if !transient {
                break;
            }
        }
        attempts
    }

    /// One signed POST; the status and JSON answer, or the transport error.
    async fn post(
        &self,
        url: &str,
        signer: &Webhook,
        callback_id: Uuid,
        bytes: &[u8],
    ) -> (Option<u16>, Value, Option<String>) {
        let msg_id = callback_id.to_string();
        let timestamp = Utc::now().timestamp();
        // The official signer refuses only bodies that are not UTF-8.
        let signature = signer
            .sign(&msg_id, timestamp, bytes)
            .expect("serde_json writes UTF-8");
        let sent = self
            .client
            .post(url)
            .header(CONTENT_TYPE, "application/json")
            .header(HEADER_WEBHOOK_ID, msg_id)
            .header(HEADER_WEBHOOK_TIMESTAMP, timestamp.to_string())
            .header(HEADER_WEBHOOK_SIGNATURE, signature)
            .body(bytes.to_vec())
            .send()
            .await;
        let response = match sent {
            Ok(response) => response,
            Err(err) => return (None, Value::Null, Some(error_chain(&err))),
        };
        let status = response.status().as_u16();
        match response.bytes().await {
            Ok(body) => {
                let answer = serde_json::from_slice(&body).unwrap_or(Value::Null);
                (Some(status), answer, None)
            }
            // The status arrived, the body did not: the receiver decided, so keep its status.
            Err(err) => (Some(status), Value::Null, Some(error_chain(&err))),
        }
    }
}

/// An error with its causes on one line: reqwest's own text says only that sending failed,
/// its causes say why (refused, or which certificate problem).
fn error_chain(err: &reqwest::Error) -> String {
    let mut text = err.to_string();
    let mut cause = std::error::Error::source(err);
    while let Some(next) = cause {
        let part = next.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        cause = next.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_non_empty_base64_with_or_without_the_prefix() {
        let generated = generate_secret();
        assert!(generated.starts_with(SECRET_PREFIX));
        assert_ne!(generated, generate_secret());
        assert!(webhook(&generated).is_ok());
        // Bare base64, as some systems hand secrets out.
        assert!(webhook("C2FVsBQIhrscChlQIMV+b5sSYspob7oD").is_ok());
        for bad in ["", "whsec_", " whsec_ ", "whsec_%%%"] {
            let refused = webhook(bad).err().map(|err| err.kind());
            assert_eq!(refused, Some(std::io::ErrorKind::InvalidInput), "{bad:?}");
        }
    }
}
