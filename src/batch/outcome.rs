//! How a batch ends: merged (every member MERGED together) or failed (its
//! members split in halves for later rounds, or failed on their own).

use crate::clients::gitlab::{GitLabError, MergeRequest};
use crate::config::projects::{ProjectKey, Projects};
use crate::db::Db;
use crate::db::batch_queue::release_members;
use crate::db::batches::{
    BatchChange, BatchRow, append_membership, get_batch, live_members, record_merged_sha,
    update_batch,
};
use crate::db::callbacks::deployed_since;
use crate::db::operations::operations_by_ids;
use crate::db::timeline_events::TimelineEvent;
use crate::db::train::half_failed;
use crate::domain::{BindingStatus, StepStatus};
use crate::files::layout::FileChange;
use crate::store::{Change, StoreError, StoreTx, lock_members, move_members};
use crate::workflow::{bot, file_change, merged_events};
use crate::write_tx;

use super::metrics::Ended;
use super::noted::note_members;
use super::runner::{ACTOR, IN_FLIGHT, MergeQueue, batch_branch};
use super::split::{Halves, halves, levels};
use super::train::{Behind, Rebuild};

impl MergeQueue {
    /// Merged: the batch SUCCEEDED and every member is MERGED, together,
    /// with what the merge round saw (`noted`), the head pipeline's run and
    /// the merge commit on their timelines; a deploy already reported for
    /// its MR confirms them at once.
    pub(super) async fn succeed(
        &self,
        db: &Db,
        batch: &BatchRow,
        merged: Option<&MergeRequest>,
        noted: &[TimelineEvent],
    ) -> Result<(), StoreError> {
        let noted: Vec<TimelineEvent> = noted
            .iter()
            .cloned()
            .chain(merged.into_iter().flat_map(merged_events))
            .collect();
        let sha = merged.and_then(|mr| mr.sha.as_deref());
        let all = live_members(db, batch.id).await?;
        let settings = self.config.current();
        // A member the configuration can no longer render cannot be shown
        // to have landed: it is not counted as merged.
        let mut unrendered = Vec::new();
        let mut changes: Vec<(String, FileChange)> = Vec::with_capacity(all.len());
        for operation in operations_by_ids(db, &all).await? {
            match file_change(&settings, &operation) {
                Ok(change) => changes.push((operation.operation_id, change)),
                Err(_) => unrendered.push(operation.operation_id),
            }
        }
        let landed_at = merged.and_then(MergeRequest::landed_at);
        let not_landed = match landed_at {
            Some(at) => {
                self.workflow
                    .not_landed(&settings, &batch.project, at, &changes)
                    .await
            }
            None => Err(GitLabError::Decode(
                "the merged MR names no commit".to_owned(),
            )),
        };
        let not_landed: Vec<String> = match not_landed {
            Ok(ids) => ids
                .into_iter()
                .map(str::to_owned)
                .chain(unrendered)
                .collect(),
            // Checked again next round: merged is merged.
            Err(err) => {
                tracing::warn!(batch = batch.id, "cannot check the merged files yet: {err}");
                return self.poll(db, batch, err.obstacle()).await;
            }
        };
        let ids: Vec<String> = all
            .iter()
            .filter(|id| !not_landed.contains(id))
            .cloned()
            .collect();
        let written = write_tx!(db, |tx| {
            let done = BatchChange {
                status: Some("SUCCEEDED"),
                merge_sha: sha,
                // The commit the deploy pipeline reports: the merge commit, or
                // the head a fast-forward merge put on the target.
                merge_commit_sha: landed_at,
                ..BatchChange::default()
            };
            if update_batch(tx.db(), batch.id, batch.version, &done).await? != 1 {
                return Ok(false);
            }
            // Merged and not-landed members move apart: lock them together.
            lock_members(tx, &all).await?;
            note_members(tx, &all, &noted).await?;
            let message = format!("merged in batch #{}", batch.shown_number());
            let change = Change {
                step: StepStatus::HandleMerged,
                message: Some(&message),
                actor: ACTOR,
            };
            move_members(
                tx,
                &ids,
                IN_FLIGHT,
                Some(BindingStatus::Merged),
                change,
                None,
            )
            .await?;
            if let Some(sha) = sha {
                record_merged_sha(tx.db(), batch.id, sha).await?;
            }
            append_membership(tx.db(), batch.id, &ids, "MERGED", sha).await?;
            if !not_landed.is_empty() {
                let message = format!(
                    "batch MR !{} merged, but this request's file on the target branch is not what was rendered",
                    batch.mr_iid.unwrap_or_default()
                );
                let change = Change {
                    step: StepStatus::HandleNotLanded,
                    message: Some(&message),
                    actor: ACTOR,
                };
                move_members(
                    tx,
                    &not_landed,
                    IN_FLIGHT,
                    Some(BindingStatus::HandleFailed),
                    change,
                    None,
                )
                .await?;
                tracing::warn!(batch = batch.id, members = ?not_landed, "merged, but files on the target branch are not as rendered");
            }
            Ok::<_, StoreError>(true)
        })
        .await?;
        if !written {
            return Ok(());
        }
        Ended::Merged.count();
        tracing::info!(batch = batch.id, members = ids.len(), "merge batch merged");
        let Some(iid) = batch.mr_iid else {
            return Ok(());
        };
        let projects = Projects::of(&settings);
        let project = ProjectKey::new(&batch.project);
        if deployed_since(db, &projects.report_keys(&project), iid, batch.created_at).await? {
            write_tx!(db, |tx| {
                let change = Change {
                    step: StepStatus::DeployConfirmed,
                    message: Some("the deploy was reported before the merge was recorded"),
                    actor: "deploy-callback",
                };
                move_members(
                    tx,
                    &ids,
                    &[BindingStatus::Merged],
                    Some(BindingStatus::Validated),
                    change,
                    None,
                )
                .await?;
                Ok::<_, StoreError>(())
            })
            .await?;
        }
        Ok(())
    }

