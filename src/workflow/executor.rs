//! A fixed pool of workers with a bounded queue. When the queue is full a
//! submission fails at once (never blocks the request, never queues without
//! bound), so the caller can record a visible, countable "busy" failure.

use std::sync::Arc;

use tokio::sync::{Mutex, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::StepFuture;

/// What the workers run for an accepted operation.
pub trait Steps: Send + Sync + 'static {
    /// The work for `operation_id`.
    fn run(&self, operation_id: String) -> StepFuture;
}

/// The queue is full (or the pool is shutting down).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the worker pool is busy")]
pub struct Busy;

/// Hands operations to the workers; cheap to clone.
#[derive(Clone)]
pub struct Executor {
    queue: mpsc::Sender<String>,
}

impl Executor {
    /// Starts `workers` workers on `tasks`, fed by a queue of `capacity`.
    /// Workers stop taking work when `shutdown` is cancelled and finish what
    /// they hold.
    pub fn start(
        workers: u32,
        capacity: u32,
        steps: Arc<dyn Steps>,
        shutdown: CancellationToken,
        tasks: &mut JoinSet<()>,
    ) -> Self {
        let (queue, receiver) = mpsc::channel(usize::try_from(capacity).unwrap_or(1).max(1));
        let receiver = Arc::new(Mutex::new(receiver));
        for _ in 0..workers.max(1) {
            let (receiver, steps, shutdown) = (receiver.clone(), steps.clone(), shutdown.clone());
            tasks.spawn(async move {
                loop {
                    let next = tokio::select! {
                        () = shutdown.cancelled() => None,
                        next = async { receiver.lock().await.recv().await } => next,
                    };
                    let Some(operation_id) = next else { return };
                    // Each job in its own task: a panicking step is contained
                    // there (and logged) instead of taking this worker down.
                    if let Err(err) = tokio::spawn(steps.run(operation_id)).await {
                        tracing::error!("a workflow step failed unexpectedly: {err}");
                    }
                }
            });
        }
        Self { queue }
    }

    /// Queues `operation_id`, or fails at once with [`Busy`].
    pub fn try_submit(&self, operation_id: String) -> Result<(), Busy> {
        self.queue.try_send(operation_id).map_err(|_| Busy)
    }

    /// Holds a place in the queue before the work exists, so that whether
    /// there is room is known before a request is recorded, and "busy" can be
    /// written in the same transaction; `None` when the queue is full.
    pub fn reserve(&self) -> Option<Reservation> {
        self.queue.clone().try_reserve_owned().ok().map(Reservation)
    }
}

/// A held place in the queue; dropping it gives the place back.
pub struct Reservation(mpsc::OwnedPermit<String>);

impl Reservation {
    /// Queues `operation_id` in the held place (never fails, never waits).
    pub fn send(self, operation_id: String) {
        self.0.send(operation_id);
    }
}
