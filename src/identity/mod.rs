//! The one identity resolver: every layer and handler asks it who is calling.
//!
//! Sources: a bearer JWT (`token`: static keys, or the identity
//! provider's own from [`keys`]), and the auth proxy's headers, honoured
//! only when the request comes from a trusted proxy. When a trusted proxy
//! sends both (oauth2-proxy's `--pass-authorization-header`), a token that
//! verifies must name the person the headers name; one that does not is
//! refused or ignored as `identity.jwt.unverifiable_from_trusted_proxy`
//! says. Email-form accounts and employee ids map to one canonical identity
//! through `[identity.aliases]` and `identity.canonical_email_domain`.

pub mod keys;
mod token;

use std::borrow::Cow;
use std::net::IpAddr;
use std::sync::Arc;

use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;

use crate::config::{IdentitySettings, Unverifiable};
use keys::KeySet;

/// A resolved caller: the canonical name, and the groups a token gave.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Identity {
    name: String,
    groups: Arc<[String]>,
}

impl Identity {
    fn named(name: String) -> Self {
        Self {
            name,
            groups: Arc::from([]),
        }
    }

    /// The canonical name.
    pub fn as_str(&self) -> &str {
        &self.name
    }

    /// The groups the caller's token names (`identity.jwt.groups_claim`),
    /// sorted; none for callers named by a proxy's headers.
    pub fn groups(&self) -> &[String] {
        &self.groups
    }

    /// Whether the caller is in `group`.
    pub fn in_group(&self, group: &str) -> bool {
        self.groups
            .binary_search_by(|held| held.as_str().cmp(group))
            .is_ok()
    }
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
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
    /// A bearer token signed with a key the provider's set lacks, while a
    /// refetch is due: after it, the key may be there.
    #[error("bearer token signed with the key {0:?}: the identity provider's keys are read again")]
    UnknownKey(String),
    /// Proxy headers that cannot be read as an identity.
    #[error("unreadable identity header")]
    Unreadable,
    /// A verified token and the trusted proxy's headers name two people.
    #[error("the bearer token and the proxy's identity headers name different people")]
    Disagree,
}

/// What [`resolve`] knows of the identity provider's keys.
#[derive(Clone, Copy, Default)]
pub struct ProviderKeys<'a> {
    /// The last good set read, if any.
    pub set: Option<&'a KeySet>,
    /// Whether a provider is configured (`identity.jwt.discovery` or
    /// `jwks_url`).
    pub configured: bool,
    /// Whether a token signed with a key the set lacks is answered
    /// [`IdentityError::UnknownKey`], for the caller to refetch and
    /// resolve again, rather than refused.
    pub refetch_due: bool,
}

/// The longest identity accepted; longer values are not names but noise.
const MAX_IDENTITY_LEN: usize = 191;

/// Resolves the caller of a request from its headers and the address of the
/// peer that sent it (the socket address, not `X-Forwarded-For`), with the
/// provider's last good keys when a provider is configured.
pub fn resolve(
    settings: &IdentitySettings,
    provider: ProviderKeys<'_>,
    headers: &HeaderMap,
    peer: IpAddr,
) -> Result<Identity, IdentityError> {
    let from_proxy = settings
        .trusted_proxies
        .iter()
        .any(|net| net.contains(&peer));
    let Some(token) = bearer_token(headers)? else {
        return if from_proxy {
            proxy_identity(settings, headers)
        } else {
            Err(IdentityError::Missing)
        };
    };
    let verified = token::verify(settings, provider, token);
    if !from_proxy {
        return verified.map(|bearer| from_token(settings, bearer));
    }
    match (verified, proxy_identity(settings, headers)) {
        (Ok(bearer), Err(IdentityError::Missing)) => Ok(from_token(settings, bearer)),
        (Ok(bearer), Ok(named)) if named.name == bearer.name => Ok(from_token(settings, bearer)),
        (Ok(bearer), Ok(named)) => {
            tracing::warn!(
                token = %bearer.name,
                headers = %named,
                "a trusted proxy's identity headers and the bearer token it passed name different people: refused"
            );
            Err(IdentityError::Disagree)
        }
        (Ok(_), Err(unreadable)) => Err(unreadable),
        // Refetched first: the provider may have rotated.
        (Err(unknown @ IdentityError::UnknownKey(_)), _) => Err(unknown),
        (Err(why), Ok(named)) => match settings.jwt.unverifiable_from_trusted_proxy {
            Unverifiable::Ignore => {
                tracing::debug!(
                    "a bearer token that does not verify is ignored ({why}): the trusted proxy's headers name {named}"
                );
                Ok(named)
            }
            Unverifiable::Refuse => Err(why),
        },
        (Err(why), Err(_)) => Err(why),
    }
}

fn from_token(settings: &IdentitySettings, bearer: token::Bearer) -> Identity {
    let prefix = &settings.jwt.username_prefix;
    Identity {
        name: if prefix.is_empty() {
            bearer.name
        } else {
            format!("{prefix}{}", bearer.name)
        },
        groups: Arc::from(bearer.groups),
    }
}

/// The identity a trusted proxy's headers name: the first of the user,
/// email and employee-id headers that is present and readable.
fn proxy_identity(
    settings: &IdentitySettings,
    headers: &HeaderMap,
) -> Result<Identity, IdentityError> {
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
        return Some(Identity::named(canonical.clone()));
    }
    if let Some((local, domain)) = key.split_once('@') {
        if settings.canonical_email_domain.as_deref() == Some(domain) && !local.is_empty() {
            return Some(Identity::named(local.to_owned()));
        }
        return Some(Identity::named(key.into_owned()));
    }
    Some(Identity::named(raw.to_owned()))
}

#[cfg(test)]
mod tests;
