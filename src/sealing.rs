//! Secrets at rest: webhook signing secrets are stored sealed with
//! AES-256-GCM under a key the operator holds (`webhooks.secret_key`), so
//! a copy of the database (a backup, a dump, a read-only replica) does not
//! let its reader sign webhooks in changegate's name.
//!
//! A sealed value is `sealed:v1:<key id>:<base64 of nonce ‖ ciphertext ‖ tag>`.
//! The key id (the first 4 bytes of the key's SHA-256, in hex) says which
//! key sealed it, so a new key can be put in place while values sealed
//! under the old one (listed in `webhooks.previous_secret_keys`) still open
//! until they are sealed again. Each value has a fresh random 96-bit nonce;
//! the associated data names what the value is, so a sealed value cannot be
//! passed off as another kind of secret.

use std::fmt;

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Key, Nonce};
use base64::Engine;
use base64::engine::general_purpose::STANDARD_NO_PAD;
use sha2::{Digest, Sha256};

const PREFIX: &str = "sealed:v1:";
const NONCE_BYTES: usize = 12;
/// What a sealed value holds: bound into each ciphertext.
const PURPOSE: &[u8] = b"changegate webhook signing secret";

/// The length of a key: AES-256.
pub const KEY_BYTES: usize = 32;

/// Why a stored value could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// Sealed under a key that is neither the current nor a previous one.
    #[error(
        "sealed under key {0}, which is neither webhooks.secret_key nor in webhooks.previous_secret_keys"
    )]
    UnknownKey(String),
    /// Not a value this module sealed, or altered since.
    #[error("the sealed secret is damaged (it does not open under its key)")]
    Damaged,
}

/// One key and its id.
struct SealingKey {
    id: String,
    cipher: Aes256Gcm,
}

impl SealingKey {
    fn new(bytes: &[u8; KEY_BYTES]) -> Self {
        Self {
            id: key_id(bytes),
            cipher: Aes256Gcm::new(&Key::<Aes256Gcm>::from(*bytes)),
        }
    }
}

/// The id of `key`: short, and telling nothing about the key itself.
pub fn key_id(key: &[u8; KEY_BYTES]) -> String {
    Sha256::digest(key)[..4]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// The current key, which seals, and the previous ones, which only open.
pub struct KeyRing {
    current: SealingKey,
    previous: Vec<SealingKey>,
}

impl fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let previous: Vec<&str> = self.previous.iter().map(|key| key.id.as_str()).collect();
        f.debug_struct("KeyRing")
            .field("current", &self.current.id)
            .field("previous", &previous)
            .finish()
    }
}

impl KeyRing {
    /// A ring sealing with `current` and opening with it and `previous`.
    pub fn new(current: &[u8; KEY_BYTES], previous: &[[u8; KEY_BYTES]]) -> Self {
        Self {
            current: SealingKey::new(current),
            previous: previous.iter().map(SealingKey::new).collect(),
        }
    }

    /// The id of the key that seals.
    pub fn current_id(&self) -> &str {
        &self.current.id
    }

    /// `secret` sealed under the current key.
    ///
    /// # Panics
    /// If the operating system has no random source (no nonce can be safe then).
    pub fn seal(&self, secret: &str) -> String {
        let mut nonce = [0u8; NONCE_BYTES];
        getrandom::fill(&mut nonce).expect("the operating system provides random bytes");
        let sealed = self
            .current
            .cipher
            .encrypt(
                &Nonce::from(nonce),
                Payload {
                    msg: secret.as_bytes(),
                    aad: PURPOSE,
                },
            )
            .expect("AES-GCM seals any secret of a sane length");
        let mut bytes = Vec::with_capacity(NONCE_BYTES + sealed.len());
        bytes.extend_from_slice(&nonce);
        bytes.extend_from_slice(&sealed);
        format!(
            "{PREFIX}{}:{}",
            self.current.id,
            STANDARD_NO_PAD.encode(bytes)
        )
    }

