//! How every outbound HTTP client is built: TLS through rustls with the
//! platform's roots plus `tls.ca_file` ([`Trust`]), proxies from the
//! environment as curl reads them, loopback never proxied ([`ProxyRules`]),
//! and a failed connection classified by its cause ([`Unreachable`]) so that
//! it is reported in words (see [`super::health`]).

mod proxy;
mod trust;
mod unreachable;

use std::time::Duration;

use anyhow::Context;
use tracing::Instrument;

pub use proxy::ProxyRules;
pub use trust::{Trust, install_crypto_provider};
pub use unreachable::Unreachable;

use super::health::{Dependencies, System};
use crate::traces::propagation;

/// The HTTP client settings every outbound client shares: trust and proxies.
#[derive(Debug, Clone)]
pub struct Outbound {
    trust: Trust,
    proxies: ProxyRules,
}

impl Outbound {
    /// Outbound settings from their parts.
    pub fn new(trust: Trust, proxies: ProxyRules) -> Self {
        Self { trust, proxies }
    }

    /// Platform roots, proxies from the environment.
    pub fn from_platform() -> anyhow::Result<Self> {
        Ok(Self::new(Trust::load(None)?, ProxyRules::from_env()))
    }

    /// The proxy rules in force.
    pub fn proxies(&self) -> &ProxyRules {
        &self.proxies
    }

    /// A client builder with this TLS trust and these proxies, and a connect
    /// timeout; callers add their own request timeouts.
    pub fn client_builder(&self) -> anyhow::Result<reqwest::ClientBuilder> {
        let builder = reqwest::Client::builder()
            .tls_backend_preconfigured(self.trust.client_config()?)
            .connect_timeout(Duration::from_secs(10));
        Ok(if self.proxies.is_active() {
            let proxies = self.proxies.clone();
            builder.proxy(reqwest::Proxy::custom(move |url| {
                proxies.proxy_for(url).map(str::to_owned)
            }))
        } else {
            // Read once at start-up, not by reqwest on its own terms.
            builder.no_proxy()
        })
    }
}

/// Why a call got no usable answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// No answer within the timeout: the request may have been applied.
    #[error("no answer in time")]
    Timeout,
    /// The connection failed before the request was sent.
    #[error("{}", .failure.describe(.system.display_name()))]
    Unreachable {
        /// Why.
        failure: Unreachable,
        /// Whom it was for.
        system: System,
    },
    /// The request failed otherwise (for example the connection broke
    /// after sending): the request may have been applied.
    #[error("{0}")]
    Failed(String),
}

/// The client of one system: sends requests and records each outcome in
/// the instance's [`Dependencies`]. Cheap to clone.
#[derive(Debug, Clone)]
pub struct SystemClient {
    client: reqwest::Client,
    proxies: ProxyRules,
    health: Dependencies,
    system: System,
}

impl SystemClient {
    /// A client for `system` with `outbound`'s trust and proxies, adjusted
    /// by `configure` (redirect policy, overall timeout).
    pub fn new(
        outbound: &Outbound,
        health: &Dependencies,
        system: System,
        configure: impl FnOnce(reqwest::ClientBuilder) -> reqwest::ClientBuilder,
    ) -> anyhow::Result<Self> {
        let client = configure(outbound.client_builder()?)
            .build()
            .with_context(|| format!("building the {} HTTP client", system.label()))?;
        Ok(Self {
            client,
            proxies: outbound.proxies.clone(),
            health: health.clone(),
            system,
        })
    }

    /// A request to start building.
    pub fn request(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        self.client.request(method, url)
    }

    /// The instance's record of outcomes.
    pub fn health(&self) -> &Dependencies {
        &self.health
    }

    /// Sends `request`; an answer of any status is `Ok` (a 5xx is recorded
    /// as a failure of the system, anything else as a success).
    pub async fn send(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, CallError> {
        let mut request = request
            .build()
            .map_err(|err| CallError::Failed(err.without_url().to_string()))?;
        let url = request.url().clone();
        let host = url.host_str().unwrap_or_default().to_owned();
        let span = tracing::debug_span!(
            "call",
            otel.name = format!("{} {}", request.method(), self.system.label()),
            otel.kind = "client",
            system = self.system.label(),
            method = %request.method(),
            host = %host,
            status = tracing::field::Empty,
        );
        // Every system called hears which trace the call belongs to.
        if !span.is_disabled() {
            propagation::inject(&span, request.headers_mut());
        }
        let outcome = self.client.execute(request).instrument(span.clone()).await;
        self.count(&outcome);
        match outcome {
            Ok(response) => {
                let status = response.status();
                span.record("status", status.as_u16());
                if status.is_server_error() {
                    self.health
                        .failed(self.system, &format!("answered HTTP {}", status.as_u16()));
                } else {
                    self.health.succeeded(self.system, &host);
                }
                Ok(response)
            }
            Err(err) if err.is_timeout() => {
                self.health.failed(self.system, "no answer in time");
                Err(CallError::Timeout)
            }
            Err(err) => {
                let detail = error_chain(&err);
                let proxied = self.proxies.proxy_for(&url).is_some();
                match Unreachable::classify(&err, proxied) {
                    Some(failure) => {
                        let detail = match self.proxies.proxy_host_for(&url) {
                            Some(proxy) => format!("{detail} (through the proxy {proxy})"),
                            None => detail,
                        };
                        self.health
                            .unreachable(self.system, &host, failure, &detail);
                        Err(CallError::Unreachable {
                            failure,
                            system: self.system,
                        })
                    }
                    None => {
                        self.health.failed(self.system, &detail);
                        Err(CallError::Failed(detail))
                    }
                }
            }
        }
    }

    /// Counts one call in `changegate_outbound_requests_total{system, result}`.
    fn count(&self, outcome: &Result<reqwest::Response, reqwest::Error>) {
        let result = match outcome {
            Ok(response) => answer_result(response.status()),
            Err(err) if err.is_timeout() => "timeout",
            Err(err) if err.is_connect() => "unreachable",
            Err(_) => "failed",
        };
        metrics::counter!(
            "changegate_outbound_requests_total",
            "system" => self.system.label(),
            "result" => result
        )
        .increment(1);
    }
}

/// The `result` label of a call that got an answer: a 4xx is an answer the
/// caller reads (GitLab's 404 for a file not there yet), a 5xx a failure.
fn answer_result(status: reqwest::StatusCode) -> &'static str {
    if status.is_server_error() {
        "server_error"
    } else if status.is_client_error() {
        "client_error"
    } else {
        "ok"
    }
}

/// An error and its causes on one line, without the URL (it may carry
/// credentials in its query).
fn error_chain(err: &reqwest::Error) -> String {
    let mut text = err.to_string();
    if let Some(url) = err.url() {
        text = text.replace(&format!(" for url ({url})"), "");
    }
    let mut cause = std::error::Error::source(err);
    while let Some(next) = cause {
        let part = next.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        cause = next.source();
    }
    text
}
