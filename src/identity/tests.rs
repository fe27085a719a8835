//! The identity resolver: trusted proxies, aliases, and bearer tokens.

use std::net::IpAddr;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use secrecy::SecretString;

use super::*;
use crate::config::{IdentitySettings, JwtSettings};

const RS256_PRIVATE: &str = include_str!("../../tests/fixtures/jwt_rs256_private.pem");
const RS256_PUBLIC: &str = include_str!("../../tests/fixtures/jwt_rs256_public.pem");

fn settings() -> IdentitySettings {
    IdentitySettings {
        trusted_proxies: vec![
            "127.0.0.0/8".parse().unwrap(),
            "10.0.0.0/8".parse().unwrap(),
        ],
        user_header: HeaderName::from_static("x-auth-request-user"),
        email_header: HeaderName::from_static("x-auth-request-email"),
        employee_id_header: HeaderName::from_static("x-auth-request-employee-id"),
        canonical_email_domain: Some("example.com".to_owned()),
        aliases: [
            ("e1001".to_owned(), "alice".to_owned()),
            ("al@other.org".to_owned(), "alice".to_owned()),
        ]
        .into(),
        jwt: JwtSettings {
            hs256_secret: Some(SecretString::from(
                "test-secret-with-enough-bytes".to_owned(),
            )),
            rs256_public_key: Some(RS256_PUBLIC.to_owned()),
            issuer: Some("https://sso.example.com".to_owned()),
            leeway: std::time::Duration::from_secs(5),
            ..JwtSettings::default()
        },
    }
}

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.insert(*name, HeaderValue::from_str(value).unwrap());
    }
    map
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn token(alg: Algorithm, key: &EncodingKey, sub: &str, exp_offset: i64, issuer: &str) -> String {
    let exp = chrono::Utc::now().timestamp() + exp_offset;
    let claims = serde_json::json!({ "sub": sub, "exp": exp, "iss": issuer });
    encode(&Header::new(alg), &claims, key).unwrap()
}

#[test]
fn email_accounts_and_employee_ids_resolve_to_one_identity() {
    let s = settings();
    let peer = ip("127.0.0.1");
    for pairs in [
        vec![("x-auth-request-user", "alice")],
        vec![("x-auth-request-email", "Alice@Example.com")],
        vec![("x-auth-request-employee-id", "E1001")],
        vec![("x-auth-request-email", "al@other.org")],
    ] {
        assert_eq!(
            resolve(&s, ProviderKeys::default(), &headers(&pairs), peer)
                .unwrap()
                .as_str(),
            "alice",
            "{pairs:?}"
        );
    }
    let other = resolve(
        &s,
        ProviderKeys::default(),
        &headers(&[("x-auth-request-email", "Bob@Other.org")]),
        peer,
    )
    .unwrap();
    assert_eq!(other.as_str(), "bob@other.org");
    // Token subjects may be any text; they are lower-cased the same way.
    assert_eq!(
        canonical(&s, "ÉVA@Other.org").map(|id| id.to_string()),
        Some("éva@other.org".to_owned())
    );
}

#[test]
fn proxy_headers_count_only_from_trusted_proxies() {
    let s = settings();
    let forged = headers(&[("x-auth-request-user", "admin")]);
    assert_eq!(
        resolve(&s, ProviderKeys::default(), &forged, ip("203.0.113.9")),
        Err(IdentityError::Missing)
    );
    assert_eq!(
        resolve(&s, ProviderKeys::default(), &forged, ip("10.1.2.3"))
            .unwrap()
            .as_str(),
        "admin"
    );
    assert_eq!(
        resolve(
            &s,
            ProviderKeys::default(),
            &HeaderMap::new(),
            ip("127.0.0.1")
        ),
        Err(IdentityError::Missing)
    );
}

