//! A rolling upgrade from the release whose schema ended at migration 0008
//! (README, Upgrades): a database as that release left it, with a request in
//! every status it had, written with its SQL and, for those with a merge
//! request, the MR it had opened in GitLab. While an instance of the old
//! release keeps submitting, moving and reading requests with its own SQL,
//! `changegate migrate` applies the current migrations; none of the old
//! instance's statements may fail. Then the current service runs on that
//! database: every request in progress (those the old instance wrote during
//! the migration too) reaches its end, and every finished one stays exactly
//! as it was.

mod old_release;

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use changegate::domain::render::{BindingFile, canonical_json};
use changegate_sim::approval::{Decision, DecisionPolicy};
use serde_json::{Value, json};

use crate::durability::{Outside, config, free_port, outside, start};
use crate::helpers::{MySqlScratch, changegate_command, plain_client};
use old_release::{OldRelease, OldRequest, OldStep, steps};

const PROJECT: &str = "config/repo";
/// The project as GitLab's API names it in a path.
const PROJECT_IN_PATH: &str = "config%2Frepo";
/// A target whose subject is not its requester, so one requester holds
/// bindings in every status.
const TARGET: &str = "team.access";
const REQUESTER: &str = "alice";

/// How far the current release must take a request of the old one.
#[derive(Debug, Clone, Copy, PartialEq)]
enum End {
    /// An apply in progress: deployed.
    Validated,
    /// A removal in progress: removed.
    Closed,
    /// Finished or waiting for an operator: exactly as it was.
    AsItWas,
}

/// A request the old release wrote.
struct Written {
    operation_id: String,
    status: &'static str,
    end: End,
}

/// The GitLab calls the old release made for a request's MR, as its bot
/// and reviewers.
struct OldGitLab<'a> {
    client: reqwest::Client,
    outside: &'a Outside,
}

impl OldGitLab<'_> {
    async fn call(&self, token: &str, method: reqwest::Method, path: &str, body: Value) -> Value {
        let url = format!(
            "{}/projects/{PROJECT_IN_PATH}{path}",
            self.outside.gitlab.api_url()
        );
        let response = self
            .client
            .request(method, &url)
            .header("private-token", token)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status();
        let answer: Value = response.json().await.unwrap();
        assert!(status.is_success(), "{url}: {status} {answer}");
        answer
    }

    /// Branch, commit of the request's file, MR: what the create step left.
    async fn open_merge_request(&self, operation_id: &str, subject: &str) -> (i64, String) {
        let branch = format!("changegate/{operation_id}");
        let post = reqwest::Method::POST;
        self.call(
            "bot-token",
            post.clone(),
            "/repository/branches",
            json!({ "branch": branch, "ref": "main" }),
        )
        .await;
        let content = BindingFile {
            subject,
            target: TARGET,
            params: &canonical_json(&json!({})),
            expires_at: None,
            operation_id,
            requested_by: REQUESTER,
        }
        .render();
        let title = format!("changegate: apply {TARGET} for {subject}");
        self.call(
            "bot-token",
            post.clone(),
            "/repository/commits",
            json!({
                "branch": branch,
                "commit_message": title,
                "actions": [{
                    "action": "create",
                    "file_path": format!("bindings/{TARGET}/{subject}.json"),
                    "content": content,
                }],
            }),
        )
        .await;
        let mr = self
            .call(
                "bot-token",
                post,
                "/merge_requests",
                json!({
                    "source_branch": branch,
                    "target_branch": "main",
                    "title": title,
                    "description": format!("{}\n\nChangegate-Operation: {operation_id}", old_release::REASON),
                }),
            )
            .await;
        (
            mr["iid"].as_i64().unwrap(),
            mr["web_url"].as_str().unwrap().to_owned(),
        )
    }

    async fn wait_for_pipeline(&self, iid: i64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mr = self
                .call(
                    "bot-token",
                    reqwest::Method::GET,
                    &format!("/merge_requests/{iid}"),
                    json!({}),
                )
                .await;
            if mr["head_pipeline"]["status"] == "success" {
                return;
            }
            assert!(Instant::now() < deadline, "MR !{iid}: {mr}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Both reviewers' approvals and the merge: what the merge step left.
    async fn approve_and_merge(&self, iid: i64) {
        self.wait_for_pipeline(iid).await;
        for reviewer in ["alice-token", "bob-token"] {
            self.call(
                reviewer,
                reqwest::Method::POST,
                &format!("/merge_requests/{iid}/approve"),
                json!({}),
            )
            .await;
        }
        self.call(
            "bot-token",
            reqwest::Method::PUT,
            &format!("/merge_requests/{iid}/merge"),
            json!({}),
        )
        .await;
    }

    /// The approval request the approval step sent.
    async fn request_approval(&self, operation_id: &str, subject: &str) {
        let url = format!("{}/approvals", self.outside.approval.base_url());
        let body = json!({
            "operationId": operation_id,
            "subjectId": subject,
            "targetKey": TARGET,
            "requestedBy": REQUESTER,
            "reason": old_release::REASON,
            "params": {},
        });
        let response = self.client.post(&url).json(&body).send().await.unwrap();
        assert!(response.status().is_success(), "{url}: {response:?}");
    }
}

fn waiting(status: &str, step_code: i64) -> OldStep<'_> {
    OldStep {
        status: Some(status),
        step_code,
        due_now: false,
    }
}

