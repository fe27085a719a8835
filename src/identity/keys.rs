//! The identity provider's signing keys: its JWKS, found through OIDC
//! discovery or named directly, kept in memory and read by every request
//! without waiting (an [`ArcSwapOption`] load).
//!
//! A background task refreshes the set as the provider's `Cache-Control`
//! asks, within [`MIN_TTL`] and [`MAX_TTL`]. A token signed with a key the
//! set does not hold makes a request wait for one refetch at once (the
//! provider has rotated), at most one every [`UNKNOWN_KID_REFETCH`]; other
//! requests with the same new key wait for that fetch instead of starting
//! their own. While the provider cannot be read, the last good set keeps
//! working; the failure shows in the dependency report, as every client's.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use chrono::{DateTime, Utc};
use headers::{CacheControl, HeaderMapExt};
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::clients::health::System;
use crate::clients::http::{CallError, SystemClient};
use crate::config::{KeySource, LiveConfig};

/// The shortest time a fetched set is kept before it is read again, however
/// short the provider's `max-age` (or `no-cache`).
pub const MIN_TTL: Duration = Duration::from_secs(5 * 60);
/// The longest, however long the provider's `max-age`.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// How long a set is kept when the provider says nothing.
const DEFAULT_TTL: Duration = Duration::from_secs(60 * 60);
/// At most one refetch for an unknown `kid` in this time: tokens naming
/// keys that do not exist cannot make changegate hammer the provider.
pub const UNKNOWN_KID_REFETCH: Duration = Duration::from_secs(30);
/// How soon a failed fetch is tried again.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(30);
/// How often the refresher looks for a changed `[identity.jwt]`.
const CONFIG_CHECK: Duration = Duration::from_secs(10);
/// Every fetch's own timeout: a request waiting on a refetch waits at most this.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// A JWKS larger than this is not a key set.
const MAX_BODY_BYTES: usize = 1024 * 1024;

/// One of the provider's public keys, with the algorithms it verifies.
pub struct ProviderKey {
    kid: Option<String>,
    algorithms: Vec<Algorithm>,
    key: DecodingKey,
}

impl ProviderKey {
    /// The key's id, if it has one.
    pub fn kid(&self) -> Option<&str> {
        self.kid.as_deref()
    }

    /// Whether a token signed with `alg` may be verified with this key.
    pub fn accepts(&self, alg: Algorithm) -> bool {
        self.algorithms.contains(&alg)
    }

    /// The algorithms the key verifies.
    pub fn algorithms(&self) -> &[Algorithm] {
        &self.algorithms
    }

    /// The key itself.
    pub fn decoding_key(&self) -> &DecodingKey {
        &self.key
    }
}

/// The signing keys read from one source.
pub struct KeySet {
    source: KeySource,
    keys: Vec<ProviderKey>,
    fetched_at: DateTime<Utc>,
}

impl KeySet {
    /// The usable keys of a JWKS's `keys`: signature keys of the types
    /// changegate verifies. Symmetric keys, encryption keys and keys of
    /// other types or algorithms are left out, each logged once here.
    pub fn from_jwks(source: KeySource, keys: &[serde_json::Value]) -> Self {
        let keys = keys
            .iter()
            .filter_map(|raw| match provider_key(raw) {
                Ok(key) => Some(key),
                Err(why) => {
                    let kid = raw.get("kid").and_then(serde_json::Value::as_str);
                    tracing::debug!(kid, "a key of the identity provider is not used: {why}");
                    None
                }
            })
            .collect();
        Self {
            source,
            keys,
            fetched_at: Utc::now(),
        }
    }

    /// The key with this id.
    pub fn by_kid(&self, kid: &str) -> Option<&ProviderKey> {
        self.keys.iter().find(|key| key.kid.as_deref() == Some(kid))
    }

    /// The keys that verify `alg`, for a token that names no key.
    pub fn for_alg(&self, alg: Algorithm) -> impl Iterator<Item = &ProviderKey> {
        self.keys.iter().filter(move |key| key.accepts(alg))
    }

    /// How many keys are usable.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no key is usable.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// When the set was read.
    pub fn fetched_at(&self) -> DateTime<Utc> {
        self.fetched_at
    }
}

