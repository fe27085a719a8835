//! The certificates outbound TLS trusts, and the one crypto provider.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

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
        let Some(path) = ca_file else {
            return Self::platform_and_pem(b"");
        };
        let pem = std::fs::read(path)
            .with_context(|| format!("reading tls.ca_file {}", path.display()))?;
        Self::platform_and_pem(&pem).with_context(|| format!("tls.ca_file {}", path.display()))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ca_pem(name: &str) -> String {
        let key = rcgen::KeyPair::generate().expect("a key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.self_signed(&key).expect("a CA").pem()
    }

    #[test]
    fn a_bundle_adds_every_certificate_it_holds() {
        let bundle = format!("{}\n{}", ca_pem("one"), ca_pem("two"));
        let trust = Trust::only_pem(bundle.as_bytes()).expect("a bundle");
        assert_eq!(trust.roots.len(), 2);
        let extended = Trust::platform_and_pem(bundle.as_bytes()).expect("platform and bundle");
        let platform = Trust::platform_and_pem(b"").expect("platform");
        assert_eq!(extended.roots.len(), platform.roots.len() + 2);
    }

    #[test]
    fn a_file_without_certificates_or_missing_is_refused_with_its_name() {
        let err = Trust::only_pem(b"not a certificate").expect_err("no certificate");
        assert!(err.to_string().contains("no certificate"), "{err:#}");
        let dir = tempfile::tempdir().expect("a directory");
        let missing = dir.path().join("missing.pem");
        let err = Trust::load(Some(&missing)).expect_err("missing");
        assert!(format!("{err:#}").contains("missing.pem"), "{err:#}");
    }
}
