//! A batch's OPENING phase: its branch, one commit of every member's file
//! and its MR, after sending back the members that would not fit.

use crate::config::Settings;
use crate::db::Db;
use crate::db::batch_queue::release_members;
use crate::db::batches::{
    BatchChange, BatchRow, Stamp, append_membership, live_members, update_batch,
};
use crate::db::operations::{OperationRow, operations_by_ids};
use crate::domain::{BindingStatus, StepStatus};
use crate::files::layout::FileChange;
use crate::store::{Change, MergeRequestRef, StoreError, move_members};
use crate::workflow::{
    ChangeSet, MAX_DESCRIPTION_BYTES, OpenFailure, Opened, file_change, file_path_of,
};
use crate::write_tx;

use super::fit::{MAX_COMMIT_BYTES, changes_that_fit, members_that_fit};
use super::metrics::Ended;
use super::runner::{ACTOR, MergeQueue, batch_branch};
use super::unwritable::Unwritten;

impl MergeQueue {
    /// Branch, one commit of every member's file, and the MR. A batch whose
    /// trailers would not fit in one MR description, or whose files would
    /// make a commit GitLab throttles, first sends the members that do not
    /// fit back to wait for the next round, so no trailer is ever cut off
    /// (the deploy pipeline reads them) and no commit is refused for its size.
    pub(super) async fn open(
        &self,
        db: &Db,
        settings: &Settings,
        batch: &BatchRow,
    ) -> Result<(), StoreError> {
        let ids = live_members(db, batch.id).await?;
        let operations = operations_by_ids(db, &ids).await?;
        let header = format!("Merge batch #{}.\n\n", batch.shown_number());
        let trailers: Vec<String> = operations
            .iter()
            .map(|o| format!("Changegate-Operation: {}", o.operation_id))
            .collect();
        let mut changes = Vec::with_capacity(operations.len());
        let mut unwritten = Vec::new();
        for operation in &operations {
            match file_change(settings, operation) {
                Ok(change) => changes.push(change),
                Err(reason) => unwritten.push(Unwritten {
                    operation_id: operation.operation_id.clone(),
                    message: format!("the file cannot be rendered: {reason}"),
                }),
            }
        }
        if !unwritten.is_empty() {
            return self.fail_unwritten(db, batch, ids.len(), &unwritten).await;
        }
        let fit = members_that_fit(header.len(), &trailers, MAX_DESCRIPTION_BYTES)
            .min(changes_that_fit(&changes, MAX_COMMIT_BYTES))
            .max(1);
        if fit < trailers.len() {
            let overflow: Vec<String> = operations[fit..]
                .iter()
                .map(|o| o.operation_id.clone())
                .collect();
            return self.shed(db, batch, &overflow).await;
        }
        let change = ChangeSet {
            branch: batch_branch(batch),
            start: batch.base_sha.clone(),
            title: format!(
                "changegate: merge batch #{} ({} changes)",
                batch.shown_number(),
                operations.len()
            ),
            description: format!("{header}{}", trailers.join("\n")),
            changes,
        };
        match self
            .workflow
            .open_change(settings, &batch.project, &change)
            .await
        {
            Ok(Opened::AlreadyInPlace) => self.already_in_place(db, batch, &ids).await,
            Ok(Opened::MergeRequest(mr)) => {
                let url = mr.web_url.as_deref();
                let opened = BatchChange {
                    phase: Some("PIPELINE"),
                    mr: Some((mr.iid, url)),
                    head: mr.sha.as_deref(),
                    stamp: Some(Stamp::Opened),
                    ..BatchChange::default()
                };
                let message = format!(
                    "merge batch #{} opened MR !{}",
                    batch.shown_number(),
                    mr.iid
                );
                write_tx!(db, |tx| {
                    if update_batch(tx.db(), batch.id, batch.version, &opened).await? != 1 {
                        return Ok(());
                    }
                    let change = Change {
                        step: StepStatus::MrCreated,
                        message: Some(&message),
                        actor: ACTOR,
                    };
                    let mr_ref = MergeRequestRef { iid: mr.iid, url };
                    move_members(
                        tx,
                        &ids,
                        &[BindingStatus::MrCreating],
                        Some(BindingStatus::MrCreated),
                        change,
                        Some(mr_ref),
                    )
                    .await?;
                    Ok::<_, StoreError>(())
                })
                .await
            }
            // Only the members whose edit cannot be applied fail; the
            // others go on in the next round.
            Err(OpenFailure::Unwritable(unwritable)) => {
                let named = |o: &&OperationRow| match (&unwritable.key, file_change(settings, o)) {
                    (Some(key), Ok(FileChange::Key { path, key: own, .. })) => {
                        path == unwritable.path && own == *key
                    }
                    _ => file_path_of(settings, o) == unwritable.path,
                };
                let mut failing: Vec<&OperationRow> = operations.iter().filter(named).collect();
                // None named (the configuration moved the file since): the
                // batch cannot be written at all, so none of it is.
                if failing.is_empty() {
                    failing = operations.iter().collect();
                }
                let unwritten: Vec<Unwritten> = failing
                    .into_iter()
                    .map(|o| Unwritten {
                        operation_id: o.operation_id.clone(),
                        message: unwritable.message.clone(),
                    })
                    .collect();
                self.fail_unwritten(db, batch, ids.len(), &unwritten).await
            }
            Err(OpenFailure::GitLab(err)) => {
                self.interrupted(db, batch, &err, StepStatus::CreateRefused)
                    .await
            }
        }
    }

