//! A fixed pool of workers with a bounded queue. When the queue is full a
//! submission fails at once (never blocks the request, never queues without
//! bound), so the caller can record a visible, countable "busy" failure.
//!
//! An operation is queued at most once at a time: submitting one that is
//! already queued or running is a no-op, so the dispatcher, callbacks and
//! wake-ups may all hand over the same operation without doubling work.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::StepFuture;

/// What the workers run for an accepted operation.
pub trait Steps: Send + Sync + 'static {
    /// The work for `operation_id`; resolves to the pause after which it
    /// should run again (a poll), if any. The pause is also stored by the
    /// work itself: the wake-up is only the fast path.
    fn run(&self, operation_id: String) -> StepFuture;
}

/// The queue is full (or the pool is shutting down).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the worker pool is busy")]
pub struct Busy;

/// Operations queued or running in this process.
#[derive(Default)]
struct InFlight(Mutex<HashSet<String>>);

impl InFlight {
    /// `false` when `operation_id` is already queued or running.
    fn enter(&self, operation_id: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(operation_id.to_owned())
    }

    fn leave(&self, operation_id: &str) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(operation_id);
    }
}

/// Hands operations to the workers; cheap to clone.
#[derive(Clone)]
pub struct Executor {
    queue: mpsc::Sender<String>,
    in_flight: Arc<InFlight>,
    shutdown: CancellationToken,
}

impl Executor {
    /// Starts `workers` workers on `steps`, fed by a queue of `capacity`.
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
        let executor = Self {
            queue,
            in_flight: Arc::default(),
            shutdown,
        };
        let receiver = Arc::new(tokio::sync::Mutex::new(receiver));
        for _ in 0..workers.max(1) {
            let (receiver, steps, executor) = (receiver.clone(), steps.clone(), executor.clone());
            tasks.spawn(async move {
                loop {
                    let next = tokio::select! {
                        () = executor.shutdown.cancelled() => None,
                        next = async { receiver.lock().await.recv().await } => next,
                    };
                    let Some(operation_id) = next else { return };
                    // Each job in its own task: a panicking step is contained
                    // there (and logged) instead of taking this worker down.
                    let outcome = tokio::spawn(steps.run(operation_id.clone())).await;
                    executor.in_flight.leave(&operation_id);
                    match outcome {
                        Ok(Some(pause)) => executor.wake_after(operation_id, pause),
                        Ok(None) => {}
                        Err(err) => tracing::error!("a workflow step failed unexpectedly: {err}"),
                    }
                }
            });
        }
        executor
    }

    /// Queues `operation_id` (or finds it queued already), or fails at once with [`Busy`].
    pub fn try_submit(&self, operation_id: String) -> Result<(), Busy> {
        if !self.in_flight.enter(&operation_id) {
            return Ok(());
        }
        self.queue.try_send(operation_id).map_err(|err| {
            let (mpsc::error::TrySendError::Full(id) | mpsc::error::TrySendError::Closed(id)) = err;
            self.in_flight.leave(&id);
            Busy
        })
    }

    /// Holds a place in the queue before the work exists, so that whether
    /// there is room is known before a request is recorded, and "busy" can be
    /// written in the same transaction; `None` when the queue is full.
    pub fn reserve(&self) -> Option<Reservation> {
        let permit = self.queue.clone().try_reserve_owned().ok()?;
        Some(Reservation {
            permit,
            in_flight: self.in_flight.clone(),
        })
    }

    /// Free places in the queue now.
    pub fn free_capacity(&self) -> usize {
        self.queue.capacity()
    }

    /// The queue's size.
    pub fn max_capacity(&self) -> usize {
        self.queue.max_capacity()
    }

    /// Queues `operation_id` again after `pause` (a poll); if the queue is
    /// full then, the dispatcher finds it due in the database instead.
    fn wake_after(&self, operation_id: String, pause: Duration) {
        let executor = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = executor.shutdown.cancelled() => {}
                () = tokio::time::sleep(pause) => {
                    let _ = executor.try_submit(operation_id);
                }
            }
        });
    }
}

/// A held place in the queue; dropping it gives the place back.
pub struct Reservation {
    permit: mpsc::OwnedPermit<String>,
    in_flight: Arc<InFlight>,
}

impl Reservation {
    /// Queues `operation_id` in the held place (never fails, never waits).
    /// When the dispatcher found it first and it is queued or running
    /// already, the place is given back: two workers stepping one operation
    /// at once would each send its step's call.
    pub fn send(self, operation_id: String) {
        if self.in_flight.enter(&operation_id) {
            self.permit.send(operation_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records which operation each run started, and never finishes a run,
    /// so every worker stays on the first operation it took.
    #[derive(Default)]
    struct StartedSteps(Mutex<Vec<String>>, tokio::sync::Notify);

    impl Steps for StartedSteps {
        fn run(&self, operation_id: String) -> StepFuture {
            self.0.lock().unwrap().push(operation_id);
            self.1.notify_one();
            Box::pin(std::future::pending())
        }
    }

    #[tokio::test]
    async fn an_operation_the_dispatcher_queued_first_is_not_queued_again_by_its_reservation() {
        let steps = Arc::new(StartedSteps::default());
        let (shutdown, mut tasks) = (CancellationToken::new(), JoinSet::new());
        let executor = Executor::start(2, 4, steps.clone(), shutdown.clone(), &mut tasks);
        let reservation = executor.reserve().unwrap();
        executor.try_submit("accepted".to_owned()).unwrap();
        reservation.send("accepted".to_owned());
        executor.try_submit("other".to_owned()).unwrap();
        // Two workers take the first two queued: with "accepted" queued
        // twice, both would step it and "other" would wait. The bound only
        // turns a worker that never starts into a failure, not a hang.
        let two_started = async {
            while steps.0.lock().unwrap().len() < 2 {
                steps.1.notified().await;
            }
        };
        tokio::time::timeout(Duration::from_secs(30), two_started)
            .await
            .expect("two workers started");
        let mut started = steps.0.lock().unwrap().clone();
        started.sort();
        assert_eq!(started, ["accepted", "other"]);
        shutdown.cancel();
    }
}