fn due_now(status: &str, step_code: i64) -> OldStep<'_> {
    OldStep {
        status: Some(status),
        step_code,
        due_now: true,
    }
}

/// The statuses of the old release (its `src/domain/binding_status.rs`),
/// and where the current one must take a request in each.
const EVERY_STATUS: [(&str, End); 15] = [
    ("APPROVAL_SENDING", End::Validated),
    ("APPROVAL_SENT", End::Validated),
    ("MR_CREATING", End::Validated),
    ("MR_CREATED", End::Validated),
    ("MERGING", End::Validated),
    ("MERGED", End::Validated),
    ("VALIDATED", End::AsItWas),
    ("CREATE_FAILED", End::AsItWas),
    ("HANDLE_FAILED", End::AsItWas),
    ("REJECTED", End::AsItWas),
    ("BUSY_REJECTED", End::AsItWas),
    ("CLOSING", End::Closed),
    ("CLOSE_FAILED", End::AsItWas),
    ("CLOSED", End::AsItWas),
    ("ABANDONED", End::AsItWas),
];

async fn step(old: &OldRelease, operation_id: &str, to: OldStep<'_>) {
    old.transition(operation_id, &to).await.unwrap();
}

/// A request in `status`, left as the old release's workflow left it; the id of the operation that owns
/// the binding.
async fn write_in_status(old: &OldRelease, gitlab: &OldGitLab<'_>, status: &str) -> String {
    let operation_id = uuid::Uuid::new_v4().to_string();
    let subject = format!("svc-{}", status.to_lowercase().replace('_', "-"));
    let request = OldRequest {
        operation_id: &operation_id,
        subject_id: &subject,
        target_key: TARGET,
        requested_by: REQUESTER,
    };
    old.submit(&request).await.unwrap();
    match status {
        "APPROVAL_SENDING" => {}
        "APPROVAL_SENT" => {
            gitlab.request_approval(&operation_id, &subject).await;
            step(
                old,
                &operation_id,
                waiting("APPROVAL_SENT", steps::APPROVAL_SENT),
            )
            .await;
        }
        // Approved, waiting for a merge round.
        "MR_CREATING" => {
            step(old, &operation_id, waiting("MR_CREATING", steps::QUEUED)).await;
            old.enqueue(&operation_id, PROJECT).await.unwrap();
        }
        "MR_CREATED" | "MERGING" | "MERGED" | "CLOSING" => {
            let (iid, url) = gitlab.open_merge_request(&operation_id, &subject).await;
            old.record_merge_request(&operation_id, iid, &url)
                .await
                .unwrap();
            step(old, &operation_id, due_now("MR_CREATED", steps::MR_CREATED)).await;
            if status == "MR_CREATED" {
                return operation_id;
            }
            gitlab.wait_for_pipeline(iid).await;
            step(
                old,
                &operation_id,
                due_now("MERGING", steps::HANDLE_STARTED),
            )
            .await;
            if status == "MERGING" {
                return operation_id;
            }
            gitlab.approve_and_merge(iid).await;
            step(old, &operation_id, waiting("MERGED", steps::HANDLE_MERGED)).await;
            if status == "MERGED" {
                return operation_id;
            }
            step(
                old,
                &operation_id,
                waiting("VALIDATED", steps::DEPLOY_CONFIRMED),
            )
            .await;
            let close_id = uuid::Uuid::new_v4().to_string();
            old.close(&request, &close_id).await.unwrap();
            return close_id;
        }
        "VALIDATED" => {
            step(
                old,
                &operation_id,
                waiting("VALIDATED", steps::DEPLOY_CONFIRMED),
            )
            .await
        }
        "CREATE_FAILED" => {
            step(
                old,
                &operation_id,
                waiting("CREATE_FAILED", steps::CREATE_REFUSED),
            )
            .await
        }
        "HANDLE_FAILED" => {
            step(
                old,
                &operation_id,
                waiting("HANDLE_FAILED", steps::HANDLE_MERGE_REFUSED),
            )
            .await
        }
        "REJECTED" => {
            step(
                old,
                &operation_id,
                waiting("REJECTED", steps::CALLED_BACK_REJECTED),
            )
            .await
        }
        "BUSY_REJECTED" => {
            step(
                old,
                &operation_id,
                waiting("BUSY_REJECTED", steps::BUSY_REJECTED),
            )
            .await
        }
        "ABANDONED" => {
            step(
                old,
                &operation_id,
                waiting("ABANDONED", steps::MANUAL_ABANDONED),
            )
            .await
        }
        "CLOSE_FAILED" | "CLOSED" => {
            step(
                old,
                &operation_id,
                waiting("VALIDATED", steps::DEPLOY_CONFIRMED),
            )
            .await;
            let close_id = uuid::Uuid::new_v4().to_string();
            old.close(&request, &close_id).await.unwrap();
            let step_code = if status == "CLOSED" {
                steps::CLOSED
            } else {
                steps::CLOSE_FAILED
            };
            step(old, &close_id, waiting(status, step_code)).await;
            return close_id;
        }
        other => panic!("no way to write {other}"),
    }
    operation_id
}

