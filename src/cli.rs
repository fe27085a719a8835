//! The command line `changegate` accepts, defined here rather than in the
//! binary so that the manual's CLI reference is rendered from the same
//! definition the binary parses ([`command`]).

use std::path::PathBuf;

use clap::{CommandFactory, Parser, Subcommand};
use clap_complete::Shell;

/// The environment variable that names the configuration file, for
/// `serve`, `migrate` and `backup`, and for a bare `changegate`.
pub const CONFIG_ENV: &str = "CHANGEGATE_CONFIG";

/// Self-service configuration changes through approval, GitLab merge
/// requests, CI and deploy confirmation.
///
/// changegate is an HTTP service through which people request changes to
/// configuration that lives as code in a GitLab repository. Each request is
/// approved, written by a bot as a merge request, passes CI, is approved by
/// two reviewer bots, merged and confirmed by the deploy pipeline. Without a
/// subcommand, changegate runs `serve`.
#[derive(Debug, Parser)]
#[command(name = "changegate", version)]
pub struct Cli {
    /// What to do; `serve` when none is given.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The subcommands.
// `long_help` on each argument keeps its doc comment whole, final period
// included, for `--help` and the reference; clap drops that period from the
// one-line help `-h` shows.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Runs the service until it receives SIGINT or SIGTERM; this is the default.
    ///
    /// It reads the configuration, applies database migrations, listens on
    /// `server.listen` and runs the background jobs. Changes to the
    /// configuration file's dynamic settings are applied without a restart.
    /// It exits with 0 after a graceful shutdown, 2 when the configuration
    /// has an error and 1 on any other failure.
    Serve {
        /// The configuration file to read; without it, changegate reads
        /// `config/default.toml` when that file exists and uses its built-in
        /// defaults otherwise.
        #[arg(long, env = CONFIG_ENV, long_help)]
        config: Option<PathBuf>,
    },
    /// Applies the database migrations and exits.
    ///
    /// It creates the SQLite file when it does not exist yet, and does nothing
    /// when every migration is already applied. It exits with 0 when the
    /// schema is up to date, 2 when the configuration has an error and 1 when
    /// the database cannot be opened or migrated.
    Migrate {
        /// The configuration file to read, found as for `serve`.
        #[arg(long, env = CONFIG_ENV, long_help)]
        config: Option<PathBuf>,
    },
    /// Writes a consistent copy of the SQLite database to a new file, also
    /// while the service runs.
    ///
    /// The copy is one snapshot, compacted, and never overwrites an existing
    /// file. When the webhook secrets are sealed with a key changegate
    /// generated beside the database, that key is copied beside the new file
    /// too, since the copy's secrets cannot be opened without it. The
    /// database is copied as it is, without migrating it, so a copy taken
    /// before an upgrade keeps the old schema. MySQL databases are backed up
    /// with their own tools (`mysqldump --single-transaction`). It exits
    /// with 0 when the copy is written, 2 when the configuration has an
    /// error and 1 on any other failure.
    Backup {
        /// The configuration file to read, found as for `serve`.
        #[arg(long, env = CONFIG_ENV, long_help)]
        config: Option<PathBuf>,
        /// The new file to write the copy to.
        #[arg(long_help)]
        path: PathBuf,
    },
    /// Checks a configuration file and prints each problem with its key.
    ///
    /// It reads only the file, without the environment's overrides, and
    /// prints the errors and warnings the service would report for it on
    /// start-up or reload, suggesting the nearest known name for a misspelt
    /// key or section. It exits with 0 when the file has no problem and 2
    /// when it has any, so a deployment can check a file before it is used.
    CheckConfig {
        /// The configuration file to check.
        #[arg(long_help)]
        path: PathBuf,
    },
    /// Prints a shell completion script to standard output.
    ///
    /// For example, `changegate completions bash > /etc/bash_completion.d/changegate`
    /// completes changegate's subcommands and options in bash.
    Completions {
        /// The shell to write the script for.
        #[arg(value_enum, long_help)]
        shell: Shell,
    },
}

/// The command line as clap describes it, for rendering its reference and
/// for completion scripts.
pub fn command() -> clap::Command {
    Cli::command()
}
