//! A close that waits for its time or its target's change window: shown
//! `SCHEDULED`, due again when it may start (its due time is stored, so a
//! restart keeps it), then on to `CLOSE_REQUESTED` and its MR.

use chrono::Utc;

use super::Workflow;
use crate::db::Db;
use crate::db::leases::make_due_at;
use crate::db::operations::OperationRow;
use crate::domain::StepStatus;
use crate::schedule::{Hold, hold};
use crate::store::{Change, StoreError, transition, transition_in};
use crate::write_tx;

/// How often a close whose target's windows never open looks again (a
/// reload may define them).
const NO_WINDOW_RECHECK: chrono::Duration = chrono::Duration::hours(1);

impl Workflow {
    /// Opens the close's MR when it may start now; otherwise records that
    /// it waits, and until when.
    pub(super) async fn close_when_due(
        &self,
        db: &Db,
        operation: &OperationRow,
    ) -> Result<(), StoreError> {
        let settings = self.config.current();
        let now = Utc::now();
        let held = hold(&settings, &operation.target_key, operation.not_before, now);
        if held == Hold::Free {
            if operation.step != StepStatus::Scheduled {
                return self.open_merge_request(db, operation).await;
            }
            let change = Change {
                step: StepStatus::CloseRequested,
                message: Some("its time has come: the removal starts"),
                actor: "workflow",
            };
            return transition(db, &operation.operation_id, operation.version, None, change)
                .await
                .map(drop);
        }
        let message = held.describe();
        let due = held.until().unwrap_or(now + NO_WINDOW_RECHECK).naive_utc();
        let id = operation.operation_id.as_str();
        write_tx!(db, |tx| {
            let change = Change {
                step: StepStatus::Scheduled,
                message: Some(&message),
                actor: "workflow",
            };
            transition_in(tx, id, operation.version, None, change).await?;
            make_due_at(tx.db(), id, due).await?;
            Ok(())
        })
        .await
    }
}
