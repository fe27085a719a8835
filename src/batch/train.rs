//! The merge train (SPEC §7): up to `batch.max_in_flight` batches of a
//! partition in flight, each built on the one ahead of it (of the same
//! project), merged in train order only.
//!
//! What keeps "nothing merges that its pipeline did not test" true does not
//! depend on any batch behind being told in time: before a batch merges, the
//! target branch must hold exactly what the batch was built on (the merge
//! of the batch ahead, at the head that batch was built with, or the target
//! head it read). Anything else (the batch ahead failed, merged another
//! head, or someone moved the target) sends it back to be built again on
//! what is there now, with every batch behind it. Building the batches
//! behind a failed one again at once only saves their pipelines' time.

use std::time::Duration;

use secrecy::SecretString;

use crate::clients::gitlab::MergeRequest;
use crate::config::Settings;
use crate::db::Db;
use crate::db::batches::{BatchRow, append_membership, get_batch, live_members};
use crate::db::train::{active_train, record_footing, send_back};
use crate::domain::{BindingStatus, StepStatus};
use crate::store::{Change, StoreError, StoreTx, move_members};
use crate::write_tx;

use super::runner::{ACTOR, IN_FLIGHT, MergeQueue, build_branch};
use super::split::are_siblings;

/// How long a project's merge method is trusted once read.
const METHOD_TTL: Duration = Duration::from_secs(300);

/// The merge method GitLab names semi-linear history: a merge needs the
/// source to contain the target's head, so every merge makes the batch
/// behind need a rebase, and what it tested is gone. The train runs at
/// depth 1 for such a project.
const SEMI_LINEAR: &str = "rebase_merge";

/// The batch of `train` that `batch` is built on, if any: the nearest
/// ahead of it of its project. A half of a failed batch is built beside
/// its sibling, on what is ahead of both: at most one of them holds the
/// change that failed, and each is tested on its own.
pub(super) fn to_build_on<'a>(train: &'a [BatchRow], batch: &BatchRow) -> Option<&'a BatchRow> {
    train.iter().rev().find(|car| {
        car.train_position < batch.train_position
            && car.project == batch.project
            && !are_siblings(&car.split_group, &batch.split_group)
    })
}

/// Why a batch is built again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rebuild {
    /// A batch ahead of it failed or was settled: what it was built on is gone.
    AheadFailed,
    /// The target branch does not hold what it was built on.
    TargetMoved,
}

impl Rebuild {
    fn label(self) -> &'static str {
        match self {
            Self::AheadFailed => "ahead_failed",
            Self::TargetMoved => "target_moved",
        }
    }

    const ALL: [Self; 2] = [Self::AheadFailed, Self::TargetMoved];

    fn count(self, batches: usize) {
        metrics::counter!("changegate_batch_rebuilds_total", "reason" => self.label())
            .increment(batches as u64);
    }
}

/// Describes the train's counter and starts it at zero.
pub(super) fn describe_train_metrics() {
    metrics::describe_counter!(
        "changegate_batch_rebuilds_total",
        "Merge batches built again on a new base, by reason: ahead_failed, target_moved."
    );
    for reason in Rebuild::ALL {
        metrics::counter!("changegate_batch_rebuilds_total", "reason" => reason.label())
            .increment(0);
    }
}

/// The batches behind one that must be built again, with their members,
/// read before the write that sends them back.
pub(super) struct Behind(Vec<(i64, Vec<String>)>);

impl Behind {
    /// The batches of `batch`'s train built on it, directly or on one
    /// built on it (by their recorded footing), that may still be sent
    /// back: running, and not merging (only the front merges). A half of a
    /// failed batch is built beside its sibling, not on it, so it is not
    /// behind its sibling.
    pub(super) async fn of(db: &Db, batch: &BatchRow) -> Result<Self, StoreError> {
        let train = active_train(db, &batch.partition_key).await?;
        let mut on_it = vec![batch.id];
        let mut behind = Vec::new();
        // Every batch is built on one ahead of it: one pass, front first.
        for car in &train {
            let built_on_it = car
                .ahead_batch_id
                .is_some_and(|ahead| on_it.contains(&ahead));
            if built_on_it && car.status == "RUNNING" && car.phase != "MERGING" {
                on_it.push(car.id);
                behind.push((car.id, live_members(db, car.id).await?));
            }
        }
        Ok(Self(behind))
    }

