//! The long-running part of a request, run off the request path by a bounded
//! pool of workers (SPEC §6).

mod approval;
mod events;
mod executor;
mod interrupted;
mod landed;
mod merge_request;
mod merge_state;
mod open;
mod pipeline;
mod review;
mod scheduled;
mod settle;

pub(crate) use events::{head_pipeline_run, merged as merged_events, rebasing as rebasing_event};
pub(crate) use interrupted::{Verdict, outage_message, verdict};
pub(crate) use landed::shared_action;
pub use merge_request::file_change;
pub(crate) use merge_request::{Round, bot, file_path_of, removal_of};
pub(crate) use open::{ChangeSet, MAX_DESCRIPTION_BYTES, OpenFailure, Opened};

pub use executor::{Busy, Executor, Reservation, Steps};

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Instrument;

use crate::clients::approval::ApprovalClient;
use crate::clients::gitlab::GitLabClient;
use crate::config::{LiveConfig, PollSchedule};
use crate::db::batches::in_running_batch;
use crate::db::leases::{acquire_lease, release_lease, renew_lease};
use crate::db::operations::{OperationRow, get_operation_with_status};
use crate::db::{Db, DbSlot};
use crate::domain::{BindingStatus, StepStatus};
use crate::store::{self, Change, StoreError};
use crate::traces::propagation;

/// A unit of work for one operation; resolves to the pause after which it
/// should run again, if any.
pub type StepFuture = Pin<Box<dyn Future<Output = Option<Duration>> + Send>>;

/// The steps of the workflow, chosen from the operation's state as stored
/// (never from the caller), so re-running a step is safe.
#[derive(Clone)]
pub struct Workflow {
    db: DbSlot,
    config: LiveConfig,
    approvals: ApprovalClient,
    pub(crate) gitlab: GitLabClient,
    /// This process, as the holder of step leases.
    owner: Arc<str>,
}

/// The most steps one run takes an operation through (a guard against a
/// step that would not move it).
const MAX_STEPS_PER_RUN: usize = 8;
/// The longest pause between two tries of a step that did not move.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// What one step did.
enum Progress {
    /// Moved the operation; the next step may follow at once.
    Moved,
    /// Nothing to do now: the operation waits for something outside, or its
    /// step's write already made it due later.
    Idle,
    /// Did not move it: try again after the pause, if it is still at `version`.
    Retry { pause: Duration, version: i64 },
}

impl Workflow {
    /// Steps over the shared database, configuration and clients.
    pub fn new(
        db: DbSlot,
        config: LiveConfig,
        approvals: ApprovalClient,
        gitlab: GitLabClient,
    ) -> Self {
        Self {
            db,
            config,
            approvals,
            gitlab,
            owner: Arc::from(format!("changegate-{}", uuid::Uuid::new_v4())),
        }
    }

    /// The same steps, holding their leases as `owner` (an id of this
    /// instance's run, see [`crate::instance::Instance`]).
    #[must_use]
    pub fn owned_by(mut self, owner: &str) -> Self {
        self.owner = Arc::from(owner);
        self
    }

    /// Takes the operation's lease, runs its steps one after another until it
    /// waits for something outside (a decision, a deploy, an operator), must
    /// be polled later, or is finished; then gives the lease back. Returns the
    /// pause before the next poll, if any.
    async fn run_steps(&self, operation_id: &str) -> Option<Duration> {
        let db = self.db.get()?;
        let lease = self.config.current().executor.lease;
        match acquire_lease(db, operation_id, &self.owner, lease).await {
            Ok(true) => {}
            // Another instance runs it; it hands it back when done.
            Ok(false) => return None,
            Err(err) => {
                tracing::warn!(operation_id, "cannot take the step lease: {err}");
                return None;
            }
        }
        let steps = async {
            for _ in 0..MAX_STEPS_PER_RUN {
                match self.contained_step(db, operation_id).await {
                    Progress::Moved => {}
                    other => return other,
                }
            }
            Progress::Idle
        };
        let (pause, version) = match self.holding_lease(db, operation_id, lease, steps).await {
            Some(Progress::Retry { pause, version }) => (Some(pause), version),
            Some(_) => (None, 0),
            None => return None,
        };
        if let Err(err) = release_lease(db, operation_id, &self.owner, version, pause).await {
            // The lease runs out by itself; the dispatcher then takes it up.
            tracing::warn!(operation_id, "cannot give the step lease back: {err}");
        }
        pause
    }

