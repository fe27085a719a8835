//! The GitLab calls an instance of the old release made for a request's MR,
//! as its bot and reviewers, and the approval request it sent: what a
//! request it left behind finds outside.

use std::time::{Duration, Instant};

use changegate::domain::render::{BindingFile, canonical_json};
use changegate_sim::deploy::{DeployFault, DeployFaultKind};
use serde_json::{Value, json};

use super::{PROJECT_IN_PATH, REQUESTER, TARGET, old_release};
use crate::durability::Outside;

/// The calls, as its bot and reviewers.
pub(super) struct OldGitLab<'a> {
    pub(super) client: reqwest::Client,
    pub(super) outside: &'a Outside,
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
    pub(super) async fn open_merge_request(
        &self,
        operation_id: &str,
        subject: &str,
    ) -> (i64, String) {
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

    pub(super) async fn wait_for_pipeline(&self, iid: i64) {
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
    pub(super) async fn approve_and_merge(&self, iid: i64) {
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
    pub(super) async fn request_approval(&self, operation_id: &str, subject: &str) {
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

    /// [`Self::approve_and_merge`], with the deploy pipeline's callback of
    /// this merge lost on its way to changegate; the merge commit (what the
    /// pipeline deploys).
    pub(super) async fn merge_with_lost_deploy(&self, iid: i64) -> String {
        let deploy = &self.outside.deploy;
        let noticed = deploy.merges().len();
        deploy.inject(DeployFault::new(DeployFaultKind::Lose));
        self.approve_and_merge(iid).await;
        let merges = deploy
            .wait_for_merges(noticed + 1, Duration::from_secs(10))
            .await;
        let merge = merges
            .iter()
            .find(|merge| i64::try_from(merge.iid) == Ok(iid))
            .unwrap_or_else(|| panic!("the deploy pipeline never saw MR !{iid} merged"));
        assert_eq!(merge.fault, Some(DeployFaultKind::Lose), "MR !{iid}");
        merge.sha.clone()
    }
}
