//! The three simulators started together and seeded for a demo: a GitLab project with a bot
//! account and reviewer accounts, the approval system and the deploy pipeline watching that
//! GitLab. This is what the `changegate-sim` binary runs; a test that needs the whole outside
//! world can start it in one call too.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::str::FromStr;

use crate::approval::{ApprovalSim, ApprovalSimHandle, ApprovalSimOptions};
use crate::deploy::{DeploySim, DeploySimHandle, DeploySimOptions};
use crate::gitlab::{AccessLevel, GitLabSim, GitLabSimHandle, GitLabSimOptions, ProjectId};

/// A GitLab account and its personal access token, written `NAME:TOKEN` on a command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Account {
    /// The username.
    pub username: String,
    /// The `PRIVATE-TOKEN` that authenticates it.
    pub token: String,
}

impl FromStr for Account {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text.split_once(':') {
            Some((username, token)) if !username.is_empty() && !token.is_empty() => Ok(Self {
                username: username.to_owned(),
                token: token.to_owned(),
            }),
            _ => Err(format!("expected NAME:TOKEN, got {text:?}")),
        }
    }
}

/// What to start and how to seed it.
#[derive(Clone, Debug)]
pub struct StackOptions {
    /// The GitLab simulator's options.
    pub gitlab: GitLabSimOptions,
    /// The approval simulator's options.
    pub approval: ApprovalSimOptions,
    /// The deploy simulator's options.
    pub deploy: DeploySimOptions,
    /// The project created in GitLab, e.g. `config/repo`.
    pub project: String,
    /// The account changegate writes branches, commits and merge requests with.
    pub bot: Account,
    /// The accounts that approve merge requests; the project requires one approval from
    /// each, as changegate approves with every reviewer it is configured with.
    pub reviewers: Vec<Account>,
}

/// The running simulators. Dropping it stops them all.
pub struct SimStack {
    /// The GitLab simulator.
    pub gitlab: GitLabSimHandle,
    /// The approval simulator.
    pub approval: ApprovalSimHandle,
    /// The deploy simulator, watching `gitlab`.
    pub deploy: DeploySimHandle,
    /// The seeded project's numeric id.
    pub project: ProjectId,
    /// The seeded project's path.
    pub project_path: String,
    /// The bot account, a developer of the project.
    pub bot: Account,
    /// The reviewer accounts, developers of the project.
    pub reviewers: Vec<Account>,
    /// Where approval callbacks go, as configured at start.
    approval_callbacks: Option<String>,
    /// Where deploy callbacks go, as configured at start.
    deploy_callbacks: Option<String>,
}

impl SimStack {
    /// Starts the three simulators and seeds GitLab; fails when an address cannot be bound
    /// or a secret is not `whsec_<base64>`.
    pub async fn start(options: StackOptions) -> io::Result<Self> {
        let approval_callbacks = options.approval.callback_url.clone();
        let deploy_callbacks = options.deploy.callback_url.clone();
        let (gitlab_bind, approval_bind, deploy_bind) = (
            options.gitlab.bind,
            options.approval.bind,
            options.deploy.bind,
        );
        let gitlab = GitLabSim::start(options.gitlab)
            .await
            .map_err(context("GitLab simulator", gitlab_bind))?;
        let project = gitlab.create_project(&options.project);
        for account in std::iter::once(&options.bot).chain(&options.reviewers) {
            let user = gitlab.add_user(&account.username, &account.token);
            gitlab
                .add_member(project, user, AccessLevel::Developer)
                .expect("the project was just created");
        }
        gitlab
            .update_settings(project, |settings| {
                settings.approvals_required = options.reviewers.len();
            })
            .expect("the project was just created");
        let approval = ApprovalSim::start(options.approval)
            .await
            .map_err(context("approval simulator", approval_bind))?;
        let deploy = DeploySim::start(gitlab.observer(), options.deploy)
            .await
            .map_err(context("deploy simulator", deploy_bind))?;
        Ok(Self {
            gitlab,
            approval,
            deploy,
            project,
            project_path: options.project,
            bot: options.bot,
            reviewers: options.reviewers,
            approval_callbacks,
            deploy_callbacks,
        })
    }
}

/// Names the simulator and its address in a start-up error, which alone would say only
/// e.g. "Address already in use".
fn context(simulator: &str, bind: SocketAddr) -> impl FnOnce(io::Error) -> io::Error {
    move |err| io::Error::new(err.kind(), format!("{simulator} on {bind}: {err}"))
}

/// One `key value` line per fact, so a person can read it and a script can grep it.
impl fmt::Display for SimStack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let none = "(none; set it through /_sim/callback_url)";
        let mut line = |key: &str, value: &dyn fmt::Display| writeln!(f, "{key:<20} {value}");
        line("gitlab.url", &self.gitlab.api_url())?;
        line(
            "gitlab.control",
            &format!("{}/_sim", self.gitlab.base_url()),
        )?;
        line(
            "gitlab.project",
            &format!("{} (id {})", self.project_path, self.project),
        )?;
        for (role, account) in std::iter::once(("gitlab.bot", &self.bot))
            .chain(self.reviewers.iter().map(|r| ("gitlab.reviewer", r)))
        {
            line(
                role,
                &format!("{} (token {})", account.username, account.token),
            )?;
        }
        line(
            "approval.url",
            &format!("{}/approvals", self.approval.base_url()),
        )?;
        line(
            "approval.control",
            &format!("{}/_sim", self.approval.base_url()),
        )?;
        line(
            "approval.callbacks",
            &self.approval_callbacks.as_deref().unwrap_or(none),
        )?;
        line("approval.secret", &self.approval.secret())?;
        line(
            "deploy.control",
            &format!("{}/_sim", self.deploy.base_url()),
        )?;
        line(
            "deploy.callbacks",
            &self.deploy_callbacks.as_deref().unwrap_or(none),
        )?;
        line("deploy.secret", &self.deploy.secret())
    }
}