    /// Runs `work` while renewing the lease; `None` if the lease was lost
    /// (then `work` is dropped: steps are re-entrant, the new holder re-runs it).
    async fn holding_lease<F: Future>(
        &self,
        db: &Db,
        operation_id: &str,
        lease: Duration,
        work: F,
    ) -> Option<F::Output> {
        tokio::pin!(work);
        loop {
            tokio::select! {
                done = &mut work => return Some(done),
                () = tokio::time::sleep(lease / 3) => {
                    match renew_lease(db, operation_id, &self.owner, lease).await {
                        Ok(true) => {}
                        Ok(false) => {
                            tracing::warn!(operation_id, "step lease lost to another instance");
                            return None;
                        }
                        Err(err) => tracing::warn!(operation_id, "cannot renew the step lease: {err}"),
                    }
                }
            }
        }
    }

    /// [`Self::step`] in a task of its own, so that a step that panics
    /// (a bug) lands the operation in its step's declared failure, with the
    /// detail in the logs, instead of being re-run and failing forever.
    async fn contained_step(&self, db: &Db, operation_id: &str) -> Progress {
        let (workflow, task_db, id) = (self.clone(), db.clone(), operation_id.to_owned());
        match tokio::spawn(async move { workflow.step(&task_db, &id).await }).await {
            Ok(progress) => progress,
            Err(err) => {
                tracing::error!(operation_id, "a workflow step failed unexpectedly: {err}");
                if let Err(err) = self.fail_unexpectedly(db, operation_id).await {
                    tracing::error!(operation_id, "cannot record the unexpected failure: {err}");
                }
                Progress::Idle
            }
        }
    }

    async fn fail_unexpectedly(&self, db: &Db, operation_id: &str) -> Result<(), StoreError> {
        let Some((operation, Some(status), _)) =
            get_operation_with_status(db, operation_id).await?
        else {
            return Ok(());
        };
        let Some((to, step)) = declared_failure(status) else {
            return Ok(());
        };
        let change = Change {
            step,
            message: Some("an unexpected error stopped this step; the team can see the details"),
            actor: "workflow",
        };
        store::flip(db, &operation.operation_id, &[status], to, change)
            .await
            .map(|_| ())
    }

    /// One step, chosen from the stored state.
    async fn step(&self, db: &Db, operation_id: &str) -> Progress {
        let (operation, status) = match get_operation_with_status(db, operation_id).await {
            Ok(Some((operation, status, _))) => (operation, status),
            Ok(None) => return Progress::Idle,
            Err(err) => {
                tracing::warn!(operation_id, "cannot read the operation: {err}");
                return Progress::Retry {
                    pause: MAX_BACKOFF,
                    version: 0,
                };
            }
        };
        let span = tracing::debug_span!(
            "step",
            otel.name = format!("step {}", operation.step),
            operation.id = operation_id,
            mr.iid = operation.mr_iid,
            step = %operation.step,
        );
        // Part of the trace of the request that submitted the operation.
        propagation::continue_stored(&span, operation.trace_parent.as_deref());
        self.step_from(db, operation_id, operation, status)
            .instrument(span)
            .await
    }

