//! The deploy-pipeline simulator: merge requests merged through the GitLab simulator's REST
//! API lead to signed deploy callbacks, which a receiver verifies with the official `standardwebhooks` crate;
//! every fault kind is exercised.

mod control;

use std::time::{Duration, Instant};

use super::receiver::Receiver;
use changegate_sim::callback::generate_secret;
use changegate_sim::deploy::{
    DeployFault, DeployFaultKind, DeploySim, DeploySimHandle, DeploySimOptions, ProjectField,
};
use changegate_sim::gitlab::{AccessLevel, GitLabSim, GitLabSimHandle, PipelineOutcome, ProjectId};
use serde_json::{Value, json};
use uuid::Uuid;

const TOKEN: &str = "bot-token";
const WAIT: Duration = Duration::from_secs(5);
/// Several poll intervals: long enough for a merge to be noticed and reported.
const SETTLE: Duration = Duration::from_millis(400);

struct Fixture {
    gitlab: GitLabSimHandle,
    deploy: DeploySimHandle,
    receiver: Receiver,
    project: ProjectId,
    client: reqwest::Client,
}

impl Fixture {
    async fn start() -> Self {
        let gitlab = GitLabSim::start(Default::default())
            .await
            .expect("gitlab simulator starts");
        let project = gitlab.create_project("config/repo");
        let bot = gitlab.add_user("change-bot", TOKEN);
        gitlab
            .add_member(project, bot, AccessLevel::Developer)
            .expect("project exists");
        gitlab
            .update_settings(project, |settings| settings.approvals_required = 0)
            .expect("project exists");
        Self::with_gitlab(gitlab, project).await
    }

    /// Starts the deploy simulator against an already prepared GitLab simulator.
    async fn with_gitlab(gitlab: GitLabSimHandle, project: ProjectId) -> Self {
        let secret = generate_secret();
        let receiver = Receiver::start(&secret).await;
        let options = DeploySimOptions {
            callback_url: Some(receiver.url("deploy")),
            secret,
            ..DeploySimOptions::default()
        };
        let deploy = DeploySim::start(gitlab.observer(), options)
            .await
            .expect("deploy simulator starts");
        Self {
            gitlab,
            deploy,
            receiver,
            project,
            client: crate::client::client(),
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Value) -> Value {
        let url = format!("{}/projects/{}{path}", self.gitlab.api_url(), self.project);
        let response = self
            .client
            .request(method, url)
            .header("PRIVATE-TOKEN", TOKEN)
            .json(&body)
            .send()
            .await
            .expect("gitlab simulator answers");
        let status = response.status();
        let body: Value = response.json().await.expect("JSON answer");
        assert!(status.is_success(), "{status}: {body}");
        body
    }

    /// Opens a merge request with one file and `description`, lets its pipeline pass and
    /// merges it over REST; returns the iid and the merge commit.
    async fn merge(&self, branch: &str, description: &str) -> (u64, String) {
        use reqwest::Method;
        let branch_body = json!({ "branch": branch, "ref": "main" });
        self.call(Method::POST, "/repository/branches", branch_body)
            .await;
        let actions = [json!({
            "action": "create",
            "file_path": format!("bindings/{branch}.json"),
            "content": "{}\n",
        })];
        let commit = json!({ "branch": branch, "commit_message": "bot: add", "actions": actions });
        self.call(Method::POST, "/repository/commits", commit).await;
        let mr = json!({
            "source_branch": branch,
            "target_branch": "main",
            "title": format!("bot: {branch}"),
            "description": description,
        });
        let mr = self.call(Method::POST, "/merge_requests", mr).await;
        let iid = mr["iid"].as_u64().expect("iid");
        let snapshot = self
            .gitlab
            .merge_request(self.project, iid)
            .expect("MR exists");
        let (pipeline, _) = snapshot.head_pipeline.expect("MR has a pipeline");
        self.gitlab
            .force_pipeline(self.project, pipeline, PipelineOutcome::Success)
            .expect("pipeline exists");
        let merged = self
            .call(
                Method::PUT,
                &format!("/merge_requests/{iid}/merge"),
                json!({}),
            )
            .await;
        assert_eq!(merged["state"], "merged");
        let merged = self
            .gitlab
            .merge_request(self.project, iid)
            .expect("MR exists");
        (
            iid,
            merged
                .merge_commit_sha
                .expect("merged MRs have a merge commit"),
        )
    }

    /// Waits until the simulator has noticed `count` merges.
    async fn noticed(&self, count: usize) {
        let merges = self.deploy.wait_for_merges(count, WAIT).await;
        assert_eq!(merges.len(), count, "{merges:?}");
    }
}

fn trailers(ids: &[Uuid]) -> String {
    let lines: Vec<String> = ids
        .iter()
        .map(|id| format!("Changegate-Operation: {id}"))
        .collect();
    format!("Batch round\n\n{}\n", lines.join("\n"))
}

#[tokio::test]
async fn a_merge_leads_to_a_verified_deploy_callback() {
    let fx = Fixture::start().await;
    let ops = [Uuid::new_v4(), Uuid::new_v4()];
    let started = Instant::now();
    let (iid, sha) = fx.merge("batch-1", &trailers(&ops)).await;

    let received = fx.receiver.wait_for(1, WAIT).await;
    let callback = &received[0];
    assert_eq!(callback.verified, Ok(()));
    assert_eq!(callback.status, 200);
    assert_eq!(callback.body["mrIid"], iid);
    assert_eq!(callback.body["project"], "config/repo", "CI_PROJECT_PATH");
    assert_eq!(callback.body["sha"], sha.as_str());
    assert_eq!(callback.body["status"], "success");
    let ids: Vec<String> = ops.iter().map(Uuid::to_string).collect();
    assert_eq!(callback.body["operationIds"], json!(ids));
    assert_eq!(
        callback.header("webhook-id"),
        callback.body["callbackId"].as_str().unwrap()
    );
    assert!(callback.at - started < WAIT);

    // The receiver records a callback before the simulator has read its answer.
    let sent = fx.deploy.wait_for_callbacks(1, WAIT).await;
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].status, Some(200));
    assert_eq!(sent[0].answer, json!({ "code": "OK" }));
    let merges = fx.deploy.merges();
    assert_eq!(merges[0].iid, iid);
    assert_eq!(merges[0].sha, sha);
    assert_eq!(merges[0].operation_ids, ops);
    assert_eq!(merges[0].fault, None);
    fx.receiver.assert_stays_at(1, SETTLE).await;
}

