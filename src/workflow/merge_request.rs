//! The Merge Request steps of one approved request (SPEC §6): write the
//! file on a branch and open the MR, wait for its pipeline, approve as both
//! reviewer bots, merge. Each step reads remote state first, so re-running
//! one after a crash or a lost answer is safe.

use std::time::Duration;

use secrecy::SecretString;

use super::Workflow;
use crate::clients::gitlab::{FileAction, GitLabError, MergeRequest};
use crate::config::Settings;
use crate::config::resolve::FlowOrder;
use crate::db::Db;
use crate::db::operations::{OperationRow, record_merge_request};
use crate::domain::render::{BindingFile, canonical_json, file_path};
use crate::domain::{BindingStatus, OperationKind, StepStatus};
use crate::store::{self, Change, StoreError};

const ACTOR: &str = "workflow";
/// Stepped polling of the pipeline: short pauses first (most pipelines are
/// quick), then long ones, then the deadline (SPEC §6).
const SHORT_POLLS: (i32, Duration) = (10, Duration::from_millis(300));
const LONG_POLLS: (i32, Duration) = (20, Duration::from_secs(3));
const PIPELINE_POLLS: i32 = SHORT_POLLS.0 + LONG_POLLS.0;

/// The pause after the `attempts`-th poll of a running pipeline.
pub(super) fn pipeline_poll_pause(attempts: i32) -> Duration {
    if attempts < SHORT_POLLS.0 {
        SHORT_POLLS.1
    } else {
        LONG_POLLS.1
    }
}
const MERGE_ATTEMPTS: u32 = 5;

/// Where a step leaves an operation.
struct Outcome {
    status: Option<BindingStatus>,
    step: StepStatus,
    message: Option<String>,
}

impl Outcome {
    fn to(status: BindingStatus, step: StepStatus) -> Self {
        Self {
            status: Some(status),
            step,
            message: None,
        }
    }

    fn failed(status: BindingStatus, step: StepStatus, err: &GitLabError) -> Self {
        Self {
            status: Some(status),
            step,
            message: Some(err.to_string()),
        }
    }
}

fn branch_of(operation: &OperationRow) -> String {
    format!("changegate/{}", operation.operation_id)
}

fn project_of<'a>(settings: &'a Settings, operation: &OperationRow) -> &'a str {
    settings
        .targets
        .get(&operation.target_key)
        .map(|target| target.project.as_str())
        .filter(|project| !project.is_empty())
        .unwrap_or(&settings.gitlab.project)
}

fn bot(settings: &Settings) -> Result<&SecretString, GitLabError> {
    settings
        .gitlab
        .bot_token
        .as_ref()
        .ok_or_else(|| GitLabError::Transport("gitlab.bot_token is not configured".to_owned()))
}