#[test]
fn unreadable_identities_are_refused() {
    let s = settings();
    let peer = ip("127.0.0.1");
    let mut nul = HeaderMap::new();
    nul.insert(
        "x-auth-request-user",
        HeaderValue::from_bytes(b"al\xffice").unwrap(),
    );
    assert_eq!(
        resolve(&s, ProviderKeys::default(), &nul, peer),
        Err(IdentityError::Unreadable)
    );
    let long = "x".repeat(300);
    assert_eq!(
        resolve(
            &s,
            ProviderKeys::default(),
            &headers(&[("x-auth-request-user", &long)]),
            peer
        ),
        Err(IdentityError::Unreadable)
    );
    assert_eq!(
        resolve(
            &s,
            ProviderKeys::default(),
            &headers(&[("x-auth-request-user", "  ")]),
            peer
        ),
        Err(IdentityError::Unreadable)
    );
}

#[test]
fn bearer_tokens_verify_with_hs256_and_rs256() {
    let s = settings();
    let untrusted = ip("198.51.100.7");
    let issuer = "https://sso.example.com";
    let hs = EncodingKey::from_secret(b"test-secret-with-enough-bytes").unwrap();
    let rs = EncodingKey::from_rsa_pem(RS256_PRIVATE.as_bytes()).unwrap();
    let bearer = |t: String| headers(&[("authorization", &format!("Bearer {t}"))]);

    let ok = resolve(
        &s,
        ProviderKeys::default(),
        &bearer(token(Algorithm::HS256, &hs, "E1001", 60, issuer)),
        untrusted,
    )
    .unwrap();
    assert_eq!(ok.as_str(), "alice");
    let ok = resolve(
        &s,
        ProviderKeys::default(),
        &bearer(token(Algorithm::RS256, &rs, "bob@example.com", 60, issuer)),
        untrusted,
    )
    .unwrap();
    assert_eq!(ok.as_str(), "bob");

    let wrong_key = EncodingKey::from_secret(b"another-secret-entirely-wrong").unwrap();
    for bad in [
        token(Algorithm::HS256, &wrong_key, "alice", 60, issuer),
        token(Algorithm::HS256, &hs, "alice", -3600, issuer),
        token(
            Algorithm::HS256,
            &hs,
            "alice",
            60,
            "https://evil.example.com",
        ),
        "not.a.token".to_owned(),
    ] {
        assert!(matches!(
            resolve(&s, ProviderKeys::default(), &bearer(bad), untrusted),
            Err(IdentityError::InvalidToken(_))
        ));
    }
    let basic = headers(&[("authorization", "Basic YWxpY2U6cHc=")]);
    assert!(matches!(
        resolve(&s, ProviderKeys::default(), &basic, untrusted),
        Err(IdentityError::InvalidToken(_))
    ));
}

#[test]
fn tokens_are_refused_when_no_key_is_configured() {
    let mut s = settings();
    s.jwt = JwtSettings::default();
    let hs = EncodingKey::from_secret(b"test-secret-with-enough-bytes").unwrap();
    let t = token(Algorithm::HS256, &hs, "alice", 60, "x");
    let bearer = headers(&[("authorization", &format!("Bearer {t}"))]);
    assert!(matches!(
        resolve(&s, ProviderKeys::default(), &bearer, ip("127.0.0.1")),
        Err(IdentityError::InvalidToken(_))
    ));
}

