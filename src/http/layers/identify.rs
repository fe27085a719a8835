//! Resolves the caller once per request, for every later layer and handler.

use std::net::IpAddr;

use axum::extract::Request;

use crate::config::Settings;
use crate::http::client_addr::{client_addr, peer_of};
use crate::identity::{self, Identity, IdentityError};

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

/// Resolves the caller without rejecting; authz decides.
pub fn resolve(settings: &Settings, request: &Request) -> Caller {
    let peer = peer_of(request);
    match identity::resolve(&settings.identity, request.headers(), peer) {
        Ok(identity) => Caller::Identified(identity),
        Err(why) => {
            tracing::debug!(%peer, "no identity: {why}");
            let client = client_addr(peer, request.headers(), &settings.identity.trusted_proxies);
            Caller::Anonymous { why, client }
        }
    }
}
