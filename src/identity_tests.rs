//! The identity resolver: trusted proxies, aliases, and bearer tokens.

use std::net::IpAddr;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use jsonwebtoken::{EncodingKey, Header, encode};
use secrecy::SecretString;

use super::*;
use crate::config::{IdentitySettings, JwtSettings};

const RS256_PRIVATE: &str = include_str!("../tests/fixtures/jwt_rs256_private.pem");
const RS256_PUBLIC: &str = include_str!("../tests/fixtures/jwt_rs256_public.pem");

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
            audience: None,
            leeway: std::time::Duration::from_secs(5),
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
            resolve(&s, &headers(&pairs), peer).unwrap().as_str(),
            "alice",
            "{pairs:?}"
        );
    }
    let other = resolve(
        &s,
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
        resolve(&s, &forged, ip("203.0.113.9")),
        Err(IdentityError::Missing)
    );
    assert_eq!(
        resolve(&s, &forged, ip("10.1.2.3")).unwrap().as_str(),
        "admin"
    );
    assert_eq!(
        resolve(&s, &HeaderMap::new(), ip("127.0.0.1")),
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
    assert_eq!(resolve(&s, &nul, peer), Err(IdentityError::Unreadable));
    let long = "x".repeat(300);
    assert_eq!(
        resolve(&s, &headers(&[("x-auth-request-user", &long)]), peer),
        Err(IdentityError::Unreadable)
    );
    assert_eq!(
        resolve(&s, &headers(&[("x-auth-request-user", "  ")]), peer),
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
        &bearer(token(Algorithm::HS256, &hs, "E1001", 60, issuer)),
        untrusted,
    )
    .unwrap();
    assert_eq!(ok.as_str(), "alice");
    let ok = resolve(
        &s,
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
            resolve(&s, &bearer(bad), untrusted),
            Err(IdentityError::InvalidToken(_))
        ));
    }
    let basic = headers(&[("authorization", "Basic YWxpY2U6cHc=")]);
    assert!(matches!(
        resolve(&s, &basic, untrusted),
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
        resolve(&s, &bearer, ip("127.0.0.1")),
        Err(IdentityError::InvalidToken(_))
    ));
}

#[test]
fn a_configured_issuer_and_audience_are_required_and_times_checked_with_the_leeway() {
    let mut s = settings();
    s.jwt.audience = Some("changegate".to_owned());
    let hs = EncodingKey::from_secret(b"test-secret-with-enough-bytes").unwrap();
    let now = chrono::Utc::now().timestamp();
    let signed = |claims: serde_json::Value| {
        let t = encode(&Header::new(Algorithm::HS256), &claims, &hs).unwrap();
        headers(&[("authorization", &format!("Bearer {t}"))])
    };
    let iss = "https://sso.example.com";
    let accepted =
        |claims: serde_json::Value| resolve(&s, &signed(claims), ip("198.51.100.7")).is_ok();

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
