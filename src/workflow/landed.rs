//! Whether a merged change really is on the target branch: each file read
//! back at the merge, one tree listing per directory (not one read per
//! file), and compared with the rendering by git blob id.

use std::collections::{BTreeSet, HashMap};

use secrecy::SecretString;

use super::Workflow;
use super::merge_request::bot;
use crate::clients::gitlab::{FileAction, GitLabError, git_blob_id};
use crate::config::Settings;

impl Workflow {
    /// The ids of `changes` whose file at `reference` is not as rendered: a
    /// written file with other content or missing, or a deleted one still
    /// there.
    pub(crate) async fn not_landed<'a>(
        &self,
        settings: &Settings,
        project: &str,
        reference: &str,
        changes: &'a [(String, FileAction)],
    ) -> Result<Vec<&'a str>, GitLabError> {
        let token = bot(settings)?;
        let actions: Vec<&FileAction> = changes.iter().map(|(_, action)| action).collect();
        let blobs = self.blobs_of(token, project, reference, &actions).await?;
        Ok(changes
            .iter()
            .filter(|(_, action)| {
                let there = blobs.get(&action.file_path);
                match &action.content {
                    Some(content) => there.is_none_or(|blob| *blob != git_blob_id(content)),
                    None => there.is_some(),
                }
            })
            .map(|(id, _)| id.as_str())
            .collect())
    }

    /// The git blob id of every file at `reference` in the directories the
    /// `actions` touch: one tree listing per directory, however many files.
    pub(crate) async fn blobs_of(
        &self,
        token: &SecretString,
        project: &str,
        reference: &str,
        actions: &[&FileAction],
    ) -> Result<HashMap<String, String>, GitLabError> {
        let directories: BTreeSet<&str> = actions
            .iter()
            .map(|action| action.file_path.rsplit_once('/').map_or("", |(dir, _)| dir))
            .collect();
        let mut blobs = HashMap::new();
        for directory in directories {
            blobs.extend(
                self.gitlab
                    .blobs_in(token, project, directory, reference)
                    .await?,
            );
        }
        Ok(blobs)
    }
}
