//! Shared fixture: a running simulator with a change bot, two reviewer bots, an outsider and
//! a reporter on project `config/repo`, plus a small HTTP client over reqwest.

use std::time::Duration;

use changegate_sim::gitlab::{
    AccessLevel, GitLabSim, GitLabSimHandle, GitLabSimOptions, ProjectId,
};
use reqwest::Method;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

/// The change bot's token; a developer of the project.
pub const BOT: &str = "bot-token";
/// The first reviewer's token; a developer of the project.
pub const ALICE: &str = "alice-token";
/// The second reviewer's token; a developer of the project.
pub const BOB: &str = "bob-token";
/// A registered user who is no member of the project.
pub const OUTSIDER: &str = "outsider-token";
/// A reporter of the project: reads, but cannot write or approve.
pub const REPORTER: &str = "reporter-token";

/// One answer: status, headers and body (JSON when it parses, else `Value::Null`).
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// The response headers.
    pub headers: HeaderMap,
    /// The body as text.
    pub text: String,
    /// The body as JSON, `Null` when it is not JSON.
    pub body: Value,
}

impl Reply {
    /// A string field of the body.
    pub fn str(&self, field: &str) -> &str {
        self.body[field].as_str().unwrap_or_default()
    }
}

/// A seeded simulator and a client for it.
pub struct Fixture {
    /// The simulator under test.
    pub sim: GitLabSimHandle,
    /// A client with a generous timeout.
    pub client: reqwest::Client,
    /// `config/repo`'s id.
    pub project: ProjectId,
    /// The change bot's user id.
    pub bot: u64,
    /// `/projects/config%2Frepo`, the prefix of most paths.
    pub root: String,
}

impl Fixture {
    /// A simulator with default options.
    pub async fn start() -> Self {
        Self::with_options(GitLabSimOptions::default()).await
    }

    /// A simulator with `options`.
    pub async fn with_options(options: GitLabSimOptions) -> Self {
        let sim = GitLabSim::start(options).await.expect("simulator starts");
        let project = sim.create_project("config/repo");
        let bot = sim.add_user("change-bot", BOT);
        for (name, token, level) in [
            ("rev-alice", ALICE, Some(AccessLevel::Developer)),
            ("rev-bob", BOB, Some(AccessLevel::Developer)),
            ("reporter", REPORTER, Some(AccessLevel::Reporter)),
            ("outsider", OUTSIDER, None),
        ] {
            let user = sim.add_user(name, token);
            if let Some(level) = level {
                sim.add_member(project, user, level).expect("member added");
            }
        }
        sim.add_member(project, bot, AccessLevel::Developer)
            .expect("bot added");
        let client = crate::client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("client builds");
        Self {
            sim,
            client,
            project,
            bot,
            root: "/projects/config%2Frepo".to_owned(),
        }
    }

    /// Sends a request with `token` (none: no header) and an optional JSON body.
    pub async fn send(
        &self,
        method: Method,
        token: Option<&str>,
        path: &str,
        body: Option<Value>,
    ) -> Reply {
        self.try_send(&self.client, method, token, path, body)
            .await
            .expect("request answered")
    }

    /// Like `send`, with a chosen client, surfacing transport errors (timeouts).
    pub async fn try_send(
        &self,
        client: &reqwest::Client,
        method: Method,
        token: Option<&str>,
        path: &str,
        body: Option<Value>,
    ) -> reqwest::Result<Reply> {
        let mut request = client.request(method, format!("{}{path}", self.sim.api_url()));
        if let Some(token) = token {
            request = request.header("PRIVATE-TOKEN", token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        Self::reply(request.send().await?).await
    }

    /// Reads a whole answer.
    pub async fn reply(response: reqwest::Response) -> reqwest::Result<Reply> {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await?;
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Ok(Reply {
            status,
            headers,
            text,
            body,
        })
    }

    /// `GET {api}{path}` as `token`.
    pub async fn get(&self, token: &str, path: &str) -> Reply {
        self.send(Method::GET, Some(token), path, None).await
    }

    /// `POST {api}{path}` as `token`.
    pub async fn post(&self, token: &str, path: &str, body: Value) -> Reply {
        self.send(Method::POST, Some(token), path, Some(body)).await
    }

    /// `PUT {api}{path}` as `token`.
    pub async fn put(&self, token: &str, path: &str, body: Value) -> Reply {
        self.send(Method::PUT, Some(token), path, Some(body)).await
    }

    /// `{root}/merge_requests/{iid}{suffix}`.
    pub fn mr_path(&self, iid: u64, suffix: &str) -> String {
        format!("{}/merge_requests/{iid}{suffix}", self.root)
    }

    /// Branch `branch` from main with one commit writing `files`, then an MR into main.
    pub async fn open_mr(&self, branch: &str, files: &[(&str, &str)]) -> u64 {
        let created = self
            .post(
                BOT,
                &format!("{}/repository/branches", self.root),
                json!({ "branch": branch, "ref": "main" }),
            )
            .await;
        assert_eq!(created.status, 201, "{}", created.text);
        let actions: Vec<Value> = files
            .iter()
            .map(|(path, content)| {
                json!({ "action": "create", "file_path": path, "content": content })
            })
            .collect();
        let commit = self
            .post(
                BOT,
                &format!("{}/repository/commits", self.root),
                json!({ "branch": branch, "commit_message": "bot: add", "actions": actions }),
            )
            .await;
        assert_eq!(commit.status, 201, "{}", commit.text);
        let mr = self
            .post(
                BOT,
                &format!("{}/merge_requests", self.root),
                json!({ "source_branch": branch, "target_branch": "main", "title": "bot: change" }),
            )
            .await;
        assert_eq!(mr.status, 201, "{}", mr.text);
        mr.body["iid"].as_u64().expect("iid")
    }

    /// Polls the MR until its head pipeline has `status`; returns the last MR body.
    pub async fn poll_pipeline(&self, iid: u64, status: &str) -> Value {
        for _ in 0..20 {
            let mr = self.get(BOT, &self.mr_path(iid, "")).await;
            if mr.body["head_pipeline"]["status"] == status {
                return mr.body;
            }
        }
        panic!("pipeline of !{iid} never reached {status}");
    }

    /// The id of the head pipeline of merge request `iid` (not a poll).
    pub fn pipeline_of(&self, iid: u64) -> u64 {
        let mr = self
            .sim
            .merge_request(self.project, iid)
            .expect("merge request");
        mr.head_pipeline.expect("a head pipeline").0
    }

    /// Both reviewers approve.
    pub async fn approve_both(&self, iid: u64) {
        for token in [ALICE, BOB] {
            let reply = self
                .post(token, &self.mr_path(iid, "/approve"), json!({}))
                .await;
            assert_eq!(reply.status, 201, "{}", reply.text);
        }
    }

    /// An MR with a green pipeline, both approvals and a settled mergeability check.
    pub async fn ready_mr(&self, branch: &str, files: &[(&str, &str)]) -> u64 {
        let iid = self.open_mr(branch, files).await;
        self.poll_pipeline(iid, "success").await;
        self.approve_both(iid).await;
        iid
    }
}
