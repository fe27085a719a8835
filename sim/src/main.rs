//! `changegate-sim`: starts the GitLab, approval and deploy simulators on loopback for a
//! demo, seeds GitLab with a project, a bot and reviewers, prints where everything is, and
//! runs until Ctrl-C. All wiring lives in [`changegate_sim::stack`].

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use changegate_sim::approval::{ApprovalSimOptions, Decision, DecisionPolicy};
use changegate_sim::callback::generate_secret;
use changegate_sim::deploy::DeploySimOptions;
use changegate_sim::gitlab::GitLabSimOptions;
use changegate_sim::stack::{Account, SimStack, StackOptions};
use changegate_sim::tls::ServerTls;
use clap::{Parser, ValueEnum};
use tracing_subscriber::EnvFilter;

/// Simulators of GitLab, the approval system and the deploy pipeline, for trying changegate
/// out locally. Everything listens on 127.0.0.1 only: the `/_sim` control APIs have no
/// authentication.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Port of the GitLab simulator (0: any free port).
    #[arg(long, env = "CHANGEGATE_SIM_GITLAB_PORT", default_value_t = 18081)]
    gitlab_port: u16,
    /// Port of the approval simulator (0: any free port).
    #[arg(long, env = "CHANGEGATE_SIM_APPROVAL_PORT", default_value_t = 18082)]
    approval_port: u16,
    /// Port of the deploy simulator's control API (0: any free port).
    #[arg(long, env = "CHANGEGATE_SIM_DEPLOY_PORT", default_value_t = 18083)]
    deploy_port: u16,
    /// changegate's base URL: callbacks go to {URL}/callbacks/approval and
    /// {URL}/callbacks/deploy.
    #[arg(
        long,
        env = "CHANGEGATE_SIM_CALLBACK_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    callback_url: String,
    /// Key (whsec_...) approval callbacks are signed with; a random one is generated and
    /// printed when absent.
    #[arg(long, env = "CHANGEGATE_SIM_APPROVAL_SECRET", hide_env_values = true)]
    approval_secret: Option<String>,
    /// Key (whsec_...) deploy callbacks are signed with; a random one is generated and
    /// printed when absent.
    #[arg(long, env = "CHANGEGATE_SIM_DEPLOY_SECRET", hide_env_values = true)]
    deploy_secret: Option<String>,
    /// Bearer token `POST /approvals` requires; none when absent.
    #[arg(long, env = "CHANGEGATE_SIM_APPROVAL_TOKEN", hide_env_values = true)]
    approval_token: Option<String>,
    /// How new approvals are decided: approved or rejected after --approval-delay-ms, or
    /// held for a decision through the control API.
    #[arg(long, value_enum, default_value_t = PolicyArg::Approve)]
    approval_policy: PolicyArg,
    /// Milliseconds between an approval request and its automatic decision.
    #[arg(long, default_value_t = 2000)]
    approval_delay_ms: u64,
    /// Path of the GitLab project to create.
    #[arg(long, default_value = "config/repo")]
    project: String,
    /// The bot account changegate uses, as NAME:TOKEN.
    #[arg(
        long,
        value_name = "NAME:TOKEN",
        default_value = "change-bot:bot-token"
    )]
    bot: Account,
    /// A reviewer account, as NAME:TOKEN; repeat the flag for each reviewer. The project
    /// requires an approval from every reviewer.
    #[arg(
        long = "reviewer",
        value_name = "NAME:TOKEN",
        default_values = ["rev-alice:alice-token", "rev-bob:bob-token"]
    )]
    reviewers: Vec<Account>,
    /// Seed of the draws behind faults injected with a probability.
    #[arg(long, default_value_t = 0)]
    fault_seed: u64,
    /// How long a GitLab pipeline runs before it may finish, in milliseconds; with
    /// --pipeline-duration-max-ms, the shortest run.
    #[arg(long, default_value_t = 0)]
    pipeline_duration_ms: u64,
    /// Each pipeline's duration drawn uniformly from --pipeline-duration-ms up to this many
    /// milliseconds (at or below it: no draw).
    #[arg(long)]
    pipeline_duration_max_ms: Option<u64>,
    /// Seed of the pipeline durations' draws (each merge request's pipelines draw their own).
    #[arg(long, default_value_t = 0)]
    pipeline_seed: u64,
    /// PEM certificate chain all three simulators serve HTTPS with, instead of plain
    /// HTTP; needs --tls-key.
    #[arg(
        long,
        env = "CHANGEGATE_SIM_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(
        long,
        env = "CHANGEGATE_SIM_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    tls_key: Option<PathBuf>,
    /// PEM CA certificates trusted, besides the platform's roots, when --callback-url is
    /// https://.
    #[arg(long, env = "CHANGEGATE_SIM_CALLBACK_CA", value_name = "FILE")]
    callback_ca: Option<PathBuf>,
}

