//! Resolves the caller once per request, for every later layer and handler.

use std::net::IpAddr;
use std::time::Instant;

use axum::extract::Request;

use crate::config::{KeySource, Settings};
use crate::http::client_addr::{client_addr, peer_of};
use crate::identity::keys::KeyCache;
use crate::identity::{self, Identity, IdentityError, ProviderKeys};
use crate::state::AppState;

/// Who is calling.
#[derive(Debug, Clone)]
pub enum Caller {
    /// A resolved identity.
    Identified(Identity),
    /// No identity: why, and the client address (through trusted proxies
    /// only), which the rate limit counts such callers by. Resolved only
    /// here, since identified callers are counted by identity.
    Anonymous {
        /// Why there is no identity.
        why: IdentityError,
        /// The client address.
        client: IpAddr,
    },
}

impl Caller {
    /// The identity, or why there is none.
    pub fn into_identity(self) -> Result<Identity, IdentityError> {
        match self {
            Self::Identified(identity) => Ok(identity),
            Self::Anonymous { why, .. } => Err(why),
        }
    }
}

/// What resolving found: the caller, or that the request's token is signed
/// with a key the identity provider's set lacks and the set is to be read
/// again first.
pub enum Identification {
    /// Resolved.
    Now(Caller),
    /// Resolve again (with [`resolve_after_refetch`]) once this has run.
    AfterKeyRefetch(KeyRefetch),
}

/// A refetch of the provider's keys a request waits for.
pub struct KeyRefetch {
    keys: KeyCache,
    source: KeySource,
    kid: String,
}

impl KeyRefetch {
    /// Reads the provider's keys again, or waits for the read under way.
    pub async fn run(self) {
        self.keys
            .refetch_for_unknown_kid(&self.source, &self.kid)
            .await;
    }
}

/// Resolves the caller without rejecting; authz decides.
pub fn resolve(state: &AppState, settings: &Settings, request: &Request) -> Identification {
    let source = settings.identity.jwt.key_source();
    match resolve_with(state, settings, source.as_ref(), true, request) {
        Err(IdentityError::UnknownKey(kid)) if let Some(source) = source => {
            Identification::AfterKeyRefetch(KeyRefetch {
                keys: state.identity_keys.clone(),
                source,
                kid,
            })
        }
        outcome => Identification::Now(caller(settings, request, outcome)),
    }
}

/// Resolves the caller after a [`KeyRefetch`]: a key still unknown refuses.
pub fn resolve_after_refetch(state: &AppState, settings: &Settings, request: &Request) -> Caller {
    let source = settings.identity.jwt.key_source();
    let outcome = resolve_with(state, settings, source.as_ref(), false, request);
    caller(settings, request, outcome)
}

fn resolve_with(
    state: &AppState,
    settings: &Settings,
    source: Option<&KeySource>,
    may_refetch: bool,
    request: &Request,
) -> Result<Identity, IdentityError> {
    let keys = &state.identity_keys;
    let set = source.and_then(|source| keys.keys_for(source));
    let provider = ProviderKeys {
        set: set.as_deref(),
        configured: source.is_some(),
        refetch_due: may_refetch
            && source.is_some_and(|source| keys.unknown_kid_refetch_due(source, Instant::now())),
    };
    identity::resolve(
        &settings.identity,
        provider,
        request.headers(),
        peer_of(request),
    )
}

fn caller(
    settings: &Settings,
    request: &Request,
    outcome: Result<Identity, IdentityError>,
) -> Caller {
    match outcome {
        Ok(identity) => Caller::Identified(identity),
        Err(why) => {
            let peer = peer_of(request);
            tracing::debug!(%peer, "no identity: {why}");
            let client = client_addr(peer, request.headers(), &settings.identity.trusted_proxies);
            Caller::Anonymous { why, client }
        }
    }
}
