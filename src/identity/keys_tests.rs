//! The key cache: which keys of a JWKS are used, how long a set is kept,
//! the refetch for an unknown `kid` (once, rate-limited, shared by the
//! requests waiting on it), and the last good set kept while the provider
//! fails.

use std::sync::atomic::{AtomicU16, AtomicUsize};
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use jsonwebtoken::{EncodingKey, jwk::Jwk};
use serde_json::{Value, json};

use super::*;
use crate::clients::health::Dependencies;
use crate::clients::http::{Outbound, ProxyRules, Trust};

const RS256_PRIVATE: &str = include_str!("../../tests/fixtures/jwt_rs256_private.pem");
const ES256_PRIVATE: &str = include_str!("../../tests/fixtures/jwt_es256_private.pem");
const EDDSA_PRIVATE: &str = include_str!("../../tests/fixtures/jwt_eddsa_private.pem");
/// A P-256 key whose public `y` coordinate starts with a zero byte.
const ES256_SHORT_Y_PRIVATE: &str =
    include_str!("../../tests/fixtures/jwt_es256_short_coordinate_private.pem");

/// The public JWK of a private key fixture, with `kid` and, when given, `alg`.
pub(crate) fn public_jwk(pem: &str, alg: Algorithm, kid: &str, named: bool) -> Value {
    let key = match alg {
        Algorithm::RS256 | Algorithm::PS256 => EncodingKey::from_rsa_pem(pem.as_bytes()),
        Algorithm::ES256 => EncodingKey::from_ec_pem(pem.as_bytes()),
        _ => EncodingKey::from_ed_pem(pem.as_bytes()),
    }
    .unwrap();
    let mut jwk = serde_json::to_value(Jwk::from_encoding_key(&key, alg).unwrap()).unwrap();
    jwk["kid"] = json!(kid);
    if !named {
        jwk.as_object_mut().unwrap().remove("alg");
    }
    jwk
}

fn source() -> KeySource {
    KeySource::Jwks {
        url: "https://sso.example.com/keys".to_owned(),
    }
}

#[test]
fn a_key_verifies_the_algorithms_its_type_allows_or_only_the_one_it_names() {
    let keys = [
        public_jwk(RS256_PRIVATE, Algorithm::RS256, "rsa-any", false),
        public_jwk(RS256_PRIVATE, Algorithm::PS256, "rsa-ps", true),
        public_jwk(ES256_PRIVATE, Algorithm::ES256, "ec", false),
        public_jwk(EDDSA_PRIVATE, Algorithm::EdDSA, "ed", true),
    ];
    let set = KeySet::from_jwks(source(), &keys);
    assert_eq!(set.len(), 4);
    let algorithms = |kid| set.by_kid(kid).unwrap().algorithms().to_vec();
    assert_eq!(algorithms("rsa-any"), [Algorithm::RS256, Algorithm::PS256]);
    assert_eq!(algorithms("rsa-ps"), [Algorithm::PS256]);
    assert_eq!(algorithms("ec"), [Algorithm::ES256]);
    assert_eq!(algorithms("ed"), [Algorithm::EdDSA]);
    let for_ps: Vec<_> = set
        .for_alg(Algorithm::PS256)
        .filter_map(ProviderKey::kid)
        .collect();
    assert_eq!(for_ps, ["rsa-any", "rsa-ps"]);
}

#[test]
fn symmetric_encryption_mismatched_and_unreadable_keys_are_left_out() {
    let mut encryption = public_jwk(RS256_PRIVATE, Algorithm::RS256, "enc", false);
    encryption["use"] = json!("enc");
    let mut mismatched = public_jwk(RS256_PRIVATE, Algorithm::RS256, "rsa-as-ec", false);
    mismatched["alg"] = json!("ES256");
    let mut other_algorithm = public_jwk(RS256_PRIVATE, Algorithm::RS256, "rs512", false);
    other_algorithm["alg"] = json!("RS512");
    let keys = [
        json!({"kty": "oct", "kid": "hmac", "k": "c2VjcmV0LXNlY3JldC1zZWNyZXQ"}),
        encryption,
        mismatched,
        other_algorithm,
        json!({"kty": "RSA", "kid": "unreadable", "alg": "RSA-OAEP-384", "n": "x", "e": "AQAB"}),
        json!({"kid": "no-type"}),
        public_jwk(ES256_PRIVATE, Algorithm::ES256, "good", true),
    ];
    let set = KeySet::from_jwks(source(), &keys);
    assert_eq!(set.len(), 1);
    assert!(set.by_kid("good").is_some());
    assert!(set.by_kid("hmac").is_none());
}

