//! Bearer tokens: which key verifies a token, what it must carry, and the
//! name and groups its claims give.
//!
//! HS256 is verified only with `identity.jwt.hs256_secret`, never with a
//! key from the provider or `rs256_public_key`: using a public key as an
//! HMAC secret is how tokens get forged. Other algorithms are verified with
//! the provider's key the token names (`kid`), whose algorithm must be the
//! token's, else with `rs256_public_key` for RS256. `alg: none` is no
//! algorithm here: its header does not parse.

use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode, decode_header};
use secrecy::ExposeSecret;
use serde_json::{Map, Value};

use super::{IdentityError, ProviderKeys, canonical};
use crate::config::IdentitySettings;

/// The most groups a token may give; more are ignored, not an error.
const MAX_GROUPS: usize = 256;
/// The longest group name taken; longer ones are ignored.
const MAX_GROUP_LEN: usize = 191;

/// What a verified token says of its bearer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Bearer {
    /// The canonical name, before `identity.jwt.username_prefix`.
    pub name: String,
    /// The groups, from `identity.jwt.groups_claim`.
    pub groups: Vec<String>,
}

/// Verifies `token` with the static keys or the provider's.
pub(super) fn verify(
    settings: &IdentitySettings,
    provider: ProviderKeys<'_>,
    token: &str,
) -> Result<Bearer, IdentityError> {
    let invalid = |err: jsonwebtoken::errors::Error| IdentityError::InvalidToken(err.to_string());
    let header = decode_header(token).map_err(invalid)?;
    let jwt = &settings.jwt;
    // A static key that does not load is no key (the token is refused).
    let static_key = |alg| match alg {
        Algorithm::HS256 => jwt
            .hs256_secret
            .as_ref()
            .and_then(|secret| DecodingKey::from_secret(secret.expose_secret().as_bytes()).ok()),
        Algorithm::RS256 => jwt
            .rs256_public_key
            .as_ref()
            .and_then(|pem| DecodingKey::from_rsa_pem(pem.as_bytes()).ok()),
        _ => None,
    };
    // A `kid` the provider's set lacks: the provider may have rotated, and
    // the caller refetches before refusing.
    let unknown_kid = header.kid.as_deref().filter(|kid| {
        provider.configured && provider.set.is_none_or(|set| set.by_kid(kid).is_none())
    });
    let keys: Vec<KeyRef<'_>> = match (header.alg, provider.set, header.kid.as_deref()) {
        (Algorithm::HS256, _, _) => static_key(Algorithm::HS256)
            .map(KeyRef::Owned)
            .into_iter()
            .collect(),
        (alg, Some(set), Some(kid)) if unknown_kid.is_none() => {
            let key = set.by_kid(kid).expect("a known kid");
            if !key.accepts(alg) {
                return Err(IdentityError::InvalidToken(format!(
                    "signed with {alg:?}, but the key {kid:?} is for {:?}",
                    key.algorithms()
                )));
            }
            vec![KeyRef::Provider(key.decoding_key())]
        }
        (alg, Some(set), None) => set
            .for_alg(alg)
            .map(|key| KeyRef::Provider(key.decoding_key()))
            .chain(static_key(alg).map(KeyRef::Owned))
            .collect(),
        (alg, _, _) => static_key(alg).map(KeyRef::Owned).into_iter().collect(),
    };
    let validation = validation(settings, header.alg);
    let mut last_error = None;
    for key in &keys {
        match decode::<Map<String, Value>>(token, key.get(), &validation) {
            Ok(data) => return bearer(settings, &data.claims),
            Err(err) => last_error = Some(err),
        }
    }
    if header.alg != Algorithm::HS256
        && let Some(kid) = unknown_kid
    {
        return Err(if provider.refetch_due {
            IdentityError::UnknownKey(kid.to_owned())
        } else {
            IdentityError::InvalidToken(format!(
                "signed with the key {kid:?}, which the identity provider does not publish"
            ))
        });
    }
    Err(match last_error {
        Some(err) => invalid(err),
        None => IdentityError::InvalidToken(format!("{:?} tokens are not accepted", header.alg)),
    })
}

/// A key of the provider's set, or one built from the static settings.
enum KeyRef<'a> {
    Provider(&'a DecodingKey),
    Owned(DecodingKey),
}

impl KeyRef<'_> {
    fn get(&self) -> &DecodingKey {
        match self {
            Self::Provider(key) => key,
            Self::Owned(key) => key,
        }
    }
}

fn validation(settings: &IdentitySettings, alg: Algorithm) -> Validation {
    let jwt = &settings.jwt;
    let mut validation = Validation::new(alg);
    // The library checks `iss` and `aud` only when the token carries them,
    // unless they are required: a configured issuer or audience is.
    let mut required = vec!["exp"];
    if let Some(issuer) = &jwt.issuer {
        validation.set_issuer(&[issuer]);
        required.push("iss");
    }
    if jwt.audience.is_empty() {
        validation.validate_aud = false;
    } else {
        validation.set_audience(&jwt.audience);
        required.push("aud");
    }
    validation.set_required_spec_claims(&required);
    validation.validate_nbf = true;
    validation.leeway = jwt.leeway.as_secs();
    validation
}

/// The bearer a token's claims name: `identity.jwt.username_claim`, else
/// `sub`, `email` or `employee_id` (the first present), in its canonical
/// form; and the groups of `identity.jwt.groups_claim`.
fn bearer(
    settings: &IdentitySettings,
    claims: &Map<String, Value>,
) -> Result<Bearer, IdentityError> {
    let jwt = &settings.jwt;
    let text = |name: &str| claims.get(name).and_then(Value::as_str);
    let raw = match &jwt.username_claim {
        Some(claim) => text(claim),
        None => ["sub", "email", "employee_id"].into_iter().find_map(text),
    };
    let name = raw
        .and_then(|raw| canonical(settings, raw))
        .ok_or_else(|| {
            IdentityError::InvalidToken(match &jwt.username_claim {
                Some(claim) => format!("names nobody in its {claim:?} claim"),
                None => "names no subject".to_owned(),
            })
        })?
        .name;
    let groups = jwt
        .groups_claim
        .as_deref()
        .and_then(|claim| claims.get(claim))
        .map(groups)
        .unwrap_or_default();
    Ok(Bearer { name, groups })
}

/// A groups claim: a list of strings (anything else in it ignored), or one
/// string of names separated by commas (as glewlwyd writes several values).
fn groups(value: &Value) -> Vec<String> {
    let names: Vec<&str> = match value {
        Value::Array(items) => items.iter().filter_map(Value::as_str).collect(),
        Value::String(joined) => joined.split(',').collect(),
        _ => Vec::new(),
    };
    let mut groups: Vec<String> = names
        .into_iter()
        .map(str::trim)
        .filter(|name| !name.is_empty() && name.len() <= MAX_GROUP_LEN)
        .take(MAX_GROUPS)
        .map(str::to_owned)
        .collect();
    groups.sort_unstable();
    groups.dedup();
    groups
}
