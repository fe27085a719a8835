//! Where a simulator listens and how it serves: plain HTTP with `axum::serve`, or HTTPS
//! with `axum-server`'s rustls acceptor when the simulator has a TLS identity. The routes
//! are the same either way, so faults and the control API behave identically.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum_server::tls_rustls::RustlsConfig;
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
        let Some(tls) = self.tls else {
            return axum::serve(self.tcp, app).await;
        };
        axum_server::from_tcp_rustls(self.tcp.into_std()?, tls)?
            // A refused handshake (say, a client that does not trust the certificate) is
            // the client's business, but worth seeing when a test wonders why it failed.
            .accept_error_handler(|peer, err| {
                tracing::debug!(?peer, %err, "simulator refused a connection");
            })
            .serve(app.into_make_service())
            .await
    }
}
