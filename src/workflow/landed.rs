//! Whether a merged change really is on the target branch: each file read
//! back at the merge, one tree listing per directory (not one read per
//! file), and compared with the rendering by git blob id.

use std::collections::BTreeMap;

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
        let mut by_directory: BTreeMap<&str, Vec<&'a (String, FileAction)>> = BTreeMap::new();
        for change in changes {
            let directory = change
                .1
                .file_path
                .rsplit_once('/')
                .map_or("", |(dir, _)| dir);
            by_directory.entry(directory).or_default().push(change);
        }
        let mut missing = Vec::new();
        for (directory, changes) in by_directory {
            let blobs = self
                .gitlab
                .blobs_in(token, project, directory, reference)
                .await?;
            for (id, action) in changes {
                let there = blobs.get(&action.file_path);
                let landed = match &action.content {
                    Some(content) => there.is_some_and(|blob| *blob == git_blob_id(content)),
                    None => there.is_none(),
                };
                if !landed {
                    missing.push(id.as_str());
                }
            }
        }
        Ok(missing)
    }
}
