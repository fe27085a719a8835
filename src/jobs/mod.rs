//! Background jobs: each is a `run_once` that does one round of work, driven
//! by [`run_loop`] until shutdown. Tests call `run_once` directly.

pub mod dispatch;
pub mod expiry;
pub mod idempotency_cleanup;
pub mod progress;
pub mod reconcile;
pub mod retention;

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// What one round did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing to do.
    Idle,
    /// Did this many units of work; a full batch means "run again at once".
    Worked {
        /// Units done.
        done: u64,
        /// Whether the round was cut at its batch size.
        full: bool,
    },
}

/// Runs `round` every `interval` until `shutdown`, at once again after a full
/// batch (adaptive polling), logging failures and carrying on.
pub async fn run_loop<F, Fut>(
    name: &'static str,
    interval: Duration,
    shutdown: CancellationToken,
    mut round: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Outcome>>,
{
    loop {
        let pause = match round().await {
            Ok(Outcome::Worked { full: true, .. }) => Duration::ZERO,
            Ok(_) => interval,
            Err(err) => {
                tracing::warn!(job = name, "round failed: {err:#}");
                interval
            }
        };
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(pause) => {}
        }
    }
}
