//! A certificate authority made up for one test: the CA certificate to trust, a server
//! identity for loopback that it signs, and the broken identities a TLS client must refuse
//! (another issuer, expired, another host name), each refused for its own reason.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, date_time_ymd,
};
use rustls::ClientConfig;
use uuid::Uuid;

use super::{ServerTls, client_config_trusting};

/// The names a loopback simulator is reached by: `127.0.0.1` and `::1` become IP SANs,
/// `localhost` a DNS SAN.
const LOOPBACK_NAMES: [&str; 3] = ["127.0.0.1", "::1", "localhost"];

/// A name no test connects to, for a certificate valid only elsewhere.
const OTHER_HOST: &str = "other.example";

/// A throwaway CA with a loopback server identity it signed.
///
/// ```no_run
/// # async fn demo() -> std::io::Result<()> {
/// use changegate_sim::gitlab::{GitLabSim, GitLabSimOptions};
/// use changegate_sim::tls::TestCa;
/// let ca = TestCa::new();
/// let gitlab = GitLabSim::start(GitLabSimOptions {
///     tls: Some(ca.server_tls()),
///     ..GitLabSimOptions::default()
/// })
/// .await?;
/// assert!(gitlab.base_url().starts_with("https://"));
/// std::fs::write("ca.pem", ca.ca_pem())?; // changegate's tls.ca_file
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
    server: ServerTls,
}

impl Default for TestCa {
    fn default() -> Self {
        Self::new()
    }
}

impl TestCa {
    /// A fresh CA and a server identity for `127.0.0.1`, `::1` and `localhost`.
    ///
    /// # Panics
    /// If ring cannot generate a key, where no test could run anyway.
    pub fn new() -> Self {
        let mut params = CertificateParams::default();
        // A name of its own: a client that trusts another test CA then finds no issuer for
        // this one's certificates (unknown issuer) rather than a namesake whose signature
        // does not match (bad signature).
        params.distinguished_name.push(
            DnType::CommonName,
            format!("changegate-sim test CA {}", Uuid::new_v4()),
        );
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer = CertifiedIssuer::self_signed(params, generate_key())
            .expect("rcgen signs a CA with a fresh key");
        let server = issue(&issuer, &LOOPBACK_NAMES, Validity::Current);
        Self { issuer, server }
    }

    /// The CA certificate, PEM: what a client trusts (changegate's `tls.ca_file`).
    pub fn ca_pem(&self) -> String {
        self.issuer.pem()
    }

    /// The identity to give the simulators: valid now, for `127.0.0.1`, `::1` and
    /// `localhost`, signed by this CA.
    pub fn server_tls(&self) -> ServerTls {
        self.server.clone()
    }

    /// A fresh identity for the loopback names, signed by this CA but expired (valid only
    /// during 2020): refused as expired.
    pub fn expired_server_tls(&self) -> ServerTls {
        issue(&self.issuer, &LOOPBACK_NAMES, Validity::Expired)
    }

    /// A fresh identity signed by this CA, valid now, for `other.example` only: refused as
    /// being for another host name.
    pub fn wrong_host_server_tls(&self) -> ServerTls {
        issue(&self.issuer, &[OTHER_HOST], Validity::Current)
    }

    /// A fresh identity for the loopback names, valid now, signed by a new CA nobody
    /// trusts: refused as having an unknown issuer.
    pub fn untrusted_server_tls(&self) -> ServerTls {
        Self::new().server
    }

    /// A rustls client configuration trusting this CA and nothing else, for
    /// `reqwest::ClientBuilder::tls_backend_preconfigured`.
    pub fn client_config(&self) -> ClientConfig {
        client_config_trusting(&self.ca_pem()).expect("the CA's own PEM parses")
    }
}

/// A server certificate for `names` with a fresh key, signed by `issuer`.
fn issue(issuer: &CertifiedIssuer<'_, KeyPair>, names: &[&str], validity: Validity) -> ServerTls {
    let names: Vec<String> = names.iter().map(|name| (*name).to_owned()).collect();
    let mut params = CertificateParams::new(names).expect("IP addresses and DNS names");
    params
        .distinguished_name
        .push(DnType::CommonName, "changegate-sim");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    if validity == Validity::Expired {
        params.not_before = date_time_ymd(2020, 1, 1);
        params.not_after = date_time_ymd(2021, 1, 1);
    }
    let key = generate_key();
    let cert = params
        .signed_by(&key, issuer)
        .expect("rcgen signs a certificate");
    ServerTls::from_pem(cert.pem(), key.serialize_pem())
}

/// When an issued certificate is valid.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Validity {
    /// rcgen's default span, which includes today for centuries.
    Current,
    /// Long past.
    Expired,
}

fn generate_key() -> KeyPair {
    KeyPair::generate().expect("ring generates an ECDSA P-256 key")
}