/// The algorithms a JWK verifies: the one it names, when it names one of
/// those changegate accepts, else those its type allows (RSA: RS256 and
/// PS256; EC P-256: ES256; Ed25519: EdDSA). Never HMAC: a public key set
/// holds no secret, and a public key used as one is the classic forgery.
fn provider_key(raw: &serde_json::Value) -> Result<ProviderKey, String> {
    let mut jwk: Jwk = serde_json::from_value(raw.clone()).map_err(|err| err.to_string())?;
    if matches!(jwk.common.public_key_use, Some(ref usage) if *usage != PublicKeyUse::Signature) {
        return Err("not a signature key (\"use\")".to_owned());
    }
    let by_type: &[Algorithm] = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => &[Algorithm::RS256, Algorithm::PS256],
        AlgorithmParameters::EllipticCurve(params) if params.curve == EllipticCurve::P256 => {
            &[Algorithm::ES256]
        }
        AlgorithmParameters::OctetKeyPair(params) if params.curve == EllipticCurve::Ed25519 => {
            &[Algorithm::EdDSA]
        }
        AlgorithmParameters::OctetKey(_) => return Err("a symmetric key".to_owned()),
        _ => return Err("a key type or curve changegate does not verify".to_owned()),
    };
    let algorithms = match jwk.common.key_algorithm {
        None => by_type.to_vec(),
        Some(named) => match named_algorithm(named).filter(|alg| by_type.contains(alg)) {
            Some(alg) => vec![alg],
            None => return Err(format!("\"alg\" {named:?} does not fit the key")),
        },
    };
    if let AlgorithmParameters::EllipticCurve(params) = &mut jwk.algorithm {
        params.x = full_size_coordinate(&params.x)?;
        params.y = full_size_coordinate(&params.y)?;
    }
    let key = DecodingKey::from_jwk(&jwk).map_err(|err| err.to_string())?;
    Ok(ProviderKey {
        kid: jwk.common.key_id,
        algorithms,
        key,
    })
}

/// The size of a P-256 coordinate, in bytes.
const P256_COORDINATE_BYTES: usize = 32;

/// A P-256 coordinate of a JWK at its full size. RFC 7518 §6.2.1.2 asks for
/// exactly 32 bytes, but some providers drop the leading zero bytes of the
/// integer (glewlwyd's `rnbyc` does, for about one key in a hundred), and
/// the point they publish would then fail every signature. Padding gives
/// the same integer; a coordinate longer than the curve's is refused.
fn full_size_coordinate(encoded: &str) -> Result<String, String> {
    use base64::Engine as _;
    let engine = &base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let bytes = engine
        .decode(encoded)
        .map_err(|err| format!("a coordinate is not base64url: {err}"))?;
    if bytes.len() > P256_COORDINATE_BYTES {
        return Err(format!(
            "a coordinate of {} bytes, longer than P-256's {P256_COORDINATE_BYTES}",
            bytes.len()
        ));
    }
    let mut full = vec![0; P256_COORDINATE_BYTES - bytes.len()];
    full.extend_from_slice(&bytes);
    Ok(engine.encode(full))
}

fn named_algorithm(named: KeyAlgorithm) -> Option<Algorithm> {
    match named {
        KeyAlgorithm::RS256 => Some(Algorithm::RS256),
        KeyAlgorithm::PS256 => Some(Algorithm::PS256),
        KeyAlgorithm::ES256 => Some(Algorithm::ES256),
        KeyAlgorithm::EdDSA => Some(Algorithm::EdDSA),
        _ => None,
    }
}

/// When the cache reads the provider next.
#[derive(Debug, Default)]
struct Schedule {
    /// The source the times below are about.
    source: Option<KeySource>,
    /// When the set (or, after a failure, the next try) is due.
    refresh_at: Option<Instant>,
    /// When a request last made the cache refetch for an unknown `kid`.
    last_unknown_kid_refetch: Option<Instant>,
}

impl Schedule {
    fn refresh_due(&self, source: &KeySource, now: Instant) -> bool {
        self.source.as_ref() != Some(source) || self.refresh_at.is_none_or(|at| at <= now)
    }

    fn unknown_kid_refetch_allowed(&self, now: Instant) -> bool {
        self.last_unknown_kid_refetch
            .is_none_or(|last| now.saturating_duration_since(last) >= UNKNOWN_KID_REFETCH)
    }

