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

/// A project at `path` whose members are the bot and the two reviewers
/// (registered on the first call; adding a known user again gives back
/// its id).
pub fn project_with_members(gitlab: &GitLabSimHandle, path: &str) -> ProjectId {
    let project = gitlab.create_project(path);
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
    project
}

/// The three simulators, GitLab's with `options`.
pub async fn outside(options: GitLabSimOptions) -> Outside {
    let gitlab = GitLabSim::start(options).await.expect("gitlab simulator");
    let project = project_with_members(&gitlab, "config/repo");
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

/// changegate running in-process against the simulators.
pub struct Running {
    pub address: String,
    pub db: changegate::db::Db,
    pub client: reqwest::Client,
    shutdown: tokio_util::sync::CancellationToken,
    server: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Outside {
    /// Starts changegate with the configuration `text` (which holds
    /// [`Outside::sections`]), has the simulators call it back, and waits
    /// until it is ready.
    pub async fn start_changegate(&self, text: &str) -> Running {
        use changegate::config::{LiveConfig, Settings, source};
        let (settings, problems) = Settings::from_table(&source::parse(text).expect("toml"), None);
        assert!(problems.is_empty(), "{problems:?}");
        let app = changegate::app::Application::build(LiveConfig::new(settings, None, None))
            .await
            .expect("app");
        let address = format!("http://127.0.0.1:{}", app.port());
        let db = app.state().db.clone();
        let shutdown = app.shutdown_token();
        let server = tokio::spawn(app.run_until_stopped());
        self.call_back(&address);
        changegate::clients::http::install_crypto_provider();
        let client = reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("client");
        while client
            .get(format!("{address}/readyz"))
            .send()
            .await
            .map(|r| r.status() != 200)
            .unwrap_or(true)
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let db = db.get().expect("database").clone();
        Running {
            address,
            db,
            client,
            shutdown,
            server,
        }
    }
}

impl Running {
    /// Stops changegate and waits until it has.
    pub async fn stop(self) {
        self.shutdown.cancel();
        let _ = self.server.await;
    }
}
