//! GitLab REST v4 (the subset of `GITLAB.md`), as the bot and reviewer
//! accounts, each call with a timeout; 429 and 5xx answers are retried with
//! exponential backoff that honours `Retry-After`.

mod blobs;
mod checklist;
mod ci_history;
mod error;
mod history;
mod merge_requests;
mod test_reports;
mod types;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use reqwest::{Method, RequestBuilder, Response, StatusCode};
use secrecy::{ExposeSecret, SecretString};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

pub use ci_history::PastPipeline;
pub use error::{FailureClass, GitLabError, Permanent};
pub use history::CommitSummary;

use super::health::{Dependencies, System};
use super::http::{CallError, SystemClient};
pub use types::{
    ApprovalRule, ApprovalUser, Approvals, ApprovedBy, Commit, FileAction, MergeRequest, Pipeline,
};

/// How a client retries and waits.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Attempts after the first, for 429 and 5xx answers.
    pub retries: u32,
    /// The first pause; doubled after each attempt.
    pub backoff: Duration,
    /// The longest pause, also the cap on `Retry-After`.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            retries: 3,
            backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(10),
        }
    }
}

/// A GitLab API client for one instance; cheap to clone.
#[derive(Clone)]
pub struct GitLabClient {
    http: SystemClient,
    api: String,
    timeout: Duration,
    retry: RetryPolicy,
    checklists: checklist::ChecklistCache,
    /// File contents by blob id, for previews.
    blobs: blobs::BlobCache,
    /// Until when GitLab's rate limiter asked every call to wait, shared by
    /// the clones (the bot and the reviewers are limited alike).
    quiet_until: Arc<Mutex<Option<Instant>>>,
}

/// Encodes a project path (`config/repo` → `config%2Frepo`) or passes an id.
fn project_ref(project: &str) -> String {
    project.replace('%', "%25").replace('/', "%2F")
}

