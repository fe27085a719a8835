//! The changegate binary: parses the command line and runs the library.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use clap_complete::Shell;

use changegate::app::Application;
use changegate::cli::{self, Cli, Command};
use changegate::clients::http::{Outbound, ProxyRules, Trust};
use changegate::config::{self, LiveConfig, Problem, Settings, Severity, source};
use changegate::traces::Traces;
use changegate::{db, telemetry};

/// Exit code for configuration problems.
const EXIT_CONFIG: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A bare `changegate` is `changegate serve`, so it reads the file that
    // the configuration variable names just as `serve` does.
    let command = cli.command.unwrap_or_else(|| Command::Serve {
        config: std::env::var_os(cli::CONFIG_ENV).map(PathBuf::from),
    });
    match command {
        Command::Serve { config } => with_runtime(serve(config)),
        Command::Migrate { config } => with_runtime(migrate(config)),
        Command::Backup { config, path } => with_runtime(backup(config, path)),
        Command::CheckConfig { path } => check_config(&path),
        Command::Completions { shell } => completions(shell),
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
    let traces = match start_traces(&settings) {
        Ok(traces) => traces,
        Err(err) => {
            eprintln!("error: cannot set up trace export: {err:#}");
            return ExitCode::FAILURE;
        }
    };
    let set_level =
        match telemetry::init_logging(&settings.log.level, settings.log.format, traces.as_ref()) {
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
    let stopped = app.run_until_stopped().await;
    // The spans of the last requests and steps, before the process ends.
    if let Some(traces) = traces {
        traces.shutdown().await;
    }
    match stopped {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!("server stopped: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// The trace export `telemetry.otlp_endpoint` asks for, sent with the trust
/// and proxies of every other outbound call.
fn start_traces(settings: &Settings) -> anyhow::Result<Option<Traces>> {
    if settings.telemetry.otlp_endpoint.is_none() {
        return Ok(None);
    }
    let outbound = Outbound::new(
        Trust::load(settings.tls.ca_file.as_deref())?,
        ProxyRules::from_env(),
    );
    Traces::start(&settings.telemetry, &outbound)
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

async fn backup(named: Option<PathBuf>, target: PathBuf) -> ExitCode {
    let (settings, _) = match load_settings(named.as_deref()) {
        Ok(loaded) => loaded,
        Err(code) => return code,
    };
    let Some(database) = db::sqlite_file(&settings.database.url) else {
        eprintln!("error: {}", db::backup::BackupError::NotSqlite);
        return ExitCode::FAILURE;
    };
    if !database.exists() {
        eprintln!("error: there is no database at {}", database.display());
        return ExitCode::FAILURE;
    }
    // Copied as it is: a backup taken before an upgrade must not migrate.
    let db = match db::connect(&settings.database).await {
        Ok(db) => db,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::FAILURE;
        }
    };
    let copied = db::backup::backup_sqlite(&db, &target).await;
    db.close().await;
    if let Err(err) = copied {
        eprintln!("error: {err}");
        return ExitCode::FAILURE;
    }
    // Without its key the copy's webhook secrets could not be opened.
    let key = changegate::webhooks::sealed::key_file_of(&database);
    if settings.webhooks.sealing_keys.current.is_none() && key.exists() {
        let key_copy = changegate::webhooks::sealed::key_file_of(&target);
        if let Err(err) = std::fs::copy(&key, &key_copy) {
            eprintln!(
                "error: the database was copied, but not its webhook key {}: {err}",
                key.display()
            );
            return ExitCode::FAILURE;
        }
        println!(
            "{} and its webhook key {} written",
            target.display(),
            key_copy.display()
        );
    } else {
        println!("{} written", target.display());
    }
    ExitCode::SUCCESS
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

fn completions(shell: Shell) -> ExitCode {
    // Written whole rather than by `generate` straight to stdout, which
    // panics when the reader goes away (`changegate completions bash | head`).
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cli::command(), "changegate", &mut script);
    match std::io::stdout().write_all(&script) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: cannot write the completion script: {err}");
            ExitCode::FAILURE
        }
    }
}
