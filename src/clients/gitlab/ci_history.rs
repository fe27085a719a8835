//! How long the project's pipelines take: its last successful merge
//! request pipelines (`GET /projects/:id/pipelines?status=success&source=
//! merge_request_event`, doc/api/pipelines.md, "List project pipelines";
//! `PipelineBasic` carries `created_at` and `updated_at`, and a finished
//! pipeline's `updated_at` is when it finished), read while changegate has
//! too few batches of its own to measure from, and kept: they fill the
//! samples the expected times are measured from.

use chrono::{DateTime, Utc};
use reqwest::Method;
use secrecy::SecretString;
use serde::Deserialize;

use super::{GitLabClient, GitLabError, project_ref};

/// Pipelines read at most: GitLab's default page.
const RECENT: u32 = 20;

#[derive(Deserialize)]
struct PipelineTimes {
    id: i64,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

/// A successful merge request pipeline of the project, as GitLab lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct PastPipeline {
    /// Its id.
    pub id: i64,
    /// When it finished.
    pub finished_at: DateTime<Utc>,
    /// Seconds from created to finished.
    pub seconds: f64,
}

impl GitLabClient {
    /// The project's last successful merge request pipelines, newest
    /// first.
    pub async fn recent_pipelines(
        &self,
        token: &SecretString,
        project: &str,
    ) -> Result<Vec<PastPipeline>, GitLabError> {
        let path = format!(
            "/projects/{}/pipelines?status=success&source=merge_request_event&per_page={RECENT}",
            project_ref(project)
        );
        let pipelines: Vec<PipelineTimes> = self.call(token, Method::GET, &path, None).await?;
        Ok(pipelines
            .iter()
            .map(|p| PastPipeline {
                id: p.id,
                finished_at: p.updated_at,
                seconds: (p.updated_at - p.created_at).as_seconds_f64().max(0.0),
            })
            .collect())
    }
}
