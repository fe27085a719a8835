//! The Merge Request calls: open, find, read, approve, rebase, merge,
//! close, and retry a pipeline's jobs.

use reqwest::Method;
use secrecy::SecretString;
use serde_json::json;

use super::{Approvals, GitLabClient, GitLabError, MergeRequest, Pipeline, project_ref};

impl GitLabClient {
    /// Opens an MR from `source` into `target` (doc/api/merge_requests.md,
    /// "Create MR"; 409 when the source branch has an open MR already,
    /// lib/api/merge_requests.rb).
    pub async fn create_merge_request(
        &self,
        token: &SecretString,
        project: &str,
        source: &str,
        target: &str,
        title: &str,
        description: &str,
    ) -> Result<MergeRequest, GitLabError> {
        let path = format!("/projects/{}/merge_requests", project_ref(project));
        let body = json!({ "source_branch": source, "target_branch": target, "title": title, "description": description });
        self.call(token, Method::POST, &path, Some(&body)).await
    }

    /// The open MRs from `branch` (to find one whose creation answer was
    /// lost): `GET merge_requests?source_branch=&state=opened`
    /// (doc/api/merge_requests.md, "List project merge requests").
    pub async fn open_merge_requests_from(
        &self,
        token: &SecretString,
        project: &str,
        branch: &str,
    ) -> Result<Vec<MergeRequest>, GitLabError> {
        let path = format!(
            "/projects/{}/merge_requests?state=opened&source_branch={}",
            project_ref(project),
            branch
                .replace('%', "%25")
                .replace('&', "%26")
                .replace('/', "%2F")
        );
        self.call(token, Method::GET, &path, None).await
    }

    /// An MR, with `rebase_in_progress` (doc/api/merge_requests.md, "Get
    /// single MR", `include_rebase_in_progress`).
    pub async fn merge_request(
        &self,
        token: &SecretString,
        project: &str,
        iid: i64,
    ) -> Result<MergeRequest, GitLabError> {
        let path = format!(
            "/projects/{}/merge_requests/{iid}?include_rebase_in_progress=true",
            project_ref(project)
        );
        self.call(token, Method::GET, &path, None).await
    }

    /// Who approved an MR (doc/api/merge_request_approvals.md, "Get
    /// configuration for a single merge request"; the CE body of
    /// lib/api/merge_request_approvals.rb has fewer fields).
    pub async fn approvals(
        &self,
        token: &SecretString,
        project: &str,
        iid: i64,
    ) -> Result<Approvals, GitLabError> {
        let path = format!(
            "/projects/{}/merge_requests/{iid}/approvals",
            project_ref(project)
        );
        self.call(token, Method::GET, &path, None).await
    }

    /// Approves as the token's user. A repeated approval is 401, like "not
    /// allowed": callers re-read the approvers to tell them apart
    /// (doc/api/merge_request_approvals.md, "Approve merge request";
    /// `unauthorized!` in lib/api/merge_request_approvals.rb).
    pub async fn approve(
        &self,
        token: &SecretString,
        project: &str,
        iid: i64,
    ) -> Result<(), GitLabError> {
        let path = format!(
            "/projects/{}/merge_requests/{iid}/approve",
            project_ref(project)
        );
        self.send(token, Method::POST, &path, Some(&json!({})))
            .await
            .map(|_| ())
    }

    /// Merges; `sha` must be the MR's head. 405/406/422 mean "not mergeable
    /// now", 409 "the head moved" (doc/api/merge_requests.md, "Merge a merge
    /// request").
    pub async fn merge(
        &self,
        token: &SecretString,
        project: &str,
        iid: i64,
        sha: &str,
    ) -> Result<MergeRequest, GitLabError> {
        let path = format!(
            "/projects/{}/merge_requests/{iid}/merge",
            project_ref(project)
        );
        let body = json!({ "sha": sha, "should_remove_source_branch": true });
        self.call(token, Method::PUT, &path, Some(&body)).await
    }

    /// Asks GitLab to rebase the MR's source branch onto its target (202:
    /// enqueued; poll the MR until `rebase_in_progress` is false). 409 means
    /// a rebase is running or could not be enqueued now
    /// (doc/api/merge_requests.md, "Rebase a merge request").
    pub async fn rebase(
        &self,
        token: &SecretString,
        project: &str,
        iid: i64,
    ) -> Result<(), GitLabError> {
        let path = format!(
            "/projects/{}/merge_requests/{iid}/rebase",
            project_ref(project)
        );
        self.send(token, Method::PUT, &path, None).await.map(|_| ())
    }

    /// Closes an MR (a no-op on GitLab's side when it is already closed):
    /// `PUT` with `state_event=close` (doc/api/merge_requests.md, "Update MR").
    pub async fn close_merge_request(
        &self,
        token: &SecretString,
        project: &str,
        iid: i64,
    ) -> Result<MergeRequest, GitLabError> {
        let path = format!("/projects/{}/merge_requests/{iid}", project_ref(project));
        self.call(
            token,
            Method::PUT,
            &path,
            Some(&json!({ "state_event": "close" })),
        )
        .await
    }

    /// Runs a finished pipeline's failed and canceled jobs again (the same
    /// pipeline, pending again); one without such jobs is left as it is
    /// (doc/api/pipelines.md, "Retry jobs in a pipeline").
    pub async fn retry_pipeline(
        &self,
        token: &SecretString,
        project: &str,
        pipeline_id: i64,
    ) -> Result<Pipeline, GitLabError> {
        self.pipeline_action(token, project, pipeline_id, "retry")
            .await
    }

    /// Cancels a pipeline's jobs. GitLab answers 200 with the pipeline
    /// whether or not it could be canceled (a finished one stays as it
    /// was: `lib/api/ci/pipelines.rb`, `post ':id/pipelines/:pipeline_id/cancel'`,
    /// gitlab-org/gitlab#519143), so a cancel sent again is harmless
    /// (doc/api/pipelines.md, "Cancel all jobs for a pipeline").
    pub async fn cancel_pipeline(
        &self,
        token: &SecretString,
        project: &str,
        pipeline_id: i64,
    ) -> Result<Pipeline, GitLabError> {
        self.pipeline_action(token, project, pipeline_id, "cancel")
            .await
    }

    /// `POST /projects/:id/pipelines/:pipeline_id/{action}`: the pipeline
    /// as it is after it.
    async fn pipeline_action(
        &self,
        token: &SecretString,
        project: &str,
        pipeline_id: i64,
        action: &str,
    ) -> Result<Pipeline, GitLabError> {
        let path = format!(
            "/projects/{}/pipelines/{pipeline_id}/{action}",
            project_ref(project)
        );
        self.call(token, Method::POST, &path, None).await
    }
}
