//! A member that leaves a running batch after its MR was opened (an
//! operator force-failed it) must never merge: the next round takes its
//! file out of the MR with a new commit on the batch's branch, putting back
//! what the target branch holds, and records it in the batch's history
//! (`REMOVED`); the pipeline then runs for the new head, and only that head
//! is merged. When no member is left, the MR is closed instead.

use crate::clients::gitlab::{FileAction, GitLabError};
use crate::config::Settings;
use crate::db::Db;
use crate::db::batches::{BatchChange, BatchRow, append_membership, live_members, update_batch};
use crate::db::departed::{departed_members, leave_batch};
use crate::db::operations::operations_by_ids;
use crate::domain::StepStatus;
use crate::store::StoreError;
use crate::workflow::{bot, file_action};
use crate::write_tx;

use super::runner::{MergeQueue, batch_branch};

impl MergeQueue {
    /// Takes the files of departed members out of the batch's MR; `true`
    /// when there were any (this round did that, or failed trying, and the
    /// next round goes on).
    pub(super) async fn take_out_departed(
        &self,
        db: &Db,
        settings: &Settings,
        batch: &BatchRow,
    ) -> Result<bool, StoreError> {
        let departed = departed_members(db, batch.id).await?;
        if departed.is_empty() {
            return Ok(false);
        }
        if live_members(db, batch.id).await?.is_empty() {
            let message = format!(
                "every request of merge batch #{} was withdrawn; its MR is closed",
                batch.shown_number()
            );
            self.fail(db, batch, StepStatus::ManualAbandoned, &message, &[])
                .await?;
            write_tx!(db, |tx| {
                append_membership(tx.db(), batch.id, &departed, "REMOVED", None).await
            })
            .await?;
            return Ok(true);
        }
        let (Ok(token), Some(iid)) = (bot(settings), batch.mr_iid) else {
            return Ok(true);
        };
        let gitlab = &self.workflow.gitlab;
        let project = batch.project.as_str();
        let target = settings.gitlab.target_branch.as_str();
        let files: Vec<FileAction> = operations_by_ids(db, &departed)
            .await?
            .iter()
            .map(|operation| file_action(settings, operation))
            .collect();
        let read: Vec<&FileAction> = files.iter().collect();
        let blobs = async {
            // The MR says which branch it merges: an instance of an earlier
            // release may have opened it, on a branch named by the batch's id.
            let branch = gitlab
                .merge_request(token, project, iid)
                .await?
                .source_branch
                .unwrap_or_else(|| batch_branch(batch));
            let on_target = self
                .workflow
                .blobs_of(token, project, target, &read)
                .await?;
            let on_branch = self
                .workflow
                .blobs_of(token, project, &branch, &read)
                .await?;
            Ok::<_, GitLabError>((branch, on_target, on_branch))
        };
        let (branch, on_target, on_branch) = match blobs.await {
            Ok(blobs) => blobs,
            Err(err) => {
                tracing::debug!(
                    batch = batch.id,
                    "cannot read the withdrawn requests' files yet: {err}"
                );
                self.poll(db, batch, err.obstacle()).await?;
                return Ok(true);
            }
        };
        let mut restore = Vec::new();
        for file in &files {
            let path = &file.file_path;
            match (on_target.get(path), on_branch.get(path)) {
                (target_blob, branch_blob) if target_blob == branch_blob => {}
                (None, Some(_)) => restore.push(FileAction {
                    action: "delete",
                    file_path: path.clone(),
                    content: None,
                }),
                (Some(_), branch_blob) => {
                    let content = match gitlab.file_content(token, project, path, target).await {
                        Ok(content) => content,
                        Err(err) => {
                            self.poll(db, batch, err.obstacle()).await?;
                            return Ok(true);
                        }
                    };
                    restore.push(FileAction {
                        action: if branch_blob.is_some() {
                            "update"
                        } else {
                            "create"
                        },
                        file_path: path.clone(),
                        content,
                    });
                }
                (None, None) => {}
            }
        }
        if !restore.is_empty() {
            let message = format!(
                "changegate: take {} withdrawn requests out of merge batch #{}",
                departed.len(),
                batch.shown_number()
            );
            // A lost answer is read back next round: the files are compared again.
            if let Err(err) = gitlab
                .commit(token, project, &branch, &message, &restore)
                .await
            {
                tracing::warn!(
                    batch = batch.id,
                    "taking withdrawn requests out of MR !{iid} failed: {err}"
                );
                self.poll(db, batch, err.obstacle()).await?;
                return Ok(true);
            }
        }
        let message = format!(
            "merge batch #{}: {} withdrawn requests taken out of MR !{iid}; its pipeline runs again",
            batch.shown_number(),
            departed.len()
        );
        let detail = format!("!{iid}");
        let written = write_tx!(db, |tx| {
            let noted = BatchChange {
                message: Some(&message),
                ..BatchChange::default()
            };
            if update_batch(tx.db(), batch.id, batch.version, &noted).await? != 1 {
                return Ok(false);
            }
            leave_batch(tx.db(), batch.id, &departed).await?;
            append_membership(tx.db(), batch.id, &departed, "REMOVED", Some(&detail)).await?;
            Ok::<_, sqlx::Error>(true)
        })
        .await?;
        if !written {
            return Ok(true);
        }
        tracing::info!(
            batch = batch.id,
            removed = departed.len(),
            "withdrawn requests taken out of the batch MR"
        );
        Ok(true)
    }
}