    /// Reads the MR before settling: an MR still open is closed first (its
    /// pipeline canceled if it still runs), and
    /// one that merged meanwhile wins (SPEC §7): `true` when it merged, and
    /// the batch is now settled as SUCCEEDED. Otherwise nothing of the batch
    /// stays behind: the branch of its closed MR (or of an MR never opened)
    /// is deleted.
    pub(super) async fn merged_meanwhile(
        &self,
        db: &Db,
        batch: &BatchRow,
    ) -> Result<bool, StoreError> {
        let settings = self.config.current();
        let Ok(token) = bot(&settings) else {
            return Ok(false);
        };
        let gitlab = &self.workflow.gitlab;
        // What to delete once the MR is closed or was never opened: a closed
        // MR names its branch (an instance of an earlier release may have
        // opened it, on a branch named by the batch's id).
        let left_behind = match batch.mr_iid {
            None => Some(batch_branch(batch)),
            Some(iid) => {
                let mut mr = gitlab.merge_request(token, &batch.project, iid).await.ok();
                if let Some(open) = mr.as_ref().filter(|mr| mr.state == "opened") {
                    self.cancel_pipeline_of(token, batch, open).await;
                    if let Err(err) = gitlab.close_merge_request(token, &batch.project, iid).await {
                        tracing::warn!(batch = batch.id, "closing the batch MR failed: {err}");
                    }
                    mr = gitlab.merge_request(token, &batch.project, iid).await.ok();
                }
                match mr {
                    Some(mr) if mr.state == "merged" => {
                        self.succeed(db, batch, Some(&mr), &[]).await?;
                        return Ok(true);
                    }
                    Some(mr) if mr.state == "closed" => {
                        Some(mr.source_branch.unwrap_or_else(|| batch_branch(batch)))
                    }
                    _ => None,
                }
            }
        };
        if let Some(branch) = left_behind
            && let Err(err) = gitlab.delete_branch(token, &batch.project, &branch).await
        {
            tracing::warn!(
                batch = batch.id,
                branch,
                "deleting the batch branch failed: {err}"
            );
        }
        Ok(false)
    }

    /// The batch as it is now, its MR closed and its branch deleted, when
    /// it is still RUNNING and did not merge meanwhile (which then wins,
    /// see [`Self::merged_meanwhile`]); `None` when there is nothing left
    /// to end.
    pub(super) async fn unmerged(
        &self,
        db: &Db,
        batch: &BatchRow,
    ) -> Result<Option<BatchRow>, StoreError> {
        if self.merged_meanwhile(db, batch).await? {
            return Ok(None);
        }
        Ok(get_batch(db, batch.id)
            .await?
            .filter(|b| b.status == "RUNNING"))
    }

    /// A failed batch: FAILED (the guarded batch write first, so a second
    /// settler rolls back), then its members either split in halves to be
    /// retried as later rounds (bisection, for failures one member can
    /// cause) or fail on their own (`next: CONTACT_TEAM`).
    pub(super) async fn fail(
        &self,
        db: &Db,
        batch: &BatchRow,
        step: StepStatus,
        message: &str,
        noted: &[TimelineEvent],
    ) -> Result<(), StoreError> {
        self.fail_with_test_report(db, batch, step, message, noted, None)
            .await
    }

