//! How every outbound HTTP client is built: TLS through rustls with the
//! platform's roots plus `tls.ca_file`, proxies from the environment as curl
//! reads them (loopback never proxied), and a failed connection classified
//! by its cause so it can be reported in words (see [`super::health`]).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use hyper_util::client::proxy::matcher::Matcher;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::{CertificateError, RootCertStore};

use super::health::{Dependencies, System};

/// The certificates outbound TLS trusts.
///
/// The platform's roots come from `rustls-native-certs`, not
/// `rustls-platform-verifier`: it is the same source sqlx reads for MySQL
/// with TLS, so HTTP and the database make one trust decision; it honours
/// `SSL_CERT_FILE` and `SSL_CERT_DIR`, which container images and corporate
/// set-ups use; and it yields a plain root store that `tls.ca_file` extends
/// the same way on every platform.
#[derive(Clone)]
pub struct Trust {
    roots: Arc<RootCertStore>,
}

impl std::fmt::Debug for Trust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trust")
            .field("roots", &self.roots.len())
            .finish()
    }
}

impl Trust {
    /// The platform's roots plus every certificate in `ca_file`, if given.
    pub fn load(ca_file: Option<&Path>) -> anyhow::Result<Self> {
        let extra = match ca_file {
            Some(path) => std::fs::read(path)
                .with_context(|| format!("reading tls.ca_file {}", path.display()))?,
            None => Vec::new(),
        };
        Self::platform_and_pem(&extra).with_context(|| {
            format!(
                "tls.ca_file {}",
                ca_file.map_or_else(String::new, |p| p.display().to_string())
            )
        })
    }

    /// The platform's roots plus the certificates of a PEM bundle (empty:
    /// platform roots only).
    pub fn platform_and_pem(pem: &[u8]) -> anyhow::Result<Self> {
        let mut roots = RootCertStore::empty();
        let native = rustls_native_certs::load_native_certs();
        for err in &native.errors {
            tracing::warn!("a platform root certificate could not be read: {err}");
        }
        let (_, unusable) = roots.add_parsable_certificates(native.certs);
        if unusable > 0 {
            tracing::debug!(unusable, "platform root certificates rustls cannot use");
        }
        add_pem(&mut roots, pem)?;
        Ok(Self {
            roots: Arc::new(roots),
        })
    }

    /// Only the certificates of a PEM bundle: for tests that must not depend
    /// on what the machine trusts.
    pub fn only_pem(pem: &[u8]) -> anyhow::Result<Self> {
        let mut roots = RootCertStore::empty();
        add_pem(&mut roots, pem)?;
        Ok(Self {
            roots: Arc::new(roots),
        })
    }

    /// A rustls client configuration trusting these roots, with the ring
    /// provider (the one the whole binary uses).
    pub fn client_config(&self) -> anyhow::Result<rustls::ClientConfig> {
        install_crypto_provider();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        Ok(rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("TLS protocol versions")?
            .with_root_certificates(self.roots.clone())
            .with_no_client_auth())
    }
}

/// Makes ring the process's rustls provider. reqwest is built without a
/// provider of its own (so that aws-lc, with its C and CMake build, stays out
/// of the binary), and then any client not built here, such as
/// `reqwest::Client::new()` in a test or a simulator, needs a process
/// default. Idempotent.
pub fn install_crypto_provider() {
    // An error only says a provider is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn add_pem(roots: &mut RootCertStore, pem: &[u8]) -> anyhow::Result<()> {
    if pem.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    let mut added = 0;
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.context("a certificate in the PEM bundle cannot be parsed")?;
        roots
            .add(cert)
            .context("a certificate in the PEM bundle is not a usable CA certificate")?;
        added += 1;
    }
    anyhow::ensure!(added > 0, "the PEM bundle holds no certificate");
    Ok(())
}

