//! `[tls]`: extra certificate authorities for outbound HTTPS (SPEC §4).

use std::path::{Path, PathBuf};

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use super::reader::Reader;

/// `[tls]`, static.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsSettings {
    /// `ca_file`: a PEM file of one or more CA certificates trusted for every
    /// outbound HTTPS call, on top of the platform's roots. Default none:
    /// the platform's roots only. Checked at load: it exists, is readable
    /// and holds at least one certificate.
    pub ca_file: Option<PathBuf>,
}

pub(super) const TLS_KEYS: &[&str] = &["ca_file"];

pub(super) fn tls(r: &mut Reader<'_>) -> TlsSettings {
    let path = r.string_at(&["tls", "ca_file"], "");
    if path.is_empty() {
        return TlsSettings::default();
    }
    let path = PathBuf::from(path);
    if let Err(message) = check_ca_file(&path) {
        r.error("tls.ca_file", message);
    }
    TlsSettings {
        ca_file: Some(path),
    }
}

/// Finds a wrong path or a file of something else (a key, a DER file) at
/// start-up rather than at the first outbound call.
fn check_ca_file(path: &Path) -> Result<(), String> {
    let pem =
        std::fs::read(path).map_err(|err| format!("cannot read {}: {err}", path.display()))?;
    let mut certificates = 0;
    for certificate in CertificateDer::pem_slice_iter(&pem) {
        certificate.map_err(|err| format!("{}: malformed PEM: {err}", path.display()))?;
        certificates += 1;
    }
    if certificates == 0 {
        return Err(format!(
            "{} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            path.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Problem, source};

    fn load(text: &str) -> (TlsSettings, Vec<Problem>) {
        let table = source::parse(text).unwrap();
        let mut r = Reader::new(&table);
        let tls = tls(&mut r);
        (tls, r.into_problems())
    }

    fn ca_file_at(path: &Path) -> String {
        format!("[tls]\nca_file = {:?}\n", path.display().to_string())
    }

    #[test]
    fn no_ca_file_means_platform_roots_only() {
        assert_eq!(load(""), (TlsSettings::default(), Vec::new()));
        assert_eq!(load("[tls]\nca_file = \"\"\n").0.ca_file, None);
    }

    #[test]
    fn a_missing_ca_file_is_an_error_naming_the_key_and_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("absent.pem");
        let (_, problems) = load(&ca_file_at(&path));
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].key, "tls.ca_file");
        assert!(
            problems[0].message.contains("cannot read")
                && problems[0].message.contains("absent.pem"),
            "{}",
            problems[0].message
        );
    }

    #[test]
    fn a_file_without_a_certificate_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let key_only = dir.path().join("key.pem");
        std::fs::write(
            &key_only,
            rcgen::KeyPair::generate().unwrap().serialize_pem(),
        )
        .unwrap();
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(
            &garbage,
            "-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        for (path, reason) in [
            (&key_only, "no PEM certificate"),
            (&garbage, "malformed PEM"),
        ] {
            let (_, problems) = load(&ca_file_at(path));
            assert_eq!(problems.len(), 1, "{path:?}");
            assert_eq!(problems[0].key, "tls.ca_file");
            assert!(
                problems[0].message.contains(reason),
                "{}",
                problems[0].message
            );
        }
    }

    #[test]
    fn a_bundle_of_certificates_is_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        let bundle: String = ["ca-one.example", "ca-two.example"]
            .into_iter()
            .map(|name| {
                rcgen::generate_simple_self_signed(vec![name.to_owned()])
                    .unwrap()
                    .cert
                    .pem()
            })
            .collect();
        std::fs::write(&path, bundle).unwrap();
        let (tls, problems) = load(&ca_file_at(&path));
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(tls.ca_file, Some(path));
    }
}
