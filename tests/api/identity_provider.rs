//! Bearer tokens from an identity provider on loopback that serves OIDC
//! discovery and a JWKS, and signs tokens: accepted through discovery, a
//! rotated key followed without a restart, the last good keys kept while
//! the provider is down, every kind of bad token refused, groups granting
//! operator rights, and the oauth2-proxy agreement rule.
//! (`identity_oidc` runs the same against a real provider.)

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::State;
use axum::routing::get;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::helpers::{TestApp, TestDb, spawn_app, sqlite_db};

const RS256_PRIVATE: &str = include_str!("../fixtures/jwt_rs256_private.pem");
const RS256_PUBLIC: &str = include_str!("../fixtures/jwt_rs256_public.pem");
const ES256_PRIVATE: &str = include_str!("../fixtures/jwt_es256_private.pem");

/// A signing key of the fake provider.
struct SigningKey {
    kid: &'static str,
    alg: Algorithm,
    key: EncodingKey,
}

impl SigningKey {
    fn rsa(kid: &'static str) -> Self {
        Self {
            kid,
            alg: Algorithm::RS256,
            key: EncodingKey::from_rsa_pem(RS256_PRIVATE.as_bytes()).unwrap(),
        }
    }

    fn ec(kid: &'static str) -> Self {
        Self {
            kid,
            alg: Algorithm::ES256,
            key: EncodingKey::from_ec_pem(ES256_PRIVATE.as_bytes()).unwrap(),
        }
    }

    fn jwk(&self) -> Value {
        let mut jwk =
            serde_json::to_value(Jwk::from_encoding_key(&self.key, self.alg).unwrap()).unwrap();
        jwk["kid"] = json!(self.kid);
        jwk["use"] = json!("sig");
        jwk
    }

    fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(self.alg);
        header.kid = Some(self.kid.to_owned());
        encode(&header, claims, &self.key).unwrap()
    }
}

/// The provider: discovery at `<issuer>/.well-known/openid-configuration`,
/// its JWKS at `<issuer>/jwks`, reads counted; stopped by cancelling.
struct Provider {
    issuer: String,
    published: Arc<Mutex<Vec<Value>>>,
    jwks_reads: Arc<AtomicUsize>,
    stop: CancellationToken,
}

#[derive(Clone)]
struct Served {
    issuer: String,
    published: Arc<Mutex<Vec<Value>>>,
    jwks_reads: Arc<AtomicUsize>,
}

impl Provider {
    async fn start(keys: &[&SigningKey]) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let issuer = format!("http://{}/realms/test", listener.local_addr().unwrap());
        let served = Served {
            issuer: issuer.clone(),
            published: Arc::new(Mutex::new(keys.iter().map(|key| key.jwk()).collect())),
            jwks_reads: Arc::new(AtomicUsize::new(0)),
        };
        let routes = axum::Router::new()
            .route(
                "/realms/test/.well-known/openid-configuration",
                get(|State(served): State<Served>| async move {
                    Json(json!({
                        "issuer": served.issuer,
                        "jwks_uri": format!("{}/jwks", served.issuer),
                    }))
                }),
            )
            .route(
                "/realms/test/jwks",
                get(|State(served): State<Served>| async move {
                    served.jwks_reads.fetch_add(1, Ordering::SeqCst);
                    let keys = served.published.lock().unwrap().clone();
                    Json(json!({ "keys": keys }))
                }),
            )
            .with_state(served.clone());
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        tokio::spawn(async move {
            axum::serve(listener, routes)
                .with_graceful_shutdown(stopped.cancelled_owned())
                .await
        });
        Self {
            issuer,
            published: served.published,
            jwks_reads: served.jwks_reads,
            stop,
        }
    }

    fn publish(&self, key: &SigningKey) {
        self.published.lock().unwrap().push(key.jwk());
    }

    fn reads(&self) -> usize {
        self.jwks_reads.load(Ordering::SeqCst)
    }

    fn claims(&self, user: &str, groups: &[&str]) -> Value {
        json!({
            "iss": self.issuer,
            "aud": ["account", "changegate"],
            "sub": format!("uuid-of-{user}"),
            "preferred_username": user,
            "groups": groups,
            "exp": chrono::Utc::now().timestamp() + 300,
        })
    }
}