    /// The secret in `stored`: opened if sealed, as it is if stored before
    /// secrets were sealed (the start-up pass seals those).
    pub fn open(&self, stored: &str) -> Result<String, OpenError> {
        let Some((id, encoded)) = sealed_parts(stored) else {
            return Ok(stored.to_owned());
        };
        let key = std::iter::once(&self.current)
            .chain(&self.previous)
            .find(|key| key.id == id)
            .ok_or_else(|| OpenError::UnknownKey(id.to_owned()))?;
        let bytes = STANDARD_NO_PAD
            .decode(encoded)
            .map_err(|_| OpenError::Damaged)?;
        if bytes.len() <= NONCE_BYTES {
            return Err(OpenError::Damaged);
        }
        let (nonce, sealed) = bytes.split_at(NONCE_BYTES);
        let nonce = <[u8; NONCE_BYTES]>::try_from(nonce).map_err(|_| OpenError::Damaged)?;
        let opened = key
            .cipher
            .decrypt(
                &Nonce::from(nonce),
                Payload {
                    msg: sealed,
                    aad: PURPOSE,
                },
            )
            .map_err(|_| OpenError::Damaged)?;
        String::from_utf8(opened).map_err(|_| OpenError::Damaged)
    }

    /// Whether `stored` is sealed under the current key (nothing to redo).
    pub fn sealed_with_current(&self, stored: &str) -> bool {
        sealed_parts(stored).is_some_and(|(id, _)| id == self.current.id)
    }
}

fn sealed_parts(stored: &str) -> Option<(&str, &str)> {
    stored.strip_prefix(PREFIX)?.split_once(':')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `stored` is a sealed value (under any key).
    fn is_sealed(stored: &str) -> bool {
        sealed_parts(stored).is_some()
    }

    const OLD: [u8; KEY_BYTES] = [7; KEY_BYTES];
    const NEW: [u8; KEY_BYTES] = [9; KEY_BYTES];
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw8xgwG+a0RGo=";

    #[test]
    fn a_sealed_secret_opens_to_itself_and_shows_nothing_of_it() {
        let ring = KeyRing::new(&NEW, &[]);
        let sealed = ring.seal(SECRET);
        assert!(sealed.starts_with(&format!("sealed:v1:{}:", key_id(&NEW))));
        assert!(!sealed.contains("MfKQ9r8GKYqr"));
        assert_eq!(ring.open(&sealed).unwrap(), SECRET);
        assert_ne!(ring.seal(SECRET), sealed, "a fresh nonce every time");
    }

    #[test]
    fn a_generated_secret_sealed_fits_the_column() {
        let secret = crate::signature::WebhookSecret::generate().expose();
        // webhook_endpoint.secret is VARCHAR(255) on MySQL (migration 0013).
        assert!(KeyRing::new(&NEW, &[]).seal(&secret).len() <= 128);
    }

    #[test]
    fn an_altered_value_or_one_sealed_for_another_purpose_does_not_open() {
        let ring = KeyRing::new(&NEW, &[]);
        let sealed = ring.seal(SECRET);
        let mut altered = sealed.clone().into_bytes();
        let last = altered.len() - 3;
        altered[last] = if altered[last] == b'A' { b'B' } else { b'A' };
        let altered = String::from_utf8(altered).unwrap();
        assert_eq!(ring.open(&altered), Err(OpenError::Damaged));

        let cipher = Aes256Gcm::new(&Key::<Aes256Gcm>::from(NEW));
        let nonce = [1u8; NONCE_BYTES];
        let mut other = nonce.to_vec();
        other.extend(
            cipher
                .encrypt(&Nonce::from(nonce), SECRET.as_bytes())
                .unwrap(),
        );
        let without_purpose = format!("{PREFIX}{}:{}", key_id(&NEW), STANDARD_NO_PAD.encode(other));
        assert_eq!(ring.open(&without_purpose), Err(OpenError::Damaged));
    }

    #[test]
    fn a_previous_key_opens_but_only_the_current_one_seals() {
        let sealed_before = KeyRing::new(&OLD, &[]).seal(SECRET);
        let rotated = KeyRing::new(&NEW, &[OLD]);
        assert_eq!(rotated.open(&sealed_before).unwrap(), SECRET);
        assert!(!rotated.sealed_with_current(&sealed_before));
        assert!(rotated.sealed_with_current(&rotated.seal(SECRET)));
        let forgotten = KeyRing::new(&NEW, &[]);
        assert_eq!(
            forgotten.open(&sealed_before),
            Err(OpenError::UnknownKey(key_id(&OLD)))
        );
    }

    #[test]
    fn a_secret_stored_before_sealing_reads_as_it_is() {
        let ring = KeyRing::new(&NEW, &[]);
        assert!(!is_sealed(SECRET));
        assert_eq!(ring.open(SECRET).unwrap(), SECRET);
        assert!(!ring.sealed_with_current(SECRET));
    }
}