/// The old instance at work until `stop` is set, and one round after: each
/// round submits a request, takes and gives back its lease as a worker
/// did, and runs every read. Returns the requests it submitted.
async fn keep_the_old_release_working(
    old: Arc<OldRelease>,
    mut operation_ids: Vec<String>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<Vec<String>> {
    let mut submitted = Vec::new();
    loop {
        let last = stop.load(Ordering::SeqCst);
        let operation_id = uuid::Uuid::new_v4().to_string();
        let subject = format!("svc-during-{}", submitted.len());
        old.submit(&OldRequest {
            operation_id: &operation_id,
            subject_id: &subject,
            target_key: TARGET,
            requested_by: REQUESTER,
        })
        .await?;
        old.take_and_release_lease(&operation_id).await?;
        operation_ids.push(operation_id.clone());
        submitted.push(operation_id);
        old.read_everything(&operation_ids, REQUESTER).await?;
        if last {
            return Ok(submitted);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `changegate migrate` of the current release, as a rolling upgrade runs it.
async fn migrate(url: &str, dir: &std::path::Path) {
    let mut command = changegate_command();
    command
        .arg("migrate")
        .current_dir(dir)
        .env("CHANGEGATE_DATABASE_URL", url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Waits until each request reached its end, approving whatever the
/// approval system has been asked meanwhile.
async fn wait_for_the_ends(
    client: &reqwest::Client,
    address: &str,
    outside: &Outside,
    expected: &[(String, End)],
) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        for approval in outside.approval.approvals() {
            if approval.decisions.is_empty() {
                outside
                    .approval
                    .decide(approval.operation_id, Decision::Approved)
                    .await
                    .unwrap();
            }
        }
        let mut views = Vec::new();
        for (id, _) in expected {
            let view: Value = client
                .get(format!("{address}/api/v1/operations/{id}"))
                .header("x-auth-request-user", REQUESTER)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            views.push(view);
        }
        let unfinished: Vec<String> = expected
            .iter()
            .zip(&views)
            .filter(|((_, end), view)| match end {
                End::Validated => view["status"] != "VALIDATED",
                End::Closed => view["status"] != "CLOSED",
                End::AsItWas => false,
            })
            .map(|(_, view)| {
                format!(
                    "{} {} {}",
                    view["status"], view["step"]["name"], view["message"]
                )
            })
            .collect();
        if unfinished.is_empty() {
            return views;
        }
        assert!(
            Instant::now() < deadline,
            "{} not finished: {unfinished:?}",
            unfinished.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn upgrade_while_the_old_release_runs(url: &str, backend: &str) {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let outside = outside(DecisionPolicy::Manual).await;
    let gitlab = OldGitLab {
        client: plain_client().build().unwrap(),
        outside: &outside,
    };
    // Where the service will listen. The deploy pipeline reports the
    // merges of the old release there, and retries until it answers.
    let port = free_port();
    let address = format!("http://127.0.0.1:{port}");
    outside
        .approval
        .set_callback_url(format!("{address}/callbacks/approval"));
    outside
        .deploy
        .set_callback_url(format!("{address}/callbacks/deploy"));
    let old = Arc::new(OldRelease::create(url).await.unwrap());
    let mut written = Vec::new();
    for (status, end) in EVERY_STATUS {
        written.push(Written {
            operation_id: write_in_status(&old, &gitlab, status).await,
            status,
            end,
        });
    }
    let mut before = Vec::new();
    for request in &written {
        before.push(old.page(&request.operation_id).await.unwrap());
    }

    let stop = Arc::new(AtomicBool::new(false));
    let ids = written.iter().map(|w| w.operation_id.clone()).collect();
    let old_instance = tokio::spawn(keep_the_old_release_working(
        Arc::clone(&old),
        ids,
        Arc::clone(&stop),
    ));
    migrate(url, dir.path()).await;

    let config = config(url, port, &outside, "approval_first", true);
    let config_path = dir.path().join("changegate.toml");
    std::fs::write(&config_path, config).unwrap();
    let client = plain_client()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    // The old instance goes on while the first new one starts and takes up
    // its work, as it does until it is replaced.
    let service = start(&config_path, &address, &client).await;
    stop.store(true, Ordering::SeqCst);
    let during = old_instance
        .await
        .unwrap()
        .unwrap_or_else(|err| panic!("{backend}: the previous release failed: {err:#}"));

    let mut expected: Vec<(String, End)> = written
        .iter()
        .map(|w| (w.operation_id.clone(), w.end))
        .collect();
    expected.extend(during.iter().map(|id| (id.clone(), End::Validated)));
    let views = wait_for_the_ends(&client, &address, &outside, &expected).await;
    drop(service);

    // Views show what the requester sees; the old release's own read shows
    // that not even the version or the time of the last write moved.
    for ((request, page), view) in written.iter().zip(&before).zip(&views) {
        if request.end != End::AsItWas {
            continue;
        }
        assert_eq!(
            view["status"], request.status,
            "{backend}: the {} request: {view}",
            request.status
        );
        let after = old.page(&request.operation_id).await.unwrap();
        assert_eq!(
            (
                &after.binding_status,
                after.operation.step_code,
                after.operation.version,
                after.operation.updated_at
            ),
            (
                &page.binding_status,
                page.operation.step_code,
                page.operation.version,
                page.operation.updated_at
            ),
            "{backend}: the {} request changed",
            request.status
        );
    }
    assert!(!during.is_empty());
    eprintln!(
        "{backend}: {} requests written before the upgrade and {} during it, all through in {:?}",
        written.len(),
        during.len(),
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_database_of_the_previous_release_upgrades_while_it_runs_and_every_request_continues() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("cg.db").display());
    upgrade_while_the_old_release_runs(&url, "sqlite").await;
    if let Some(scratch) = MySqlScratch::create().await {
        upgrade_while_the_old_release_runs(&scratch.url(), "mysql").await;
    }
}
