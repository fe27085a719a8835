//! `changegate-demo`: one command that starts changegate on its embedded
//! SQLite database together with the GitLab, approval and deploy simulators
//! on loopback, wired by `config/demo.toml`, prints where everything is, and
//! runs until Ctrl-C.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use changegate::app::Application;
use changegate::config::{self, LiveConfig};
use changegate::telemetry;
use changegate_sim::approval::{ApprovalSimOptions, Decision, DecisionPolicy};
use changegate_sim::deploy::DeploySimOptions;
use changegate_sim::gitlab::GitLabSimOptions;
use changegate_sim::stack::{Account, SimStack, StackOptions};
use clap::Parser;

/// Signing keys of the demo's callbacks. They are in `config/demo.toml` as
/// well, in plain sight: the demo is for a laptop, never for production.
const APPROVAL_SECRET: &str = "whsec_Y2hhbmdlZ2F0ZS1kZW1vLWFwcHJvdmFsLXNlY3JldCE=";
const DEPLOY_SECRET: &str = "whsec_Y2hhbmdlZ2F0ZS1kZW1vLWRlcGxveS1zZWNyZXQhISE=";

/// changegate with simulated GitLab, approval system and deploy pipeline.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// changegate's configuration; the simulators' addresses and secrets in
    /// it must match the ports below.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/demo.toml"))]
    config: PathBuf,
    /// Port of the GitLab simulator (`gitlab.base_url` in the config).
    #[arg(long, default_value_t = 18081)]
    gitlab_port: u16,
    /// Port of the approval simulator (`approval.url` in the config).
    #[arg(long, default_value_t = 18082)]
    approval_port: u16,
    /// Port of the deploy simulator's control API.
    #[arg(long, default_value_t = 18083)]
    deploy_port: u16,
}

/// The simulators keep their state in memory only, so a database kept from
/// an earlier run would hold requests, merge requests and bindings they
/// never heard of: links to other MRs, removals that "succeed" with an
/// empty MR. The demo starts from a fresh database on every run instead,
/// its file with its WAL, shared-memory and webhook key files removed.
fn start_afresh(database_url: &str) -> anyhow::Result<()> {
    let Some(file) = changegate::db::sqlite_file(database_url) else {
        tracing::warn!(
            "the demo's database is not an SQLite file: it is kept, but the simulators start empty"
        );
        return Ok(());
    };
    let mut wal = file.clone().into_os_string();
    wal.push("-wal");
    let mut shm = file.clone().into_os_string();
    shm.push("-shm");
    let key = changegate::webhooks::sealed::key_file_of(&file);
    for path in [file.clone(), wal.into(), shm.into(), key] {
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => anyhow::bail!("cannot remove the earlier demo's {}: {err}", path.display()),
        }
    }
    println!(
        "fresh demo database  {} (each run starts anew)",
        file.display()
    );
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let (settings, warnings) = config::load(Some(&args.config), None).map_err(|problems| {
        let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
        anyhow::anyhow!("{}: {}", args.config.display(), problems.join("; "))
    })?;
    let set_level = telemetry::init_logging(&settings.log.level, settings.log.format, None)?;
    for warning in warnings {
        tracing::warn!("{warning}");
    }
    start_afresh(&settings.database.url)?;
    let changegate_url = format!("http://{}", settings.server.listen);
    let demo_identity = settings.web.demo_identity;
    let loopback = |port| std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let stack = SimStack::start(StackOptions {
        gitlab: GitLabSimOptions {
            bind: loopback(args.gitlab_port),
            ..GitLabSimOptions::default()
        },
        approval: ApprovalSimOptions {
            bind: loopback(args.approval_port),
            callback_url: Some(format!("{changegate_url}/callbacks/approval")),
            secret: APPROVAL_SECRET.to_owned(),
            // Approve by itself a few seconds after each request, so a newcomer
            // watches requests move on; decide by hand through /_sim instead
            // by setting the policy to manual there.
            policy: DecisionPolicy::Auto {
                result: Decision::Approved,
                delay: Duration::from_secs(3),
            },
            ..ApprovalSimOptions::default()
        },
        deploy: DeploySimOptions {
            bind: loopback(args.deploy_port),
            callback_url: Some(format!("{changegate_url}/callbacks/deploy")),
            secret: DEPLOY_SECRET.to_owned(),
            ..DeploySimOptions::default()
        },
        project: settings.gitlab.project.clone(),
        bot: Account {
            username: "change-bot".to_owned(),
            token: "bot-token".to_owned(),
        },
        reviewers: vec![
            Account {
                username: "rev-alice".to_owned(),
                token: "alice-token".to_owned(),
            },
            Account {
                username: "rev-bob".to_owned(),
                token: "bob-token".to_owned(),
            },
        ],
    })
    .await?;

    let live = LiveConfig::new(settings, Some(args.config.clone()), Some(set_level));
    let app = Application::build(live).await?;
    let shutdown = app.shutdown_token();
    println!(
        "changegate           {changegate_url}  (try: curl -H 'X-Auth-Request-User: alice' {changegate_url}/api/v1/targets)"
    );
    let switcher = if demo_identity {
        "; pick alice (requester) or admin (operator) at the top right"
    } else {
        ""
    };
    println!("web app              open {changegate_url}/ in a browser{switcher}");
    print!("{stack}");
    println!("ready; Ctrl-C stops everything");
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        shutdown.cancel();
    });
    app.run_until_stopped().await?;
    drop(stack);
    Ok(())
}
