//! The one identity resolver: every layer and handler asks it who is calling.
//!
//! Sources, in order: a bearer JWT (HS256 or RS256 with configured keys), then
//! the auth proxy's headers, honoured only when the request comes from a
//! trusted proxy. Email-form accounts and employee ids map to one canonical
//! identity through `[identity.aliases]` and `identity.canonical_email_domain`.

use std::borrow::Cow;
use std::net::IpAddr;

use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode};
use secrecy::ExposeSecret;
use serde::Deserialize;

use crate::config::IdentitySettings;

/// A resolved caller.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Identity(String);

impl Identity {
    /// The canonical name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why no identity could be resolved. Every variant answers 401.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// Neither a token nor trusted proxy headers.
    #[error("no credentials")]
    Missing,
    /// A bearer token that does not verify, or names nobody.
    #[error("invalid bearer token: {0}")]
    InvalidToken(String),
    /// Proxy headers that cannot be read as an identity.
    #[error("unreadable identity header")]
    Unreadable,
}

/// The longest identity accepted; longer values are not names but noise.
const MAX_IDENTITY_LEN: usize = 191;

#[derive(Deserialize)]
struct Claims {
    sub: Option<String>,
    email: Option<String>,
    employee_id: Option<String>,
}

/// Resolves the caller of a request from its headers and the address of the
/// peer that sent it (the socket address, not `X-Forwarded-For`).
pub fn resolve(
    settings: &IdentitySettings,
    headers: &HeaderMap,
    peer: IpAddr,
) -> Result<Identity, IdentityError> {
    if let Some(token) = bearer_token(headers)? {
        let claims = verify_token(settings, token)?;
        let raw = claims.sub.or(claims.email).or(claims.employee_id);
        return raw
            .and_then(|raw| canonical(settings, &raw))
            .ok_or_else(|| IdentityError::InvalidToken("names no subject".to_owned()));
    }
    if !settings
        .trusted_proxies
        .iter()
        .any(|net| net.contains(&peer))
    {
        return Err(IdentityError::Missing);
    }
    let mut present = false;
    for header in [
        &settings.user_header,
        &settings.email_header,
        &settings.employee_id_header,
    ] {
        let Some(value) = headers.get(header) else {
            continue;
        };
        present = true;
        let text = value.to_str().map_err(|_| IdentityError::Unreadable)?;
        if let Some(identity) = canonical(settings, text) {
            return Ok(identity);
        }
    }
    Err(if present {
        IdentityError::Unreadable
    } else {
        IdentityError::Missing
    })
}

fn bearer_token(headers: &HeaderMap) -> Result<Option<&str>, IdentityError> {
    let Some(value) = headers.get(AUTHORIZATION) else {
        return Ok(None);
    };
    let text = value.to_str().map_err(|_| IdentityError::Unreadable)?;
    match text.split_once(' ') {
        Some((scheme, token))
            if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() =>
        {
            Ok(Some(token.trim()))
        }
        _ => Err(IdentityError::InvalidToken(
            "expected \"Bearer <token>\"".to_owned(),
        )),
    }
}

fn verify_token(settings: &IdentitySettings, token: &str) -> Result<Claims, IdentityError> {
    let invalid = |err: jsonwebtoken::errors::Error| IdentityError::InvalidToken(err.to_string());
    let header = jsonwebtoken::decode_header(token).map_err(invalid)?;
    let jwt = &settings.jwt;
    let key = match header.alg {
        Algorithm::HS256 => match &jwt.hs256_secret {
            Some(secret) => {
                Some(DecodingKey::from_secret(secret.expose_secret().as_bytes()).map_err(invalid)?)
            }
            None => None,
        },
        Algorithm::RS256 => match &jwt.rs256_public_key {
            Some(pem) => Some(DecodingKey::from_rsa_pem(pem.as_bytes()).map_err(invalid)?),
            None => None,
        },
        _ => None,
    }
    .ok_or_else(|| {
        IdentityError::InvalidToken(format!("{:?} tokens are not accepted", header.alg))
    })?;
    let mut validation = Validation::new(header.alg);
    // The library checks `iss` and `aud` only when the token carries them,
    // unless they are required: a configured issuer or audience is.
    let mut required = vec!["exp"];
    if let Some(issuer) = &jwt.issuer {
        validation.set_issuer(&[issuer]);
        required.push("iss");
    }
    match &jwt.audience {
        Some(audience) => {
            validation.set_audience(&[audience]);
            required.push("aud");
        }
        None => validation.validate_aud = false,
    }
    validation.set_required_spec_claims(&required);
    validation.validate_nbf = true;
    validation.leeway = jwt.leeway.as_secs();
    decode::<Claims>(token, &key, &validation)
        .map(|data| data.claims)
        .map_err(invalid)
}

/// The canonical identity for a raw account name, email or employee id:
/// an alias if one is configured, else the local part of an email in the
/// canonical domain, else the value itself (emails lower-cased).
pub fn canonical(settings: &IdentitySettings, raw: &str) -> Option<Identity> {
    let raw = raw.trim();
    if raw.is_empty() || raw.len() > MAX_IDENTITY_LEN || raw.chars().any(char::is_control) {
        return None;
    }
    // Most names are lower-case already; only the others are copied.
    let key = if raw.bytes().any(|b| b.is_ascii_uppercase()) || !raw.is_ascii() {
        Cow::Owned(raw.to_lowercase())
    } else {
        Cow::Borrowed(raw)
    };
    if let Some(canonical) = settings.aliases.get(key.as_ref()) {
        return Some(Identity(canonical.clone()));
    }
    if let Some((local, domain)) = key.split_once('@') {
        if settings.canonical_email_domain.as_deref() == Some(domain) && !local.is_empty() {
            return Some(Identity(local.to_owned()));
        }
        return Some(Identity(key.into_owned()));
    }
    Some(Identity(raw.to_owned()))
}

#[cfg(test)]
#[path = "identity_tests.rs"]
mod tests;