    /// [`Self::step`] once the operation is read.
    async fn step_from(
        &self,
        db: &Db,
        operation_id: &str,
        operation: OperationRow,
        status: Option<BindingStatus>,
    ) -> Progress {
        // A member of a running merge batch moves with its batch, never by itself.
        if matches!(
            status,
            Some(BindingStatus::MrCreating | BindingStatus::MrCreated | BindingStatus::Merging)
        ) {
            match in_running_batch(db, operation_id).await {
                Ok(false) => {}
                Ok(true) => return Progress::Idle,
                Err(err) => {
                    tracing::warn!(operation_id, "cannot read the operation's batch: {err}");
                    return Progress::Retry {
                        pause: MAX_BACKOFF,
                        version: operation.version,
                    };
                }
            }
        }
        let started = Instant::now();
        let (kind, outcome) = match (status, operation.step) {
            (
                Some(BindingStatus::ApprovalSending),
                StepStatus::Accepted
                | StepStatus::ApprovalSending
                | StepStatus::ApprovalSendUnknown,
            ) => ("send_approval", self.send_approval(db, &operation).await),
            (
                Some(BindingStatus::MrCreating),
                StepStatus::Accepted | StepStatus::CalledBackApproved | StepStatus::MrCreating,
            ) => (
                "open_merge_request",
                self.open_merge_request(db, &operation).await,
            ),
            (
                Some(BindingStatus::MrCreated),
                StepStatus::MrCreated | StepStatus::PipelinePending,
            ) => ("await_pipeline", self.await_pipeline(db, &operation).await),
            (
                Some(BindingStatus::MrCreated | BindingStatus::Closing),
                StepStatus::PipelineRetrying,
            ) => ("rerun_pipeline", self.rerun_pipeline(db, &operation).await),
            (
                Some(BindingStatus::Merging),
                StepStatus::HandleStarted
                | StepStatus::CalledBackApproved
                | StepStatus::MergePending
                | StepStatus::MergeChecksPending,
            ) => (
                "approve_and_merge",
                self.approve_and_merge(db, &operation).await,
            ),
            // A close walks the same MR steps while its binding stays
            // CLOSING, once its time and its target's window have come.
            (
                Some(BindingStatus::Closing),
                StepStatus::CloseRequested | StepStatus::CloseExpired | StepStatus::Scheduled,
            ) => (
                "open_merge_request",
                self.close_when_due(db, &operation).await,
            ),
            (
                Some(BindingStatus::Closing),
                StepStatus::CloseMrCreated | StepStatus::PipelinePending,
            ) => ("await_pipeline", self.await_pipeline(db, &operation).await),
            (
                Some(BindingStatus::Closing),
                StepStatus::HandleStarted
                | StepStatus::MergePending
                | StepStatus::MergeChecksPending,
            ) => (
                "approve_and_merge",
                self.approve_and_merge(db, &operation).await,
            ),
            // Waiting for a decision, a deploy, or an operator.
            (status, step) => {
                tracing::debug!(operation_id, ?status, %step, "no automatic step from here");
                return Progress::Idle;
            }
        };
        record_step(kind, started.elapsed(), outcome.is_ok());
        // A pause GitLab's rate limiter asked for is kept: the step is due
        // again only after it (stored as its due time, so also after a restart).
        let pause = poll_pause(
            &self.config.current().polling,
            operation.step,
            operation.attempts,
        )
        .max(self.gitlab.quiet_for().unwrap_or_default());
        let retry = Progress::Retry {
            pause,
            version: operation.version,
        };
        match outcome {
            Ok(()) => {}
            // Another worker moved the request first: the guarded write did
            // its job, and nobody has anything to do about it.
            Err(StoreError::Preempted) => {
                metrics::counter!("changegate_step_preempted_total", "step" => kind).increment(1);
                tracing::debug!(operation_id, step = kind, "workflow step preempted");
                return retry;
            }
            Err(err) => {
                tracing::warn!(operation_id, "workflow step failed: {err}");
                return retry;
            }
        }
        match get_operation_with_status(db, operation_id).await {
            Ok(Some((after, _, _))) if after.version == operation.version => retry,
            // Moved: an unknown outcome is waited out (its write made it due
            // later), not retried in a loop.
            Ok(Some((after, _, _))) if after.step.resume_after() == Some(Duration::ZERO) => {
                Progress::Moved
            }
            Ok(_) => Progress::Idle,
            Err(err) => {
                tracing::warn!(operation_id, "cannot re-read the operation: {err}");
                Progress::Idle
            }
        }
    }
}

