//! Resolves the caller once per request, for every later layer and handler.

use std::net::IpAddr;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

use crate::http::client_addr::{client_addr, peer_of};
use crate::identity::{self, Identity, IdentityError};
use crate::state::AppState;

/// Who is calling and from where; in the request extensions of API routes.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The resolved identity, or why there is none.
    pub identity: Result<Identity, IdentityError>,
    /// The client address (through trusted proxies only).
    pub client: IpAddr,
}

/// Middleware: resolves the caller without rejecting; authz decides.
pub async fn identify(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let peer = peer_of(&request);
    let caller = {
        let settings = state.config.load();
        Caller {
            identity: identity::resolve(&settings.identity, request.headers(), peer),
            client: client_addr(peer, request.headers(), &settings.identity.trusted_proxies),
        }
    };
    if let Err(err) = &caller.identity {
        tracing::debug!(%peer, "no identity: {err}");
    }
    request.extensions_mut().insert(caller);
    next.run(request).await
}