    fn until_refresh(&self, now: Instant) -> Duration {
        self.refresh_at
            .map_or(Duration::ZERO, |at| at.saturating_duration_since(now))
    }
}

/// How long a set may be kept, from its answer's `Cache-Control`.
fn time_to_live(headers: &reqwest::header::HeaderMap) -> Duration {
    match headers.typed_get::<CacheControl>() {
        Some(control) if control.no_store() || control.no_cache() => MIN_TTL,
        Some(control) => control
            .max_age()
            .map_or(DEFAULT_TTL, |age| age.clamp(MIN_TTL, MAX_TTL)),
        None => DEFAULT_TTL,
    }
}

/// Why a fetch failed.
#[derive(Debug, thiserror::Error)]
enum FetchError {
    /// No answer (recorded by the client with its cause).
    #[error("{0}")]
    Call(CallError),
    /// An answer that is not a usable key set.
    #[error("{0}")]
    Answer(String),
}

#[derive(Deserialize)]
struct Discovery {
    issuer: String,
    jwks_uri: String,
}

#[derive(Deserialize)]
struct Jwks {
    keys: Vec<serde_json::Value>,
}

/// The provider's keys, shared by every request of an instance. Cheap to
/// clone.
#[derive(Clone)]
pub struct KeyCache {
    inner: Arc<Inner>,
}

struct Inner {
    client: SystemClient,
    current: ArcSwapOption<KeySet>,
    /// Held while fetching: one fetch at a time, and requests waiting on
    /// a refetch wait here.
    fetch: tokio::sync::Mutex<()>,
    fetching: AtomicBool,
    schedule: Mutex<Schedule>,
}

impl KeyCache {
    /// An empty cache reading through `client` (the identity system's).
    pub fn new(client: SystemClient) -> Self {
        Self {
            inner: Arc::new(Inner {
                client,
                current: ArcSwapOption::empty(),
                fetch: tokio::sync::Mutex::new(()),
                fetching: AtomicBool::new(false),
                schedule: Mutex::new(Schedule::default()),
            }),
        }
    }

    fn schedule<T>(&self, f: impl FnOnce(&mut Schedule) -> T) -> T {
        f(&mut self
            .inner
            .schedule
            .lock()
            .unwrap_or_else(PoisonError::into_inner))
    }

    /// The last good keys read from `source`; `None` before the first
    /// fetch, or when they came from another source.
    pub fn keys_for(&self, source: &KeySource) -> Option<Arc<KeySet>> {
        self.inner
            .current
            .load_full()
            .filter(|set| set.source == *source)
    }

    /// Whether a request with an unknown `kid` should wait for a refetch:
    /// one is running, `source` is due (never read, say, at start-up), or
    /// no refetch for an unknown key ran for [`UNKNOWN_KID_REFETCH`].
    pub fn unknown_kid_refetch_due(&self, source: &KeySource, now: Instant) -> bool {
        self.inner.fetching.load(Ordering::Acquire)
            || self.schedule(|schedule| {
                schedule.refresh_due(source, now) || schedule.unknown_kid_refetch_allowed(now)
            })
    }

    /// Reads `source` again for a token signed with `kid`, unless another
    /// request's fetch brought the key meanwhile or a refetch for an
    /// unknown key ran less than [`UNKNOWN_KID_REFETCH`] ago. A set that is
    /// due anyway (never read yet) is read as the refresher would, without
    /// using up the refetch an unknown key may make.
    pub async fn refetch_for_unknown_kid(&self, source: &KeySource, kid: &str) {
        let _one_fetch = self.inner.fetch.lock().await;
        if self
            .keys_for(source)
            .is_some_and(|set| set.by_kid(kid).is_some())
        {
            return;
        }
        let now = Instant::now();
        let fetch = self.schedule(|schedule| {
            if schedule.refresh_due(source, now) {
                return true;
            }
            let allowed = schedule.unknown_kid_refetch_allowed(now);
            if allowed {
                schedule.last_unknown_kid_refetch = Some(now);
            }
            allowed
        });
        if fetch {
            tracing::info!(
                kid,
                "a token names a key the identity provider's set lacks: reading the set again"
            );
            self.fetch_locked(source).await;
        }
    }

