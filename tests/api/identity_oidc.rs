//! changegate against a real OIDC provider, Debian's `glewlwyd`, stood up
//! by `.ci/oidc.sh` (through `.ci/glewlwyd.sh`), which names its state
//! directory in `CHANGEGATE_TEST_OIDC_DIR`. Without it this test is
//! skipped, unless `CHANGEGATE_TEST_REQUIRE_OIDC` says it must run.
//!
//! One test, in order, since the provider is one: tokens accepted through
//! discovery, groups granting operator rights, the oauth2-proxy rule,
//! refused tokens, a key rotation followed without a restart, and the
//! provider stopped while cached keys keep working.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use serde_json::{Value, json};

use crate::helpers::{TestApp, TestDb, spawn_app, sqlite_db};

const DIR_VAR: &str = "CHANGEGATE_TEST_OIDC_DIR";
const REQUIRE_VAR: &str = "CHANGEGATE_TEST_REQUIRE_OIDC";
const MINE: &str = "/api/v1/me/bindings";
const OPERATORS_ONLY: &str = "/admin/v1/health/dependencies";

/// The provider `.ci/glewlwyd.sh` started, driven through it.
struct Glewlwyd {
    dir: PathBuf,
    env: HashMap<String, String>,
}

impl Glewlwyd {
    fn configured() -> Option<Self> {
        let Some(dir) = std::env::var_os(DIR_VAR) else {
            assert!(
                std::env::var_os(REQUIRE_VAR).is_none(),
                "{REQUIRE_VAR} is set but {DIR_VAR} is not: the OIDC tests cannot run"
            );
            eprintln!("skipped: {DIR_VAR} is not set (run .ci/oidc.sh)");
            return None;
        };
        let dir = PathBuf::from(dir);
        let text = std::fs::read_to_string(dir.join("env")).expect("the provider's env file");
        let env = text
            .lines()
            .filter_map(|line| line.split_once('='))
            .map(|(key, value)| {
                (
                    key.trim().to_owned(),
                    value.trim().trim_matches('"').to_owned(),
                )
            })
            .collect();
        Some(Self { dir, env })
    }

    fn var(&self, key: &str) -> &str {
        self.env
            .get(key)
            .unwrap_or_else(|| panic!("{key} in the provider's env file"))
    }

    fn script(&self, args: &[&str]) -> String {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/glewlwyd.sh");
        let output = Command::new("bash")
            .arg(script)
            .args(args)
            .output()
            .expect("run .ci/glewlwyd.sh");
        assert!(
            output.status.success(),
            "glewlwyd.sh {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap().trim().to_owned()
    }

    fn dir(&self) -> &str {
        self.dir.to_str().unwrap()
    }

    /// A token from the password grant.
    fn token(&self, user: &str, password: &str) -> String {
        self.script(&["token", self.dir(), user, password])
    }

    fn header_of(token: &str) -> Value {
        let header = jsonwebtoken::decode_header(token).unwrap();
        json!({ "kid": header.kid, "alg": format!("{:?}", header.alg) })
    }

    fn claims_of(token: &str) -> Value {
        let payload = token.split('.').nth(1).unwrap();
        let bytes =
            base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, payload)
                .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }
}

async fn service(provider: &Glewlwyd, jwt: &str) -> (TestApp, TestDb) {
    let db = sqlite_db().await;
    let app = spawn_app(
        &db.url,
        &format!(
            r#"
[identity.jwt]
{jwt}
username_claim = "{username}"
groups_claim = "{groups}"
[access]
mode = "OPEN"
[authz.rules]
read = ["changegate.requester"]
operator = ["changegate.operator"]
[authz.grants]
"changegate.requester" = ["*"]
"changegate.operator" = ["group:platform-admins"]
"#,
            username = provider.var("OIDC_USERNAME_CLAIM"),
            groups = provider.var("OIDC_GROUPS_CLAIM"),
        ),
    )
    .await;
    app.wait_until_ready().await;
    (app, db)
}

