//! What a branch or commit holds of a set of changes, read the cheap way:
//! one tree listing per directory of whole files (compared by git blob id,
//! however many files), and one read of each shared file (compared by the
//! value at each key, not the whole file, which other people edit too).
//! Opening a change writes what a branch still lacks; after a merge, the
//! same reading says whether every change landed.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use secrecy::SecretString;

use super::Workflow;
use super::merge_request::bot;
use crate::clients::gitlab::{FileAction, GitLabError, git_blob_id};
use crate::config::Settings;
use crate::files::layout::{FileChange, edited, holds};

/// What one reference holds of some changes' files.
#[derive(Debug, Default)]
pub(crate) struct Held {
    /// Blob id of every file in the directories of whole-file changes.
    blobs: HashMap<String, String>,
    /// The text of each shared file (none: it does not exist).
    shared: HashMap<String, Option<String>>,
}

/// A file cannot be written as its changes say: a rendering that failed,
/// or a shared file that cannot take its edits (it no longer parses, or a
/// key's parent is not a table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unwritable {
    /// The file.
    pub path: String,
    /// The key whose edit failed; none: the whole file.
    pub key: Option<Vec<String>>,
    /// Why, naming the file.
    pub message: String,
}

impl Held {
    /// Whether the reference holds `change` as rendered.
    pub(crate) fn holds(&self, change: &FileChange) -> bool {
        match change {
            FileChange::Whole { path, content } => {
                let there = self.blobs.get(path);
                match content {
                    Some(content) => there.is_some_and(|blob| *blob == git_blob_id(content)),
                    None => there.is_none(),
                }
            }
            FileChange::Key {
                path,
                format,
                key,
                value,
            } => holds(
                *format,
                self.shared.get(path).and_then(Option::as_deref),
                key,
                value.as_ref(),
            ),
        }
    }

    /// The blob id of `path`, when it is a file listed.
    pub(crate) fn blob(&self, path: &str) -> Option<&String> {
        self.blobs.get(path)
    }

    /// The text of the shared file `path`, when it was read and exists.
    pub(crate) fn text(&self, path: &str) -> Option<&str> {
        self.shared.get(path).and_then(Option::as_deref)
    }

    /// The commit actions that make the reference hold every change: a
    /// whole file already as rendered needs nothing, one there with other
    /// content is updated, a missing one created, and a deletion of a
    /// missing file dropped; a shared file gets one action with all of its
    /// edits applied, in order, to what the reference holds now (so an
    /// entry someone else wrote meanwhile is kept).
    pub(crate) fn missing(&self, changes: &[FileChange]) -> Result<Vec<FileAction>, Unwritable> {
        let mut actions = Vec::new();
        let mut edits: BTreeMap<&str, Vec<&FileChange>> = BTreeMap::new();
        for change in changes {
            match change {
                FileChange::Whole { path, content } => {
                    let now = self.blobs.get(path);
                    let verb = match (content, now) {
                        (Some(content), Some(now)) if git_blob_id(content) == *now => None,
                        (Some(_), Some(_)) => Some("update"),
                        (Some(_), None) => Some("create"),
                        (None, Some(_)) => Some("delete"),
                        (None, None) => None,
                    };
                    if let Some(verb) = verb {
                        actions.push(FileAction {
                            action: verb,
                            file_path: path.clone(),
                            content: content.clone(),
                        });
                    }
                }
                FileChange::Key { path, .. } => edits.entry(path).or_default().push(change),
            }
        }
        for (path, changes) in edits {
            let current = self.text(path);
            if let Some(action) = shared_action(path, current, &changes)? {
                actions.push(action);
            }
        }
        Ok(actions)
    }
}

/// The one action that applies `changes` (all of one shared file) to its
/// `current` text; none when the text would not change.
pub(crate) fn shared_action(
    path: &str,
    current: Option<&str>,
    changes: &[&FileChange],
) -> Result<Option<FileAction>, Unwritable> {
    let Some(FileChange::Key { format, .. }) = changes.first() else {
        return Ok(None);
    };
    // One edit at a time, so a failure names the one edit (and request)
    // that cannot be applied, not every request of the file.
    let mut next = current.map(str::to_owned);
    for change in changes {
        let FileChange::Key { key, value, .. } = change else {
            continue;
        };
        next = edited(*format, next.as_deref(), &[(key, value.as_ref())]).map_err(|reason| {
            Unwritable {
                path: path.to_owned(),
                key: Some(key.clone()),
                message: format!("{path} cannot be edited at {}: {reason}", key.join(".")),
            }
        })?;
    }
    Ok(match (current, next) {
        (Some(now), Some(next)) if now == next => None,
        (Some(_), Some(next)) => Some(FileAction {
            action: "update",
            file_path: path.to_owned(),
            content: Some(next),
        }),
        (None, Some(next)) => Some(FileAction {
            action: "create",
            file_path: path.to_owned(),
            content: Some(next),
        }),
        (_, None) => None,
    })
}

impl Workflow {
    /// The ids of `changes` whose file at `reference` is not as rendered: a
    /// written file with other content or missing, a deleted one still
    /// there, a shared file's key without the value (or still there).
    pub(crate) async fn not_landed<'a>(
        &self,
        settings: &Settings,
        project: &str,
        reference: &str,
        changes: &'a [(String, FileChange)],
    ) -> Result<Vec<&'a str>, GitLabError> {
        let token = bot(settings)?;
        let read: Vec<&FileChange> = changes.iter().map(|(_, change)| change).collect();
        let held = self.held(token, project, reference, &read).await?;
        Ok(changes
            .iter()
            .filter(|(_, change)| !held.holds(change))
            .map(|(id, _)| id.as_str())
            .collect())
    }

    /// What `reference` holds of `changes`' files: one tree listing per
    /// directory of whole files, one read per shared file.
    pub(crate) async fn held(
        &self,
        token: &SecretString,
        project: &str,
        reference: &str,
        changes: &[&FileChange],
    ) -> Result<Held, GitLabError> {
        let mut directories = BTreeSet::new();
        let mut shared = BTreeSet::new();
        for change in changes {
            match change {
                FileChange::Whole { path, .. } => {
                    directories.insert(path.rsplit_once('/').map_or("", |(dir, _)| dir));
                }
                FileChange::Key { path, .. } => {
                    shared.insert(path.as_str());
                }
            }
        }
        let mut held = Held::default();
        for directory in directories {
            held.blobs.extend(
                self.gitlab
                    .blobs_in(token, project, directory, reference)
                    .await?,
            );
        }
        for path in shared {
            let text = self
                .gitlab
                .file_content(token, project, path, reference)
                .await?;
            held.shared.insert(path.to_owned(), text);
        }
        Ok(held)
    }
}
