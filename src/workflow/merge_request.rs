//! The Merge Request steps of one approved request (SPEC §6): write the
//! file on a branch and open the MR, wait for its pipeline, approve as both
//! reviewer bots, merge. Each step reads remote state first, so re-running
//! one after a crash or a lost answer is safe.

use secrecy::SecretString;

use super::landed::Unwritable;
use super::merge_state::{merge_state, passed_for_head};
use super::open::{ChangeSet, OpenFailure, Opened};
use super::review::ApproveFailure;
use super::{Workflow, events};
use crate::clients::gitlab::{GitLabError, MergeRequest};
use crate::config::Settings;
use crate::config::projects::{ProjectKey, Projects};

use crate::db::Db;
use crate::db::callbacks::deployed_since;
use crate::db::operations::{OperationRow, record_merge_request};
use crate::db::outage::OutageClock;
use crate::db::timeline_events::TimelineEvent;
use crate::domain::render::canonical_json;
use crate::domain::{BindingStatus, OperationKind, StepStatus};
use crate::files::layout::{FileChange, Layout};
use crate::files::template::TemplateContext;
use crate::store::{self, Change, StoreError};

pub(super) const ACTOR: &str = "workflow";

/// Where a step leaves an operation.
pub(crate) struct Outcome {
    /// The binding's new status, if it moves.
    pub status: Option<BindingStatus>,
    /// The operation's new step.
    pub step: StepStatus,
    /// Why.
    pub message: Option<String>,
}

impl Outcome {
    pub(super) fn to(status: BindingStatus, step: StepStatus) -> Self {
        Self {
            status: Some(status),
            step,
            message: None,
        }
    }
}

fn commit_title(operation: &OperationRow) -> String {
    format!(
        "changegate: {} {} for {}",
        operation.kind.as_str().to_lowercase(),
        operation.target_key,
        operation.subject_id
    )
}

/// What an operation does to the repository: its binding's file written
/// (apply) or deleted (close), or its key of a shared file set or removed,
/// as its target's layout says. Deterministic: run twice, it says the same
/// bytes. An apply whose file cannot be rendered says why.
pub fn file_change(settings: &Settings, operation: &OperationRow) -> Result<FileChange, String> {
    with_layout(settings, operation, |layout| match operation.kind {
        OperationKind::Apply => {
            let params =
                serde_json::from_str(&operation.params).unwrap_or_else(|_| serde_json::json!({}));
            let expires_at = operation.expires_at.map(|at| {
                at.and_utc()
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
            });
            layout.write(&TemplateContext {
                subject: &operation.subject_id,
                target: &operation.target_key,
                params: &canonical_json(&params),
                expires_at: expires_at.as_deref(),
                operation_id: &operation.operation_id,
                requested_by: &operation.requested_by,
            })
        }
        OperationKind::Close => Ok(layout.remove(&operation.target_key, &operation.subject_id)),
    })
}

/// What removing the operation's binding does to the repository: its
/// file deleted or its key removed. Needs no rendering, so it never fails.
pub(crate) fn removal_of(settings: &Settings, operation: &OperationRow) -> FileChange {
    with_layout(settings, operation, |layout| {
        layout.remove(&operation.target_key, &operation.subject_id)
    })
}

/// The file the operation's binding lives in.
pub(crate) fn file_path_of(settings: &Settings, operation: &OperationRow) -> String {
    with_layout(settings, operation, |layout| {
        layout.path(&operation.target_key, &operation.subject_id)
    })
}

/// `then` with the operation's target's layout; a target gone from the
/// catalog falls back to the default layout (its own is no longer known).
fn with_layout<T>(
    settings: &Settings,
    operation: &OperationRow,
    then: impl FnOnce(&Layout) -> T,
) -> T {
    match settings.targets.get(&operation.target_key) {
        Some(target) => then(&target.layout),
        None => then(&Layout::default_file()),
    }
}

fn branch_of(operation: &OperationRow) -> String {
    format!("changegate/{}", operation.operation_id)
}

pub(super) fn project_of<'a>(settings: &'a Settings, operation: &OperationRow) -> &'a str {
    settings.project_for(&operation.target_key)
}

