//! Watches the configuration file and the secret files, and reloads on change.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use notify::event::{AccessKind, AccessMode, ModifyKind};
use notify::{Event, EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{LiveConfig, ReloadOutcome};

/// Editors save in bursts (truncate, write, rename); one reload per burst:
/// the files are read once no change has come for this long.
const SETTLE: Duration = Duration::from_millis(200);

/// The files a reload reads, as the directories to watch and the names in
/// them that matter.
#[derive(Default)]
struct Watched {
    directories: BTreeSet<PathBuf>,
    names: BTreeSet<OsString>,
}

impl Watched {
    fn of(config: &LiveConfig) -> Self {
        let mut watched = Self::default();
        for file in config.files() {
            let absolute = match std::path::absolute(&file) {
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

/// Whether an event of this kind can change what a file holds: data written
/// (and the writer closing the file), a file created, removed or renamed
/// into place. Opening, reading, closing after reading and metadata changes
/// (access times, `touch`) cannot; a reload's own reads cause exactly those,
/// in this instance and in every other one watching the same file, so
/// reacting to them would reload for ever.
fn may_change_content(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::Create(_)
            | EventKind::Remove(_)
            | EventKind::Modify(ModifyKind::Data(_) | ModifyKind::Name(_) | ModifyKind::Any)
            | EventKind::Access(AccessKind::Close(AccessMode::Write))
    )
}

/// Reloads `config` whenever its file or one of its secret files changes,
/// until `shutdown`. A burst of events is one reload, and only if what the
/// files hold differs from the last load (see [`LiveConfig::reload_if_changed`]).
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
    let mut watcher = notify::recommended_watcher(move |result: notify::Result<Event>| {
        let touched = match result {
            Ok(event) => {
                let watched = filter.lock().unwrap_or_else(PoisonError::into_inner);
                may_change_content(&event.kind)
                    && event.paths.iter().any(|path| watched.touched_by(path))
            }
            Err(err) => {
                tracing::warn!("config file watch error: {err}");
                false
            }
        };
        if touched {
            // A full channel already holds a pending change, after which the
            // newest files are read anyway.
            let _ = changed_tx.try_send(());
        }
    })?;
    follow(&mut watcher, &mut directories, &wanted);

    loop {
        if !next_change(&mut changed_rx, &shutdown).await {
            return Ok(());
        }
        // Let the burst settle: each further change restarts the wait.
        loop {
            tokio::select! {
                () = tokio::time::sleep(SETTLE) => break,
                more = next_change(&mut changed_rx, &shutdown) => if !more {
                    return Ok(());
                },
            }
        }
        if config.reload_if_changed() == Some(ReloadOutcome::Applied) {
            let next = Watched::of(&config);
            follow(&mut watcher, &mut directories, &next.directories);
            *watched.lock().unwrap_or_else(PoisonError::into_inner) = next;
        }
    }
}

/// Waits for the next change; `false` once `shutdown` is cancelled or the
/// watcher is gone.
async fn next_change(changed: &mut mpsc::Receiver<()>, shutdown: &CancellationToken) -> bool {
    tokio::select! {
        () = shutdown.cancelled() => false,
        change = changed.recv() => change.is_some(),
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
