//! Opening a change as an MR: the branch, one commit that makes the
//! branch's files what they should be (judged by what is there, not by
//! status codes), and the MR, each adopted when an earlier attempt made it.

use reqwest::StatusCode;
use secrecy::SecretString;

use super::Workflow;
use super::landed::Unwritable;
use super::merge_request::bot;
use crate::clients::gitlab::{FileAction, GitLabError, MergeRequest};
use crate::config::Settings;
use crate::files::layout::FileChange;

/// What one MR writes: a branch, one commit of file actions, and the MR's
/// title and description (whose `Changegate-Operation:` trailers name the
/// operations it carries, for the deploy pipeline).
pub(crate) struct ChangeSet {
    /// The source branch.
    pub branch: String,
    /// The commit the branch starts from, when not the target branch's
    /// head as it is when the branch is made: a merge train's batch starts
    /// at the head of the batch ahead (or the target head it read), so its
    /// pipeline tests what the target branch will hold.
    pub start: Option<String>,
    /// Commit message and MR title.
    pub title: String,
    /// The MR's description.
    pub description: String,
    /// What it does to the repository's files.
    pub changes: Vec<FileChange>,
}

impl ChangeSet {
    /// Whether any change edits a key of a shared file (whose other
    /// entries are other people's).
    fn edits_shared_files(&self) -> bool {
        self.changes
            .iter()
            .any(|change| matches!(change, FileChange::Key { .. }))
    }

    /// Whether what the commit must write is read from the new branch, not
    /// from the target: a shared file's other entries may have moved, and
    /// a branch started elsewhere holds what the batches ahead wrote.
    fn reads_its_branch(&self) -> bool {
        self.start.is_some() || self.edits_shared_files()
    }
}

/// Why a change could not be opened.
#[derive(Debug)]
pub(crate) enum OpenFailure {
    /// A GitLab call failed.
    GitLab(GitLabError),
    /// A file cannot be written as the change says (its rendering failed,
    /// or a shared file cannot take its edits): nothing was committed.
    Unwritable(Unwritable),
}

impl From<GitLabError> for OpenFailure {
    fn from(err: GitLabError) -> Self {
        Self::GitLab(err)
    }
}

impl From<Unwritable> for OpenFailure {
    fn from(err: Unwritable) -> Self {
        Self::Unwritable(err)
    }
}

/// What opening a change came to.
pub(crate) enum Opened {
    /// The MR that carries the change, opened now or by an earlier run.
    MergeRequest(Box<MergeRequest>),
    /// The target branch already holds every file as the change would
    /// write it: there is nothing to merge.
    AlreadyInPlace,
}

/// GitLab's limits on an MR: a title of at most 255 characters
/// (app/models/concerns/issuable.rb validates its length) and a description
/// of at most 1 MiB (`issuable_description_limit`'s default).
const MAX_TITLE_CHARS: usize = 255;
pub(crate) const MAX_DESCRIPTION_BYTES: usize = 1 << 20;

/// `text` cut to at most `limit` characters, ending in `…` when cut.
fn cut_chars(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        None => text.to_owned(),
        Some(_) => text.chars().take(limit - 1).chain(['…']).collect(),
    }
}

/// `text` cut to at most `limit` bytes on a character boundary, ending in
/// `…` when cut.
fn cut_bytes(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_owned();
    }
    let mut end = limit - '…'.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

