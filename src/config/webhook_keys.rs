//! `webhooks.secret_key` (or `secret_key_file`) and
//! `webhooks.previous_secret_keys` (or `previous_secret_key_files`): the
//! keys that seal webhook signing secrets at rest, each 32 bytes in
//! standard base64 (`openssl rand -base64 32`).

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use secrecy::ExposeSecret;

use super::reader::Reader;
use super::secrets::{self, SecretFiles};

/// The length of a sealing key (AES-256).
pub const KEY_BYTES: usize = 32;

/// One key's bytes; never shown.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyBytes(pub [u8; KEY_BYTES]);

impl fmt::Debug for KeyBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyBytes(<redacted>)")
    }
}

/// The sealing keys the configuration gives.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SealingKeys {
    /// The key that seals, if configured.
    pub current: Option<KeyBytes>,
    /// Keys that only open values sealed before a rotation.
    pub previous: Vec<KeyBytes>,
}

pub(super) fn read(r: &mut Reader<'_>, files: &mut SecretFiles) -> SealingKeys {
    let current = secrets::text(r, files, &["webhooks", "secret_key"])
        .and_then(|text| decoded(r, "webhooks.secret_key", &text));
    let previous: Vec<KeyBytes> = secrets::list(
        r,
        files,
        "webhooks",
        ["previous_secret_keys", "previous_secret_key_files"],
    )
    .iter()
    .filter_map(|text| decoded(r, "webhooks.previous_secret_keys", text.expose_secret()))
    .collect();
    if current.is_none() && !previous.is_empty() {
        r.error(
            "webhooks.previous_secret_keys",
            "previous keys only open what they sealed: set webhooks.secret_key as well",
        );
    }
    SealingKeys { current, previous }
}

/// The key in `text`; the message never shows the text.
fn decoded(r: &mut Reader<'_>, key: &str, text: &str) -> Option<KeyBytes> {
    let bytes = STANDARD.decode(text.trim()).map_err(|_| {
        r.error(
            key,
            "must be 32 bytes in standard base64 (make one with `openssl rand -base64 32`)",
        );
    });
    match <[u8; KEY_BYTES]>::try_from(bytes.ok()?) {
        Ok(bytes) => Some(KeyBytes(bytes)),
        Err(bytes) => {
            r.error(
                key,
                format!(
                    "must be 32 bytes in standard base64, got {} bytes (make one with `openssl rand -base64 32`)",
                    bytes.len()
                ),
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Problem, Settings, Severity, source};

    const KEY: &str = "KioqKioqKioqKioqKioqKioqKioqKioqKioqKioqKio=";

    fn load(text: &str) -> (Settings, Vec<(String, String)>) {
        let (settings, problems) = Settings::from_table(&source::parse(text).unwrap(), None);
        let errors = problems
            .into_iter()
            .filter(|p: &Problem| p.severity == Severity::Error)
            .map(|p| (p.key, p.message))
            .collect();
        (settings, errors)
    }

    #[test]
    fn a_key_is_32_bytes_of_base64_inline_or_in_a_file() {
        let (settings, errors) = load(&format!("[webhooks]\nsecret_key = {KEY:?}\n"));
        assert!(errors.is_empty(), "{errors:?}");
        let keys = settings.webhooks.sealing_keys;
        assert_eq!(keys.current.unwrap().0, [42; 32]);
        assert!(keys.previous.is_empty());

        let dir = tempfile::tempdir().unwrap();
        let (file, old) = (dir.path().join("key"), dir.path().join("old"));
        std::fs::write(&file, format!("{KEY}\n")).unwrap();
        std::fs::write(&old, "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=\n").unwrap();
        let (settings, errors) = load(&format!(
            "[webhooks]\nsecret_key_file = {:?}\nprevious_secret_key_files = [{:?}]\n",
            file.display().to_string(),
            old.display().to_string()
        ));
        assert!(errors.is_empty(), "{errors:?}");
        let keys = settings.webhooks.sealing_keys;
        assert_eq!(keys.current.unwrap().0, [42; 32]);
        assert_eq!(keys.previous[0].0, [1; 32]);
        assert!(!format!("{:?}", keys.previous).contains('1'));
    }

    #[test]
    fn a_wrong_key_is_an_error_that_shows_nothing_of_it() {
        for (text, key, says) in [
            (
                "secret_key = \"not base64!\"".to_owned(),
                "webhooks.secret_key",
                "standard base64",
            ),
            (
                "secret_key = \"c2hvcnQ=\"".to_owned(),
                "webhooks.secret_key",
                "got 5 bytes",
            ),
            (
                "previous_secret_keys = [\"c2hvcnQ=\"]".to_owned(),
                "webhooks.previous_secret_keys",
                "got 5 bytes",
            ),
            (
                format!("previous_secret_keys = [{KEY:?}]"),
                "webhooks.previous_secret_keys",
                "set webhooks.secret_key as well",
            ),
            (
                format!("secret_key = {KEY:?}\nsecret_key_file = \"/k\""),
                "webhooks.secret_key",
                "not both",
            ),
        ] {
            let (settings, errors) = load(&format!("[webhooks]\n{text}\n"));
            assert!(
                errors
                    .iter()
                    .any(|(k, message)| k == key && message.contains(says)),
                "{text}: {errors:?}"
            );
            assert!(
                errors
                    .iter()
                    .all(|(_, message)| !message.contains("c2hvcnQ")),
                "{errors:?}"
            );
            assert!(settings.webhooks.sealing_keys.current.is_none(), "{text}");
        }
    }
}