    /// Sends them back to be built again, in the caller's transaction.
    pub(super) async fn send_back(
        &self,
        tx: &mut StoreTx,
        reason: Rebuild,
        message: &str,
    ) -> Result<(), StoreError> {
        if self.0.is_empty() {
            return Ok(());
        }
        let ids: Vec<i64> = self.0.iter().map(|(id, _)| *id).collect();
        send_back(tx.db(), &ids, None, message).await?;
        for (id, members) in &self.0 {
            rebuild_members(tx, *id, members, message).await?;
        }
        reason.count(self.0.len());
        Ok(())
    }
}

/// Members of a batch sent back: building again, with the reason on their
/// timelines and in the batch's history.
async fn rebuild_members(
    tx: &mut StoreTx,
    batch_id: i64,
    members: &[String],
    message: &str,
) -> Result<(), StoreError> {
    let change = Change {
        step: StepStatus::MrCreating,
        message: Some(message),
        actor: ACTOR,
    };
    move_members(
        tx,
        members,
        IN_FLIGHT,
        Some(BindingStatus::MrCreating),
        change,
        None,
    )
    .await?;
    let detail: String = message.chars().take(191).collect();
    append_membership(tx.db(), batch_id, members, "REBUILT", Some(&detail)).await?;
    Ok(())
}

/// What a batch's next step in the train is.
pub(super) enum Turn {
    /// Go on: it may do what its phase does.
    Go(Box<BatchRow>),
    /// Not now; the batch's row says why (written already).
    Wait,
}

impl MergeQueue {
    /// Before a batch's branch is made: what it is built on (the head of
    /// the batch ahead of it, or the target branch's head), recorded first,
    /// so that every later round, and an MR adopted after a crash, goes by
    /// the same footing. A batch in a train of one, or of a project with
    /// semi-linear history, is built as it always was, from the target
    /// branch's name, and merged as it always was.
    pub(super) async fn footing(
        &self,
        db: &Db,
        settings: &Settings,
        token: &SecretString,
        batch: &BatchRow,
    ) -> Result<Turn, StoreError> {
        if batch.base_sha.is_some() {
            return Ok(Turn::Go(Box::new(batch.clone())));
        }
        let train = active_train(db, &batch.partition_key).await?;
        let ahead = to_build_on(&train, batch);
        if ahead.is_none() && batch.rebuilds == 0 && settings.batch.max_in_flight <= 1 {
            return Ok(Turn::Go(Box::new(batch.clone())));
        }
        let method = match self.merge_method(token, &batch.project).await {
            Ok(method) => method,
            Err(err) => {
                self.interrupted(db, batch, &err, StepStatus::CreateRefused)
                    .await?;
                return Ok(Turn::Wait);
            }
        };
        // Semi-linear history: one batch at a time, merged as it always was
        // (rebased when the target moved).
        if method == SEMI_LINEAR
            && let Some(car) = ahead
        {
            let why = format!(
                "the project merges with semi-linear history, so every merge needs a rebase: waiting for batch #{} ahead to merge",
                car.shown_number()
            );
            self.poll(db, batch, Some(why)).await?;
            return Ok(Turn::Wait);
        }
        let ahead_head = match ahead {
            Some(car) => match car.head_sha.as_deref() {
                Some(head) => Some((car.id, head.to_owned())),
                None => {
                    let why = format!(
                        "waiting for batch #{} ahead to open its MR, to be built on it",
                        car.shown_number()
                    );
                    self.poll(db, batch, Some(why)).await?;
                    return Ok(Turn::Wait);
                }
            },
            None => None,
        };
        if batch.rebuilds > 0
            && let Err(err) = self.clear_last_build(token, batch).await
        {
            self.interrupted(db, batch, &err, StepStatus::CreateRefused)
                .await?;
            return Ok(Turn::Wait);
        }
        if method == SEMI_LINEAR {
            return Ok(Turn::Go(Box::new(batch.clone())));
        }
        let (ahead_id, base) = match ahead_head {
            Some((id, head)) => (Some(id), head),
            None => {
                let target = &settings.gitlab.target_branch;
                match self
                    .workflow
                    .gitlab
                    .branch_head(token, &batch.project, target)
                    .await
                {
                    Ok(head) => (None, head),
                    Err(err) => {
                        self.interrupted(db, batch, &err, StepStatus::CreateRefused)
                            .await?;
                        return Ok(Turn::Wait);
                    }
                }
            }
        };
        let recorded = write_tx!(db, |tx| {
            let written = record_footing(tx.db(), batch.id, batch.version, ahead_id, &base).await?;
            Ok::<_, StoreError>(written == 1)
        })
        .await?;
        if !recorded {
            return Ok(Turn::Wait);
        }
        Ok(match get_batch(db, batch.id).await? {
            Some(batch) if batch.status == "RUNNING" => Turn::Go(Box::new(batch)),
            _ => Turn::Wait,
        })
    }