pub(crate) fn bot(settings: &Settings) -> Result<&SecretString, GitLabError> {
    settings
        .gitlab
        .bot_token
        .as_ref()
        .ok_or(GitLabError::NotConfigured("gitlab.bot_token is not set"))
}

impl Outcome {
    /// The same outcome for a close operation, whose binding stays CLOSING
    /// through the MR's life and ends CLOSED (or CLOSE_FAILED).
    pub(super) fn for_kind(self, kind: OperationKind) -> Self {
        if kind == OperationKind::Apply {
            return self;
        }
        let (status, step) = match (self.status, self.step) {
            (Some(BindingStatus::MrCreated), StepStatus::MrCreated) => {
                (None, StepStatus::CloseMrCreated)
            }
            (Some(BindingStatus::Merging), step) => (None, step),
            (Some(BindingStatus::Merged), _) => (Some(BindingStatus::Closed), StepStatus::Closed),
            (Some(BindingStatus::Validated), step) => (Some(BindingStatus::Closed), step),
            (Some(BindingStatus::CreateFailed | BindingStatus::HandleFailed), step) => {
                (Some(BindingStatus::CloseFailed), step)
            }
            other => other,
        };
        Self {
            status,
            step,
            message: self.message,
        }
    }
}

impl Workflow {
    /// Branch, commit and MR; records the MR on the operation.
    pub(super) async fn open_merge_request(
        &self,
        db: &Db,
        operation: &OperationRow,
    ) -> Result<(), StoreError> {
        let settings = self.config.current();
        let outcome = match self.create_mr(&settings, operation).await {
            Ok(Opened::AlreadyInPlace) => Outcome {
                status: Some(BindingStatus::Validated),
                step: StepStatus::AlreadyInPlace,
                message: Some(
                    match operation.kind {
                        OperationKind::Apply => {
                            "the target branch already holds this file as requested: nothing to merge"
                        }
                        OperationKind::Close => {
                            "the file is already absent from the target branch: nothing to merge"
                        }
                    }
                    .to_owned(),
                ),
            },
            Ok(Opened::MergeRequest(mr)) => {
                let recorded = record_merge_request(
                    db,
                    &operation.operation_id,
                    operation.version,
                    mr.iid,
                    mr.web_url.as_deref(),
                )
                .await?;
                if recorded != 1 {
                    return Err(StoreError::Preempted);
                }
                return self
                    .settle(
                        db,
                        operation,
                        operation.version + 1,
                        Outcome::to(BindingStatus::MrCreated, StepStatus::MrCreated),
                    )
                    .await;
            }
            Err(OpenFailure::Unwritable(unwritable)) => Outcome {
                status: Some(BindingStatus::CreateFailed),
                step: StepStatus::CreateUnrenderable,
                message: Some(unwritable.message),
            },
            Err(OpenFailure::GitLab(err)) => {
                return self
                    .interrupted(
                        db,
                        operation,
                        &err,
                        BindingStatus::CreateFailed,
                        StepStatus::CreateRefused,
                    )
                    .await;
            }
        };
        self.settle(db, operation, operation.version, outcome).await
    }

    async fn create_mr(
        &self,
        settings: &Settings,
        operation: &OperationRow,
    ) -> Result<Opened, OpenFailure> {
        let change = file_change(settings, operation).map_err(|reason| {
            OpenFailure::Unwritable(Unwritable {
                path: file_path_of(settings, operation),
                key: None,
                message: format!("the file cannot be rendered: {reason}"),
            })
        })?;
        let change = ChangeSet {
            start: None,
            branch: branch_of(operation),
            title: commit_title(operation),
            description: format!(
                "{}\n\nChangegate-Operation: {}",
                operation.reason, operation.operation_id
            ),
            changes: vec![change],
        };
        self.open_change(settings, project_of(settings, operation), &change)
            .await
    }

