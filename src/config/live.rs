//! The live configuration: an atomically swapped snapshot that readers load
//! without locking, and the reload rules that protect it from a bad file.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use arc_swap::ArcSwap;
use sha2::{Digest, Sha256};

use super::secrets::MAX_SECRET_BYTES;
use super::static_settings::keep_static;
use super::{Settings, load};

/// Applies a new log level or filter at runtime; `Err` when it is rejected.
pub type LevelSetter = Arc<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// Handle to the current configuration snapshot; cheap to clone.
#[derive(Clone)]
pub struct LiveConfig {
    inner: Arc<Inner>,
}

struct Inner {
    current: ArcSwap<Settings>,
    path: Option<PathBuf>,
    set_level: Option<LevelSetter>,
    /// What the files held at the last load, good or bad; `None` when not
    /// known (the next change event then reloads whatever the files hold).
    last_read: Mutex<Option<Fingerprint>>,
}

/// What a reload did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReloadOutcome {
    /// The new snapshot is live.
    Applied,
    /// The file was invalid; the last good snapshot stays live.
    Rejected,
}

impl LiveConfig {
    /// Starts from a validated snapshot. `path` is the file reloads read;
    /// `set_level` applies `log.level` changes to the running logger.
    pub fn new(settings: Settings, path: Option<PathBuf>, set_level: Option<LevelSetter>) -> Self {
        let last_read = Fingerprint::of(path.as_deref(), &settings);
        Self {
            inner: Arc::new(Inner {
                current: ArcSwap::from_pointee(settings),
                path,
                set_level,
                last_read: Mutex::new(Some(last_read)),
            }),
        }
    }

    /// The current snapshot. Hold it for the duration of one use, not longer,
    /// so a reload takes effect on the next use.
    pub fn current(&self) -> Arc<Settings> {
        self.inner.current.load_full()
    }

    /// The current snapshot for a short, synchronous use: cheaper than
    /// [`LiveConfig::current`] on the per-request path (no reference count
    /// is taken), but not to be held across an `.await`.
    pub fn load(&self) -> arc_swap::Guard<Arc<Settings>> {
        self.inner.current.load()
    }

    /// The watched file, if any.
    pub fn path(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }

    /// The files a reload reads: the configuration file and every `_file`
    /// secret the current snapshot read (`tls.ca_file` is static, so a change
    /// to it needs a restart anyway).
    pub fn files(&self) -> Vec<PathBuf> {
        files_read(self.path(), &self.current())
    }

    /// [`LiveConfig::reload`], but only when a file it reads now holds
    /// something else than at the last load; `None` when nothing changed.
    /// So an event that changed nothing (an editor saving the same text, a
    /// `touch`) reloads nothing, and a broken file is reported once, not
    /// again until its content changes.
    pub fn reload_if_changed(&self) -> Option<ReloadOutcome> {
        let mut last_read = self.last_read();
        let running = self.current();
        let read = Fingerprint::of(self.path(), &running);
        (*last_read != Some(read)).then(|| self.reload_read(&running, read, &mut last_read))
    }

    /// Re-reads the file, the environment and the secret files. An invalid
    /// file keeps the last good snapshot, logs one error, counts
    /// `changegate_config_reload_failures_total` and sets
    /// `changegate_config_last_reload_successful` to 0 until a reload
    /// succeeds; static settings (among them the database password read
    /// from `database.password_file`) keep their running values until a
    /// restart.
    pub fn reload(&self) -> ReloadOutcome {
        let mut last_read = self.last_read();
        let running = self.current();
        let read = Fingerprint::of(self.path(), &running);
        self.reload_read(&running, read, &mut last_read)
    }