#[tokio::test]
async fn operation_ids_are_omitted_when_none_or_when_switched_off() {
    let fx = Fixture::start().await;
    fx.merge("plain", "No trailers here").await;
    let received = fx.receiver.wait_for(1, WAIT).await;
    assert!(received[0].body.get("operationIds").is_none());

    fx.deploy.set_send_operation_ids(false);
    fx.merge("legacy", &trailers(&[Uuid::new_v4()])).await;
    let received = fx.receiver.wait_for(2, WAIT).await;
    assert!(received[1].body.get("operationIds").is_none());
    // Still parsed, for inspection.
    assert_eq!(fx.deploy.merges()[1].operation_ids.len(), 1);
}

#[tokio::test]
async fn a_single_project_pipeline_names_no_project() {
    let fx = Fixture::start().await;
    fx.deploy.set_project_field(ProjectField::Omitted);
    fx.merge("single", "").await;
    let received = fx.receiver.wait_for(1, WAIT).await;
    assert!(
        received[0].body.get("project").is_none(),
        "{:?}",
        received[0].body
    );
}

#[tokio::test]
async fn merges_before_the_start_are_not_reported() {
    let before = Fixture::start().await;
    before.merge("early", "").await;
    before.receiver.wait_for(1, WAIT).await;
    let Fixture {
        gitlab, project, ..
    } = before;
    let fx = Fixture::with_gitlab(gitlab, project).await;
    let (iid, _) = fx.merge("late", "").await;
    let received = fx.receiver.wait_for(1, WAIT).await;
    assert_eq!(received[0].body["mrIid"], iid);
    fx.receiver.assert_stays_at(1, SETTLE).await;
}