    /// One round of the merge step: read the MR (merged → done, closed →
    /// failed, rebasing → wait), have both reviewer bots approve, re-read it,
    /// then rebase when the target moved on, wait while it is not mergeable
    /// yet, or merge at the head whose pipeline passed. A round that cannot
    /// finish leaves the operation where it is, to be polled again; only
    /// when its polls reach the deadline without progress is the merge refused.
    pub(super) async fn approve_and_merge(
        &self,
        db: &Db,
        operation: &OperationRow,
    ) -> Result<(), StoreError> {
        let settings = self.config.current();
        let (Ok(token), Some(iid)) = (bot(&settings), operation.mr_iid) else {
            return Ok(());
        };
        let project = project_of(&settings, operation);
        let mut noted = Vec::new();
        let round = self
            .merge_round(
                &settings,
                token,
                project,
                iid,
                operation.attempts,
                &mut noted,
            )
            .await;
        let outcome = match round {
            Ok(Round::Merged(mr)) => {
                noted.extend(events::merged(&mr));
                match self.check_landed(&settings, project, &mr, operation).await {
                    Ok(true) => Outcome::to(BindingStatus::Merged, StepStatus::HandleMerged),
                    Ok(false) => Outcome {
                        status: Some(BindingStatus::HandleFailed),
                        step: StepStatus::HandleNotLanded,
                        message: Some(format!(
                            "MR !{iid} merged, but the file on the target branch is not what was rendered"
                        )),
                    },
                    // Checked again next round: merged is merged.
                    Err(err) => {
                        tracing::warn!(iid, "cannot check the merged file yet: {err}");
                        self.note(db, operation, &noted).await?;
                        return self
                            .interrupted(
                                db,
                                operation,
                                &err,
                                BindingStatus::HandleFailed,
                                StepStatus::HandleNotLanded,
                            )
                            .await;
                    }
                }
            }
            Ok(Round::Finished(outcome)) => outcome,
            // The rebase event says why; the step starts its polls again.
            Ok(Round::Rebasing(mr)) => {
                noted.push(events::rebasing(&mr, ACTOR));
                Outcome {
                    status: None,
                    step: StepStatus::HandleStarted,
                    message: None,
                }
            }
            Ok(Round::NotYet) => {
                self.note(db, operation, &noted).await?;
                return self
                    .note_obstacle(db, operation, None, OutageClock::Stop)
                    .await;
            }
            Err(err) => {
                self.note(db, operation, &noted).await?;
                return self
                    .interrupted(
                        db,
                        operation,
                        &err,
                        BindingStatus::HandleFailed,
                        StepStatus::HandleMergeRefused,
                    )
                    .await;
            }
        };
        let merged = outcome.status == Some(BindingStatus::Merged);
        self.settle_noting(db, operation, operation.version, outcome, &noted)
            .await?;
        if merged && operation.kind == OperationKind::Apply {
            self.confirm_early_deploy(db, operation, iid).await?;
        }
        Ok(())
    }

    /// Whether the operation's file is on the target branch as rendered, at
    /// the commit the merge of `mr` put there.
    async fn check_landed(
        &self,
        settings: &Settings,
        project: &str,
        mr: &MergeRequest,
        operation: &OperationRow,
    ) -> Result<bool, GitLabError> {
        let at = mr
            .landed_at()
            .ok_or_else(|| GitLabError::Decode(format!("merged MR !{} names no commit", mr.iid)))?;
        // Rendered again with the configuration as it is now (what was
        // committed is not kept): a configuration that can no longer render
        // it cannot show that it landed, as in a batch.
        let Ok(rendered) = file_change(settings, operation) else {
            return Ok(false);
        };
        let change = [(operation.operation_id.clone(), rendered)];
        Ok(self
            .not_landed(settings, project, at, &change)
            .await?
            .is_empty())
    }

