//! TLS for the simulators: the identity a simulator serves HTTPS with ([`ServerTls`]), the
//! client configuration callbacks are sent with ([`client_builder`]), and a throwaway
//! certificate authority for tests ([`TestCa`]).
//!
//! Every configuration here names the ring provider itself instead of relying on a
//! process-wide default: reqwest is built without a provider of its own, and a simulator
//! must work in any process, whether or not something else installed one.

mod serve;
mod test_ca;

use std::fmt;
use std::io;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

pub(crate) use serve::Listener;
pub use test_ca::TestCa;

/// A certificate chain and its private key, both PEM, that a simulator serves HTTPS with.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerTls {
    cert_chain_pem: String,
    key_pem: String,
}

impl fmt::Debug for ServerTls {
    // The key stays out: options are logged and printed in test failures.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerTls")
            .field("cert_chain_pem", &self.cert_chain_pem)
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// An identity from PEM text: the server's certificate first, then any intermediates;
    /// the key in PKCS#8, PKCS#1 or SEC1 form. Checked when a simulator starts with it.
    pub fn from_pem(cert_chain_pem: impl Into<String>, key_pem: impl Into<String>) -> Self {
        Self {
            cert_chain_pem: cert_chain_pem.into(),
            key_pem: key_pem.into(),
        }
    }

    /// An identity read from two PEM files.
    pub fn from_pem_files(cert_chain: &Path, key: &Path) -> io::Result<Self> {
        let read = |path: &Path| {
            std::fs::read_to_string(path)
                .map_err(|err| io::Error::new(err.kind(), format!("{}: {err}", path.display())))
        };
        Ok(Self::from_pem(read(cert_chain)?, read(key)?))
    }

    /// The certificate chain, PEM.
    pub fn cert_chain_pem(&self) -> &str {
        &self.cert_chain_pem
    }

    /// The private key, PEM.
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// A rustls server configuration serving this identity over HTTP/2 or HTTP/1.1, for a
    /// test that serves HTTPS itself (a callback receiver, say); fails on PEM that holds
    /// no certificate or no usable key.
    pub fn server_config(&self) -> io::Result<ServerConfig> {
        let chain = parse_certificates(&self.cert_chain_pem, "TLS certificate chain")?;
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes())
            .map_err(|err| invalid(format!("TLS private key: {err}")))?;
        let mut config = ServerConfig::builder_with_provider(ring_provider())
            .with_safe_default_protocol_versions()
            .map_err(|err| invalid(format!("TLS protocol versions: {err}")))?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|err| invalid(format!("TLS identity: {err}")))?;
        // Both, as GitLab's front proxy offers them; the server speaks whichever the client
        // picks.
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(config)
    }
}

/// A reqwest client builder whose TLS trusts the platform's roots plus the certificates of
/// `extra_ca_pem`, if given. The callbacks of the approval and deploy simulators are sent
/// with it; tests use it for plain-HTTP clients too, since a reqwest client built without
/// a TLS configuration needs a process-wide provider.
///
/// The platform's roots come from `rustls-native-certs`, as changegate reads them: it
/// honours `SSL_CERT_FILE` and `SSL_CERT_DIR`, and a simulator pointed at a changegate
/// behind an ingress with a company CA trusts what the machine trusts.
pub fn client_builder(extra_ca_pem: Option<&str>) -> io::Result<reqwest::ClientBuilder> {
    let mut roots = RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for err in &native.errors {
        tracing::debug!(%err, "a platform root certificate could not be read");
    }
    roots.add_parsable_certificates(native.certs);
    if let Some(pem) = extra_ca_pem {
        add_roots(&mut roots, pem)?;
    }
    Ok(reqwest::Client::builder().tls_backend_preconfigured(client_config(roots)?))
}

/// A rustls client configuration trusting only the certificates of `ca_pem`.
pub fn client_config_trusting(ca_pem: &str) -> io::Result<ClientConfig> {
    let mut roots = RootCertStore::empty();
    add_roots(&mut roots, ca_pem)?;
    client_config(roots)
}

fn client_config(roots: RootCertStore) -> io::Result<ClientConfig> {
    Ok(ClientConfig::builder_with_provider(ring_provider())
        .with_safe_default_protocol_versions()
        .map_err(|err| invalid(format!("TLS protocol versions: {err}")))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

fn ring_provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Adds every certificate of `pem` as a trusted root; refuses a bundle with none.
fn add_roots(roots: &mut RootCertStore, pem: &str) -> io::Result<()> {
    for cert in parse_certificates(pem, "CA bundle")? {
        roots
            .add(cert)
            .map_err(|err| invalid(format!("CA bundle: {err}")))?;
    }
    Ok(())
}

fn parse_certificates(pem: &str, what: &str) -> io::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| invalid(format!("{what}: {err}")))?;
    if certs.is_empty() {
        return Err(invalid(format!("{what} holds no PEM certificate")));
    }
    Ok(certs)
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}
