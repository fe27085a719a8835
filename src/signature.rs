//! Standard Webhooks signatures: the `whsec_` secret format, signing, and verification of
//! the `webhook-id` / `webhook-timestamp` / `webhook-signature` headers.
//!
//! One scheme serves both directions: the approval system and the deploy pipeline sign the
//! callbacks changegate receives (SPEC §2.2), and changegate signs the webhooks it sends
//! (SPEC §9), which subscribers check with the official `standardwebhooks` libraries. The
//! signed content is `"{id}.{timestamp}.{body}"` over the body's exact bytes, so whoever
//! sends must sign the very bytes it puts on the wire, and whoever verifies must do so
//! before parsing them.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use axum::http::HeaderMap;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// Header carrying the message id; it stays the same across redeliveries of one message.
pub const HEADER_ID: &str = "webhook-id";
/// Header carrying the signing time in Unix seconds.
pub const HEADER_TIMESTAMP: &str = "webhook-timestamp";
/// Header carrying one or more space-separated `v1,<base64>` signatures.
pub const HEADER_SIGNATURE: &str = "webhook-signature";
/// How far a timestamp may be from the receiver's clock, either way (SPEC §2.2).
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(5 * 60);

/// The prefix of the textual form of a secret.
const PREFIX: &str = "whsec_";
/// The only signature version the scheme defines.
const VERSION: &str = "v1";
/// The scheme asks for at least 192 bits; shorter keys are a configuration mistake.
const MIN_SECRET_BYTES: usize = 24;
/// Length of a generated secret: 256 bits, SHA-256's output size; longer adds no strength.
const GENERATED_SECRET_BYTES: usize = 32;

type HmacSha256 = Hmac<Sha256>;

/// A shared signing key. Its `Debug` output is redacted and it has no `Display`, so it
/// cannot end up in a log line by accident; [`WebhookSecret::expose`] is the explicit way
/// to show it (e.g. once, when an endpoint is created).
#[derive(Clone)]
pub struct WebhookSecret {
    key: Vec<u8>,
}

/// Why a secret could not be parsed.
#[derive(Clone, Copy, Debug, thiserror::Error, PartialEq, Eq)]
pub enum SecretError {
    /// The part after the optional `whsec_` prefix is not standard base64.
    #[error("webhook secret is not valid base64")]
    NotBase64,
    /// The decoded key is shorter than the scheme's minimum.
    #[error("webhook secret must decode to at least {MIN_SECRET_BYTES} bytes, got {0}")]
    TooShort(usize),
}

impl WebhookSecret {
    /// Parses `whsec_<base64>`, or bare base64 as some systems hand it out.
    pub fn parse(text: &str) -> Result<Self, SecretError> {
        let encoded = text.trim();
        let encoded = encoded.strip_prefix(PREFIX).unwrap_or(encoded);
        let key = STANDARD
            .decode(encoded)
            .map_err(|_| SecretError::NotBase64)?;
        if key.len() < MIN_SECRET_BYTES {
            return Err(SecretError::TooShort(key.len()));
        }
        Ok(Self { key })
    }

    /// A fresh random secret from the operating system's generator.
    ///
    /// # Panics
    /// If the operating system has no random source, where no secret could be safe anyway.
    pub fn generate() -> Self {
        let mut key = vec![0; GENERATED_SECRET_BYTES];
        getrandom::fill(&mut key).expect("the operating system provides random bytes");
        Self { key }
    }

    /// The `whsec_<base64>` form, to hand to the other side.
    pub fn expose(&self) -> String {
        format!("{PREFIX}{}", STANDARD.encode(&self.key))
    }

    /// A MAC keyed with this secret, ready for the signed content.
    fn mac(&self, msg_id: &str, timestamp: &str, body: &[u8]) -> HmacSha256 {
        let mut mac =
            HmacSha256::new_from_slice(&self.key).expect("HMAC accepts keys of any length");
        mac.update(msg_id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.as_bytes());
        mac.update(b".");
        mac.update(body);
        mac
    }
}

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WebhookSecret(<redacted>)")
    }
}