fn discovery(provider: &Glewlwyd) -> String {
    format!(
        "discovery = true\nissuer = {:?}\naudience = {:?}\n",
        provider.var("OIDC_ISSUER"),
        provider.var("OIDC_AUDIENCE")
    )
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

async fn identity_report(app: &TestApp, token: &str) -> Value {
    let report: Value = app
        .client
        .get(format!("{}{OPERATORS_ONLY}", app.address))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    report["dependencies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|system| system["system"] == "identity")
        .unwrap()
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn against_glewlwyd_tokens_rotation_outage_refusals_groups_and_the_proxy_rule() {
    let Some(provider) = Glewlwyd::configured() else {
        return;
    };
    let (app, _db) = service(&provider, &discovery(&provider)).await;

    // 1. Through discovery; 5. groups from a claim grant operator rights.
    let alice = provider.token("alice", "alice-password");
    let bob = provider.token("bob", "bob-password");
    assert_eq!(Glewlwyd::header_of(&alice)["alg"], "RS256");
    assert_eq!(
        status(&app, MINE, &alice, &[]).await,
        200,
        "{}",
        Glewlwyd::claims_of(&alice)
    );
    assert_eq!(status(&app, OPERATORS_ONLY, &alice, &[]).await, 200);
    assert_eq!(status(&app, MINE, &bob, &[]).await, 200);
    assert_eq!(
        status(&app, OPERATORS_ONLY, &bob, &[]).await,
        403,
        "bob is in no operators' group"
    );

    // 6. oauth2-proxy: headers and a token that agree, and that do not.
    assert_eq!(
        status(
            &app,
            OPERATORS_ONLY,
            &alice,
            &[("x-auth-request-user", "alice")]
        )
        .await,
        200
    );
    assert_eq!(
        status(&app, MINE, &alice, &[("x-auth-request-user", "bob")]).await,
        401
    );

    // 4. Refused: a wrong audience or issuer (changegate configured for
    // others), an expired token, `alg: none`, HS256 with the RSA public key.
    let (other_audience, _db2) = service(
        &provider,
        &format!(
            "discovery = true\nissuer = {:?}\naudience = \"another-service\"\n",
            provider.var("OIDC_ISSUER")
        ),
    )
    .await;
    assert_eq!(
        status(&other_audience, MINE, &alice, &[]).await,
        401,
        "wrong audience"
    );
    let (other_issuer, _db3) = service(
        &provider,
        &format!(
            "jwks_url = {:?}\nissuer = \"{}/other\"\n",
            provider.var("OIDC_JWKS_URL"),
            provider.var("OIDC_ISSUER")
        ),
    )
    .await;
    assert_eq!(
        status(&other_issuer, MINE, &alice, &[]).await,
        401,
        "wrong issuer"
    );
    let claims = Glewlwyd::claims_of(&alice);
    let kid = Glewlwyd::header_of(&alice)["kid"]
        .as_str()
        .unwrap()
        .to_owned();
    let private =
        std::fs::read(provider.dir.join("rsa-private.pem")).expect("the provider's RSA key");
    let mut expired = claims.clone();
    expired["exp"] = json!(chrono::Utc::now().timestamp() - 600);
    let mut rsa_header = Header::new(Algorithm::RS256);
    rsa_header.kid = Some(kid.clone());
    let expired = encode(
        &rsa_header,
        &expired,
        &EncodingKey::from_rsa_pem(&private).unwrap(),
    )
    .unwrap();
    let b64 = |text: &str| {
        base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, text)
    };
    let unsigned = format!(
        "{}.{}.",
        b64(&json!({"alg": "none", "typ": "JWT", "kid": kid}).to_string()),
        b64(&claims.to_string())
    );
    let public =
        std::fs::read(provider.dir.join("rsa-public.pem")).expect("the provider's public key");
    let mut hmac_header = Header::new(Algorithm::HS256);
    hmac_header.kid = Some(kid.clone());
    let hmac = encode(
        &hmac_header,
        &claims,
        &EncodingKey::from_secret(&public).unwrap(),
    )
    .unwrap();
    for (case, token) in [
        ("expired", expired),
        ("alg: none", unsigned),
        ("HS256 with the public key", hmac),
    ] {
        assert_eq!(status(&app, MINE, &token, &[]).await, 401, "{case}");
    }

    // 2. The provider rotates to a new key: new tokens are accepted without
    // a restart, and the old ones until they expire.
    provider.script(&["rotate", provider.dir()]);
    let rotated = provider.token("alice", "alice-password");
    let header = Glewlwyd::header_of(&rotated);
    assert_ne!(
        header["kid"],
        json!(kid),
        "signed with the new key: {header}"
    );
    assert_eq!(
        status(&app, MINE, &rotated, &[]).await,
        200,
        "the new key, {header}"
    );
    assert_eq!(status(&app, MINE, &alice, &[]).await, 200, "the old key");

    // 3. The provider stops: cached keys keep working, and the report says
    // the provider cannot be read (a fresh instance, whose refetch for an
    // unknown key is not used up by the rotation).
    let (fresh, _db4) = service(&provider, &discovery(&provider)).await;
    assert_eq!(status(&fresh, MINE, &rotated, &[]).await, 200);
    provider.script(&["stop", provider.dir()]);
    assert_eq!(
        status(&fresh, MINE, &token_with_unknown_kid(&claims), &[]).await,
        401
    );
    assert_eq!(
        status(&fresh, MINE, &rotated, &[]).await,
        200,
        "the cached keys"
    );
    assert_eq!(
        status(&fresh, MINE, &alice, &[]).await,
        200,
        "the cached keys"
    );
    let identity = identity_report(&fresh, &rotated).await;
    assert_eq!(identity["lastCallSucceeded"], false, "{identity}");
    provider.script(&["restart", provider.dir()]);
}

/// A token naming a key the provider never published (signed with the test
/// fixture), which makes changegate read the provider's keys again.
fn token_with_unknown_kid(claims: &Value) -> String {
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some("never-published".to_owned());
    let key =
        EncodingKey::from_ec_pem(include_bytes!("../fixtures/jwt_es256_private.pem")).unwrap();
    encode(&header, claims, &key).unwrap()
}