    /// The project's merge method, read at most every few minutes.
    async fn merge_method(
        &self,
        token: &SecretString,
        project: &str,
    ) -> Result<String, crate::clients::gitlab::GitLabError> {
        if let Some(method) = self.methods.fresh(project, METHOD_TTL) {
            return Ok(method);
        }
        let method = self.workflow.gitlab.merge_method(token, project).await?;
        self.methods.remember(project, method.clone());
        Ok(method)
    }

    /// The build before this one leaves nothing behind: its pipeline, if
    /// still running, is canceled, its open MR closed and its branch
    /// deleted (each fine when already done).
    async fn clear_last_build(
        &self,
        token: &SecretString,
        batch: &BatchRow,
    ) -> Result<(), crate::clients::gitlab::GitLabError> {
        let gitlab = &self.workflow.gitlab;
        let branch = build_branch(batch, batch.rebuilds - 1);
        for mr in gitlab
            .open_merge_requests_from(token, &batch.project, &branch)
            .await?
        {
            // The list answers no head pipeline (`MergeRequestBasic`); the
            // MR itself does.
            let mr = gitlab.merge_request(token, &batch.project, mr.iid).await?;
            self.cancel_pipeline_of(token, batch, &mr).await;
            gitlab
                .close_merge_request(token, &batch.project, mr.iid)
                .await?;
        }
        gitlab.delete_branch(token, &batch.project, &branch).await
    }

    /// Cancels the head pipeline of `mr`, one of `batch`'s, if it still
    /// runs: the batch will not merge it. GitLab lets a pipeline run on
    /// when its MR is closed and its branch deleted: with pipelines of
    /// minutes, every batch built again or ended early would keep a runner
    /// busy for a tree nothing will merge, while the pipelines that count
    /// wait for one. A cancel that fails is said and left: it saves CI
    /// time, and the batch goes on without it.
    pub(super) async fn cancel_pipeline_of(
        &self,
        token: &SecretString,
        batch: &BatchRow,
        mr: &MergeRequest,
    ) {
        let Some(pipeline) = mr
            .head_pipeline
            .as_ref()
            .filter(|pipeline| !pipeline.is_finished())
        else {
            return;
        };
        if let Err(err) = self
            .workflow
            .gitlab
            .cancel_pipeline(token, &batch.project, pipeline.id)
            .await
        {
            tracing::warn!(
                batch = batch.id,
                pipeline = pipeline.id,
                error = %err,
                "the pipeline of a merge batch's build that will not merge could not be canceled: it runs on for nothing"
            );
        }
    }

    /// Whether a batch that started more than `timeout` ago has itself run
    /// that long: in a train, the time a batch waited for the batches ahead
    /// is theirs, not its own. Only the front is ever overdue, counted from
    /// when the batch it was built on merged (or from its start).
    pub(super) async fn overdue(
        &self,
        db: &Db,
        batch_id: i64,
        timeout: Duration,
    ) -> Result<bool, StoreError> {
        let Some(batch) = get_batch(db, batch_id).await? else {
            return Ok(false);
        };
        let train = active_train(db, &batch.partition_key).await?;
        if train.first().is_some_and(|front| front.id != batch.id) {
            return Ok(false);
        }
        let mut since = batch.created_at;
        if let Some(ahead) = batch.ahead_batch_id
            && let Some(ahead) = get_batch(db, ahead).await?
            && ahead.status != "RUNNING"
        {
            since = since.max(ahead.updated_at);
        }
        let ran = (chrono::Utc::now().naive_utc() - since)
            .to_std()
            .unwrap_or_default();
        Ok(ran > timeout)
    }

