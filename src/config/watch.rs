//! Watches the configuration file and the secret files, and reloads on change.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use notify_debouncer_mini::{DebounceEventResult, new_debouncer};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{LiveConfig, ReloadOutcome};

/// Editors save in bursts (truncate, write, rename); one reload per burst.
const DEBOUNCE: Duration = Duration::from_millis(200);

/// The files a reload reads, as the directories to watch and the names in
/// them that matter.
#[derive(Default)]
struct Watched {
    directories: BTreeSet<PathBuf>,
    names: BTreeSet<OsString>,
}

impl Watched {
    /// The configuration file and every `_file` secret the current snapshot
    /// read (`tls.ca_file` is static, so a change to it needs a restart anyway).
    fn of(config: &LiveConfig) -> Self {
        let settings = config.current();
        let files = config
            .path()
            .into_iter()
            .chain(settings.secret_files.paths())
            .chain(settings.database.password_file.as_deref());
        let mut watched = Self::default();
        for file in files {
            let absolute = match std::path::absolute(file) {
                Ok(absolute) => absolute,
                Err(err) => {
                    tracing::warn!(path = %file.display(), "cannot watch: {err}");
                    continue;
                }
            };
            if let (Some(directory), Some(name)) = (absolute.parent(), absolute.file_name()) {
                watched.directories.insert(directory.to_owned());
                watched.names.insert(name.to_owned());
            }
        }
        watched
    }

    /// Whether a change at `path` may have changed a watched file. Names are
    /// compared, not whole paths, because some platforms report events under
    /// the resolved path of a symlinked directory. Kubernetes updates a
    /// mounted ConfigMap or Secret by swapping its hidden `..data` symlink,
    /// so the file's own name never shows up in the events.
    fn touched_by(&self, path: &Path) -> bool {
        path.file_name().is_some_and(|name| {
            self.names.contains(name) || name.to_string_lossy().starts_with("..")
        })
    }
}

/// Reloads `config` whenever its file or one of its secret files changes,
/// until `shutdown`.
///
/// Directories are watched rather than files, because editors and
/// orchestrators (Kubernetes ConfigMaps and Secrets) replace a file instead
/// of writing it in place, which would end a watch on the file itself. The
/// set of directories follows each applied reload, so a secret file named
/// for the first time is watched from then on.
pub async fn watch(config: LiveConfig, shutdown: CancellationToken) -> anyhow::Result<()> {
    let initial = Watched::of(&config);
    if initial.directories.is_empty() {
        return Ok(());
    }
    let mut directories = BTreeSet::new();
    let wanted = initial.directories.clone();
    let watched = Arc::new(Mutex::new(initial));

    let (changed_tx, mut changed_rx) = mpsc::channel::<()>(1);
    let filter = Arc::clone(&watched);
    let mut debouncer = new_debouncer(DEBOUNCE, move |result: DebounceEventResult| {
        let touched = match result {
            Ok(events) => {
                let watched = filter.lock().unwrap_or_else(PoisonError::into_inner);
                events.iter().any(|event| watched.touched_by(&event.path))
            }
            Err(err) => {
                tracing::warn!("config file watch error: {err}");
                false
            }
        };
        if touched {
            // A full channel already holds a pending reload, which will read
            // the newest files anyway.
            let _ = changed_tx.try_send(());
        }
    })?;
    follow(debouncer.watcher(), &mut directories, &wanted);

    loop {
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            changed = changed_rx.recv() => {
                if changed.is_none() {
                    return Ok(());
                }
                if config.reload() == ReloadOutcome::Applied {
                    let next = Watched::of(&config);
                    follow(debouncer.watcher(), &mut directories, &next.directories);
                    *watched.lock().unwrap_or_else(PoisonError::into_inner) = next;
                }
            }
        }
    }
}

/// Watches the directories in `wanted` not yet in `watching` and stops
/// watching those no longer wanted. A directory that cannot be watched is
/// logged and tried again after the next reload.
fn follow(watcher: &mut dyn Watcher, watching: &mut BTreeSet<PathBuf>, wanted: &BTreeSet<PathBuf>) {
    let gone: Vec<PathBuf> = watching.difference(wanted).cloned().collect();
    for directory in gone {
        // A directory that disappeared has no watch left to remove.
        let _ = watcher.unwatch(&directory);
        watching.remove(&directory);
    }
    let added: Vec<PathBuf> = wanted.difference(watching).cloned().collect();
    for directory in added {
        match watcher.watch(&directory, RecursiveMode::NonRecursive) {
            Ok(()) => {
                tracing::debug!(directory = %directory.display(), "watching for configuration changes");
                watching.insert(directory);
            }
            Err(err) => tracing::error!(
                directory = %directory.display(),
                "cannot watch; changes there need a restart: {err}"
            ),
        }
    }
}
