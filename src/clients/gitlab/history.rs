//! Who last changed a file: the newest commit on a branch that touched a
//! path (`GET repository/commits?ref_name=&path=&per_page=1`,
//! doc/api/commits.md, "List repository commits"), read only when an
//! operator looks at a drifted file.

use reqwest::Method;
use secrecy::SecretString;
use serde::Deserialize;

use super::{GitLabClient, GitLabError, project_ref, query_value};

/// A commit as the list of commits answers it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct CommitSummary {
    /// Its sha.
    pub id: String,
    /// Its first line.
    pub title: String,
    /// Who wrote it.
    #[serde(default)]
    pub author_name: Option<String>,
    /// When it was committed (ISO 8601, as GitLab writes it).
    #[serde(default)]
    pub committed_date: Option<String>,
    /// Its page.
    #[serde(default)]
    pub web_url: Option<String>,
}

impl GitLabClient {
    /// The newest commit on `reference` that changed `file_path` (also by
    /// deleting it), if any.
    pub async fn last_commit_of(
        &self,
        token: &SecretString,
        project: &str,
        file_path: &str,
        reference: &str,
    ) -> Result<Option<CommitSummary>, GitLabError> {
        let path = format!(
            "/projects/{}/repository/commits?ref_name={}&path={}&per_page=1",
            project_ref(project),
            query_value(reference),
            query_value(file_path)
        );
        let commits: Vec<CommitSummary> = self.call(token, Method::GET, &path, None).await?;
        Ok(commits.into_iter().next())
    }
}
