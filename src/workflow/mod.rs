//! The long-running part of a request, run off the request path by a bounded
//! pool of workers (SPEC §6).

mod executor;

pub use executor::{Busy, Executor, Reservation, Steps};

use std::future::Future;
use std::pin::Pin;

/// A unit of work for one operation.
pub type StepFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The steps run for accepted operations until the workflow engine is wired
/// in: the operation stays at its first step, visible as waiting.
pub struct AwaitingWorkflow;

impl Steps for AwaitingWorkflow {
    fn run(&self, operation_id: String) -> StepFuture {
        Box::pin(async move {
            tracing::debug!(%operation_id, "accepted; no workflow steps are configured yet");
        })
    }
}
