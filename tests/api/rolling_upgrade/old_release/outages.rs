//! What the release through 0012 wrote that the one through 0008 could
//! not, outside the merge queue: a step that could not connect to GitLab
//! (its obstacle, migration 0009, and outage clock, 0012), a deploy report
//! under its project's key (0011), and the release of a run's leases by
//! owner prefix when it shut down (0010).

use anyhow::{Context, ensure};

use super::instance::{OldInstance, Role};
use super::rows::MrOperation;
use super::{OldRelease, Value};

/// What that release wrote for a step or round whose connection GitLab
/// refused (its `GitLabError::obstacle` of `Unreachable::Refused`).
pub const UNREACHABLE: &str =
    "GitLab refused the connection; changegate keeps trying: please tell the team";

/// `workflow.unreachable_deadline`, its default.
pub(super) const UNREACHABLE_DEADLINE_MS: i64 = 15 * 60 * 1000;

impl OldRelease {
    /// `instance` takes the step lease of `operation_id` for `lease_ms`,
    /// and the step's call to GitLab cannot connect: the obstacle is
    /// written, the outage clock starts, and the deadline is not reached.
    /// The instance goes on holding the lease, as it does while the step
    /// tries again.
    pub async fn step_cannot_connect(
        &self,
        operation_id: &str,
        instance: &OldInstance,
        lease_ms: i64,
    ) -> anyhow::Result<()> {
        ensure!(
            self.take_lease(operation_id, instance, lease_ms).await?,
            "the lease of {operation_id} is held"
        );
        self.write(
            "set_operation_obstacle",
            &[UNREACHABLE.into(), operation_id.into()],
        )
        .await?;
        let outlasted = self
            .read::<(i64,)>(
                "operation_unreachable_for",
                &[operation_id.into(), UNREACHABLE_DEADLINE_MS.into()],
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

    /// Extends the step lease `instance` holds, as it does while a step runs.
    pub async fn renew_lease(
        &self,
        operation_id: &str,
        instance: &OldInstance,
        lease_ms: i64,
    ) -> anyhow::Result<()> {
        let owner = instance.owner(Role::Steps);
        let renewed = self
            .write(
                "renew_lease",
                &[lease_ms.into(), operation_id.into(), owner.as_str().into()],
            )
            .await?;
        ensure!(renewed == 1, "{owner} lost the lease of {operation_id}");
        Ok(())
    }

    /// A successful deploy callback of MR `iid` of the project keyed
    /// `project` that came before the merge was recorded: its receipt and
    /// report are stored, and nothing is flipped (only MERGED operations
    /// are), so it was answered IGNORED_STALE.
    pub async fn deploy_reported_early(
        &self,
        callback_id: &str,
        project: &str,
        iid: i64,
        sha: &str,
    ) -> anyhow::Result<()> {
        let mut tx = self.begin().await?;
        self.write_in(
            &mut tx,
            "insert_receipt",
            &["deploy".into(), callback_id.into()],
        )
        .await?;
        self.write_in(
            &mut tx,
            "insert_deploy_report",
            &[
                callback_id.into(),
                project.into(),
                iid.into(),
                sha.into(),
                "success".into(),
            ],
        )
        .await?;
        let operations: Vec<MrOperation> = self
            .read_in(&mut tx, "operations_of_mr", &[iid.into()])
            .await?;
        ensure!(!operations.is_empty(), "no operation of MR !{iid}");
        tx.commit().await?;
        Ok(())
    }

    /// A graceful shutdown of `instance`: what its run still holds is
    /// released, step and batch leases and webhook delivery claims.
    pub async fn shut_down(&self, instance: &OldInstance) -> anyhow::Result<u64> {
        let prefix = format!("{}%", instance.life_prefix());
        let mut released = 0;
        for statement in [
            "release_operation_leases_of",
            "release_batch_leases_of",
            "release_delivery_claims_of",
        ] {
            released += self
                .write(statement, &[Value::from(prefix.as_str())])
                .await?;
        }
        Ok(released)
    }
}