    /// Reads `source` now if its set is due (or was never read), as the
    /// refresher does; answers how long until the next is due.
    pub async fn refresh_if_due(&self, source: &KeySource) -> Duration {
        let _one_fetch = self.inner.fetch.lock().await;
        if self.schedule(|schedule| schedule.refresh_due(source, Instant::now())) {
            self.fetch_locked(source).await;
        }
        self.schedule(|schedule| schedule.until_refresh(Instant::now()))
    }

    /// Keeps the set of the configured source fresh until `shutdown`,
    /// following reloads of `[identity.jwt]`.
    pub async fn keep_fresh(self, config: LiveConfig, shutdown: CancellationToken) {
        loop {
            let wait = match config.current().identity.jwt.key_source() {
                Some(source) => self.refresh_if_due(&source).await.min(CONFIG_CHECK),
                None => {
                    self.inner.current.store(None);
                    CONFIG_CHECK
                }
            };
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = shutdown.cancelled() => return,
            }
        }
    }

    /// One fetch, the fetch lock held: the new set on success, the last
    /// good one kept on failure, and the next time due either way.
    async fn fetch_locked(&self, source: &KeySource) {
        self.inner.fetching.store(true, Ordering::Release);
        let fetched = self.fetch(source).await;
        let now = Instant::now();
        let next = match fetched {
            Ok((set, ttl)) => {
                tracing::debug!(keys = set.len(), ?ttl, "read the identity provider's keys");
                self.inner.current.store(Some(Arc::new(set)));
                ttl
            }
            Err(failure) => {
                let why = failure.to_string();
                tracing::warn!(
                    "cannot read the identity provider's keys ({why}); the last good set, if any, is kept"
                );
                // A call that got no answer is on record already, with its cause.
                if let FetchError::Answer(_) = failure {
                    self.inner.client.health().failed(System::Identity, &why);
                }
                RETRY_AFTER_FAILURE
            }
        };
        self.schedule(|schedule| {
            schedule.source = Some(source.clone());
            schedule.refresh_at = Some(now + next);
        });
        self.inner.fetching.store(false, Ordering::Release);
    }

    async fn fetch(&self, source: &KeySource) -> Result<(KeySet, Duration), FetchError> {
        let jwks_url = match source {
            KeySource::Jwks { url } => url.clone(),
            KeySource::Discovery { issuer } => {
                let url = format!(
                    "{}/.well-known/openid-configuration",
                    issuer.trim_end_matches('/')
                );
                let (discovery, _): (Discovery, _) = self.get_json(&url).await?;
                // OpenID Connect Discovery 1.0 §4.3: the document must name
                // the issuer it was read under, exactly.
                if discovery.issuer != *issuer {
                    return Err(FetchError::Answer(format!(
                        "the discovery document names the issuer {:?}, not {issuer:?}",
                        discovery.issuer
                    )));
                }
                discovery.jwks_uri
            }
        };
        let (jwks, ttl): (Jwks, _) = self.get_json(&jwks_url).await?;
        let set = KeySet::from_jwks(source.clone(), &jwks.keys);
        if set.is_empty() {
            return Err(FetchError::Answer(format!(
                "{jwks_url} holds no key changegate can verify with"
            )));
        }
        Ok((set, ttl))
    }

    async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        url: &str,
    ) -> Result<(T, Duration), FetchError> {
        let client = &self.inner.client;
        let request = client
            .request(reqwest::Method::GET, url)
            .timeout(FETCH_TIMEOUT)
            .header(reqwest::header::ACCEPT, "application/json");
        let response = client.send(request).await.map_err(FetchError::Call)?;
        let status = response.status();
        if !status.is_success() {
            return Err(FetchError::Answer(format!(
                "{url} answered HTTP {}",
                status.as_u16()
            )));
        }
        if response
            .content_length()
            .is_some_and(|length| length > MAX_BODY_BYTES as u64)
        {
            return Err(FetchError::Answer(format!(
                "{url} answers more than {MAX_BODY_BYTES} bytes"
            )));
        }
        let ttl = time_to_live(response.headers());
        let body = response
            .bytes()
            .await
            .map_err(|err| FetchError::Answer(format!("{url}: {err}")))?;
        let parsed = serde_json::from_slice(&body).map_err(|err| {
            FetchError::Answer(format!("{url} answered something unreadable: {err}"))
        })?;
        Ok((parsed, ttl))
    }
}

#[cfg(test)]
#[path = "keys_tests.rs"]
pub(super) mod tests;
