//! A member that leaves a running batch after its MR was opened (an
//! operator force-failed it) must never merge: the next round takes its
//! file out of the MR with a new commit on the batch's branch, putting back
//! what the target branch holds, and records it in the batch's history
//! (`REMOVED`); the pipeline then runs for the new head, and only that head
//! is merged. When no member is left, the MR is closed instead.

use std::collections::BTreeSet;

use crate::clients::gitlab::{FileAction, GitLabError};
use crate::config::Settings;
use crate::db::Db;
use crate::db::batches::{BatchChange, BatchRow, append_membership, live_members, update_batch};
use crate::db::departed::{departed_members, leave_batch};
use crate::db::operations::operations_by_ids;
use crate::domain::StepStatus;
use crate::files::layout::FileChange;
use crate::store::StoreError;
use crate::workflow::{bot, file_change, removal_of, shared_action};
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
        // Only where each departed member's file is matters, never what it
        // would render: taken out is what the target holds (plus the staying
        // members' edits of a shared file), so even a member the
        // configuration can no longer render is taken out.
        let departed_changes: Vec<FileChange> = operations_by_ids(db, &departed)
            .await?
            .iter()
            .map(|operation| removal_of(settings, operation))
            .collect();
        // The members that stay keep their edits of the shared files the
        // departed ones edited too.
        let shared: BTreeSet<&str> = departed_changes
            .iter()
            .filter(|change| matches!(change, FileChange::Key { .. }))
            .map(FileChange::path)
            .collect();
        let staying: Vec<FileChange> = if shared.is_empty() {
            Vec::new()
        } else {
            operations_by_ids(db, &live_members(db, batch.id).await?)
                .await?
                .iter()
                .filter_map(|operation| file_change(settings, operation).ok())
                .filter(|change| {
                    matches!(change, FileChange::Key { .. }) && shared.contains(change.path())
                })
                .collect()
        };
        let read: Vec<&FileChange> = departed_changes.iter().collect();
        let held = async {
            // The MR says which branch it merges: an instance of an earlier
            // release may have opened it, on a branch named by the batch's id.
            let branch = gitlab
                .merge_request(token, project, iid)
                .await?
                .source_branch
                .unwrap_or_else(|| batch_branch(batch));
            let on_target = self.workflow.held(token, project, target, &read).await?;
            let on_branch = self.workflow.held(token, project, &branch, &read).await?;
            Ok::<_, GitLabError>((branch, on_target, on_branch))
        };
        let (branch, on_target, on_branch) = match held.await {
            Ok(held) => held,
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
        for change in &departed_changes {
            let FileChange::Whole { path, .. } = change else {
                continue;
            };
            match (on_target.blob(path), on_branch.blob(path)) {
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
        for path in shared {
            let edits: Vec<&FileChange> = staying.iter().filter(|c| c.path() == path).collect();
            let wanted = match shared_action(path, on_target.text(path), &edits) {
                Ok(Some(action)) => action.content,
                Ok(None) => on_target.text(path).map(str::to_owned),
                // A withdrawn member must never merge: its edit goes even
                // when the staying ones can no longer be applied to the
                // target's file; the merge's landed check then reports
                // those as not landed.
                Err(err) => {
                    tracing::warn!(
                        batch = batch.id,
                        "taking withdrawn requests out of {path} drops the staying ones' edits too: {}",
                        err.message
                    );
                    on_target.text(path).map(str::to_owned)
                }
            };
            let now = on_branch.text(path);
            if wanted.as_deref() == now {
                continue;
            }
            restore.push(FileAction {
                action: match (&wanted, now) {
                    (None, _) => "delete",
                    (Some(_), Some(_)) => "update",
                    (Some(_), None) => "create",
                },
                file_path: path.to_owned(),
                content: wanted,
            });
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
