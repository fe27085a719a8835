//! Members whose file cannot be written (their template fails, or the
//! shared file they edit cannot take the edit) fail on their own, before
//! anything of the batch reaches GitLab; the rest of the batch goes on in
//! the next round. A broken file is never committed, and one bad request
//! never holds the others.

use crate::db::Db;
use crate::db::batches::{BatchChange, BatchRow, append_membership, update_batch};
use crate::db::departed::leave_batch;
use crate::domain::StepStatus;
use crate::store::StoreError;
use crate::write_tx;

use super::outcome::fail_members;
use super::runner::MergeQueue;

/// A member that cannot be written, and why.
pub(super) struct Unwritten {
    /// The member.
    pub operation_id: String,
    /// Why, in words a requester can pass on.
    pub message: String,
}

impl MergeQueue {
    /// Fails `unwritten` at `CREATE_UNRENDERABLE` and takes them out of the
    /// batch (of `members` live members; when none is left, the batch is
    /// FAILED), guarded by the batch's version like every batch write.
    pub(super) async fn fail_unwritten(
        &self,
        db: &Db,
        batch: &BatchRow,
        members: usize,
        unwritten: &[Unwritten],
    ) -> Result<(), StoreError> {
        let ids: Vec<String> = unwritten.iter().map(|u| u.operation_id.clone()).collect();
        let message = format!(
            "merge batch #{}: {} requests cannot be written and failed on their own",
            batch.shown_number(),
            ids.len()
        );
        let written = write_tx!(db, |tx| {
            let noted = BatchChange {
                status: (ids.len() >= members).then_some("FAILED"),
                message: Some(&message),
                ..BatchChange::default()
            };
            if update_batch(tx.db(), batch.id, batch.version, &noted).await? != 1 {
                return Ok(false);
            }
            for member in unwritten {
                fail_members(
                    tx,
                    std::slice::from_ref(&member.operation_id),
                    StepStatus::CreateUnrenderable,
                    &member.message,
                )
                .await?;
            }
            leave_batch(tx.db(), batch.id, &ids).await?;
            append_membership(tx.db(), batch.id, &ids, "FAILED", None).await?;
            Ok::<_, StoreError>(true)
        })
        .await?;
        if written {
            tracing::info!(
                batch = batch.id,
                failed = ids.len(),
                "merge batch members whose file cannot be written failed on their own"
            );
        }
        Ok(())
    }
}