const STATIC_GRANTS: &str = r#"
[authz.grants]
"changegate.requester" = ["*"]
"changegate.operator" = ["group:platform-admins"]
"#;

/// The service, and its database (kept for as long as the service runs).
async fn service(provider: &Provider) -> (TestApp, TestDb) {
    service_with(provider, STATIC_GRANTS).await
}

async fn service_with(provider: &Provider, authz: &str) -> (TestApp, TestDb) {
    let db = sqlite_db().await;
    let app = spawn_app(
        &db.url,
        &format!(
            r#"
[identity.jwt]
discovery = true
issuer = "{issuer}"
audience = "changegate"
username_claim = "preferred_username"
groups_claim = "groups"
[access]
mode = "OPEN"
[authz.rules]
read = ["changegate.requester"]
operator = ["changegate.operator"]
{authz}"#,
            issuer = provider.issuer
        ),
    )
    .await;
    app.wait_until_ready().await;
    (app, db)
}

async fn status(app: &TestApp, path: &str, token: &str, headers: &[(&str, &str)]) -> u16 {
    let mut request = app
        .client
        .get(format!("{}{path}", app.address))
        .bearer_auth(token);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap().status().as_u16()
}

const MINE: &str = "/api/v1/me/bindings";
const OPERATORS_ONLY: &str = "/admin/v1/health/dependencies";

#[tokio::test]
async fn tokens_verify_through_discovery_and_a_rotated_key_is_followed_without_a_restart() {
    let first = SigningKey::rsa("rsa-1");
    let provider = Provider::start(&[&first]).await;
    let (app, _db) = service(&provider).await;

    let alice = provider.claims("alice", &["platform-admins"]);
    let bob = provider.claims("bob", &["developers"]);
    assert_eq!(status(&app, MINE, &first.sign(&alice), &[]).await, 200);
    assert_eq!(
        status(&app, OPERATORS_ONLY, &first.sign(&alice), &[]).await,
        200
    );
    assert_eq!(status(&app, MINE, &first.sign(&bob), &[]).await, 200);
    assert_eq!(
        status(&app, OPERATORS_ONLY, &first.sign(&bob), &[]).await,
        403,
        "not in the operators' group"
    );

    // The provider rotates: the new key is published and signs from now on.
    let second = SigningKey::ec("ec-2");
    provider.publish(&second);
    let reads_before = provider.reads();
    assert_eq!(status(&app, MINE, &second.sign(&alice), &[]).await, 200);
    assert_eq!(
        provider.reads(),
        reads_before + 1,
        "one refetch for the new key"
    );
    assert_eq!(
        status(&app, MINE, &first.sign(&alice), &[]).await,
        200,
        "old tokens until they expire"
    );
    // A key nobody publishes: refused, and no second refetch within 30 s.
    let forged = SigningKey::ec("never-published");
    assert_eq!(status(&app, MINE, &forged.sign(&alice), &[]).await, 401);
    assert_eq!(status(&app, MINE, &forged.sign(&alice), &[]).await, 401);
    assert_eq!(provider.reads(), reads_before + 1);
}

#[tokio::test]
async fn while_the_provider_is_down_its_last_keys_keep_working_and_the_report_says_so() {
    let key = SigningKey::rsa("rsa-1");
    let provider = Provider::start(&[&key]).await;
    let (app, _db) = service(&provider).await;
    let alice = provider.claims("alice", &["platform-admins"]);
    assert_eq!(status(&app, MINE, &key.sign(&alice), &[]).await, 200);

    provider.stop.cancel();
    // A token with a key the set lacks makes changegate read the set again,
    // which fails: the last good keys stay in use.
    let unknown = SigningKey::ec("ec-2");
    assert_eq!(status(&app, MINE, &unknown.sign(&alice), &[]).await, 401);
    assert_eq!(status(&app, MINE, &key.sign(&alice), &[]).await, 200);
    let report: Value = app
        .client
        .get(format!("{}{OPERATORS_ONLY}", app.address))
        .bearer_auth(key.sign(&alice))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let identity = report["dependencies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|system| system["system"] == "identity")
        .unwrap()
        .clone();
    assert_eq!(identity["lastCallSucceeded"], false, "{identity}");
    assert!(identity["lastSuccessAt"].is_string(), "{identity}");
    let metrics = app
        .client
        .get(format!("{}/metrics", app.address))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.lines().any(
            |line| line.starts_with("changegate_outbound_failures_total{")
                && line.contains("system=\"identity\"")
        ),
        "{metrics}"
    );
}