#[test]
fn a_configured_issuer_and_audience_are_required_and_times_checked_with_the_leeway() {
    let mut s = settings();
    s.jwt.audience = vec!["changegate".to_owned()];
    let hs = EncodingKey::from_secret(b"test-secret-with-enough-bytes").unwrap();
    let now = chrono::Utc::now().timestamp();
    let signed = |claims: serde_json::Value| {
        let t = encode(&Header::new(Algorithm::HS256), &claims, &hs).unwrap();
        headers(&[("authorization", &format!("Bearer {t}"))])
    };
    let iss = "https://sso.example.com";
    let accepted = |claims: serde_json::Value| {
        resolve(
            &s,
            ProviderKeys::default(),
            &signed(claims),
            ip("198.51.100.7"),
        )
        .is_ok()
    };

    assert!(accepted(
        serde_json::json!({ "sub": "alice", "exp": now + 60, "iss": iss, "aud": "changegate" })
    ));
    // Within the 5 s leeway: a clock a little ahead or behind is forgiven.
    assert!(accepted(
        serde_json::json!({ "sub": "alice", "exp": now - 2, "iss": iss, "aud": "changegate" })
    ));
    assert!(accepted(
        serde_json::json!({ "sub": "alice", "exp": now + 60, "nbf": now + 2, "iss": iss, "aud": "changegate" })
    ));
    for (case, claims) in [
        (
            "no iss",
            serde_json::json!({ "sub": "alice", "exp": now + 60, "aud": "changegate" }),
        ),
        (
            "no aud",
            serde_json::json!({ "sub": "alice", "exp": now + 60, "iss": iss }),
        ),
        (
            "another aud",
            serde_json::json!({ "sub": "alice", "exp": now + 60, "iss": iss, "aud": "other" }),
        ),
        (
            "no exp",
            serde_json::json!({ "sub": "alice", "iss": iss, "aud": "changegate" }),
        ),
        (
            "expired 30 s ago",
            serde_json::json!({ "sub": "alice", "exp": now - 30, "iss": iss, "aud": "changegate" }),
        ),
        (
            "not valid for 30 s",
            serde_json::json!({ "sub": "alice", "exp": now + 60, "nbf": now + 30, "iss": iss, "aud": "changegate" }),
        ),
    ] {
        assert!(!accepted(claims), "{case} must be refused");
    }
}

const ES256_PRIVATE: &str = include_str!("../../tests/fixtures/jwt_es256_private.pem");
const EDDSA_PRIVATE: &str = include_str!("../../tests/fixtures/jwt_eddsa_private.pem");

/// Settings with a provider configured (its keys come from [`provider_set`]).
fn provider_settings() -> IdentitySettings {
    let mut s = settings();
    s.jwt.hs256_secret = None;
    s.jwt.rs256_public_key = None;
    s.jwt.jwks_url = Some("https://sso.example.com/keys".to_owned());
    s
}

/// The provider's set: an RSA key named for RS256, an EC and an Ed25519 key.
fn provider_set() -> keys::KeySet {
    use super::keys::tests::public_jwk;
    keys::KeySet::from_jwks(
        provider_settings().jwt.key_source().unwrap(),
        &[
            public_jwk(RS256_PRIVATE, Algorithm::RS256, "rsa", true),
            public_jwk(ES256_PRIVATE, Algorithm::ES256, "ec", false),
            public_jwk(EDDSA_PRIVATE, Algorithm::EdDSA, "ed", false),
        ],
    )
}

fn provider(set: &keys::KeySet, refetch_due: bool) -> ProviderKeys<'_> {
    ProviderKeys {
        set: Some(set),
        configured: true,
        refetch_due,
    }
}

fn signed(alg: Algorithm, pem: &str, kid: Option<&str>, claims: serde_json::Value) -> HeaderMap {
    let key = match alg {
        Algorithm::RS256 | Algorithm::PS256 => EncodingKey::from_rsa_pem(pem.as_bytes()),
        Algorithm::ES256 => EncodingKey::from_ec_pem(pem.as_bytes()),
        Algorithm::EdDSA => EncodingKey::from_ed_pem(pem.as_bytes()),
        _ => EncodingKey::from_secret(pem.as_bytes()),
    }
    .unwrap();
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_owned);
    let t = encode(&header, &claims, &key).unwrap();
    headers(&[("authorization", &format!("Bearer {t}"))])
}

fn claims(sub: &str) -> serde_json::Value {
    serde_json::json!({
        "sub": sub,
        "exp": chrono::Utc::now().timestamp() + 60,
        "iss": "https://sso.example.com",
    })
}

#[test]
fn provider_keys_verify_each_algorithm_their_type_allows() {
    let (s, set) = (provider_settings(), provider_set());
    let untrusted = ip("198.51.100.7");
    for (alg, pem, kid) in [
        (Algorithm::RS256, RS256_PRIVATE, Some("rsa")),
        (Algorithm::ES256, ES256_PRIVATE, Some("ec")),
        (Algorithm::EdDSA, EDDSA_PRIVATE, Some("ed")),
        // No `kid`: every key for the algorithm is tried.
        (Algorithm::ES256, ES256_PRIVATE, None),
    ] {
        let who = resolve(
            &s,
            provider(&set, false),
            &signed(alg, pem, kid, claims("alice")),
            untrusted,
        );
        assert_eq!(
            who.map(|id| id.to_string()),
            Ok("alice".to_owned()),
            "{alg:?} {kid:?}"
        );
    }
}

