//! Resolves the caller once per request, for every later layer and handler.

use std::net::IpAddr;

use axum::extract::Request;

use crate::config::Settings;
use crate::http::client_addr::{client_addr, peer_of};
use crate::identity::{self, Identity, IdentityError};

/// Who is calling and from where.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The resolved identity, or why there is none.
    pub identity: Result<Identity, IdentityError>,
    /// The client address (through trusted proxies only).
    pub client: IpAddr,
}

/// Resolves the caller without rejecting; authz decides.
pub fn resolve(settings: &Settings, request: &Request) -> Caller {
    let peer = peer_of(request);
    let caller = Caller {
        identity: identity::resolve(&settings.identity, request.headers(), peer),
        client: client_addr(peer, request.headers(), &settings.identity.trusted_proxies),
    };
    if let Err(err) = &caller.identity {
        tracing::debug!(%peer, "no identity: {err}");
    }
    caller
}
