//! Watches the configuration file and reloads on change.

use std::time::Duration;

use notify::RecursiveMode;
use notify_debouncer_mini::{DebounceEventResult, new_debouncer};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::LiveConfig;

/// Editors save in bursts (truncate, write, rename); one reload per burst.
const DEBOUNCE: Duration = Duration::from_millis(200);

/// Reloads `config` whenever its file changes, until `shutdown`.
///
/// The directory is watched rather than the file, because editors and
/// orchestrators (Kubernetes ConfigMaps) replace the file instead of writing
/// it in place, which would end a watch on the file itself.
pub async fn watch(config: LiveConfig, shutdown: CancellationToken) -> anyhow::Result<()> {
    let Some(path) = config.path().map(std::path::Path::to_path_buf) else {
        return Ok(());
    };
    let absolute = std::path::absolute(&path)?;
    let directory = absolute
        .parent()
        .map(std::path::Path::to_path_buf)
        .ok_or_else(|| anyhow::anyhow!("config file {} has no directory", path.display()))?;

    let (changed_tx, mut changed_rx) = mpsc::channel::<()>(1);
    let file_name = absolute.file_name().map(ToOwned::to_owned);
    let mut debouncer = new_debouncer(DEBOUNCE, move |result: DebounceEventResult| {
        let touches_file = match result {
            Ok(events) => events
                .iter()
                .any(|event| event.path.file_name() == file_name.as_deref()),
            Err(err) => {
                tracing::warn!("config file watch error: {err}");
                false
            }
        };
        if touches_file {
            // A full channel already holds a pending reload, which will read
            // the newest file anyway.
            let _ = changed_tx.try_send(());
        }
    })?;
    debouncer
        .watcher()
        .watch(&directory, RecursiveMode::NonRecursive)?;
    tracing::debug!(path = %absolute.display(), "watching config file");

    loop {
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            changed = changed_rx.recv() => {
                if changed.is_none() {
                    return Ok(());
                }
                config.reload();
            }
        }
    }
}