impl Workflow {
    /// Branch, one commit of `change`'s files, and the MR, as the bot. Each
    /// part an earlier run already made is found and reused, so this may run
    /// any number of times for one change. What the commit writes is judged
    /// from what the target branch holds: a file already as rendered needs
    /// nothing, and when every file is, no branch or MR is made at all (an
    /// MR without commits can never merge: `commits_status`).
    pub(crate) async fn open_change(
        &self,
        settings: &Settings,
        project: &str,
        change: &ChangeSet,
    ) -> Result<Opened, OpenFailure> {
        let token = bot(settings)?;
        let (branch, base) = (&change.branch, &settings.gitlab.target_branch);
        // An MR from an earlier run of this step is the one to use.
        if let Some(mr) = self
            .gitlab
            .open_merge_requests_from(token, project, branch)
            .await?
            .into_iter()
            .next()
        {
            return Ok(Opened::MergeRequest(Box::new(mr)));
        }
        let needed = self
            .still_missing(token, project, base, &change.changes)
            .await?;
        if needed.is_empty() {
            return Ok(Opened::AlreadyInPlace);
        }
        let start = change.start.as_deref().unwrap_or(base);
        let actions = match self
            .gitlab
            .create_branch(token, project, branch, start)
            .await
        {
            // The branch starts at the target's head as it is now, which may
            // have moved since it was read: a shared file is read again from
            // the branch, so an entry someone wrote in between is kept, not
            // written back over with the copy read before.
            Ok(()) if change.reads_its_branch() => {
                self.still_missing(token, project, branch, &change.changes)
                    .await?
            }
            Ok(()) => needed,
            // From an earlier run (GitLab: 400 "Branch already exists"),
            // which may have committed some or all of the files.
            Err(GitLabError::Status { status, message })
                if status == StatusCode::BAD_REQUEST && message.contains("already exists") =>
            {
                self.still_missing(token, project, branch, &change.changes)
                    .await?
            }
            // No clear answer: the branch GitLab may have made is used,
            // with whatever it already holds.
            Err(err) if err.outcome_unknown() => {
                if !self.gitlab.branch_exists(token, project, branch).await? {
                    return Err(err.into());
                }
                self.still_missing(token, project, branch, &change.changes)
                    .await?
            }
            Err(err) => return Err(err.into()),
        };
        if !actions.is_empty() {
            self.commit_missing(token, project, change, &actions)
                .await?;
        }
        let created = self
            .gitlab
            .create_merge_request(
                token,
                project,
                branch,
                base,
                &cut_chars(&change.title, MAX_TITLE_CHARS),
                &cut_bytes(&change.description, MAX_DESCRIPTION_BYTES),
            )
            .await;
        match created {
            // GitLab answers 409 when the source branch has an open MR
            // already (`conflict!` on `validate_branches` in
            // lib/api/merge_requests.rb): ours, from an attempt whose answer
            // was lost. So is one found after an answer that never came or
            // was a 5xx. Either way it is adopted, never a second MR.
            Err(err)
                if err.outcome_unknown()
                    || err.status().is_some_and(|s| s == StatusCode::CONFLICT) =>
            {
                let open = self
                    .gitlab
                    .open_merge_requests_from(token, project, branch)
                    .await?;
                match open.into_iter().next() {
                    Some(mr) => {
                        tracing::info!(
                            iid = mr.iid,
                            branch,
                            "adopted the MR an unanswered create opened"
                        );
                        Ok(Opened::MergeRequest(Box::new(mr)))
                    }
                    None => Err(err.into()),
                }
            }
            other => Ok(Opened::MergeRequest(Box::new(other?))),
        }
    }

    /// One commit of `actions` on the change's branch. When GitLab finds the
    /// branch other than the actions expect (a file created meanwhile, one
    /// deleted), or the answer is lost (the commit may be there), what the
    /// branch still lacks is read again and only that is committed.
    ///
    /// The actions carry no `last_commit_id`: it guards an edit against a
    /// file changed since it was read, but on changegate's own branch the
    /// rendering must win over whatever is there, so an `update` that
    /// overwrites a concurrent edit is the intended outcome, and a `create`
    /// or `delete` that no longer fits is refused by GitLab anyway and read
    /// again here. What could change under a request, the target branch,
    /// is not written by this commit: a move there shows as `need_rebase`
    /// or `conflict`, and the merged files are read back.
    async fn commit_missing(
        &self,
        token: &SecretString,
        project: &str,
        change: &ChangeSet,
        actions: &[FileAction],
    ) -> Result<(), OpenFailure> {
        let branch = &change.branch;
        match self
            .gitlab
            .commit(token, project, branch, &change.title, actions)
            .await
        {
            Ok(_) => Ok(()),
            Err(err) if err.outcome_unknown() || is_file_state_refusal(&err) => {
                let missing = self
                    .still_missing(token, project, branch, &change.changes)
                    .await?;
                if !missing.is_empty() {
                    self.gitlab
                        .commit(token, project, branch, &change.title, &missing)
                        .await?;
                }
                Ok(())
            }
            // Anything else GitLab refuses is a failure, with its message.
            Err(err) => Err(err.into()),
        }
    }

