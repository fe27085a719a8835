//! The merge queue of the release through 0012, for one waiting request:
//! a claim round, a settle by its timeout sweep (which counts the settle,
//! migration 0012), and a batch round that could not connect to GitLab
//! (the batch's obstacle, 0009, and outage clock, 0012). Its statements
//! are the set-based ones written for one member.

use std::time::Duration;

use anyhow::{Context, ensure};

use super::instance::{OldInstance, Role};
use super::outages::{UNREACHABLE, UNREACHABLE_DEADLINE_MS};
use super::rows::{BatchRow, LockedBinding, LockedOperation, Waiting};
use super::{OldRelease, Tx, Value, steps};

/// The partition of every batch (`batch.partition_by_project` off).
const PARTITION: &str = "";
/// Who writes the merge queue's history entries.
const ACTOR: &str = "merge-queue";
/// `batch.max_attempts`, its default.
const MAX_ATTEMPTS: i64 = 3;
/// `executor.lease`, its default: how long a settle holds a batch.
const SETTLE_LEASE_MS: i64 = 60_000;

impl OldRelease {
    /// A claim round over the waiting set, which holds one request: a new
    /// RUNNING batch with it. The batch's id and its member.
    pub async fn claim(&self) -> anyhow::Result<(i64, String)> {
        loop {
            if let Some(claimed) = self.claim_once().await? {
                return Ok(claimed);
            }
            // Only requests enqueued before the database's now are claimed;
            // a round that found none rolled back, and the next one came.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn claim_once(&self) -> anyhow::Result<Option<(i64, String)>> {
        let mut tx = self.begin().await?;
        let batch_id = self
            .insert_in(&mut tx, "insert_batch", &[PARTITION.into()])
            .await?;
        let Some(first) = self
            .read_in::<Waiting>(&mut tx, "oldest_waiting", &[PARTITION.into()])
            .await?
            .pop()
        else {
            return Ok(None);
        };
        let group: Vec<Waiting> = self
            .read_in(
                &mut tx,
                "waiting_group",
                &[
                    PARTITION.into(),
                    first.project.as_str().into(),
                    first.split_group.as_str().into(),
                    500.into(),
                ],
            )
            .await?;
        ensure!(group.len() == 1, "one request waits, {} found", group.len());
        let message = format!("in merge batch #{batch_id}");
        self.move_member(
            &mut tx,
            &first.operation_id,
            steps::MR_CREATING,
            &message,
            None,
        )
        .await?;
        let claimed = self
            .write_in(&mut tx, "claim", &[batch_id.into(), first.id.into()])
            .await?;
        ensure!(claimed == 1, "the waiting request was claimed meanwhile");
        self.write_in(
            &mut tx,
            "describe_batch",
            &[
                first.project.as_str().into(),
                first.split_group.as_str().into(),
                batch_id.into(),
            ],
        )
        .await?;
        self.membership(&mut tx, batch_id, &first.operation_id, "CLAIMED", None)
            .await?;
        tx.commit().await?;
        Ok(Some((batch_id, first.operation_id)))
    }

    /// Moves a member to `step` with `message`, keeping its binding's
    /// status (re-written as `keep_status` when given, as a settle's move
    /// does): a history entry and no event.
    async fn move_member(
        &self,
        tx: &mut Tx,
        operation_id: &str,
        step: i64,
        message: &str,
        keep_status: Option<&str>,
    ) -> anyhow::Result<()> {
        let operation = self
            .read_in::<LockedOperation>(tx, "lock_member_operations", &[operation_id.into()])
            .await?
            .pop()
            .context("the member's operation")?;
        let binding = self
            .read_in::<LockedBinding>(tx, "lock_member_bindings", &[operation_id.into()])
            .await?
            .pop()
            .context("the member's binding")?;
        self.write_in(
            tx,
            "move_member_operations",
            &[step.into(), message.into(), operation_id.into()],
        )
        .await?;
        if let Some(status) = keep_status {
            ensure!(
                status == binding.status,
                "{operation_id} is {}",
                binding.status
            );
            let moved = self
                .write_in(
                    tx,
                    "move_member_bindings",
                    &[
                        status.into(),
                        operation_id.into(),
                        "MR_CREATING".into(),
                        "MR_CREATED".into(),
                        "MERGING".into(),
                    ],
                )
                .await?;
            ensure!(moved == 1, "the binding of {operation_id} moved meanwhile");
        }
        self.write_in(
            tx,
            "append_history",
            &[
                operation.operation_id.as_str().into(),
                i64::from(operation.step_code).into(),
                step.into(),
                Value::Null,
                Value::Null,
                (operation.version + 1).into(),
                ACTOR.into(),
                message.into(),
            ],
        )
        .await?;
        Ok(())
    }

    async fn membership(
        &self,
        tx: &mut Tx,
        batch_id: i64,
        operation_id: &str,
        event: &str,
        detail: Option<&str>,
    ) -> anyhow::Result<()> {
        self.write_in(
            tx,
            "append_membership",
            &[
                batch_id.into(),
                operation_id.into(),
                event.into(),
                detail.into(),
            ],
        )
        .await?;
        Ok(())
    }

    async fn take_batch_lease(
        &self,
        batch_id: i64,
        owner: &str,
        lease_ms: i64,
    ) -> anyhow::Result<BatchRow> {
        let taken = self
            .write(
                "acquire_batch_lease",
                &[owner.into(), lease_ms.into(), batch_id.into(), owner.into()],
            )
            .await?;
        ensure!(taken == 1, "the lease of batch #{batch_id} is held");
        self.read::<BatchRow>("get_batch", &[batch_id.into()])
            .await?
            .pop()
            .with_context(|| format!("batch #{batch_id}"))
    }

    /// The timeout sweep settles a batch that ran past `batch.timeout`:
    /// FAILED, and its member (not at its last attempt) waits for the next
    /// round again, with one more settle counted.
    pub async fn settle(&self, batch_id: i64, reason: &str) -> anyhow::Result<()> {
        let settler = format!("settle-{}", uuid::Uuid::new_v4());
        let batch = self
            .take_batch_lease(batch_id, &settler, SETTLE_LEASE_MS)
            .await?;
        let members: Vec<(String,)> = self.read("live_members", &[batch_id.into()]).await?;
        let [(member,)] = &members[..] else {
            anyhow::bail!("one member in batch #{batch_id}, found {members:?}");
        };
        let message = format!("settled: {reason}");
        let retry = format!("batch #{batch_id} was settled ({reason}); waiting for the next round");
        let mut tx = self.begin().await?;
        let failed = self
            .write_in(
                &mut tx,
                "update_batch_settled",
                &[
                    Value::Null,
                    "FAILED".into(),
                    message.as_str().into(),
                    batch_id.into(),
                    batch.version.into(),
                ],
            )
            .await?;
        ensure!(failed == 1, "batch #{batch_id} moved meanwhile");
        let exhausted: Vec<(String,)> = self
            .read_in(
                &mut tx,
                "exhausted_members",
                &[batch_id.into(), MAX_ATTEMPTS.into()],
            )
            .await?;
        ensure!(exhausted.is_empty(), "{member} reached batch.max_attempts");
        self.move_member(&mut tx, member, steps::QUEUED, &retry, Some("MR_CREATING"))
            .await?;
        self.write_in(
            &mut tx,
            "release_members",
            &[batch.split_group.as_str().into(), member.as_str().into()],
        )
        .await?;
        self.write_in(&mut tx, "count_settle", &[member.as_str().into()])
            .await?;
        self.membership(&mut tx, batch_id, member, "RELEASED", Some(reason))
            .await?;
        tx.commit().await?;
        self.write(
            "release_batch_lease",
            &[batch_id.into(), settler.as_str().into()],
        )
        .await?;
        Ok(())
    }

    /// `instance`'s merge queue takes the batch's lease for `lease_ms`, and
    /// the round's first call to GitLab cannot connect: polled, the
    /// obstacle written, the outage clock started, the deadline not
    /// reached. The lease is not given back: the instance dies there.
    pub async fn round_cannot_connect(
        &self,
        batch_id: i64,
        instance: &OldInstance,
        lease_ms: i64,
    ) -> anyhow::Result<()> {
        let owner = instance.owner(Role::Queue);
        let batch = self.take_batch_lease(batch_id, &owner, lease_ms).await?;
        ensure!(
            batch.phase == "OPENING",
            "batch #{batch_id} is {}",
            batch.phase
        );
        let mut tx = self.begin().await?;
        let written = self
            .write_in(
                &mut tx,
                "update_batch_unreachable",
                &[UNREACHABLE.into(), batch_id.into(), batch.version.into()],
            )
            .await?;
        ensure!(written == 1, "batch #{batch_id} moved meanwhile");
        tx.commit().await?;
        let outlasted = self
            .read::<(i64,)>(
                "batch_unreachable_for",
                &[batch_id.into(), UNREACHABLE_DEADLINE_MS.into()],
            )
            .await?
            .pop()
            .context("a count")?;
        ensure!(
            outlasted.0 == 0,
            "an outage of a moment outlasted the deadline"
        );
        Ok(())
    }
}