/// Which outbound requests go through a proxy: `HTTPS_PROXY`, `HTTP_PROXY`,
/// `ALL_PROXY` and `NO_PROXY`, upper or lower case, with curl's rules (the
/// matcher reqwest itself uses), except that a loopback target (`localhost`,
/// `*.localhost`, `127.0.0.0/8`, `::1`) is never proxied: a proxy cannot
/// reach this machine's loopback.
#[derive(Debug, Clone, Default)]
pub struct ProxyRules {
    http: Option<String>,
    https: Option<String>,
    matcher: Option<Arc<Matcher>>,
}

/// `NO_PROXY` entries always added to the operator's.
const LOOPBACK: &str = "localhost,.localhost,127.0.0.0/8,::1";

impl ProxyRules {
    /// The rules of this process's environment.
    pub fn from_env() -> Self {
        let var = |names: &[&str]| {
            names
                .iter()
                .find_map(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()))
        };
        Self::new(
            var(&["HTTP_PROXY", "http_proxy"]),
            var(&["HTTPS_PROXY", "https_proxy"]),
            var(&["ALL_PROXY", "all_proxy"]),
            var(&["NO_PROXY", "no_proxy"]),
        )
    }

    /// Rules from explicit values, as the environment would give them.
    pub fn new(
        http: Option<String>,
        https: Option<String>,
        all: Option<String>,
        no_proxy: Option<String>,
    ) -> Self {
        let http = http.or_else(|| all.clone());
        let https = https.or(all);
        if http.is_none() && https.is_none() {
            return Self::default();
        }
        let no = match no_proxy {
            Some(list) if !list.trim().is_empty() => format!("{list},{LOOPBACK}"),
            _ => LOOPBACK.to_owned(),
        };
        let mut builder = Matcher::builder().no(no);
        if let Some(proxy) = &http {
            builder = builder.http(proxy.clone());
        }
        if let Some(proxy) = &https {
            builder = builder.https(proxy.clone());
        }
        Self {
            http,
            https,
            matcher: Some(Arc::new(builder.build())),
        }
    }

    /// The proxy URL a request to `url` goes through, if any (with any
    /// credentials it carries).
    pub fn proxy_for(&self, url: &reqwest::Url) -> Option<&str> {
        let matcher = self.matcher.as_ref()?;
        let uri: http::Uri = url.as_str().parse().ok()?;
        matcher.intercept(&uri)?;
        match url.scheme() {
            "https" => self.https.as_deref(),
            "http" => self.http.as_deref(),
            _ => None,
        }
    }

    /// The same URL with credentials cut out, for logs.
    pub fn proxy_host_for(&self, url: &reqwest::Url) -> Option<String> {
        let proxy = reqwest::Url::parse(self.proxy_for(url)?).ok()?;
        Some(match proxy.port() {
            Some(port) => format!("{}:{port}", proxy.host_str().unwrap_or_default()),
            None => proxy.host_str().unwrap_or_default().to_owned(),
        })
    }
}

/// Why a connection to another system failed before any answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unreachable {
    /// The server's certificate chain does not lead to a trusted root.
    UntrustedCertificate,
    /// The server's certificate has expired (or is not valid yet).
    ExpiredCertificate,
    /// The server's certificate is for another host name.
    WrongHostName,
    /// TLS failed otherwise (protocol, alert, unusable certificate).
    Tls,
    /// Nothing listens there, or a firewall refused.
    Refused,
    /// The host name does not resolve.
    Dns,
    /// The proxy in use failed or refused the tunnel.
    Proxy,
    /// The connection failed in another way.
    Connect,
}

