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
}

/// Who approved an MR (the CE and EE bodies share this part).
#[derive(Debug, Clone, Deserialize)]
pub struct Approvals {
    /// The approvers.
    #[serde(default)]
    pub approved_by: Vec<ApprovedBy>,
    /// Whether the caller (the token's user) has approved.
    #[serde(default)]
    pub user_has_approved: bool,
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
}
