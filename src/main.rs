//! The changegate binary: parses the command line and runs the library.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use changegate::app::Application;
use changegate::config::{self, LiveConfig, Problem, Settings, Severity, source};
use changegate::{db, telemetry};

/// Exit code for configuration problems.
const EXIT_CONFIG: u8 = 2;

#[derive(Parser)]
#[command(version, about = "Self-service configuration changes through GitLab")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the service (the default).
    Serve {
        /// Configuration file; default `config/default.toml` if present, else built-in defaults.
        #[arg(long, env = "CHANGEGATE_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Apply database migrations and exit.
    Migrate {
        /// Configuration file, as for `serve`.
        #[arg(long, env = "CHANGEGATE_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Validate a configuration file: print each problem with its key; exit 2 on any.
    CheckConfig {
        /// The file to check.
        path: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command.unwrap_or(Command::Serve { config: None }) {
        Command::Serve { config } => with_runtime(serve(config)),
        Command::Migrate { config } => with_runtime(migrate(config)),
        Command::CheckConfig { path } => check_config(&path),
    }
}

fn with_runtime(task: impl Future<Output = ExitCode>) -> ExitCode {
    match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime.block_on(task),
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Loads the configuration or prints why not.
fn load_settings(named: Option<&Path>) -> Result<(Settings, Option<PathBuf>), ExitCode> {
    let path = config::config_path(named);
    match config::load(path.as_deref(), None) {
        Ok((settings, warnings)) => {
            for warning in warnings {
                eprintln!("{warning}");
            }
            Ok((settings, path))
        }
        Err(problems) => {
            for problem in problems {
                eprintln!("{problem}");
            }
            eprintln!("changegate did not start: fix the configuration above");
            Err(ExitCode::from(EXIT_CONFIG))
        }
    }
}

async fn serve(named: Option<PathBuf>) -> ExitCode {
    let (settings, path) = match load_settings(named.as_deref()) {
        Ok(loaded) => loaded,
        Err(code) => return code,
    };
    let set_level = match telemetry::init_logging(&settings.log.level, settings.log.format) {
        Ok(set_level) => set_level,
        Err(err) => {
            eprintln!("error: cannot set up logging: {err}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(path) = &path {
        tracing::info!(path = %path.display(), "configuration loaded");
    }
    let signals = match ShutdownSignals::register() {
        Ok(signals) => signals,
        Err(err) => {
            eprintln!("error: cannot listen for shutdown signals: {err}");
            return ExitCode::FAILURE;
        }
    };
    let live = LiveConfig::new(settings, path, Some(set_level));
    let app = match Application::build(live).await {
        Ok(app) => app,
        Err(err) => {
            tracing::error!("{err:#}");
            eprintln!("error: {err:#}");
            return ExitCode::FAILURE;
        }
    };
    signals.cancel_on_first(app.shutdown_token());
    match app.run_until_stopped().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!("server stopped: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// SIGINT and SIGTERM, registered before the port opens, so a signal that
/// arrives as soon as the service listens already shuts it down gracefully
/// instead of killing the process.
struct ShutdownSignals {
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    fn register() -> std::io::Result<Self> {
        Ok(Self {
            #[cfg(unix)]
            terminate: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?,
        })
    }

    /// Cancels `shutdown` on the first signal.
    #[cfg_attr(not(unix), expect(unused_mut, reason = "only unix has SIGTERM"))]
    fn cancel_on_first(mut self, shutdown: tokio_util::sync::CancellationToken) {
        tokio::spawn(async move {
            #[cfg(unix)]
            let terminated = self.terminate.recv();
            #[cfg(not(unix))]
            let terminated = std::future::pending::<Option<()>>();
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = terminated => {}
            }
            shutdown.cancel();
        });
    }
}

async fn migrate(named: Option<PathBuf>) -> ExitCode {
    let (settings, _) = match load_settings(named.as_deref()) {
        Ok(loaded) => loaded,
        Err(code) => return code,
    };
    match db::open(&settings.database).await {
        Ok(db) => {
            db.close().await;
            println!("migrations applied");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

fn check_config(path: &Path) -> ExitCode {
    let problems: Vec<Problem> = match source::read_file(path) {
        Ok(table) => Settings::from_table(&table, None).1,
        Err(message) => vec![Problem::new(
            Severity::Error,
            &path.display().to_string(),
            message,
        )],
    };
    if problems.is_empty() {
        println!("{}: ok", path.display());
        return ExitCode::SUCCESS;
    }
    for problem in &problems {
        println!("{problem}");
    }
    ExitCode::from(EXIT_CONFIG)
}
