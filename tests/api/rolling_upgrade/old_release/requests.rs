//! The old release's writes and reads of requests, which both earlier
//! releases made alike (each with its own SQL): submitting, removing, a
//! step's transition, the MR record, the merge queue's waiting set, step
//! leases, and every read its instances ran while they served.

use anyhow::{Context, bail, ensure};

use super::instance::{OldInstance, Role};
use super::rows::{BindingRow, EventRow, ListedOperation, OperationPage, OperationRow, step_name};
use super::{OldRelease, REASON, Release, Tx, Value, steps};

/// What a request of the old release holds.
pub struct OldRequest<'a> {
    pub operation_id: &'a str,
    pub subject_id: &'a str,
    pub target_key: &'a str,
    pub requested_by: &'a str,
}

/// Where a write of the old release moves an operation.
pub struct OldStep<'a> {
    /// The binding's new status, if it changes.
    pub status: Option<&'a str>,
    pub step_code: i64,
    /// Whether the workflow runs the step at once (else it waits outside).
    pub due_now: bool,
}

/// How long the old release's merge batches ran before its timeout sweep
/// settled them (`batch.timeout`, its default), for that sweep's scan.
const BATCH_TIMEOUT_MS: i64 = 30 * 60 * 1000;

impl OldRelease {
    /// The outbox event and history entry of a flip, in its transaction.
    async fn record_flip(
        &self,
        tx: &mut Tx,
        operation: (&str, &str, &str),
        from: (Option<i64>, Option<&str>),
        to: (i64, &str),
        version: i64,
        actor: &str,
    ) -> anyhow::Result<()> {
        let (operation_id, subject_id, target_key) = operation;
        let payload = serde_json::json!({
            "operationId": operation_id,
            "subjectId": subject_id,
            "targetKey": target_key,
            "from": from.1,
            "to": to.1,
            "step": { "code": to.0, "name": step_name(to.0) },
        })
        .to_string();
        self.write_in(
            tx,
            "append_event",
            &[
                "binding.status_changed".into(),
                operation_id.into(),
                subject_id.into(),
                target_key.into(),
                from.1.into(),
                to.1.into(),
                payload.as_str().into(),
            ],
        )
        .await?;
        self.write_in(
            tx,
            "append_history",
            &[
                operation_id.into(),
                from.0.map_or(Value::Null, Value::Int),
                to.0.into(),
                from.1.into(),
                to.1.into(),
                version.into(),
                actor.into(),
                Value::Null,
            ],
        )
        .await?;
        Ok(())
    }

