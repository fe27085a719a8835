//! Where a simulator listens and how it serves: `axum-server`, over plain HTTP or, when the
//! simulator has a TLS identity, with its rustls acceptor. The routes are the same either
//! way, so faults and the control API behave identically; either way every request carries
//! `axum-server`'s [`ConnectionShutdown`](axum_server::ConnectionShutdown), with which a
//! fault drops the connection it arrived on.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum_server::Server;
use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use super::ServerTls;

/// A bound port, and the TLS it will serve with, if any.
pub(crate) struct Listener {
    tcp: TcpListener,
    tls: Option<RustlsConfig>,
    base_url: String,
}

impl Listener {
    /// Binds `addr`; with `tls`, the port will serve HTTPS only. An unusable identity is
    /// refused before the port is taken.
    pub(crate) async fn bind(addr: SocketAddr, tls: Option<&ServerTls>) -> io::Result<Self> {
        let tls = match tls {
            Some(identity) => Some(RustlsConfig::from_config(Arc::new(
                identity.server_config()?,
            ))),
            None => None,
        };
        let tcp = TcpListener::bind(addr).await?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let base_url = format!("{scheme}://{}", tcp.local_addr()?);
        Ok(Self { tcp, tls, base_url })
    }

    /// `http://` or `https://`, then the bound address, e.g. `https://127.0.0.1:41234`.
    pub(crate) fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Serves `app` in the background until the returned task is aborted; `simulator`
    /// names it in the log.
    pub(crate) fn serve(self, app: Router, simulator: &'static str) -> JoinHandle<()> {
        tokio::spawn(async move {
            if let Err(err) = self.run(app).await {
                tracing::error!(%err, simulator, "simulator stopped serving");
            }
        })
    }

    async fn run(self, app: Router) -> io::Result<()> {
        let server = Server::<SocketAddr>::from_listener(self.tcp);
        let Some(tls) = self.tls else {
            return server.serve(app.into_make_service()).await;
        };
        server
            .acceptor(RustlsAcceptor::new(tls))
            // A refused handshake (say, a client that does not trust the certificate) is
            // the client's business, but worth seeing when a test wonders why it failed.
            .accept_error_handler(|peer, err| {
                tracing::debug!(?peer, %err, "simulator refused a connection");
            })
            .serve(app.into_make_service())
            .await
    }
}
