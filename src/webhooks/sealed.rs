//! The keys that seal webhook signing secrets at rest, and the start-up
//! pass that seals what is not yet sealed under the current key: secrets
//! stored before sealing existed, and those sealed under a key since
//! rotated into `webhooks.previous_secret_keys`.
//!
//! With no `webhooks.secret_key`, a SQLite database gets a key generated
//! into a file next to it (`<database file>.webhook-key`, readable by its
//! owner only), so a newcomer's demo needs nothing set up; it must be backed
//! up with the database. On MySQL, where several instances share the
//! secrets, the key must be configured: without it no endpoint can be
//! registered and no delivery is sent.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use crate::config::{KeyBytes, Settings};
use crate::db::webhook_endpoints::{StoredSecrets, list_stored_secrets, replace_stored_secrets};
use crate::db::{Db, sqlite_file};
use crate::sealing::{KEY_BYTES, KeyRing};

/// The key ring the configuration gives, or for SQLite the generated one;
/// `None` on MySQL without `webhooks.secret_key`.
pub fn key_ring(settings: &Settings) -> anyhow::Result<Option<KeyRing>> {
    let keys = &settings.webhooks.sealing_keys;
    let previous: Vec<[u8; KEY_BYTES]> = keys.previous.iter().map(|key| key.0).collect();
    if let Some(KeyBytes(current)) = &keys.current {
        return Ok(Some(KeyRing::new(current, &previous)));
    }
    if crate::db::Backend::of_url(&settings.database.url) != Some(crate::db::Backend::Sqlite) {
        return Ok(None);
    }
    let current = match sqlite_file(&settings.database.url) {
        Some(database) => generated_key(&key_file_of(&database))?,
        // Nothing outlives an in-memory database: neither need its key.
        None => random_key(),
    };
    Ok(Some(KeyRing::new(&current, &previous)))
}

/// Where the key generated for the SQLite database at `database` lives.
pub fn key_file_of(database: &Path) -> PathBuf {
    let mut name = database.as_os_str().to_owned();
    name.push(".webhook-key");
    PathBuf::from(name)
}

fn random_key() -> [u8; KEY_BYTES] {
    let mut key = [0; KEY_BYTES];
    getrandom::fill(&mut key).expect("the operating system provides random bytes");
    key
}

/// The key in `path`, written there first if the file does not exist.
fn generated_key(path: &Path) -> anyhow::Result<[u8; KEY_BYTES]> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(mut file) => {
            let key = random_key();
            file.write_all(format!("{}\n", STANDARD.encode(key)).as_bytes())
                .and_then(|()| file.sync_all())
                .with_context(|| {
                    format!("cannot write the webhook secret key {}", path.display())
                })?;
            tracing::warn!(
                key_file = %path.display(),
                "webhooks.secret_key is not set: generated a key sealing webhook secrets in this \
                 file; back it up with the database (without it, stored webhook secrets cannot \
                 be opened)"
            );
            Ok(key)
        }
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => read_key(path),
        Err(err) => Err(err)
            .with_context(|| format!("cannot create the webhook secret key {}", path.display())),
    }
}

fn read_key(path: &Path) -> anyhow::Result<[u8; KEY_BYTES]> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the webhook secret key {}", path.display()))?;
    let bytes = STANDARD.decode(text.trim()).ok();
    bytes
        .and_then(|bytes| <[u8; KEY_BYTES]>::try_from(bytes).ok())
        .with_context(|| {
            format!(
                "{} does not hold a webhook secret key (32 bytes in base64)",
                path.display()
            )
        })
}

/// What the start-up pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Resealed {
    /// Endpoints whose secrets are now sealed under the current key.
    pub sealed: u64,
    /// Endpoints whose secrets no configured key opens (left as they are).
    pub unopenable: u64,
}

/// Seals, under the current key, every endpoint's secrets that are not
/// sealed under it yet. Each row is replaced by compare-and-swap, so
/// instances starting together (or a rotation meanwhile) lose nothing.
pub async fn seal_stored(db: &Db, keys: &KeyRing) -> Result<Resealed, sqlx::Error> {
    let mut done = Resealed::default();
    for seen in list_stored_secrets(db).await? {
        let current = keys.sealed_with_current(&seen.secret);
        let previous_current = seen
            .previous_secret
            .as_deref()
            .is_none_or(|previous| keys.sealed_with_current(previous));
        if current && previous_current {
            continue;
        }
        let resealed = |stored: &str| keys.open(stored).map(|secret| keys.seal(&secret));
        let next = match (
            resealed(&seen.secret),
            seen.previous_secret.as_deref().map(resealed).transpose(),
        ) {
            (Ok(secret), Ok(previous_secret)) => StoredSecrets {
                id: seen.id,
                secret,
                previous_secret,
            },
            (Err(why), _) | (_, Err(why)) => {
                tracing::error!(
                    endpoint_id = seen.id,
                    "webhook endpoint secret {why}: its deliveries fail until the key is \
                     configured again (or the secret rotated)"
                );
                done.unopenable += 1;
                continue;
            }
        };
        if replace_stored_secrets(db, &seen, &next).await? {
            done.sealed += 1;
        }
    }
    Ok(done)
}

/// The start-up work once the database is reachable: seal what needs it
/// with `keys`, or without keys say loudly that endpoints exist whose
/// deliveries wait for `webhooks.secret_key`.
pub async fn prepare(db: &Db, keys: Option<&KeyRing>) -> Result<(), sqlx::Error> {
    match keys {
        Some(keys) => {
            let done = seal_stored(db, keys).await?;
            if done.sealed > 0 {
                tracing::info!(
                    endpoints = done.sealed,
                    key_id = keys.current_id(),
                    "webhook signing secrets sealed under the current key"
                );
            }
        }
        None => {
            let endpoints = list_stored_secrets(db).await?.len();
            if endpoints > 0 {
                tracing::error!(
                    endpoints,
                    "webhooks.secret_key is not set: webhook endpoints exist, and no webhook is \
                     delivered until the key is set (see the manual, Explanation: Security)"
                );
            }
        }
    }
    Ok(())
}