    /// Held for a whole reload, so concurrent reloads take turns and each
    /// remembers what it read.
    fn last_read(&self) -> MutexGuard<'_, Option<Fingerprint>> {
        self.inner
            .last_read
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Reloads over `running`, the files having been found as `read` just
    /// before: a change during the reload then makes the next check reload
    /// again rather than go unnoticed. When the new snapshot names other
    /// secret files, `read` did not cover them and is not remembered.
    fn reload_read(
        &self,
        running: &Settings,
        read: Fingerprint,
        last_read: &mut Option<Fingerprint>,
    ) -> ReloadOutcome {
        let outcome = self.reload_over(running);
        let same_files =
            outcome == ReloadOutcome::Rejected || files_read(self.path(), running) == self.files();
        *last_read = same_files.then_some(read);
        outcome
    }

    fn reload_over(&self, running: &Settings) -> ReloadOutcome {
        let (mut next, warnings) = match load(self.path(), Some(running)) {
            Ok(loaded) => loaded,
            Err(problems) => {
                let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
                tracing::error!(
                    problems = %problems.join("; "),
                    "configuration reload rejected; keeping the last good configuration"
                );
                metrics::counter!("changegate_config_reload_failures_total").increment(1);
                metrics::gauge!("changegate_config_last_reload_successful").set(0.0);
                return ReloadOutcome::Rejected;
            }
        };
        for warning in &warnings {
            // SPEC §4: a log level that cannot be applied is an error.
            if warning.key == "log.level" {
                tracing::error!(key = %warning.key, "{}", warning.message);
            } else {
                tracing::warn!(key = %warning.key, "{}", warning.message);
            }
        }
        let kept = keep_static(&mut next, running);
        if !kept.is_empty() {
            tracing::warn!(
                keys = %kept.join(", "),
                "static settings changed in the file; they keep their running values until a restart"
            );
        }
        if next.log.level != running.log.level
            && let Some(set_level) = &self.inner.set_level
            && let Err(err) = set_level(&next.log.level)
        {
            tracing::error!(level = %next.log.level, "log level not applied: {err}");
            next.log.level = running.log.level.clone();
        }
        self.inner.current.store(Arc::new(next));
        metrics::counter!("changegate_config_reloads_total").increment(1);
        metrics::gauge!("changegate_config_last_reload_successful").set(1.0);
        tracing::info!("configuration reloaded");
        ReloadOutcome::Applied
    }
}

fn files_read(path: Option<&Path>, settings: &Settings) -> Vec<PathBuf> {
    path.into_iter()
        .chain(settings.secret_files.paths())
        .chain(settings.database.password_file.as_deref())
        .map(Path::to_path_buf)
        .collect()
}

/// A digest of what a reload would read: each file's path with its bytes
/// or the error reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fingerprint([u8; 32]);

impl Fingerprint {
    /// The configuration file at `path` and the secret files `settings` read.
    fn of(path: Option<&Path>, settings: &Settings) -> Self {
        let mut digest = Sha256::new();
        if let Some(path) = path {
            add(&mut digest, path, std::fs::read(path));
        }
        for secret in files_read(None, settings) {
            add(&mut digest, &secret, read_secret(&secret));
        }
        Self(digest.finalize().into())
    }
}

fn add(digest: &mut Sha256, file: &Path, read: std::io::Result<Vec<u8>>) {
    let path = file.as_os_str().as_encoded_bytes();
    digest.update(path.len().to_le_bytes());
    digest.update(path);
    match read {
        Ok(bytes) => {
            digest.update([1]);
            digest.update(bytes.len().to_le_bytes());
            digest.update(bytes);
        }
        Err(err) => {
            digest.update([0]);
            digest.update(err.to_string());
        }
    }
}

/// A secret file's bytes as far as a load reads them: up to one past the
/// largest secret, since a load rejects a larger file whatever follows (so a
/// log named by mistake is not read whole on every write to it).
fn read_secret(file: &Path) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    std::fs::File::open(file)?
        .take(MAX_SECRET_BYTES as u64 + 1)
        .read_to_end(&mut bytes)?;
    Ok(bytes)
}
