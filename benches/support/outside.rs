//! What a bench runs changegate against: the GitLab simulator with one
//! project (`config/repo`) whose bot and two reviewers are members, the
//! approval simulator approving at once, and the deploy simulator confirming
//! every merge; and the configuration sections that point changegate at them.

use std::time::Duration;

use changegate_sim::approval::{
    ApprovalSim, ApprovalSimHandle, ApprovalSimOptions, Decision, DecisionPolicy,
};
use changegate_sim::callback::{DeliverySettings, generate_secret};
use changegate_sim::deploy::{DeploySim, DeploySimHandle, DeploySimOptions};
use changegate_sim::gitlab::{
    AccessLevel, GitLabSim, GitLabSimHandle, GitLabSimOptions, ProjectId,
};

pub struct Outside {
    pub gitlab: GitLabSimHandle,
    pub project: ProjectId,
    pub approval: ApprovalSimHandle,
    pub deploy: DeploySimHandle,
}

/// The three simulators, GitLab's with `options`.
pub async fn outside(options: GitLabSimOptions) -> Outside {
    let gitlab = GitLabSim::start(options).await.expect("gitlab simulator");
    let project = gitlab.create_project("config/repo");
    for (user, token) in [
        ("bot", "bot-token"),
        ("rev-a", "a-token"),
        ("rev-b", "b-token"),
    ] {
        let id = gitlab.add_user(user, token);
        gitlab
            .add_member(project, id, AccessLevel::Developer)
            .expect("member");
    }
    let delivery = DeliverySettings {
        timeout: Duration::from_secs(10),
        retries: 20,
        retry_backoff: Duration::from_millis(50),
    };
    let approval = ApprovalSim::start(ApprovalSimOptions {
        secret: generate_secret(),
        policy: DecisionPolicy::Auto {
            result: Decision::Approved,
            delay: Duration::ZERO,
        },
        delivery: delivery.clone(),
        ..ApprovalSimOptions::default()
    })
    .await
    .expect("approval simulator");
    let deploy = DeploySim::start(
        gitlab.observer(),
        DeploySimOptions {
            secret: generate_secret(),
            delivery,
            ..DeploySimOptions::default()
        },
    )
    .await
    .expect("deploy simulator");
    Outside {
        gitlab,
        project,
        approval,
        deploy,
    }
}

impl Outside {
    /// changegate's `[gitlab]`, `[approval]` and `[deploy]` sections.
    pub fn sections(&self) -> String {
        format!(
            "[gitlab]\nbase_url = {:?}\nproject = \"config/repo\"\nbot_token = \"bot-token\"\nreviewer_tokens = [\"a-token\", \"b-token\"]\n\
             [approval]\nprovider = \"http\"\nurl = \"{}/approvals\"\ncallback_secret = {:?}\n\
             [deploy]\ncallback_secret = {:?}\n",
            self.gitlab.base_url(),
            self.approval.base_url(),
            self.approval.secret(),
            self.deploy.secret()
        )
    }

    /// Sends the approval and deploy callbacks to changegate at `address`.
    pub fn call_back(&self, address: &str) {
        self.approval
            .set_callback_url(format!("{address}/callbacks/approval"));
        self.deploy
            .set_callback_url(format!("{address}/callbacks/deploy"));
    }
}