#[test]
fn a_token_whose_algorithm_is_not_its_keys_is_refused() {
    let (s, set) = (provider_settings(), provider_set());
    let untrusted = ip("198.51.100.7");
    let refused = |headers: HeaderMap| {
        matches!(
            resolve(&s, provider(&set, true), &headers, untrusted),
            Err(IdentityError::InvalidToken(_))
        )
    };
    // The RSA key names RS256: PS256 with the very same key is not it.
    assert!(refused(signed(
        Algorithm::PS256,
        RS256_PRIVATE,
        Some("rsa"),
        claims("alice")
    )));
    // The classic forgery: HS256 with the provider's public key as the secret.
    let public_pem = RS256_PUBLIC;
    assert!(refused(signed(
        Algorithm::HS256,
        public_pem,
        Some("rsa"),
        claims("alice")
    )));
    // Even where an HS256 secret is configured, a public key is not it.
    let mut with_secret = provider_settings();
    with_secret.jwt.hs256_secret = Some(SecretString::from(
        "test-secret-with-enough-bytes".to_owned(),
    ));
    let forged = signed(Algorithm::HS256, public_pem, Some("rsa"), claims("alice"));
    assert!(matches!(
        resolve(&with_secret, provider(&set, true), &forged, untrusted),
        Err(IdentityError::InvalidToken(_))
    ));
    // `alg: none`, unsigned.
    let none = format!(
        "Bearer {}.{}.",
        base64::Engine::encode(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
            r#"{"alg":"none","typ":"JWT"}"#
        ),
        base64::Engine::encode(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
            claims("alice").to_string()
        ),
    );
    assert!(refused(headers(&[("authorization", &none)])));
    // The EC key signing as ES256 but a token claiming EdDSA with it.
    assert!(refused(signed(
        Algorithm::EdDSA,
        EDDSA_PRIVATE,
        Some("ec"),
        claims("alice")
    )));
}

#[test]
fn an_unknown_key_asks_for_a_refetch_only_while_one_is_due() {
    let (s, set) = (provider_settings(), provider_set());
    let token = signed(
        Algorithm::ES256,
        ES256_PRIVATE,
        Some("rotated"),
        claims("alice"),
    );
    let untrusted = ip("198.51.100.7");
    assert_eq!(
        resolve(&s, provider(&set, true), &token, untrusted),
        Err(IdentityError::UnknownKey("rotated".to_owned()))
    );
    assert!(matches!(
        resolve(&s, provider(&set, false), &token, untrusted),
        Err(IdentityError::InvalidToken(_))
    ));
    // Before the first read, every key is unknown.
    let first = ProviderKeys {
        set: None,
        configured: true,
        refetch_due: true,
    };
    assert!(matches!(
        resolve(&s, first, &token, untrusted),
        Err(IdentityError::UnknownKey(_))
    ));
    // Static keys only: a `kid` means nothing, and nothing is refetched.
    assert!(matches!(
        resolve(&settings(), ProviderKeys::default(), &token, untrusted),
        Err(IdentityError::InvalidToken(_))
    ));
}