#[test]
fn an_ec_coordinate_published_without_its_leading_zero_still_verifies() {
    use base64::Engine as _;
    let engine = &base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let full = public_jwk(ES256_SHORT_Y_PRIVATE, Algorithm::ES256, "short", true);
    let y = engine.decode(full["y"].as_str().unwrap()).unwrap();
    assert_eq!(
        (y.len(), y[0]),
        (32, 0),
        "the fixture's y starts with a zero byte"
    );
    // As glewlwyd's `rnbyc` publishes it: the integer without its zero byte.
    let mut short = full.clone();
    short["y"] = json!(engine.encode(&y[1..]));
    let mut too_long = full.clone();
    too_long["kid"] = json!("too-long");
    too_long["y"] = json!(engine.encode([&[0][..], &y].concat()));
    let set = KeySet::from_jwks(source(), &[short, too_long]);
    assert!(set.by_kid("too-long").is_none(), "a 33-byte coordinate");

    let claims = json!({"sub": "alice", "exp": chrono::Utc::now().timestamp() + 600});
    let mut header = jsonwebtoken::Header::new(Algorithm::ES256);
    header.kid = Some("short".to_owned());
    let signing = EncodingKey::from_ec_pem(ES256_SHORT_Y_PRIVATE.as_bytes()).unwrap();
    let token = jsonwebtoken::encode(&header, &claims, &signing).unwrap();
    let key = set
        .by_kid("short")
        .expect("the key with a short coordinate is used");
    let verified = jsonwebtoken::decode::<Value>(
        &token,
        key.decoding_key(),
        &jsonwebtoken::Validation::new(Algorithm::ES256),
    );
    assert!(verified.is_ok(), "{verified:?}");
}

#[test]
fn a_set_is_kept_as_cache_control_says_within_bounds() {
    let ttl = |value: Option<&str>| {
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(value) = value {
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_str(value).unwrap());
        }
        time_to_live(&headers)
    };
    assert_eq!(ttl(None), DEFAULT_TTL);
    assert_eq!(ttl(Some("public, max-age=7200")), Duration::from_secs(7200));
    assert_eq!(ttl(Some("max-age=10")), MIN_TTL);
    assert_eq!(ttl(Some("max-age=2592000")), MAX_TTL);
    assert_eq!(ttl(Some("no-store")), MIN_TTL);
    assert_eq!(ttl(Some("no-cache, max-age=86400")), MIN_TTL);
    assert_eq!(ttl(Some("public")), DEFAULT_TTL);
}

#[test]
fn an_unknown_kid_refetches_at_most_once_in_the_interval_and_a_new_source_is_due_at_once() {
    let start = Instant::now();
    let mut schedule = Schedule::default();
    assert!(schedule.unknown_kid_refetch_allowed(start));
    schedule.last_unknown_kid_refetch = Some(start);
    assert!(!schedule.unknown_kid_refetch_allowed(start));
    assert!(
        !schedule
            .unknown_kid_refetch_allowed(start + UNKNOWN_KID_REFETCH - Duration::from_millis(1))
    );
    assert!(schedule.unknown_kid_refetch_allowed(start + UNKNOWN_KID_REFETCH));

    assert!(schedule.refresh_due(&source(), start), "never read");
    schedule.source = Some(source());
    schedule.refresh_at = Some(start + MIN_TTL);
    assert!(!schedule.refresh_due(&source(), start));
    assert!(schedule.refresh_due(&source(), start + MIN_TTL));
    let other = KeySource::Discovery {
        issuer: "https://other.example.com".to_owned(),
    };
    assert!(schedule.refresh_due(&other, start), "another source");
}