impl FromStr for WebhookSecret {
    type Err = SecretError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

/// The `webhook-signature` value for one message: `v1,<base64 HMAC-SHA256>` of
/// `"{msg_id}.{timestamp_secs}.{body}"`.
pub fn sign(secret: &WebhookSecret, msg_id: &str, timestamp_secs: i64, body: &[u8]) -> String {
    let tag = secret
        .mac(msg_id, &timestamp_secs.to_string(), body)
        .finalize()
        .into_bytes();
    format!("{VERSION},{}", STANDARD.encode(tag))
}

/// Why a signed message was refused. Every variant means "answer 401"; they differ so the
/// log says whether a sender is misconfigured, skewed in time, or forging.
#[derive(Clone, Copy, Debug, thiserror::Error, PartialEq, Eq)]
pub enum SignatureError {
    /// A required header is absent.
    #[error("missing header {0}")]
    MissingHeader(&'static str),
    /// A header holds bytes that are not visible ASCII.
    #[error("header {0} is not readable text")]
    InvalidHeader(&'static str),
    /// `webhook-timestamp` is not an integer number of seconds.
    #[error("webhook-timestamp is not a Unix time in seconds")]
    BadTimestamp,
    /// The timestamp is outside the tolerance around the receiver's clock.
    #[error("webhook-timestamp {timestamp} is too far from now ({now})")]
    Expired {
        /// The sender's claimed signing time.
        timestamp: i64,
        /// The receiver's clock.
        now: i64,
    },
    /// No `v1` signature matches any of the secrets.
    #[error("no signature matches")]
    NoMatch,
}

/// Checks a received message. `secrets` are all keys currently accepted from this sender
/// (during a rotation, old and new); the signature header may carry several signatures and
/// one match with any secret is enough. `now_secs` is the receiver's clock in Unix seconds.
/// Tags are compared in constant time.
pub fn verify(
    secrets: &[WebhookSecret],
    headers: &HeaderMap,
    body: &[u8],
    now_secs: i64,
    tolerance: Duration,
) -> Result<(), SignatureError> {
    let msg_id = header(headers, HEADER_ID)?;
    let timestamp_text = header(headers, HEADER_TIMESTAMP)?;
    let signatures = header(headers, HEADER_SIGNATURE)?;
    let timestamp: i64 = timestamp_text
        .trim()
        .parse()
        .map_err(|_| SignatureError::BadTimestamp)?;
    if timestamp.abs_diff(now_secs) > tolerance.as_secs() {
        return Err(SignatureError::Expired {
            timestamp,
            now: now_secs,
        });
    }
    // Entries of other versions or with broken base64 are skipped, not fatal: a sender may
    // add signatures of a newer scheme next to v1.
    let tags: Vec<Vec<u8>> = signatures
        .split_whitespace()
        .filter_map(|entry| entry.split_once(','))
        .filter(|(version, _)| *version == VERSION)
        .filter_map(|(_, tag)| STANDARD.decode(tag).ok())
        .collect();
    // The canonical rendering of the parsed time is what gets signed, as in the official
    // libraries, so `0123` and `123` verify alike.
    let timestamp_text = timestamp.to_string();
    let matches = secrets.iter().any(|secret| {
        let mac = secret.mac(msg_id, &timestamp_text, body);
        tags.iter().any(|tag| mac.clone().verify_slice(tag).is_ok())
    });
    if matches {
        Ok(())
    } else {
        Err(SignatureError::NoMatch)
    }
}

/// A header's text, or why it is unusable.
fn header<'a>(headers: &'a HeaderMap, name: &'static str) -> Result<&'a str, SignatureError> {
    headers
        .get(name)
        .ok_or(SignatureError::MissingHeader(name))?
        .to_str()
        .map_err(|_| SignatureError::InvalidHeader(name))
}