#[tokio::test]
async fn bad_tokens_are_refused() {
    let key = SigningKey::rsa("rsa-1");
    let provider = Provider::start(&[&key]).await;
    let (app, _db) = service(&provider).await;
    let good = provider.claims("alice", &[]);
    assert_eq!(status(&app, MINE, &key.sign(&good), &[]).await, 200);

    let mut wrong_audience = good.clone();
    wrong_audience["aud"] = json!("another-service");
    let mut wrong_issuer = good.clone();
    wrong_issuer["iss"] = json!(format!("{}/", provider.issuer));
    let mut expired = good.clone();
    expired["exp"] = json!(chrono::Utc::now().timestamp() - 600);
    let b64 = |text: &str| {
        base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, text)
    };
    let unsigned = format!(
        "{}.{}.",
        b64(r#"{"alg":"none","typ":"JWT","kid":"rsa-1"}"#),
        b64(&good.to_string())
    );
    let mut hmac_header = Header::new(Algorithm::HS256);
    hmac_header.kid = Some("rsa-1".to_owned());
    let public_key_as_secret = encode(
        &hmac_header,
        &good,
        &EncodingKey::from_secret(RS256_PUBLIC.as_bytes()).unwrap(),
    )
    .unwrap();
    for (case, token) in [
        ("a wrong audience", key.sign(&wrong_audience)),
        ("a wrong issuer", key.sign(&wrong_issuer)),
        ("an expired token", key.sign(&expired)),
        ("alg: none", unsigned),
        (
            "HS256 with the RSA public key as secret",
            public_key_as_secret,
        ),
    ] {
        assert_eq!(status(&app, MINE, &token, &[]).await, 401, "{case}");
    }
}

#[tokio::test]
async fn behind_oauth2_proxy_the_token_and_the_headers_must_name_one_person() {
    let key = SigningKey::rsa("rsa-1");
    let provider = Provider::start(&[&key]).await;
    let (app, _db) = service(&provider).await;
    let alice = key.sign(&provider.claims("alice", &["platform-admins"]));
    // The test client is on loopback, a trusted proxy by default.
    let agreeing = [
        ("x-auth-request-user", "alice"),
        ("x-auth-request-email", "alice@example.com"),
    ];
    assert_eq!(status(&app, OPERATORS_ONLY, &alice, &agreeing).await, 200);
    let disagreeing = [("x-auth-request-user", "mallory")];
    assert_eq!(status(&app, MINE, &alice, &disagreeing).await, 401);
}

#[tokio::test]
async fn the_permission_service_hears_the_tokens_groups() {
    let key = SigningKey::rsa("rsa-1");
    let provider = Provider::start(&[&key]).await;
    let asked = Arc::new(Mutex::new(Vec::<Value>::new()));
    let heard = asked.clone();
    let grants = move |Json(body): Json<Value>| {
        let heard = heard.clone();
        async move {
            let operator = body["groups"]
                .as_array()
                .is_some_and(|groups| groups.contains(&json!("platform-admins")));
            heard.lock().unwrap().push(body);
            let mut granted = vec!["changegate.requester"];
            if operator {
                granted.push("changegate.operator");
            }
            Json(json!({ "granted": granted }))
        }
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/check", listener.local_addr().unwrap());
    let routes = axum::Router::new().route("/check", axum::routing::post(grants));
    tokio::spawn(async move { axum::serve(listener, routes).await });
    let (app, _db) = service_with(
        &provider,
        &format!("[authz]\nprovider = \"http\"\nurl = \"{url}\"\ntimeout = \"5s\"\n"),
    )
    .await;

    let alice = key.sign(&provider.claims("alice", &["platform-admins", "developers"]));
    let bob = key.sign(&provider.claims("bob", &[]));
    assert_eq!(status(&app, OPERATORS_ONLY, &alice, &[]).await, 200);
    assert_eq!(status(&app, OPERATORS_ONLY, &bob, &[]).await, 403);
    let asked = asked.lock().unwrap();
    assert_eq!(asked[0]["identity"], "alice");
    assert_eq!(asked[0]["groups"], json!(["developers", "platform-admins"]));
    assert_eq!(asked[1]["groups"], json!([]));
}
