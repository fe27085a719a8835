//! TLS for the simulators: the client configuration callbacks are sent with
//! ([`client_builder`]).
//!
//! Every configuration here names the ring provider itself instead of relying on a
//! process-wide default: reqwest is built without a provider of its own, and a simulator
//! must work in any process, whether or not something else installed one.

use std::io;
use std::sync::Arc;

use rustls::{ClientConfig, RootCertStore};

/// A reqwest client builder whose TLS trusts the platform's roots. The callbacks of the
/// approval and deploy simulators are sent with it; tests use it for plain-HTTP clients
/// too, since a reqwest client built without a TLS configuration needs a process-wide
/// provider.
///
/// The platform's roots come from `rustls-native-certs`, as changegate reads them: it
/// honours `SSL_CERT_FILE` and `SSL_CERT_DIR`, and a simulator pointed at a changegate
/// behind an ingress with a company CA trusts what the machine trusts.
pub fn client_builder() -> io::Result<reqwest::ClientBuilder> {
    let mut roots = RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for err in &native.errors {
        tracing::debug!(%err, "a platform root certificate could not be read");
    }
    roots.add_parsable_certificates(native.certs);
    Ok(reqwest::Client::builder().tls_backend_preconfigured(client_config(roots)?))
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

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}
