//! What the instances talk to, on loopback: the GitLab and deploy simulators
//! (approved requests go through merge rounds, pipelines and deploy
//! confirmation, as in a deployment) and a webhook receiver that answers 204.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::post;
use changegate_sim::callback::{DeliverySettings, generate_secret};
use changegate_sim::deploy::{DeploySim, DeploySimHandle, DeploySimOptions};
use changegate_sim::gitlab::{
    AccessLevel, GitLabSim, GitLabSimHandle, GitLabSimOptions, ProjectId,
};

/// The GitLab project every target's changes go to.
pub const PROJECT: &str = "config/repo";
/// The change bot's token, then the two reviewers'.
pub const TOKENS: [(&str, &str); 3] = [
    ("bot", "bot-token"),
    ("rev-a", "a-token"),
    ("rev-b", "b-token"),
];

/// The simulators and the receiver of one run; dropping it stops them.
pub struct Outside {
    gitlab: GitLabSimHandle,
    project: ProjectId,
    pub deploy: DeploySimHandle,
    /// `http://127.0.0.1:PORT/hook`
    pub receiver_url: String,
    /// Webhook deliveries received.
    pub received: Arc<AtomicUsize>,
    receiver: tokio::task::JoinHandle<()>,
}

impl Outside {
    pub async fn start() -> Self {
        let gitlab = GitLabSim::start(GitLabSimOptions {
            pipeline_duration: Duration::from_secs(1),
            pipeline_steps_per_poll: 3,
            ..GitLabSimOptions::default()
        })
        .await
        .expect("gitlab simulator");
        let project = gitlab.create_project(PROJECT);
        for (user, token) in TOKENS {
            let id = gitlab.add_user(user, token);
            gitlab
                .add_member(project, id, AccessLevel::Developer)
                .expect("member");
        }
        let deploy = DeploySim::start(
            gitlab.observer(),
            DeploySimOptions {
                secret: generate_secret(),
                // A callback answered 5xx is sent again, as a deploy pipeline
                // would, so that its merge is still confirmed; every attempt
                // is counted.
                delivery: DeliverySettings {
                    timeout: Duration::from_secs(10),
                    retries: 20,
                    retry_backoff: Duration::from_millis(50),
                },
                ..DeploySimOptions::default()
            },
        )
        .await
        .expect("deploy simulator");
        let received = Arc::new(AtomicUsize::new(0));
        let counted = received.clone();
        let app = Router::new().route(
            "/hook",
            post(move || {
                counted.fetch_add(1, Ordering::Relaxed);
                async { StatusCode::NO_CONTENT }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the receiver");
        let receiver_url = format!("http://{}/hook", listener.local_addr().expect("address"));
        let receiver = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("receiver");
        });
        Self {
            gitlab,
            project,
            deploy,
            receiver_url,
            received,
            receiver,
        }
    }
}

impl Outside {
    /// The GitLab simulator's root, for `gitlab.base_url`.
    pub fn gitlab_url(&self) -> &str {
        self.gitlab.base_url()
    }

    /// Merge requests opened so far (one per merge round).
    pub fn merge_requests(&self) -> usize {
        (1..)
            .map_while(|iid| self.gitlab.merge_request(self.project, iid))
            .count()
    }
}

impl Drop for Outside {
    fn drop(&mut self) {
        self.receiver.abort();
    }
}