/// Records one step's run in `changegate_step_duration_seconds{step, result}`:
/// `step` names what it did (`send_approval`, `open_merge_request`,
/// `await_pipeline`, `rerun_pipeline`, `approve_and_merge`); `result` is
/// `error` when its write to the database failed (the step is retried).
fn record_step(kind: &'static str, took: Duration, written: bool) {
    let result = if written { "ok" } else { "error" };
    metrics::histogram!("changegate_step_duration_seconds", "step" => kind, "result" => result)
        .record(took.as_secs_f64());
}

/// The steps [`Workflow::step`] runs, as its metrics label them.
const STEP_KINDS: [&str; 5] = [
    "send_approval",
    "open_merge_request",
    "await_pipeline",
    "rerun_pipeline",
    "approve_and_merge",
];

/// Describes the step metrics and starts the preemption counters at zero.
pub fn describe_metrics() {
    metrics::describe_histogram!(
        "changegate_step_duration_seconds",
        "How long one round of a workflow step took, by step and result (error: its database write failed and it is retried)."
    );
    metrics::describe_counter!(
        "changegate_step_preempted_total",
        "Workflow steps whose write found the request already moved by another worker (an expected race: nothing was written twice), by step."
    );
    for kind in STEP_KINDS {
        metrics::counter!("changegate_step_preempted_total", "step" => kind).increment(0);
    }
}

/// Where an operation whose binding is in `status` lands when its step fails
/// in a way no step foresaw: the failure its phase declares.
fn declared_failure(status: BindingStatus) -> Option<(BindingStatus, StepStatus)> {
    match status {
        BindingStatus::ApprovalSending
        | BindingStatus::ApprovalSent
        | BindingStatus::MrCreating
        | BindingStatus::MrCreated => Some((BindingStatus::CreateFailed, StepStatus::CreateFailed)),
        BindingStatus::Merging => Some((BindingStatus::HandleFailed, StepStatus::HandleFailed)),
        BindingStatus::Closing => Some((BindingStatus::CloseFailed, StepStatus::CloseFailed)),
        _ => None,
    }
}

/// The pause before a step that did not move the operation runs again:
/// waits on the MR (its pipeline, its mergeability) poll in steps, short
/// pauses first (most pipelines are quick), then long ones until their
/// deadline; waits on an unknown outcome keep their own pace; anything else
/// backs off exponentially.
fn poll_pause(schedule: &PollSchedule, step: StepStatus, attempts: i32) -> Duration {
    match step {
        StepStatus::MrCreated
        | StepStatus::CloseMrCreated
        | StepStatus::HandleStarted
        | StepStatus::CalledBackApproved => schedule.pause_after(attempts),
        // Past the deadline: checked on at the slow pace.
        StepStatus::MergeChecksPending => schedule.long_interval,
        step => match step.resume_after() {
            Some(pause) if !pause.is_zero() => pause,
            _ => Duration::from_secs(1)
                .saturating_mul(1 << attempts.clamp(0, 6))
                .min(MAX_BACKOFF),
        },
    }
}

impl Steps for Workflow {
    fn run(&self, operation_id: String) -> StepFuture {
        let workflow = self.clone();
        Box::pin(async move { workflow.run_steps(&operation_id).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{check_transition, next_action};

    #[test]
    fn every_status_a_step_runs_in_declares_a_legal_failure_that_says_contact_the_team() {
        for status in BindingStatus::ALL {
            if let Some((to, step)) = declared_failure(status) {
                assert_eq!(check_transition(status, to), Ok(()), "{status}");
                assert_eq!(next_action(to, step).as_str(), "CONTACT_TEAM", "{status}");
            }
        }
        for status in [
            BindingStatus::ApprovalSending,
            BindingStatus::MrCreating,
            BindingStatus::MrCreated,
            BindingStatus::Merging,
            BindingStatus::Closing,
        ] {
            assert!(
                declared_failure(status).is_some(),
                "{status} has automatic steps"
            );
        }
    }
}