    /// The first batch `batch` was built on (directly, or through the
    /// batches it was built on) whose pipeline has not passed yet: a
    /// failure of `batch`'s pipeline may be its doing. A sibling half is
    /// not one of them: they are built side by side.
    pub(super) async fn unproven_ahead(
        &self,
        db: &Db,
        batch: &BatchRow,
    ) -> Result<Option<BatchRow>, StoreError> {
        if batch.ahead_batch_id.is_none() {
            return Ok(None);
        }
        let train = active_train(db, &batch.partition_key).await?;
        let mut on = batch.ahead_batch_id;
        while let Some(car) = on.and_then(|id| train.iter().find(|car| car.id == id)) {
            if car.untested() {
                return Ok(Some(car.clone()));
            }
            on = car.ahead_batch_id;
        }
        Ok(None)
    }

    /// Before the front merges: does the target branch hold exactly what it
    /// was built on? If not, it is built again (with the batches behind),
    /// unless its MR merged meanwhile, which then wins. A batch opened one
    /// at a time (no footing) merges as it always did.
    pub(super) async fn on_its_footing(
        &self,
        db: &Db,
        settings: &Settings,
        token: &SecretString,
        batch: &BatchRow,
    ) -> Result<bool, StoreError> {
        let Some(base) = batch.base_sha.as_deref() else {
            return Ok(true);
        };
        let expected = match batch.ahead_batch_id {
            None => Some(base.to_owned()),
            Some(id) => match get_batch(db, id).await? {
                Some(ahead)
                    if ahead.status == "SUCCEEDED" && ahead.merge_sha.as_deref() == Some(base) =>
                {
                    ahead.merge_commit_sha
                }
                _ => None,
            },
        };
        let target = &settings.gitlab.target_branch;
        let head = match self
            .workflow
            .gitlab
            .branch_head(token, &batch.project, target)
            .await
        {
            Ok(head) => head,
            Err(err) => {
                self.interrupted(db, batch, &err, StepStatus::HandleMergeRefused)
                    .await?;
                return Ok(false);
            }
        };
        if expected.as_deref() == Some(head.as_str()) {
            return Ok(true);
        }
        let message = match batch.ahead_batch_id {
            Some(_) if expected.is_none() => format!(
                "merge batch #{} is built again: the batch it was built on did not merge as tested",
                batch.shown_number()
            ),
            _ => format!(
                "merge batch #{} is built again: {target} moved since it was built",
                batch.shown_number()
            ),
        };
        self.build_again(db, batch, Rebuild::TargetMoved, &message)
            .await?;
        Ok(false)
    }

    /// Builds `batch` again from OPENING, with every built batch behind it;
    /// its MR is closed first, and if it merged meanwhile it succeeds
    /// instead.
    pub(super) async fn build_again(
        &self,
        db: &Db,
        batch: &BatchRow,
        reason: Rebuild,
        message: &str,
    ) -> Result<(), StoreError> {
        let Some(batch) = self.unmerged(db, batch).await? else {
            return Ok(());
        };
        let members = live_members(db, batch.id).await?;
        let behind = Behind::of(db, &batch).await?;
        let written = write_tx!(db, |tx| {
            if send_back(tx.db(), &[batch.id], Some(batch.version), message).await? != 1 {
                return Ok(false);
            }
            rebuild_members(tx, batch.id, &members, message).await?;
            let behind_message = format!(
                "merge batch #{} ahead is built again: this one too",
                batch.shown_number()
            );
            behind.send_back(tx, reason, &behind_message).await?;
            Ok::<_, StoreError>(true)
        })
        .await?;
        if written {
            reason.count(1);
            tracing::info!(batch = batch.id, "{message}");
        }
        Ok(())
    }
}
