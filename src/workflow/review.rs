//! The reviewer bots' part of the merge step (SPEC §6): each approves the MR,
//! reading the approvers before each attempt and once more after the last
//! failure; and when GitLab still reports the MR `not_approved` afterwards,
//! its approval state (doc/api/merge_request_approvals.md) tells whether
//! waiting could ever change that.

use std::time::Duration;

use secrecy::SecretString;

use super::Workflow;
use super::events;
use crate::clients::gitlab::{Approvals, GitLabError, MergeRequest};
use crate::config::Settings;
use crate::db::timeline_events::TimelineEvent;

/// Why the reviewer bots could not approve.
pub(super) enum ApproveFailure {
    /// GitLab refused an approval, after the retries and a final read.
    Refused(GitLabError),
    /// GitLab says this reviewer (1-based, in `gitlab.reviewer_tokens` order)
    /// may not approve, even after the others approved.
    NotEligible {
        reviewer: usize,
        approvals: Box<Approvals>,
    },
}

impl ApproveFailure {
    /// What the step reports.
    pub(super) fn message(&self, iid: i64) -> String {
        match self {
            Self::Refused(err) => err.to_string(),
            Self::NotEligible {
                reviewer,
                approvals,
            } => {
                let mut message = format!(
                    "reviewer bot {reviewer} may not approve MR !{iid}: GitLab answers \
                     user_can_approve false (no approval rule makes it an eligible approver, \
                     or it lacks the right to approve)"
                );
                if let Some(left) = approvals.approvals_left.filter(|left| *left > 0) {
                    message.push_str(&format!("; {left} approval(s) still required"));
                }
                let rules = approvals.rules_left();
                if !rules.is_empty() {
                    message.push_str(&format!(" (rules left: {rules})"));
                }
                message
            }
        }
    }
}

/// Where one reviewer's approving ended.
enum Approval {
    /// It had approved before this round.
    Given,
    /// It approved in this round.
    Gave,
    /// GitLab says it may not approve (`user_can_approve: false`).
    NotEligible(Box<Approvals>),
    Failed(GitLabError),
}

impl Workflow {
    /// Each reviewer separately, in order. One GitLab says may not approve
    /// tries again after the others: approvals that meet the MR's rules let
    /// any member approve (EE's `any_approver_allowed?`). Each approval given
    /// in this round is added to `noted`, once: a round that finds a bot's
    /// approval already there (most rounds, while the MR is not mergeable
    /// yet) has nothing to record.
    pub(super) async fn approve_as_reviewers(
        &self,
        settings: &Settings,
        project: &str,
        mr: &MergeRequest,
        noted: &mut Vec<TimelineEvent>,
    ) -> Result<(), ApproveFailure> {
        let iid = mr.iid;
        let mut later = Vec::new();
        for (index, reviewer) in settings.gitlab.reviewer_tokens.iter().enumerate() {
            match self.approve_as(settings, reviewer, project, iid).await {
                Approval::Given => {}
                Approval::Gave => noted.push(events::approved(index + 1, mr)),
                Approval::NotEligible(_) => later.push((index, reviewer)),
                Approval::Failed(err) => return Err(ApproveFailure::Refused(err)),
            }
        }
        for (index, reviewer) in later {
            match self.approve_as(settings, reviewer, project, iid).await {
                Approval::Given => {}
                Approval::Gave => noted.push(events::approved(index + 1, mr)),
                Approval::NotEligible(approvals) => {
                    return Err(ApproveFailure::NotEligible {
                        reviewer: index + 1,
                        approvals,
                    });
                }
                Approval::Failed(err) => return Err(ApproveFailure::Refused(err)),
            }
        }
        Ok(())
    }

    /// One reviewer: read before each attempt, approve, and read once more
    /// after the last failure (GitLab answers 401 both for "already approved"
    /// and "not allowed"); a failed read counts as "not yet". A read saying it
    /// may not approve ends the attempts: asking would only be refused; so
    /// does a transient failure, which the merge round's next poll retries.
    async fn approve_as(
        &self,
        settings: &Settings,
        reviewer: &SecretString,
        project: &str,
        iid: i64,
    ) -> Approval {
        let mut pause = Duration::from_millis(100);
        let mut attempt = 0;
        let err = loop {
            match self.gitlab.approvals(reviewer, project, iid).await {
                Ok(approvals) if approvals.user_has_approved => return Approval::Given,
                Ok(approvals) if approvals.refuses_caller() => {
                    return Approval::NotEligible(Box::new(approvals));
                }
                _ => {}
            }
            match self
                .gitlab
                .approve_with(settings.gitlab.approve_impl, reviewer, project, iid)
                .await
            {
                Ok(()) => return Approval::Gave,
                // A transient failure (5xx, 429, no answer) is not retried
                // here: the merge round is polled again instead.
                Err(err) if err.is_transient() || attempt >= settings.approval.retries => {
                    break err;
                }
                Err(_) => {}
            }
            tokio::time::sleep(pause).await;
            pause *= 2;
            attempt += 1;
        };
        // Approved after all: the last attempt's answer was lost.
        match self.gitlab.approvals(reviewer, project, iid).await {
            Ok(approvals) if approvals.user_has_approved => Approval::Gave,
            Ok(approvals) if approvals.refuses_caller() => {
                Approval::NotEligible(Box::new(approvals))
            }
            _ => Approval::Failed(err),
        }
    }

    /// After every reviewer bot approved, GitLab still reports the MR
    /// `not_approved`: why no wait can change that, when its approval state
    /// says so (every bot has approved, and Premium's `approvals_left` still
    /// wants more). `None` when it cannot tell (the Free body counts nothing)
    /// or a bot's approval is gone again (a push reset it): the next round
    /// approves and looks again.
    pub(super) async fn approvals_out_of_reach(
        &self,
        settings: &Settings,
        project: &str,
        iid: i64,
    ) -> Result<Option<String>, GitLabError> {
        let mut last = None;
        for reviewer in &settings.gitlab.reviewer_tokens {
            let approvals = self.gitlab.approvals(reviewer, project, iid).await?;
            if !approvals.user_has_approved {
                return Ok(None);
            }
            last = Some(approvals);
        }
        Ok(last.and_then(|approvals| {
            let left = approvals.approvals_left.filter(|left| *left > 0)?;
            let rules = approvals.rules_left();
            let rules = if rules.is_empty() {
                String::new()
            } else {
                format!(" (rules left: {rules})")
            };
            Some(format!(
                "MR !{iid} still needs {left} approval(s) after every reviewer bot approved{rules}: \
                 its approval rules want approvers other than the bots"
            ))
        }))
    }
}