    /// Sends `overflow` back to the waiting set (in the batch's own split
    /// group), before anything of the batch is written to GitLab.
    async fn shed(&self, db: &Db, batch: &BatchRow, overflow: &[String]) -> Result<(), StoreError> {
        let message = format!(
            "merge batch #{}: {} requests do not fit in one MR description and wait for the next round",
            batch.shown_number(),
            overflow.len()
        );
        let written = write_tx!(db, |tx| {
            let noted = BatchChange {
                message: Some(&message),
                ..BatchChange::default()
            };
            if update_batch(tx.db(), batch.id, batch.version, &noted).await? != 1 {
                return Ok(false);
            }
            let change = Change {
                step: StepStatus::Queued,
                message: Some(&message),
                actor: ACTOR,
            };
            move_members(
                tx,
                overflow,
                &[BindingStatus::MrCreating],
                None,
                change,
                None,
            )
            .await?;
            release_members(tx.db(), &[(batch.split_group.as_str(), overflow)]).await?;
            append_membership(tx.db(), batch.id, overflow, "SHED", None).await?;
            Ok::<_, StoreError>(true)
        })
        .await?;
        if !written {
            return Ok(());
        }
        tracing::info!(
            batch = batch.id,
            shed = overflow.len(),
            "merge batch too big for one MR description"
        );
        Ok(())
    }

    /// The target branch already holds every member's file as rendered: the
    /// batch SUCCEEDED without an MR, and its members are VALIDATED, since
    /// nothing is left to merge or deploy.
    async fn already_in_place(
        &self,
        db: &Db,
        batch: &BatchRow,
        ids: &[String],
    ) -> Result<(), StoreError> {
        let message = format!(
            "merge batch #{}: the target branch already holds this file as requested: nothing to merge",
            batch.shown_number()
        );
        let written = write_tx!(db, |tx| {
            let done = BatchChange {
                status: Some("SUCCEEDED"),
                message: Some(&message),
                ..BatchChange::default()
            };
            if update_batch(tx.db(), batch.id, batch.version, &done).await? != 1 {
                return Ok(false);
            }
            let change = Change {
                step: StepStatus::AlreadyInPlace,
                message: Some(&message),
                actor: ACTOR,
            };
            move_members(
                tx,
                ids,
                &[BindingStatus::MrCreating],
                Some(BindingStatus::Validated),
                change,
                None,
            )
            .await?;
            append_membership(tx.db(), batch.id, ids, "IN_PLACE", None).await?;
            Ok::<_, StoreError>(true)
        })
        .await?;
        if !written {
            return Ok(());
        }
        Ended::InPlace.count();
        tracing::info!(
            batch = batch.id,
            members = ids.len(),
            "merge batch had nothing to merge"
        );
        Ok(())
    }
}