#[tokio::test]
async fn lost_callbacks_are_never_sent() {
    let fx = Fixture::start().await;
    fx.deploy
        .inject(DeployFault::new(DeployFaultKind::Lose).times(2));
    fx.merge("one", "").await;
    fx.merge("two", "").await;
    fx.noticed(2).await;
    fx.receiver.assert_stays_at(0, SETTLE).await;
    let (third, _) = fx.merge("three", "").await;
    let received = fx.receiver.wait_for(1, WAIT).await;
    assert_eq!(received[0].body["mrIid"], third);
    let faults: Vec<_> = fx.deploy.merges().iter().map(|m| m.fault).collect();
    assert_eq!(
        faults,
        vec![
            Some(DeployFaultKind::Lose),
            Some(DeployFaultKind::Lose),
            None
        ]
    );
    assert_eq!(fx.deploy.wait_for_callbacks(1, WAIT).await.len(), 1);
}

#[tokio::test]
async fn duplicates_repeat_the_callback_id() {
    let fx = Fixture::start().await;
    fx.deploy
        .inject(DeployFault::new(DeployFaultKind::Duplicate));
    fx.merge("dup", "").await;
    let received = fx.receiver.wait_for(2, WAIT).await;
    assert_eq!(received[0].body, received[1].body);
    let sent = fx.deploy.wait_for_callbacks(2, WAIT).await;
    assert_eq!(sent[0].answer, json!({ "code": "OK" }));
    assert_eq!(sent[1].answer, json!({ "code": "DUPLICATE" }));
    fx.receiver.assert_stays_at(2, SETTLE).await;
}

#[tokio::test]
async fn reverse_reports_the_later_merge_first() {
    let fx = Fixture::start().await;
    fx.deploy.inject(DeployFault::new(DeployFaultKind::Reverse));
    let (first, _) = fx.merge("first", "").await;
    fx.noticed(1).await;
    fx.receiver.assert_stays_at(0, SETTLE).await;
    let (second, _) = fx.merge("second", "").await;
    let received = fx.receiver.wait_for(2, WAIT).await;
    assert_eq!(received[0].body["mrIid"], second);
    assert_eq!(received[1].body["mrIid"], first);
    assert!(received.iter().all(|r| r.verified.is_ok()));
}

#[tokio::test]
async fn failed_deployments_are_reported_as_failed() {
    let fx = Fixture::start().await;
    fx.deploy.inject(DeployFault::new(DeployFaultKind::Failed));
    let op = Uuid::new_v4();
    let (iid, sha) = fx.merge("broken", &trailers(&[op])).await;
    let received = fx.receiver.wait_for(1, WAIT).await;
    assert_eq!(received[0].body["status"], "failed");
    assert_eq!(received[0].body["mrIid"], iid);
    assert_eq!(received[0].body["sha"], sha.as_str());
    assert_eq!(received[0].body["operationIds"], json!([op.to_string()]));
}

#[tokio::test]
async fn a_delayed_callback_is_overtaken_by_the_next_merge() {
    let fx = Fixture::start().await;
    let delay = Duration::from_millis(800);
    fx.deploy
        .inject(DeployFault::new(DeployFaultKind::Delay(delay)));
    let (slow, _) = fx.merge("slow", "").await;
    fx.noticed(1).await;
    let noticed = Instant::now();
    let (quick, _) = fx.merge("quick", "").await;
    let received = fx.receiver.wait_for(2, WAIT).await;
    assert_eq!(received[0].body["mrIid"], quick);
    assert_eq!(received[1].body["mrIid"], slow);
    assert!(received[1].at - noticed >= delay - Duration::from_millis(100));
}

#[tokio::test]
async fn dropping_the_handle_stops_reporting() {
    let fx = Fixture::start().await;
    fx.receiver.fail_next(503);
    fx.merge("retried", "").await;
    let received = fx.receiver.wait_for(2, WAIT).await;
    assert_eq!(received[0].status, 503);
    assert_eq!(received[1].status, 200);
    assert_eq!(
        received[0].header("webhook-id"),
        received[1].header("webhook-id")
    );

    let Fixture {
        gitlab,
        deploy,
        receiver,
        project,
        client,
    } = fx;
    drop(deploy);
    let fx = Fixture {
        deploy: DeploySim::start(gitlab.observer(), DeploySimOptions::default())
            .await
            .unwrap(),
        gitlab,
        receiver,
        project,
        client,
    };
    fx.merge("unwatched", "").await;
    fx.noticed(1).await;
    // Only the new simulator (with no callback URL) noticed it; the dropped one sent nothing.
    fx.receiver.assert_stays_at(2, SETTLE).await;
    assert_eq!(fx.deploy.callbacks()[0].status, None);
}