/// `--approval-policy`.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum PolicyArg {
    /// Approve after the delay.
    Approve,
    /// Reject after the delay.
    Reject,
    /// Wait for `POST /_sim/approvals/{operationId}/decision`.
    Manual,
}

impl Args {
    /// The stack's options: loopback addresses, callback URLs under `--callback-url`; fails
    /// when a TLS file cannot be read.
    fn into_options(self) -> std::io::Result<StackOptions> {
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(ServerTls::from_pem_files(cert, key)?),
            _ => None,
        };
        let callback_ca_pem = match &self.callback_ca {
            Some(path) => Some(std::fs::read_to_string(path).map_err(|err| {
                std::io::Error::new(err.kind(), format!("{}: {err}", path.display()))
            })?),
            None => None,
        };
        let loopback = |port| SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let base = self.callback_url.trim_end_matches('/');
        let delay = Duration::from_millis(self.approval_delay_ms);
        let policy = match self.approval_policy {
            PolicyArg::Approve => DecisionPolicy::Auto {
                result: Decision::Approved,
                delay,
            },
            PolicyArg::Reject => DecisionPolicy::Auto {
                result: Decision::Rejected,
                delay,
            },
            PolicyArg::Manual => DecisionPolicy::Manual,
        };
        Ok(StackOptions {
            gitlab: GitLabSimOptions {
                bind: loopback(self.gitlab_port),
                fault_seed: self.fault_seed,
                pipeline_duration: Duration::from_millis(self.pipeline_duration_ms),
                pipeline_duration_max: self.pipeline_duration_max_ms.map(Duration::from_millis),
                pipeline_seed: self.pipeline_seed,
                tls: tls.clone(),
                ..GitLabSimOptions::default()
            },
            approval: ApprovalSimOptions {
                bind: loopback(self.approval_port),
                callback_url: Some(format!("{base}/callbacks/approval")),
                secret: self.approval_secret.unwrap_or_else(generate_secret),
                policy,
                api_token: self.approval_token,
                fault_seed: self.fault_seed,
                tls: tls.clone(),
                callback_ca_pem: callback_ca_pem.clone(),
                ..ApprovalSimOptions::default()
            },
            deploy: DeploySimOptions {
                bind: loopback(self.deploy_port),
                callback_url: Some(format!("{base}/callbacks/deploy")),
                secret: self.deploy_secret.unwrap_or_else(generate_secret),
                fault_seed: self.fault_seed,
                tls,
                callback_ca_pem,
                ..DeploySimOptions::default()
            },
            project: self.project,
            bot: self.bot,
            reviewers: self.reviewers,
        })
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    // Logs go to stderr so that stdout carries only the summary scripts read.
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("changegate-sim: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Starts the stack, prints the summary and waits for Ctrl-C.
async fn run(args: Args) -> std::io::Result<()> {
    let stack = SimStack::start(args.into_options()?).await?;
    print!("{stack}");
    tracing::info!("simulators running; Ctrl-C stops them");
    tokio::signal::ctrl_c().await
}
