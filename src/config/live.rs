//! The live configuration: an atomically swapped snapshot that readers load
//! without locking, and the reload rules that protect it from a bad file.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;

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
        Self {
            inner: Arc::new(Inner {
                current: ArcSwap::from_pointee(settings),
                path,
                set_level,
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

    /// Re-reads the file, the environment and the secret files. An invalid
    /// file keeps the last good snapshot, logs one error and counts
    /// `changegate_config_reload_failures_total`; static settings (among them
    /// the database password read from `database.password_file`) keep their
    /// running values until a restart.
    pub fn reload(&self) -> ReloadOutcome {
        let running = self.current();
        let (mut next, warnings) = match load(self.path(), Some(&running)) {
            Ok(loaded) => loaded,
            Err(problems) => {
                let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
                tracing::error!(
                    problems = %problems.join("; "),
                    "configuration reload rejected; keeping the last good configuration"
                );
                metrics::counter!("changegate_config_reload_failures_total").increment(1);
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
        if next.server.listen != running.server.listen
            || next.database.url != running.database.url
            || next.tls != running.tls
        {
            tracing::warn!("server, database or tls settings changed; they apply after a restart");
        }
        next.server = running.server.clone();
        next.database = running.database.clone();
        next.tls = running.tls.clone();
        next.log.format = running.log.format;
        if next.log.level != running.log.level
            && let Some(set_level) = &self.inner.set_level
            && let Err(err) = set_level(&next.log.level)
        {
            tracing::error!(level = %next.log.level, "log level not applied: {err}");
            next.log.level = running.log.level.clone();
        }
        self.inner.current.store(Arc::new(next));
        metrics::counter!("changegate_config_reloads_total").increment(1);
        tracing::info!("configuration reloaded");
        ReloadOutcome::Applied
    }
}