    /// The deploy pipeline may report the merge before the MERGED write (it
    /// watches GitLab, not changegate); its callback was then ignored as
    /// stale, but its report is stored: it confirms the deploy now, through
    /// the same flip-once transition the callback uses.
    async fn confirm_early_deploy(
        &self,
        db: &Db,
        operation: &OperationRow,
        iid: i64,
    ) -> Result<(), StoreError> {
        let settings = self.config.current();
        let projects = Projects::of(&settings);
        let project = ProjectKey::new(project_of(&settings, operation));
        if !deployed_since(
            db,
            &projects.report_keys(&project),
            iid,
            operation.created_at,
        )
        .await?
        {
            return Ok(());
        }
        let change = Change {
            step: StepStatus::DeployConfirmed,
            message: Some("the deploy was reported before the merge was recorded"),
            actor: "deploy-callback",
        };
        store::flip(
            db,
            &operation.operation_id,
            &[BindingStatus::Merged],
            BindingStatus::Validated,
            change,
        )
        .await
        .map(|_| ())
    }

    /// One merge round of MR `iid`; the approvals it gave and the pipeline
    /// run it saw fail are added to `noted`, for the caller to record with
    /// what it writes (even when the round ends in an error).
    pub(crate) async fn merge_round(
        &self,
        settings: &Settings,
        token: &SecretString,
        project: &str,
        iid: i64,
        polls: i32,
        noted: &mut Vec<TimelineEvent>,
    ) -> Result<Round, GitLabError> {
        let mr = self.gitlab.merge_request(token, project, iid).await?;
        // Read remote state first: an MR already merged is finished, not approved again.
        match mr.state.as_str() {
            "merged" => return Ok(Round::Merged(Box::new(mr))),
            "closed" => {
                return Ok(Round::Finished(Outcome {
                    status: Some(BindingStatus::HandleFailed),
                    step: StepStatus::HandleMrClosed,
                    message: Some(format!("MR !{iid} was closed")),
                }));
            }
            _ if mr.rebase_in_progress => return Ok(Round::NotYet),
            _ => {}
        }
        if let Some(error) = mr
            .merge_error
            .as_deref()
            .filter(|e| e.starts_with("Rebase failed"))
        {
            return Ok(Round::Finished(Outcome {
                status: Some(BindingStatus::HandleFailed),
                step: StepStatus::HandleRebaseConflict,
                message: Some(format!("MR !{iid} cannot be rebased: {error}")),
            }));
        }
        // GitLab unavailable or throttling is waited out until the step's
        // deadline, as a merge that is not possible yet is.
        match self
            .approve_as_reviewers(settings, project, &mr, noted)
            .await
        {
            Err(ApproveFailure::Refused(err))
                if err.is_transient() && !settings.polling.deadline_reached(polls) =>
            {
                return Err(err);
            }
            Err(failure) => {
                return Ok(Round::Finished(Outcome {
                    status: Some(BindingStatus::HandleFailed),
                    step: StepStatus::HandleApproveFailed,
                    message: Some(failure.message(iid)),
                }));
            }
            Ok(()) => {}
        }
        let mr = self.gitlab.merge_request(token, project, iid).await?;
        let detailed = merge_state(&mr);
        let pipeline = mr.head_pipeline.as_ref().map(|p| p.status.as_str());
        let stuck = |why: &str| {
            if !settings.polling.deadline_reached(polls) {
                Round::NotYet
            } else {
                // Past the deadline the outcome is unknown, not failed
                // (SPEC §6): waiting may still help, so the request says
                // WAIT and is checked again at a slower pace.
                Round::Finished(Outcome {
                    status: None,
                    step: StepStatus::MergeChecksPending,
                    message: Some(format!(
                        "MR !{iid} did not become mergeable in time ({why}); changegate keeps checking"
                    )),
                })
            }
        };
        match (detailed, pipeline) {
            ("merged", _) => Ok(Round::Merged(Box::new(mr.clone()))),
            ("conflict", _) => Ok(Round::Finished(Outcome {
                status: Some(BindingStatus::HandleFailed),
                step: StepStatus::HandleRebaseConflict,
                message: Some(format!("MR !{iid} conflicts with its target branch")),
            })),
            ("need_rebase", _) => match self.gitlab.rebase(token, project, iid).await {
                Ok(()) => Ok(Round::Rebasing(Box::new(mr))),
                // No clear answer: GitLab may well be rebasing. Waiting as for
                // a started rebase is right either way: the next round reads
                // `rebase_in_progress` and the head, and asks again if needed.
                Err(err) if err.outcome_unknown() => Ok(Round::Rebasing(Box::new(mr))),
                // A rebase is running or could not be enqueued right now.
                Err(err) if err.status().is_some_and(|s| s.as_u16() == 409) => Ok(Round::NotYet),
                Err(err) => Err(err),
            },
            // States waiting cannot change (doc/api/merge_requests.md,
            // "Merge status"; GitLab's check services under
            // app/services/merge_requests/mergeability/): the team must act,
            // so the step fails now instead of at its deadline.
            ("commits_status" | "draft_status" | "discussions_not_resolved", _) => {
                let why = match detailed {
                    "commits_status" => "has no commits: there is nothing to merge",
                    "draft_status" => "is marked as a draft",
                    _ => "has unresolved discussions",
                };
                Ok(Round::Finished(Outcome {
                    status: Some(BindingStatus::HandleFailed),
                    step: StepStatus::HandleMergeRefused,
                    message: Some(format!("MR !{iid} {why}")),
                }))
            }
            // Every bot approved and GitLab still wants approvals: only when
            // its approval state says no wait can bring them does the step
            // fail now; otherwise (a failed read too) it waits like any other
            // state.
            ("not_approved", _) => {
                match self.approvals_out_of_reach(settings, project, iid).await {
                    Ok(Some(why)) => Ok(Round::Finished(Outcome {
                        status: Some(BindingStatus::HandleFailed),
                        step: StepStatus::HandleMergeRefused,
                        message: Some(why),
                    })),
                    Ok(None) => Ok(stuck("not_approved")),
                    Err(err) => {
                        tracing::debug!(iid, "reading the approvals failed, waiting: {err}");
                        Ok(stuck("not_approved"))
                    }
                }
            }
            (_, Some("failed" | "canceled")) => {
                noted.extend(events::head_pipeline_run(&mr));
                Ok(Round::Finished(Outcome {
                    status: Some(BindingStatus::HandleFailed),
                    step: StepStatus::CreatePipelineFailed,
                    message: Some(format!("the pipeline of MR !{iid} failed")),
                }))
            }
            // Only what passed CI is merged, whether or not the project
            // requires it: without "Pipelines must succeed" GitLab reports
            // `mergeable` while the pipeline still runs (doc/api/merge_requests.md,
            // `detailed_merge_status`). The pipeline must be the head's own,
            // or a merged-results pipeline of this MR (its `sha` is the merge
            // ref's, doc/ci/pipelines/merged_results_pipelines.md).
            ("mergeable", pipeline) if !passed_for_head(&mr, iid) => {
                Ok(stuck(pipeline.unwrap_or("no pipeline")))
            }
            ("mergeable", _) => {
                let sha = mr.sha.unwrap_or_default();
                match self.gitlab.merge(token, project, iid, &sha).await {
                    Ok(merged) => Ok(Round::Merged(Box::new(merged))),
                    Err(err) if err.outcome_unknown() => {
                        tracing::warn!(iid, "merge answer unclear, will re-read: {err}");
                        Ok(Round::Finished(Outcome {
                            status: None,
                            step: StepStatus::MergePending,
                            message: None,
                        }))
                    }
                    // Not mergeable at this moment (the target moved on, a
                    // check is running): the next round re-reads it.
                    Err(err)
                        if err
                            .status()
                            .is_some_and(|s| matches!(s.as_u16(), 405 | 406 | 409 | 422)) =>
                    {
                        Ok(stuck(&err.to_string()))
                    }
                    Err(err) => Err(err),
                }
            }
            (other, _) => Ok(stuck(other)),
        }
    }
}

/// What one merge round found.
pub(crate) enum Round {
    /// Merged (by this round or before it): the MR as GitLab last gave it.
    Merged(Box<MergeRequest>),
    /// The step ends here.
    Finished(Outcome),
    /// A rebase of the MR (as read before it) was asked for: recorded, and
    /// its polls count from zero.
    Rebasing(Box<MergeRequest>),
    /// Not mergeable yet: polled again later.
    NotYet,
}
