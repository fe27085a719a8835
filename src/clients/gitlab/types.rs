//! The parts of GitLab's answers changegate reads (field names as GitLab's).

use serde::{Deserialize, Serialize};

/// One file change of a commit (`actions[]` of the Commits API).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileAction {
    /// `create`, `update` or `delete`.
    pub action: &'static str,
    /// The file.
    pub file_path: String,
    /// New content (create and update).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

/// A created commit.
#[derive(Debug, Clone, Deserialize)]
pub struct Commit {
    /// Its SHA.
    pub id: String,
}

/// A merge request.
#[derive(Debug, Clone, Deserialize)]
pub struct MergeRequest {
    /// Project-scoped number.
    pub iid: i64,
    /// `opened`, `closed`, `locked` or `merged`.
    pub state: String,
    /// Head SHA.
    pub sha: Option<String>,
    /// Web address.
    pub web_url: Option<String>,
    /// The branch it merges.
    #[serde(default)]
    pub source_branch: Option<String>,
    /// Mergeability (15.6+); unknown values mean "not yet".
    #[serde(default)]
    pub detailed_merge_status: Option<String>,
    /// Mergeability before 15.6 (`can_be_merged`, `cannot_be_merged`,
    /// `unchecked`, `checking`, `cannot_be_merged_recheck`).
    #[serde(default)]
    pub merge_status: Option<String>,
    /// The head pipeline, once there is one.
    #[serde(default)]
    pub head_pipeline: Option<Pipeline>,
    /// A rebase is running.
    #[serde(default)]
    pub rebase_in_progress: bool,
    /// Why the last merge or rebase failed.
    #[serde(default)]
    pub merge_error: Option<String>,
    /// The merge commit, once merged.
    #[serde(default)]
    pub merge_commit_sha: Option<String>,
}

impl MergeRequest {
    /// The commit a merge of it put on the target branch: the merge (or
    /// squash) commit, or, for a fast-forward merge, the head itself.
    pub fn landed_at(&self) -> Option<&str> {
        self.merge_commit_sha.as_deref().or(self.sha.as_deref())
    }
}

/// A pipeline.
#[derive(Debug, Clone, Deserialize)]
pub struct Pipeline {
    /// Its id.
    pub id: i64,
    /// The commit it runs for.
    pub sha: Option<String>,
    /// The ref it ran on: a branch, or `refs/merge-requests/<iid>/merge`
    /// for a merged-results pipeline (whose `sha` is that ref's commit).
    #[serde(rename = "ref", default)]
    pub reference: Option<String>,
    /// `created`, `pending`, `running`, `success`, `failed`, ...
    pub status: String,
    /// Its page.
    #[serde(default)]
    pub web_url: Option<String>,
    /// Seconds its jobs ran, once it has run (the `Pipeline` entity of
    /// `head_pipeline`, lib/api/entities/ci/pipeline.rb; `null` before).
    #[serde(default)]
    pub duration: Option<f64>,
}

impl Pipeline {
    /// It has finished: `success`, `failed`, `canceled` or `skipped`
    /// (`COMPLETED_STATUSES`, `Ci::HasStatus`); any other status may still
    /// run jobs.
    pub fn is_finished(&self) -> bool {
        matches!(
            self.status.as_str(),
            "success" | "failed" | "canceled" | "skipped"
        )
    }
}

/// An MR's approvals, relative to the caller (doc/api/merge_request_approvals.md). The
/// Free tier's body (`lib/api/entities/merge_request_approvals.rb`) has only who
/// approved and what the caller may do; Premium's (`ApprovalState`) adds how many
/// approvals are still missing and the rules they are missing from.
#[derive(Debug, Clone, Deserialize)]
pub struct Approvals {
    /// The approvers.
    #[serde(default)]
    pub approved_by: Vec<ApprovedBy>,
    /// Whether the caller (the token's user) has approved.
    #[serde(default)]
    pub user_has_approved: bool,
    /// Whether the caller may approve now (`false` once it has approved, or when no
    /// approval rule makes it an eligible approver).
    #[serde(default)]
    pub user_can_approve: Option<bool>,
    /// Approvals GitLab still requires (Premium); absent on Free, which requires none.
    #[serde(default)]
    pub approvals_left: Option<i64>,
    /// The approval rules still unmet (Premium).
    #[serde(default)]
    pub approval_rules_left: Vec<ApprovalRule>,
}

/// An approval rule as `ApprovalRuleShort` shows it.
#[derive(Debug, Clone, Deserialize)]
pub struct ApprovalRule {
    /// The rule's name.
    pub name: String,
}

/// One approver entry.
#[derive(Debug, Clone, Deserialize)]
pub struct ApprovedBy {
    /// The user.
    pub user: ApprovalUser,
}

/// A user as the approvals body shows it.
#[derive(Debug, Clone, Deserialize)]
pub struct ApprovalUser {
    /// Username.
    pub username: String,
}

impl Approvals {
    /// Whether `username` is among the approvers.
    pub fn includes(&self, username: &str) -> bool {
        self.approved_by
            .iter()
            .any(|entry| entry.user.username == username)
    }

    /// Whether GitLab says the caller may not approve, although it has not approved.
    pub fn refuses_caller(&self) -> bool {
        !self.user_has_approved && self.user_can_approve == Some(false)
    }

    /// The unmet rules by name, comma-separated (empty when none are named).
    pub fn rules_left(&self) -> String {
        let names: Vec<&str> = self
            .approval_rules_left
            .iter()
            .map(|rule| rule.name.as_str())
            .collect();
        names.join(", ")
    }
}