    /// The actions that make `branch` hold what `wanted` says, from what it
    /// holds now ([`super::landed::Held::missing`]).
    async fn still_missing(
        &self,
        token: &SecretString,
        project: &str,
        branch: &str,
        wanted: &[FileChange],
    ) -> Result<Vec<FileAction>, OpenFailure> {
        let read: Vec<&FileChange> = wanted.iter().collect();
        let held = self.held(token, project, branch, &read).await?;
        Ok(held.missing(wanted)?)
    }
}

/// Whether GitLab refused a commit because a file is not as an action
/// expects. Its wording changed across versions (`Files::MultiService` in
/// app/services/files/multi_service.rb: "a file with the name `…` already
/// exists", "File to be updated `…` does not exist", "… has changed since
/// you started editing it"; Gitaly's "A file with this name already exists"
/// and "A file with this name doesn't exist"), so the message is matched
/// loosely, and only on a 400.
fn is_file_state_refusal(err: &GitLabError) -> bool {
    let GitLabError::Status { status, message } = err else {
        return false;
    };
    let message = message.to_lowercase();
    *status == StatusCode::BAD_REQUEST
        && message.contains("file")
        && [
            "already exists",
            "does not exist",
            "doesn't exist",
            "has changed since",
        ]
        .iter()
        .any(|phrase| message.contains(phrase))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(status: u16, message: &str) -> GitLabError {
        GitLabError::Status {
            status: StatusCode::from_u16(status).expect("a status"),
            message: message.to_owned(),
        }
    }

    #[test]
    fn titles_and_descriptions_are_cut_to_gitlabs_limits_on_a_character_boundary() {
        let title = "é".repeat(342);
        let cut = cut_chars(&title, MAX_TITLE_CHARS);
        assert_eq!(cut.chars().count(), 255);
        assert!(cut.ends_with('…'));
        let description = "ü".repeat(MAX_DESCRIPTION_BYTES);
        let cut = cut_bytes(&description, MAX_DESCRIPTION_BYTES);
        assert!(cut.len() <= MAX_DESCRIPTION_BYTES && cut.len() > MAX_DESCRIPTION_BYTES - 8);
        assert_eq!(cut_chars("short", 255), "short");
        assert_eq!(cut_bytes("short", 255), "short");
        assert_eq!(
            cut_chars(&"x".repeat(255), 255).len(),
            255,
            "at the limit: not cut"
        );
    }

    #[test]
    fn file_state_refusals_are_told_by_gitlabs_words_in_each_version() {
        for message in [
            "A file with this name already exists",
            "A file with this name doesn't exist",
            "Your changes could not be committed because a file with the name `a.json` already exists.",
            "File to be updated `a.json` does not exist.",
            "You are attempting to update a file `a.json` that has changed since you started editing it.",
        ] {
            assert!(is_file_state_refusal(&refusal(400, message)), "{message}");
        }
        for other in [
            refusal(400, "400 Bad Request"),
            refusal(
                400,
                "Your changes could not be committed, because the file name, `../a` can contain only...",
            ),
            refusal(403, "A file with this name already exists"),
            GitLabError::Timeout,
        ] {
            assert!(!is_file_state_refusal(&other), "{other:?}");
        }
    }
}