impl Outcome {
    /// The same outcome for a close operation, whose binding stays CLOSING
    /// through the MR's life and ends CLOSED (or CLOSE_FAILED).
    fn for_kind(self, kind: OperationKind) -> Self {
        if kind == OperationKind::Apply {
            return self;
        }
        let (status, step) = match (self.status, self.step) {
            (Some(BindingStatus::MrCreated), StepStatus::MrCreated) => {
                (None, StepStatus::CloseMrCreated)
            }
            (Some(BindingStatus::Merging), step) => (None, step),
            (Some(BindingStatus::Merged), _) => (Some(BindingStatus::Closed), StepStatus::Closed),
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
    /// Writes `outcome` (adapted to the operation's kind) if the operation is
    /// still at `version`.
    async fn settle(
        &self,
        db: &Db,
        operation: &OperationRow,
        version: i64,
        outcome: Outcome,
    ) -> Result<(), StoreError> {
        let outcome = outcome.for_kind(operation.kind);
        let change = Change {
            step: outcome.step,
            message: outcome.message.as_deref(),
            actor: ACTOR,
        };
        store::transition(db, &operation.operation_id, version, outcome.status, change)
            .await
            .map(|_| ())
    }

    /// Branch, commit and MR; records the MR on the operation.
    pub(super) async fn open_merge_request(
        &self,
        db: &Db,
        operation: &OperationRow,
    ) -> Result<(), StoreError> {
        let settings = self.config.current();
        let outcome = match self.create_mr(&settings, operation).await {
            Ok(mr) => {
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
            Err(err) if err.outcome_unknown() => {
                tracing::warn!(operation_id = %operation.operation_id, "MR creation unclear, will re-read: {err}");
                return Ok(());
            }
            Err(err) => {
                Outcome::failed(BindingStatus::CreateFailed, StepStatus::CreateRefused, &err)
            }
        };
        self.settle(db, operation, operation.version, outcome).await
    }

    async fn create_mr(
        &self,
        settings: &Settings,
        operation: &OperationRow,
    ) -> Result<MergeRequest, GitLabError> {
        let (token, project) = (bot(settings)?, project_of(settings, operation));
        let branch = branch_of(operation);
        let base = &settings.gitlab.target_branch;
        // An MR from an earlier run of this step is the one to use.
        if let Some(mr) = self
            .gitlab
            .open_merge_requests_from(token, project, &branch)
            .await?
            .into_iter()
            .next()
        {
            return Ok(mr);
        }
        match self
            .gitlab
            .create_branch(token, project, &branch, base)
            .await
        {
            Err(err) if err.status().is_some_and(|s| s.as_u16() == 400) => {} // exists from an earlier run
            other => other?,
        }
        let template = settings
            .targets
            .get(&operation.target_key)
            .map_or("bindings/{target}/{subject}.json", |t| t.path.as_str());
        let path = file_path(template, &operation.target_key, &operation.subject_id);
        let action = match operation.kind {
            OperationKind::Apply => {
                let params = serde_json::from_str(&operation.params)
                    .unwrap_or_else(|_| serde_json::json!({}));
                let content = BindingFile {
                    subject: &operation.subject_id,
                    target: &operation.target_key,
                    params: &canonical_json(&params),
                    expires_at: operation.expires_at.map(|at| {
                        at.and_utc()
                            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
                    }),
                    operation_id: &operation.operation_id,
                    requested_by: &operation.requested_by,
                }
                .render();
                FileAction {
                    action: "create",
                    file_path: path,
                    content: Some(content),
                }
            }
            OperationKind::Close => FileAction {
                action: "delete",
                file_path: path,
                content: None,
            },
        };
        let message = format!(
            "changegate: {} {} for {}",
            operation.kind.as_str().to_lowercase(),
            operation.target_key,
            operation.subject_id
        );
        match self
            .gitlab
            .commit(token, project, &branch, &message, &[action])
            .await
        {
            // Written by an earlier run of this step (the content is deterministic).
            Err(err) if err.status().is_some_and(|s| s.as_u16() == 400) => {}
            other => {
                other?;
            }
        }
        let description = format!(
            "{}\n\nChangegate-Operation: {}",
            operation.reason, operation.operation_id
        );
        self.gitlab
            .create_merge_request(token, project, &branch, base, &message, &description)
            .await
    }

    /// Reads the MR's pipeline once: pass → merging, fail → failed (contact
    /// the team); still running → polled again later (the operation stays
    /// where it is), until the deadline → pending (its outcome is unknown,
    /// keep waiting; it is still re-read now and then).
    pub(super) async fn await_pipeline(
        &self,
        db: &Db,
        operation: &OperationRow,
    ) -> Result<(), StoreError> {
        let settings = self.config.current();
        let (Ok(token), Some(iid)) = (bot(&settings), operation.mr_iid) else {
            return Ok(());
        };
        let project = project_of(&settings, operation);
        let outcome = match self.gitlab.merge_request(token, project, iid).await {
            Ok(mr) if mr.state == "merged" => {
                Outcome::to(BindingStatus::Merging, StepStatus::HandleStarted)
            }
            Ok(mr) => match mr.head_pipeline.as_ref().map(|p| p.status.as_str()) {
                // MR first: the approval is asked for now, carrying the MR.
                Some("success") if operation.flow_order == FlowOrder::MrFirst => {
                    Outcome::to(BindingStatus::ApprovalSending, StepStatus::ApprovalSending)
                }
                Some("success") => Outcome::to(BindingStatus::Merging, StepStatus::HandleStarted),
                Some("failed" | "canceled") => Outcome {
                    status: Some(BindingStatus::CreateFailed),
                    step: StepStatus::CreatePipelineFailed,
                    message: Some(format!("the pipeline of MR !{iid} failed")),
                },
                _ if operation.step == StepStatus::PipelinePending
                    || operation.attempts < PIPELINE_POLLS =>
                {
                    return Ok(());
                }
                _ => Outcome {
                    status: None,
                    step: StepStatus::PipelinePending,
                    message: Some(format!(
                        "the pipeline of MR !{iid} has not finished; its outcome is unknown"
                    )),
                },
            },
            Err(err) => {
                tracing::debug!(iid, "reading the MR failed, polling on: {err}");
                return Ok(());
            }
        };
        self.settle(db, operation, operation.version, outcome).await
    }

    /// Both reviewer bots approve, then the bot merges.
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
        let mr = match self.gitlab.merge_request(token, project, iid).await {
            Ok(mr) => mr,
            Err(err) => {
                tracing::warn!(iid, "cannot read the MR before merging: {err}");
                return Ok(());
            }
        };
        // Read remote state first: an MR already merged is finished, not approved again.
        let outcome = if mr.state == "merged" {
            Outcome::to(BindingStatus::Merged, StepStatus::HandleMerged)
        } else if mr.state == "closed" {
            Outcome {
                status: Some(BindingStatus::HandleFailed),
                step: StepStatus::HandleMrClosed,
                message: Some(format!("MR !{iid} was closed")),
            }
        } else if let Err(err) = self.approve_as_reviewers(&settings, project, iid).await {
            Outcome::failed(
                BindingStatus::HandleFailed,
                StepStatus::HandleApproveFailed,
                &err,
            )
        } else {
            match self.merge(token, project, iid).await {
                Ok(()) => Outcome::to(BindingStatus::Merged, StepStatus::HandleMerged),
                Err(err) if err.outcome_unknown() => {
                    tracing::warn!(iid, "merge answer unclear, will re-read: {err}");
                    Outcome {
                        status: None,
                        step: StepStatus::MergePending,
                        message: None,
                    }
                }
                Err(err) => Outcome::failed(
                    BindingStatus::HandleFailed,
                    StepStatus::HandleMergeRefused,
                    &err,
                ),
            }
        };
        self.settle(db, operation, operation.version, outcome).await
    }

    /// Each reviewer separately: read before each attempt, approve, and read
    /// once more after the last failure (GitLab answers 401 both for "already
    /// approved" and "not allowed"); a failed read counts as "not yet".
    async fn approve_as_reviewers(
        &self,
        settings: &Settings,
        project: &str,
        iid: i64,
    ) -> Result<(), GitLabError> {
        let retries = settings.approval.retries;
        for reviewer in &settings.gitlab.reviewer_tokens {
            let approved = |approvals: Result<_, GitLabError>| {
                approvals.is_ok_and(|a: crate::clients::gitlab::Approvals| a.user_has_approved)
            };
            let mut pause = Duration::from_millis(100);
            let mut last = None;
            for attempt in 0..=retries {
                if approved(self.gitlab.approvals(reviewer, project, iid).await) {
                    last = None;
                    break;
                }
                match self.gitlab.approve(reviewer, project, iid).await {
                    Ok(()) => {
                        last = None;
                        break;
                    }
                    Err(err) => last = Some(err),
                }
                if attempt < retries {
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
            }
            if let Some(err) = last
                && !approved(self.gitlab.approvals(reviewer, project, iid).await)
            {
                return Err(err);
            }
        }
        Ok(())
    }

    /// Merges at the MR's head; a "not mergeable now" answer (405/406/422)
    /// is re-polled and retried.
    async fn merge(
        &self,
        token: &SecretString,
        project: &str,
        iid: i64,
    ) -> Result<(), GitLabError> {
        let mut last = None;
        for _ in 0..MERGE_ATTEMPTS {
            let mr = self.gitlab.merge_request(token, project, iid).await?;
            if mr.state == "merged" {
                return Ok(());
            }
            let sha = mr.sha.unwrap_or_default();
            match self.gitlab.merge(token, project, iid, &sha).await {
                Ok(_) => return Ok(()),
                Err(err)
                    if err
                        .status()
                        .is_some_and(|s| matches!(s.as_u16(), 405 | 406 | 409 | 422)) =>
                {
                    last = Some(err)
                }
                Err(err) => return Err(err),
            }
            tokio::time::sleep(SHORT_POLLS.1).await;
        }
        Err(last.unwrap_or_else(|| GitLabError::Decode("merge attempts exhausted".to_owned())))
    }
}