    /// [`Self::fail`] for a batch whose pipeline `failed_pipeline` failed:
    /// when the batch is bisected, the members whose files that
    /// pipeline's test report names go to one half and the others to the
    /// other (see [`halves`]). The report is read only then.
    pub(super) async fn fail_with_test_report(
        &self,
        db: &Db,
        batch: &BatchRow,
        step: StepStatus,
        message: &str,
        noted: &[TimelineEvent],
        failed_pipeline: Option<i64>,
    ) -> Result<(), StoreError> {
        let Some(batch) = self.unmerged(db, batch).await? else {
            return Ok(());
        };
        let ids = live_members(db, batch.id).await?;
        let settings = self.config.current();
        let depth = batch
            .split_group
            .split('/')
            .filter(|g| !g.is_empty())
            .count();
        let splittable = matches!(
            step,
            StepStatus::CreatePipelineFailed | StepStatus::HandleRebaseConflict
        );
        let bisect = splittable
            && ids.len() > 1
            && (depth < settings.batch.max_split_depth as usize
                || one_failing_change(db, &batch.split_group).await?);
        let suspects = match failed_pipeline {
            Some(pipeline) if bisect => {
                self.suspects(db, &settings, &batch, &ids, pipeline).await?
            }
            _ => Vec::new(),
        };
        let behind = Behind::of(db, &batch).await?;
        let behind_message = format!(
            "merge batch #{} ahead failed: built again without it",
            batch.shown_number()
        );
        let written = write_tx!(db, |tx| {
            let failed = BatchChange {
                status: Some("FAILED"),
                message: Some(message),
                ..BatchChange::default()
            };
            if update_batch(tx.db(), batch.id, batch.version, &failed).await? != 1 {
                return Ok(false);
            }
            behind
                .send_back(tx, Rebuild::AheadFailed, &behind_message)
                .await?;
            note_members(tx, &ids, noted).await?;
            if bisect {
                let Halves { a, b, reported } = halves(&ids, &suspects);
                let parent = if batch.split_group.is_empty() {
                    String::new()
                } else {
                    format!("{}/", batch.split_group)
                };
                // Groups name the failed batch by id: a key of the waiting
                // set, and what the console links; views show its number.
                let (group_a, group_b) = (
                    format!("{parent}{}a", batch.id),
                    format!("{parent}{}b", batch.id),
                );
                let failed = format!("batch #{} failed ({message})", batch.shown_number());
                let retries = if reported {
                    [
                        (&a, format!("{failed}; its test report names this request's file: retried apart from the others")),
                        (&b, format!("{failed}; its test report names another request's file: retried without it")),
                    ]
                } else {
                    let retry = format!("{failed}; retried in a smaller batch");
                    [(&a, retry.clone()), (&b, retry)]
                };
                // Two subsets of the members move: the whole set is locked
                // first, in the store's one lock order.
                lock_members(tx, &ids).await?;
                for (half, retry) in retries {
                    let change = Change {
                        step: StepStatus::HandleBatchRetry,
                        message: Some(&retry),
                        actor: ACTOR,
                    };
                    move_members(
                        tx,
                        half,
                        IN_FLIGHT,
                        Some(BindingStatus::MrCreating),
                        change,
                        None,
                    )
                    .await?;
                }
                release_members(
                    tx.db(),
                    &[(group_a.as_str(), &a), (group_b.as_str(), &b)],
                )
                .await?;
                append_membership(tx.db(), batch.id, &a, "SPLIT", Some(&group_a)).await?;
                append_membership(tx.db(), batch.id, &b, "SPLIT", Some(&group_b)).await?;
            } else {
                fail_members(tx, &ids, step, message).await?;
                append_membership(tx.db(), batch.id, &ids, "FAILED", None).await?;
            }
            Ok::<_, StoreError>(true)
        })
        .await?;
        if !written {
            return Ok(());
        }
        if bisect { Ended::Split } else { Ended::Failed }.count();
        tracing::warn!(
            batch = batch.id,
            members = ids.len(),
            bisect,
            "merge batch failed: {message}"
        );
        Ok(())
    }
}

/// Whether everything so far says one change fails CI in the half
/// `group`: it is a half, and at every level of the bisection that led to
/// it, the other half did not fail. `batch.max_split_depth` then does not
/// stop it from being halved until that change is alone, so it never
/// fails another request. Once both halves of a failed batch failed, more
/// than one change fails, or CI fails whatever it is given: the depth
/// bounds the pipelines spent.
async fn one_failing_change(db: &Db, group: &str) -> Result<bool, StoreError> {
    let levels = levels(group);
    if levels.is_empty() {
        // Not split yet: nothing says so (`max_split_depth = 0` never splits).
        return Ok(false);
    }
    for (parent, other) in levels {
        if half_failed(db, parent, &other).await? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Fails `ids` at `step`: those not merging yet as CREATE_FAILED, those
/// merging as HANDLE_FAILED.
pub(super) async fn fail_members(
    tx: &mut StoreTx,
    ids: &[String],
    step: StepStatus,
    message: &str,
) -> Result<(), StoreError> {
    let change = Change {
        step,
        message: Some(message),
        actor: ACTOR,
    };
    move_members(
        tx,
        ids,
        &[BindingStatus::MrCreating, BindingStatus::MrCreated],
        Some(BindingStatus::CreateFailed),
        change,
        None,
    )
    .await?;
    move_members(
        tx,
        ids,
        &[BindingStatus::Merging],
        Some(BindingStatus::HandleFailed),
        change,
        None,
    )
    .await
    .map(|_| ())
}