    /// A new apply, as that release's submit wrote it: APPROVAL_SENDING at
    /// ACCEPTED, due now.
    pub async fn submit(&self, request: &OldRequest<'_>) -> anyhow::Result<()> {
        let mut tx = self.begin().await?;
        self.write_in(
            &mut tx,
            "insert_operation",
            &[
                request.operation_id.into(),
                "APPLY".into(),
                request.subject_id.into(),
                request.target_key.into(),
                request.requested_by.into(),
                "approval_first".into(),
                steps::ACCEPTED.into(),
                "{}".into(),
                REASON.into(),
                Value::Null,
            ],
        )
        .await?;
        self.write_in(
            &mut tx,
            "insert_binding",
            &[
                request.subject_id.into(),
                request.target_key.into(),
                request.operation_id.into(),
                "APPROVAL_SENDING".into(),
                request.requested_by.into(),
                "{}".into(),
                Value::Null,
            ],
        )
        .await?;
        self.record_flip(
            &mut tx,
            (request.operation_id, request.subject_id, request.target_key),
            (None, None),
            (steps::ACCEPTED, "APPROVAL_SENDING"),
            1,
            request.requested_by,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// A removal of `applied`'s live binding, as that release's submit
    /// wrote it: the binding reset in place to a new CLOSE operation.
    pub async fn close(&self, applied: &OldRequest<'_>, close_id: &str) -> anyhow::Result<()> {
        let mut tx = self.begin().await?;
        let binding = self
            .read_in::<BindingRow>(&mut tx, "lock_binding_of", &[applied.operation_id.into()])
            .await?
            .pop()
            .context("the applied binding")?;
        self.write_in(
            &mut tx,
            "insert_operation",
            &[
                close_id.into(),
                "CLOSE".into(),
                applied.subject_id.into(),
                applied.target_key.into(),
                applied.requested_by.into(),
                "approval_first".into(),
                steps::CLOSE_REQUESTED.into(),
                "{}".into(),
                REASON.into(),
                Value::Null,
            ],
        )
        .await?;
        let reset = self
            .write_in(
                &mut tx,
                "reset_binding",
                &[
                    close_id.into(),
                    "CLOSING".into(),
                    binding.requested_by.as_str().into(),
                    binding.params.as_str().into(),
                    Value::Null,
                    binding.id.into(),
                    binding.status.as_str().into(),
                    binding.version.into(),
                ],
            )
            .await?;
        ensure!(reset == 1, "the binding moved meanwhile");
        self.record_flip(
            &mut tx,
            (close_id, applied.subject_id, applied.target_key),
            (None, Some(binding.status.as_str())),
            (steps::CLOSE_REQUESTED, "CLOSING"),
            1,
            applied.requested_by,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// One write of that release's transition: the operation to
    /// `to.step_code`, its binding to `to.status`, under both locks.
    pub async fn transition(&self, operation_id: &str, to: &OldStep<'_>) -> anyhow::Result<()> {
        let mut tx = self.begin().await?;
        let operation = self
            .read_in::<OperationRow>(&mut tx, "lock_operation", &[operation_id.into()])
            .await?
            .pop()
            .context("the operation")?;
        let binding = self
            .read_in::<BindingRow>(&mut tx, "lock_binding_of", &[operation_id.into()])
            .await?
            .pop()
            .context("its binding")?;
        let step = if to.due_now {
            "update_operation_step_due_now"
        } else {
            "update_operation_step_waiting"
        };
        let moved = self
            .write_in(
                &mut tx,
                step,
                &[
                    to.step_code.into(),
                    Value::Null,
                    operation_id.into(),
                    operation.version.into(),
                ],
            )
            .await?;
        ensure!(moved == 1, "{operation_id} moved meanwhile");
        if let Some(status) = to.status {
            let flipped = self
                .write_in(
                    &mut tx,
                    "update_binding_status",
                    &[status.into(), binding.id.into(), binding.version.into()],
                )
                .await?;
            ensure!(
                flipped == 1,
                "the binding of {operation_id} moved meanwhile"
            );
            self.record_flip(
                &mut tx,
                (operation_id, &operation.subject_id, &operation.target_key),
                (
                    Some(operation.step_code.into()),
                    Some(binding.status.as_str()),
                ),
                (to.step_code, status),
                operation.version + 1,
                "workflow",
            )
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Records the operation's MR, as the create step did.
    pub async fn record_merge_request(
        &self,
        operation_id: &str,
        iid: i64,
        url: &str,
    ) -> anyhow::Result<()> {
        let version = self.page(operation_id).await?.operation.version;
        let recorded = self
            .write(
                "record_merge_request",
                &[iid.into(), url.into(), operation_id.into(), version.into()],
            )
            .await?;
        ensure!(recorded == 1, "{operation_id} moved meanwhile");
        Ok(())
    }

    /// Puts an approved request in the merge queue's waiting set.
    pub async fn enqueue(&self, operation_id: &str, project: &str) -> anyhow::Result<()> {
        let inserted = self
            .write("enqueue", &[operation_id.into(), "".into(), project.into()])
            .await?;
        ensure!(inserted == 1, "{operation_id} was queued already");
        Ok(())
    }

    /// Takes the operation's step lease as `instance`'s worker did for
    /// `lease_ms`; `false` when another holds it (an instance of the
    /// current release already running the step, which a worker took as a
    /// normal answer).
    pub async fn take_lease(
        &self,
        operation_id: &str,
        instance: &OldInstance,
        lease_ms: i64,
    ) -> anyhow::Result<bool> {
        let owner = instance.owner(Role::Steps);
        let taken = self
            .write(
                "acquire_lease",
                &[
                    owner.as_str().into(),
                    lease_ms.into(),
                    operation_id.into(),
                    owner.as_str().into(),
                ],
            )
            .await?;
        Ok(taken == 1)
    }

    /// Takes the operation's lease as a worker did, and gives it back.
    pub async fn take_and_release_lease(
        &self,
        operation_id: &str,
        instance: &OldInstance,
    ) -> anyhow::Result<()> {
        if self.take_lease(operation_id, instance, 30_000).await? {
            let owner = instance.owner(Role::Steps);
            self.write(
                "release_lease",
                &[operation_id.into(), owner.as_str().into()],
            )
            .await?;
        }
        Ok(())
    }

    /// The status answer's row of `operation_id`.
    pub async fn page(&self, operation_id: &str) -> anyhow::Result<OperationPage> {
        self.read::<OperationPage>("operation_page", &[operation_id.into()])
            .await?
            .pop()
            .with_context(|| format!("no operation {operation_id}"))
    }

    /// Every read of that release's instances once, as `instance` ran
    /// them: the status answer of each of `operation_ids`, `requester`'s
    /// list, the operators' list and the background jobs' scans.
    pub async fn read_everything(
        &self,
        operation_ids: &[String],
        requester: &str,
        instance: &OldInstance,
    ) -> anyhow::Result<()> {
        for id in operation_ids {
            self.page(id).await?;
        }
        let listed: Vec<BindingRow> = self
            .read(
                "my_bindings",
                &[requester.into(), i64::MAX.into(), 50.into()],
            )
            .await?;
        if listed.is_empty() {
            bail!("{requester} has no bindings");
        }
        self.read::<ListedOperation>("operators_list", &[50.into()])
            .await?;
        self.read::<(String,)>("waiting_partitions", &[]).await?;
        self.read::<(String, String)>("list_expired", &[100.into()])
            .await?;
        self.read::<EventRow>("pending_events", &[100.into()])
            .await?;
        match self.release {
            Release::Through0008 => {
                self.read::<(String,)>("list_due", &[100.into()]).await?;
                self.read::<(i64,)>("runnable_batches", &[]).await?;
            }
            // Its scans also take up what the instance itself holds, and
            // it reads the deploy watermark per project.
            Release::Through0012 => {
                let (steps, queue) = (instance.owner(Role::Steps), instance.owner(Role::Queue));
                self.read::<(String,)>("list_due", &[steps.as_str().into(), 100.into()])
                    .await?;
                self.read::<(i64,)>("runnable_batches", &[queue.as_str().into()])
                    .await?;
                self.read::<(i64,)>("stuck_batches", &[BATCH_TIMEOUT_MS.into()])
                    .await?;
                self.read::<(String, i64)>("deploy_watermarks", &[]).await?;
            }
        }
        Ok(())
    }
}