impl Unreachable {
    /// Classifies `err`, from a request that went through a proxy when
    /// `proxied`; `None` when the failure came after connecting (or was a
    /// timeout, which callers treat as "may have been applied").
    pub fn classify(err: &reqwest::Error, proxied: bool) -> Option<Self> {
        if err.is_timeout() || !err.is_connect() {
            return None;
        }
        let mut refused = false;
        let mut dns = false;
        let mut pending: Vec<&(dyn std::error::Error + 'static)> = vec![err];
        while let Some(cause) = pending.pop() {
            if let Some(tls) = cause.downcast_ref::<rustls::Error>() {
                return Some(Self::of_tls(tls));
            }
            if let Some(io) = cause.downcast_ref::<std::io::Error>() {
                refused |= io.kind() == std::io::ErrorKind::ConnectionRefused;
                // io::Error's `source` skips the error it wraps: look at it too.
                if let Some(inner) = io.get_ref() {
                    pending.push(inner);
                }
            }
            // hyper-util's connector names resolver failures this way; its
            // error type is private.
            dns |= cause.to_string().starts_with("dns error");
            if let Some(source) = cause.source() {
                pending.push(source);
            }
        }
        Some(if proxied {
            Self::Proxy
        } else if refused {
            Self::Refused
        } else if dns {
            Self::Dns
        } else {
            Self::Connect
        })
    }

    fn of_tls(err: &rustls::Error) -> Self {
        match err {
            rustls::Error::InvalidCertificate(cert) => match cert {
                CertificateError::UnknownIssuer | CertificateError::BadSignature => {
                    Self::UntrustedCertificate
                }
                CertificateError::Expired
                | CertificateError::ExpiredContext { .. }
                | CertificateError::NotValidYet
                | CertificateError::NotValidYetContext { .. } => Self::ExpiredCertificate,
                CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. } => Self::WrongHostName,
                _ => Self::Tls,
            },
            _ => Self::Tls,
        }
    }

    /// The metric label.
    pub fn reason(self) -> &'static str {
        match self {
            Self::UntrustedCertificate => "untrusted_certificate",
            Self::ExpiredCertificate => "expired_certificate",
            Self::WrongHostName => "wrong_host_name",
            Self::Tls => "tls",
            Self::Refused => "refused",
            Self::Dns => "dns",
            Self::Proxy => "proxy",
            Self::Connect => "connect",
        }
    }

    /// What a requester can pass on, for a system named `who` ("GitLab").
    pub fn describe(self, who: &str) -> String {
        match self {
            Self::UntrustedCertificate => format!("{who}'s certificate is not trusted"),
            Self::ExpiredCertificate => {
                format!("{who}'s certificate has expired or is not valid yet")
            }
            Self::WrongHostName => format!("{who}'s certificate is for another host name"),
            Self::Tls => format!("a secure connection to {who} could not be set up"),
            Self::Refused => format!("{who} refused the connection"),
            Self::Dns => format!("{who}'s host name cannot be resolved"),
            Self::Proxy => format!("the proxy to {who} failed"),
            Self::Connect => format!("{who} cannot be reached"),
        }
    }

    /// What the team can do about it, for the log.
    pub fn hint(self) -> &'static str {
        match self {
            Self::UntrustedCertificate => {
                "add the CA that signed it to tls.ca_file (a PEM bundle), or to the platform's store"
            }
            Self::ExpiredCertificate => "the server's certificate must be renewed",
            Self::WrongHostName => "the URL's host must be one the certificate names",
            Self::Tls => "check that the URL's port speaks TLS and the server's TLS settings",
            Self::Refused => "check the URL's host and port, and that the server is up",
            Self::Dns => "check the URL's host name and this machine's DNS",
            Self::Proxy => "check HTTPS_PROXY/HTTP_PROXY and NO_PROXY, and that the proxy is up",
            Self::Connect => "check the network between changegate and the server",
        }
    }
}

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
        Ok(if self.proxies.matcher.is_some() {
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
        let request = request
            .build()
            .map_err(|err| CallError::Failed(err.without_url().to_string()))?;
        let url = request.url().clone();
        let host = url.host_str().unwrap_or_default().to_owned();
        match self.client.execute(request).await {
            Ok(response) => {
                let status = response.status();
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
}

/// An error and its causes on one line, without the URL (it may carry
/// credentials in its query).
fn error_chain(err: &reqwest::Error) -> String {
    let mut text = err.to_string();
    let mut cause = std::error::Error::source(err);
    while let Some(next) = cause {
        let part = next.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        cause = next.source();
    }
    if let Some(url) = err.url() {
        text = text.replace(url.as_str(), url.host_str().unwrap_or_default());
    }
    text
}