#[test]
fn the_username_claim_prefix_and_groups_name_the_caller() {
    let set = provider_set();
    let mut s = provider_settings();
    s.jwt.username_claim = Some("preferred_username".to_owned());
    s.jwt.username_prefix = "oidc:".to_owned();
    s.jwt.groups_claim = Some("groups".to_owned());
    s.jwt.audience = vec!["changegate".to_owned(), "api".to_owned()];
    let mut token_claims = claims("0b5c-uuid");
    token_claims["preferred_username"] = serde_json::json!("Alice@Example.com");
    token_claims["groups"] = serde_json::json!(["platform-admins", "dev", 3, "dev", ""]);
    token_claims["aud"] = serde_json::json!(["other", "api"]);
    let who = resolve(
        &s,
        provider(&set, false),
        &signed(
            Algorithm::EdDSA,
            EDDSA_PRIVATE,
            Some("ed"),
            token_claims.clone(),
        ),
        ip("198.51.100.7"),
    )
    .unwrap();
    assert_eq!(
        who.as_str(),
        "oidc:alice",
        "canonical form, then the prefix"
    );
    assert_eq!(who.groups(), ["dev", "platform-admins"]);
    assert!(who.in_group("platform-admins") && !who.in_group("platform"));

    // Groups as one string, commas between; a token without the username
    // claim names nobody.
    token_claims["groups"] = serde_json::json!("ops, oncall");
    token_claims
        .as_object_mut()
        .unwrap()
        .remove("preferred_username");
    assert!(matches!(
        resolve(
            &s,
            provider(&set, false),
            &signed(Algorithm::EdDSA, EDDSA_PRIVATE, Some("ed"), token_claims.clone()),
            ip("198.51.100.7"),
        ),
        Err(IdentityError::InvalidToken(why)) if why.contains("preferred_username")
    ));
    token_claims["preferred_username"] = serde_json::json!("bob");
    let who = resolve(
        &s,
        provider(&set, false),
        &signed(Algorithm::EdDSA, EDDSA_PRIVATE, Some("ed"), token_claims),
        ip("198.51.100.7"),
    )
    .unwrap();
    assert_eq!(who.groups(), ["oncall", "ops"]);
}

#[test]
fn behind_a_trusted_proxy_a_verified_token_must_name_the_headers_person() {
    let set = provider_set();
    let mut s = provider_settings();
    s.jwt.groups_claim = Some("groups".to_owned());
    let proxy = ip("10.0.0.5");
    let mut alice = claims("alice@example.com");
    alice["groups"] = serde_json::json!(["platform-admins"]);
    let with_headers = |token: HeaderMap, pairs: &[(&'static str, &str)]| {
        let mut all = headers(pairs);
        all.extend(token);
        all
    };
    let token = signed(Algorithm::ES256, ES256_PRIVATE, Some("ec"), alice);

    let agreed = with_headers(
        token.clone(),
        &[("x-auth-request-email", "Alice@example.com")],
    );
    let who = resolve(&s, provider(&set, false), &agreed, proxy).unwrap();
    assert_eq!(
        (who.as_str(), who.groups()),
        ("alice", &["platform-admins".to_owned()][..])
    );

    let disagreeing = with_headers(token.clone(), &[("x-auth-request-user", "bob")]);
    assert_eq!(
        resolve(&s, provider(&set, false), &disagreeing, proxy),
        Err(IdentityError::Disagree)
    );

    // A token that does not verify: refused by default, or ignored.
    let expired = {
        let mut c = claims("alice");
        c["exp"] = serde_json::json!(chrono::Utc::now().timestamp() - 3600);
        signed(Algorithm::ES256, ES256_PRIVATE, Some("ec"), c)
    };
    let stale = with_headers(expired, &[("x-auth-request-user", "bob")]);
    assert!(matches!(
        resolve(&s, provider(&set, false), &stale, proxy),
        Err(IdentityError::InvalidToken(_))
    ));
    s.jwt.unverifiable_from_trusted_proxy = crate::config::Unverifiable::Ignore;
    let who = resolve(&s, provider(&set, false), &stale, proxy).unwrap();
    assert_eq!((who.as_str(), who.groups()), ("bob", &[][..]));
    // Ignored only from a trusted proxy: elsewhere the headers count for nothing.
    assert!(matches!(
        resolve(&s, provider(&set, false), &stale, ip("198.51.100.7")),
        Err(IdentityError::InvalidToken(_))
    ));
    // A key still to be read is read first, whatever the setting.
    let rotated = with_headers(
        signed(
            Algorithm::ES256,
            ES256_PRIVATE,
            Some("rotated"),
            claims("bob"),
        ),
        &[("x-auth-request-user", "bob")],
    );
    assert!(matches!(
        resolve(&s, provider(&set, true), &rotated, proxy),
        Err(IdentityError::UnknownKey(_))
    ));
}