/// Git's id of a blob holding `content`: the SHA-1 of `blob <len>\0`
/// followed by the bytes, as the repository tree reports it.
pub fn git_blob_id(content: &str) -> String {
    use sha1::Digest;
    let mut hasher = sha1::Sha1::new();
    hasher.update(format!("blob {}\0", content.len()).as_bytes());
    hasher.update(content.as_bytes());
    hasher
        .finalize()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// A path segment or query value, percent-encoded byte by byte except for
/// the unreserved characters.
fn query_value(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

impl GitLabClient {
    /// A client for `base_url` (the REST root is `{base_url}/api/v4`).
    pub fn new(http: SystemClient, base_url: &str, timeout: Duration, retry: RetryPolicy) -> Self {
        Self {
            http,
            api: format!("{}/api/v4", base_url.trim_end_matches('/')),
            timeout,
            retry,
            checklists: checklist::ChecklistCache::default(),
            blobs: blobs::BlobCache::default(),
            quiet_until: Arc::default(),
        }
    }

    /// The instance's record of what GitLab answered.
    pub fn health(&self) -> &Dependencies {
        self.http.health()
    }

    /// What is left of the pause GitLab's rate limiter asked for, if any.
    pub fn quiet_for(&self) -> Option<Duration> {
        let until = (*self
            .quiet_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner))?;
        until
            .checked_duration_since(Instant::now())
            .filter(|left| !left.is_zero())
    }

    fn keep_quiet_for(&self, wait: Duration) {
        let until = Instant::now() + wait;
        let mut quiet = self
            .quiet_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if quiet.is_none_or(|current| current < until) {
            *quiet = Some(until);
        }
    }

    /// Sends one request. A 429 is retried (GitLab's rate limiter answers
    /// before the request is processed), honouring `Retry-After`; a 5xx is
    /// retried only for a read. A write answered 5xx, like one that timed
    /// out or whose connection broke before the answer, may have been applied (GitLab's front proxy can answer 502/504
    /// after GitLab finished): it is returned as outcome-unknown, and the
    /// caller re-reads GitLab's state before writing again. Any other answer
    /// is returned as it is.
    async fn exchange(
        &self,
        token: &SecretString,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Response, GitLabError> {
        if let Some(wait) = self.quiet_for() {
            return Err(GitLabError::Throttled { wait });
        }
        let url = format!("{}{path}", self.api);
        let mut pause = self.retry.backoff;
        let mut attempt = 0;
        loop {
            let mut request: RequestBuilder = self
                .http
                .request(method.clone(), &url)
                .timeout(self.timeout)
                .header("PRIVATE-TOKEN", token.expose_secret());
            if let Some(body) = body {
                request = request.json(body);
            }
            let response = self.http.send(request).await.map_err(|err| match err {
                CallError::Timeout => GitLabError::Timeout,
                CallError::Unreachable { failure, .. } => GitLabError::Unreachable(failure),
                CallError::Failed(detail) => GitLabError::Transport(detail),
            })?;
            let status = response.status();
            let throttled = status == StatusCode::TOO_MANY_REQUESTS;
            let read = method == Method::GET || method == Method::HEAD;
            let retryable = throttled || (status.is_server_error() && read);
            if !retryable {
                return Ok(response);
            }
            let asked = retry_after(&response);
            // A long wait is not spent holding a worker: the step is told how
            // long to wait, and its next run is due then (a durable wait);
            // meanwhile no call goes out.
            let long_wait = asked.filter(|wait| *wait > self.retry.max_backoff);
            if long_wait.is_some() && !throttled {
                return Ok(response);
            }
            if let Some(wait) = long_wait {
                tracing::warn!(
                    path,
                    wait_secs = wait.as_secs(),
                    "GitLab's rate limit asks to wait; no GitLab call goes out until then"
                );
                self.keep_quiet_for(wait);
                return Err(GitLabError::Throttled { wait });
            }
            if attempt >= self.retry.retries {
                return Ok(response);
            }
            let wait = asked.unwrap_or(pause).min(self.retry.max_backoff);
            tracing::debug!(%status, attempt, ?wait, path, "GitLab asked to retry");
            tokio::time::sleep(wait).await;
            pause = (pause * 2).min(self.retry.max_backoff);
            attempt += 1;
        }
    }

    /// [`Self::exchange`], with any unsuccessful answer as an error.
    async fn send(
        &self,
        token: &SecretString,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Response, GitLabError> {
        let response = self.exchange(token, method, path, body).await?;
        if response.status().is_success() {
            self.http.health().accepted(System::GitLab);
            Ok(response)
        } else {
            Err(failure(response).await)
        }
    }

    async fn call<T: DeserializeOwned>(
        &self,
        token: &SecretString,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<T, GitLabError> {
        let response = self.send(token, method, path, body).await?;
        response
            .json()
            .await
            .map_err(|err| GitLabError::Decode(err.without_url().to_string()))
    }

    /// Creates `branch` from `from`. 400 "Branch already exists" is an error
    /// with that status (doc/api/branches.md, "Create repository branch";
    /// lib/api/branches.rb).
    pub async fn create_branch(
        &self,
        token: &SecretString,
        project: &str,
        branch: &str,
        from: &str,
    ) -> Result<(), GitLabError> {
        let path = format!("/projects/{}/repository/branches", project_ref(project));
        let body = json!({ "branch": branch, "ref": from });
        self.send(token, Method::POST, &path, Some(&body))
            .await
            .map(|_| ())
    }

    /// Whether `branch` exists (`GET repository/branches/:branch`,
    /// doc/api/branches.md: 404 `Branch Not Found` when it does not), to
    /// tell whether a create whose answer was lost was applied.
    pub async fn branch_exists(
        &self,
        token: &SecretString,
        project: &str,
        branch: &str,
    ) -> Result<bool, GitLabError> {
        let path = format!(
            "/projects/{}/repository/branches/{}",
            project_ref(project),
            query_value(branch)
        );
        match self.send(token, Method::GET, &path, None).await {
            Ok(_) => Ok(true),
            Err(GitLabError::Status { status, .. }) if status == StatusCode::NOT_FOUND => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// The commit `branch` points at (`GET repository/branches/:branch`,
    /// doc/api/branches.md, "Get single repository branch": `commit.id`).
    pub async fn branch_head(
        &self,
        token: &SecretString,
        project: &str,
        branch: &str,
    ) -> Result<String, GitLabError> {
        #[derive(serde::Deserialize)]
        struct Commit {
            id: String,
        }
        #[derive(serde::Deserialize)]
        struct Branch {
            commit: Commit,
        }
        let path = format!(
            "/projects/{}/repository/branches/{}",
            project_ref(project),
            query_value(branch)
        );
        let branch: Branch = self.call(token, Method::GET, &path, None).await?;
        Ok(branch.commit.id)
    }

    /// The project's merge method (`GET /projects/:id`, doc/api/projects.md:
    /// `merge_method` is `merge`, `rebase_merge` or `ff`, the spelling of
    /// lib/api/entities/project.rb).
    pub async fn merge_method(
        &self,
        token: &SecretString,
        project: &str,
    ) -> Result<String, GitLabError> {
        #[derive(serde::Deserialize)]
        struct Project {
            merge_method: Option<String>,
        }
        let path = format!("/projects/{}", project_ref(project));
        let found: Project = self.call(token, Method::GET, &path, None).await?;
        // GitLab's default for a project that does not say.
        Ok(found.merge_method.unwrap_or_else(|| "merge".to_owned()))
    }

    /// Deletes `branch` (`DELETE repository/branches/:branch`,
    /// doc/api/branches.md, "Delete repository branch": 204, 404 `Branch
    /// Not Found` when it is gone, which is as good).
    pub async fn delete_branch(
        &self,
        token: &SecretString,
        project: &str,
        branch: &str,
    ) -> Result<(), GitLabError> {
        let path = format!(
            "/projects/{}/repository/branches/{}",
            project_ref(project),
            query_value(branch)
        );
        match self.send(token, Method::DELETE, &path, None).await {
            Ok(_) => Ok(()),
            Err(GitLabError::Status { status, .. }) if status == StatusCode::NOT_FOUND => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// One commit of `actions` on `branch` (doc/api/commits.md, "Create a
    /// commit with multiple files and actions"; refusals are 400 with the
    /// message of app/services/files/multi_service.rb).
    pub async fn commit(
        &self,
        token: &SecretString,
        project: &str,
        branch: &str,
        message: &str,
        actions: &[FileAction],
    ) -> Result<Commit, GitLabError> {
        let path = format!("/projects/{}/repository/commits", project_ref(project));
        let body = json!({ "branch": branch, "commit_message": message, "actions": actions });
        self.call(token, Method::POST, &path, Some(&body)).await
    }

    /// The content of the file at `file_path` on `reference`, `None` when
    /// there is none (`GET repository/files/:file_path/raw`,
    /// doc/api/repository_files.md, "Get raw file from repository": 404
    /// `File Not Found`).
    pub async fn file_content(
        &self,
        token: &SecretString,
        project: &str,
        file_path: &str,
        reference: &str,
    ) -> Result<Option<String>, GitLabError> {
        let path = format!(
            "/projects/{}/repository/files/{}/raw?ref={}",
            project_ref(project),
            query_value(file_path),
            query_value(reference)
        );
        match self.send(token, Method::GET, &path, None).await {
            Ok(response) => response
                .text()
                .await
                .map(Some)
                .map_err(|err| GitLabError::Decode(err.without_url().to_string())),
            Err(GitLabError::Status { status, .. }) if status == StatusCode::NOT_FOUND => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// The files directly in `directory` at `reference`, path → git blob
    /// id, every page read (`GET repository/tree`, doc/api/repositories.md;
    /// offset pagination with `x-next-page`, 100 entries a page at most). A
    /// directory that does not exist there holds nothing: GitLab answers it
    /// 404 (`invalid revision or path`, `Tree Not Found`).
    pub async fn blobs_in(
        &self,
        token: &SecretString,
        project: &str,
        directory: &str,
        reference: &str,
    ) -> Result<std::collections::HashMap<String, String>, GitLabError> {
        #[derive(serde::Deserialize)]
        struct Entry {
            id: String,
            path: String,
            #[serde(rename = "type")]
            kind: String,
        }
        let mut blobs = std::collections::HashMap::new();
        let mut page = String::from("1");
        loop {
            let path = format!(
                "/projects/{}/repository/tree?ref={}&path={}&per_page=100&page={page}",
                project_ref(project),
                query_value(reference),
                query_value(directory)
            );
            let response = match self.send(token, Method::GET, &path, None).await {
                Ok(response) => response,
                Err(GitLabError::Status { status, .. }) if status == StatusCode::NOT_FOUND => {
                    return Ok(blobs);
                }
                Err(err) => return Err(err),
            };
            let next = response
                .headers()
                .get("x-next-page")
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_owned);
            let entries: Vec<Entry> = response
                .json()
                .await
                .map_err(|err| GitLabError::Decode(err.without_url().to_string()))?;
            blobs.extend(
                entries
                    .into_iter()
                    .filter(|e| e.kind == "blob")
                    .map(|e| (e.path, e.id)),
            );
            match next {
                Some(next) if next != page => page = next,
                _ => return Ok(blobs),
            }
        }
    }
}

/// How long GitLab asks to wait: `Retry-After` in seconds, else
/// `RateLimit-Reset` (the epoch second the window resets), as its rate
/// limiter sends them (doc/security/rate_limits.md, "Response headers").
fn retry_after(response: &Response) -> Option<Duration> {
    let header = |name: &str| {
        response
            .headers()
            .get(name)?
            .to_str()
            .ok()?
            .trim()
            .parse::<u64>()
            .ok()
    };
    if let Some(seconds) = header("retry-after") {
        return Some(Duration::from_secs(seconds));
    }
    let reset = header("ratelimit-reset")?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_secs();
    Some(Duration::from_secs(reset.saturating_sub(now)))
}

/// The body of an unsuccessful answer, as JSON when it is JSON.
async fn error_body(response: Response) -> (StatusCode, String, Option<Value>) {
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    let body = serde_json::from_str(&text).ok();
    (status, text, body)
}

/// GitLab's error text: `message` (a string, an array, or an object of field
/// errors) or `error`, flattened to one line.
async fn failure(response: Response) -> GitLabError {
    let (status, _, body) = error_body(response).await;
    status_error(status, body.as_ref())
}

fn status_error(status: StatusCode, body: Option<&Value>) -> GitLabError {
    let message = match body {
        Some(body) => match body.get("message").or_else(|| body.get("error")) {
            Some(Value::String(message)) => message.clone(),
            Some(other) => other.to_string(),
            None => body.to_string(),
        },
        // An HTML page from a proxy in front of GitLab.
        None => status.canonical_reason().unwrap_or("error").to_owned(),
    };
    GitLabError::Status {
        status,
        message: message.chars().take(500).collect(),
    }
}