/// A provider on loopback: discovery and a JWKS, counting reads, answering
/// with the status set.
struct Provider {
    base: String,
    state: Arc<ProviderState>,
}

struct ProviderState {
    issuer: Mutex<String>,
    keys: Mutex<Vec<Value>>,
    status: AtomicU16,
    jwks_reads: AtomicUsize,
    /// Held while answering a JWKS read, so that a test can hold one open.
    answering: tokio::sync::Mutex<()>,
}

impl Provider {
    async fn start(keys: Vec<Value>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(ProviderState {
            issuer: Mutex::new(base.clone()),
            keys: Mutex::new(keys),
            status: AtomicU16::new(200),
            jwks_reads: AtomicUsize::new(0),
            answering: tokio::sync::Mutex::new(()),
        });
        let app = axum::Router::new()
            .route("/.well-known/openid-configuration", get(discovery))
            .route("/keys", get(jwks))
            .with_state(state.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { base, state }
    }

    fn reads(&self) -> usize {
        self.state.jwks_reads.load(Ordering::SeqCst)
    }

    fn discovery(&self) -> KeySource {
        KeySource::Discovery {
            issuer: self.base.clone(),
        }
    }
}

async fn discovery(State(state): State<Arc<ProviderState>>) -> Json<Value> {
    let issuer = state.issuer.lock().unwrap().clone();
    let base = issuer.trim_end_matches("/other");
    Json(json!({"issuer": issuer, "jwks_uri": format!("{base}/keys")}))
}

async fn jwks(State(state): State<Arc<ProviderState>>) -> Response {
    let _answering = state.answering.lock().await;
    state.jwks_reads.fetch_add(1, Ordering::SeqCst);
    let status = StatusCode::from_u16(state.status.load(Ordering::SeqCst)).unwrap();
    if !status.is_success() {
        return status.into_response();
    }
    let keys = state.keys.lock().unwrap().clone();
    (
        [(header::CACHE_CONTROL, "max-age=600")],
        Json(json!({ "keys": keys })),
    )
        .into_response()
}

fn cache() -> (KeyCache, Dependencies) {
    let outbound = Outbound::new(Trust::load(None).unwrap(), ProxyRules::default());
    let health = Dependencies::default();
    let client = SystemClient::new(&outbound, &health, System::Identity, |b| b).unwrap();
    (KeyCache::new(client), health)
}

fn identity_report(health: &Dependencies) -> crate::clients::health::DependencyView {
    health
        .report()
        .into_iter()
        .find(|view| view.system == "identity")
        .unwrap()
}

#[tokio::test]
async fn discovery_finds_the_jwks_and_its_keys_are_kept_for_their_source() {
    let provider = Provider::start(vec![public_jwk(
        RS256_PRIVATE,
        Algorithm::RS256,
        "one",
        true,
    )])
    .await;
    let (cache, health) = cache();
    let source = provider.discovery();
    let wait = cache.refresh_if_due(&source).await;
    assert!(
        wait > Duration::from_secs(590) && wait <= Duration::from_secs(600),
        "max-age=600, less the time since: {wait:?}"
    );
    let set = cache.keys_for(&source).expect("read");
    assert!(set.by_kid("one").is_some());
    assert_eq!(identity_report(&health).last_call_succeeded, Some(true));
    let other = KeySource::Jwks {
        url: format!("{}/keys", provider.base),
    };
    assert!(
        cache.keys_for(&other).is_none(),
        "another source's keys are not these"
    );
    // Not due yet: no second read.
    cache.refresh_if_due(&source).await;
    assert_eq!(provider.reads(), 1);
}

#[tokio::test]
async fn a_discovery_document_naming_another_issuer_gives_no_keys_and_says_so() {
    let provider = Provider::start(vec![public_jwk(
        RS256_PRIVATE,
        Algorithm::RS256,
        "one",
        true,
    )])
    .await;
    *provider.state.issuer.lock().unwrap() = format!("{}/other", provider.base);
    let (cache, health) = cache();
    let source = provider.discovery();
    cache.refresh_if_due(&source).await;
    assert!(cache.keys_for(&source).is_none());
    let report = identity_report(&health);
    assert_eq!(report.last_call_succeeded, Some(false));
    assert!(report.last_error.unwrap().contains("names the issuer"));
}

#[tokio::test]
async fn an_unknown_kid_refetches_once_and_again_only_after_the_interval() {
    let provider = Provider::start(vec![public_jwk(
        RS256_PRIVATE,
        Algorithm::RS256,
        "one",
        true,
    )])
    .await;
    let (cache, _) = cache();
    let source = provider.discovery();
    cache.refresh_if_due(&source).await;
    assert!(cache.unknown_kid_refetch_due(&source, Instant::now()));

    provider.state.keys.lock().unwrap().push(public_jwk(
        ES256_PRIVATE,
        Algorithm::ES256,
        "two",
        true,
    ));
    cache.refetch_for_unknown_kid(&source, "two").await;
    assert_eq!(provider.reads(), 2);
    assert!(
        cache.keys_for(&source).unwrap().by_kid("two").is_some(),
        "the rotated key"
    );

    // A known kid reads nothing; another unknown one within the interval
    // reads nothing either, and the request is not held for it.
    cache.refetch_for_unknown_kid(&source, "two").await;
    cache.refetch_for_unknown_kid(&source, "forged").await;
    assert_eq!(provider.reads(), 2);
    assert!(!cache.unknown_kid_refetch_due(&source, Instant::now()));
    assert!(cache.unknown_kid_refetch_due(&source, Instant::now() + UNKNOWN_KID_REFETCH));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_with_the_same_new_kid_wait_for_one_refetch() {
    let provider = Provider::start(vec![public_jwk(
        RS256_PRIVATE,
        Algorithm::RS256,
        "one",
        true,
    )])
    .await;
    let (cache, _) = cache();
    let source = provider.discovery();
    cache.refresh_if_due(&source).await;
    provider.state.keys.lock().unwrap().push(public_jwk(
        EDDSA_PRIVATE,
        Algorithm::EdDSA,
        "two",
        true,
    ));
    // The provider holds its answer until every request has asked.
    let holding = provider.state.answering.lock().await;
    let mut waiting = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (cache, source) = (cache.clone(), source.clone());
        waiting.spawn(async move { cache.refetch_for_unknown_kid(&source, "two").await });
    }
    while !cache.inner.fetching.load(Ordering::Acquire) {
        tokio::task::yield_now().await;
    }
    assert!(
        cache.unknown_kid_refetch_due(&source, Instant::now()),
        "a fetch under way is waited for"
    );
    drop(holding);
    while let Some(done) = waiting.join_next().await {
        done.unwrap();
    }
    assert_eq!(provider.reads(), 2, "one start-up read, one refetch");
    assert!(cache.keys_for(&source).unwrap().by_kid("two").is_some());
}

#[tokio::test]
async fn the_last_good_set_is_kept_while_the_provider_fails() {
    let provider = Provider::start(vec![public_jwk(
        RS256_PRIVATE,
        Algorithm::RS256,
        "one",
        true,
    )])
    .await;
    let (cache, health) = cache();
    let source = KeySource::Jwks {
        url: format!("{}/keys", provider.base),
    };
    cache.refresh_if_due(&source).await;
    provider.state.status.store(503, Ordering::SeqCst);
    cache.refetch_for_unknown_kid(&source, "two").await;
    assert_eq!(provider.reads(), 2);
    let set = cache.keys_for(&source).expect("kept");
    assert!(set.by_kid("one").is_some());
    assert_eq!(identity_report(&health).last_call_succeeded, Some(false));
    // A set without a usable key is a failure too, not an empty set.
    provider.state.status.store(200, Ordering::SeqCst);
    *provider.state.keys.lock().unwrap() = vec![json!({"kty": "oct", "kid": "s", "k": "c2VjcmV0"})];
    cache.schedule(|schedule| schedule.refresh_at = Some(Instant::now()));
    cache.refresh_if_due(&source).await;
    assert!(cache.keys_for(&source).unwrap().by_kid("one").is_some());
    assert!(
        identity_report(&health)
            .last_error
            .unwrap()
            .contains("holds no key")
    );
}
