//! Configuration: a TOML file plus environment overrides, validated at start-up,
//! with dynamic settings hot-reloaded from the watched file (SPEC §4).

pub mod effective;
mod git_ref;
mod jwt;
mod live;
pub mod projects;
mod reader;
pub mod resolve;
mod retention;
mod scheduling;
mod schema;
mod secrets;
mod sections;
mod settings;
pub mod source;
mod static_settings;
mod targets;
mod telemetry;
mod tls;
mod watch;
mod webhook_keys;
mod windows;

use std::fmt;
use std::path::{Path, PathBuf};

pub use jwt::{JwtSettings, KeySource, Unverifiable};
pub use live::{LevelSetter, LiveConfig, ReloadOutcome};
pub use retention::RetentionSettings;
pub use scheduling::SchedulingSettings;
pub use secrets::SecretFiles;
pub use sections::{
    AuthzProvider, AuthzSettings, DriftSettings, ExecutorSettings, IdempotencySettings,
    IdentitySettings, PollSchedule, WebSettings, WebhookSettings,
};
pub use settings::{
    AccessSettings, ApprovalProvider, ApprovalSettings, BatchSettings, DatabaseSettings,
    GitLabSettings, LogFormat, LogSettings, ServerSettings, Settings,
};
pub use static_settings::{STATIC_KEYS, STATIC_SECTIONS};
pub use targets::TargetSettings;
pub use telemetry::TelemetrySettings;
pub use tls::TlsSettings;
pub use watch::watch;
pub use webhook_keys::{KeyBytes, SealingKeys};
pub use windows::{Opening, Window, WindowKind, WindowRule, Windows};

/// Where the configuration file is looked for when none is named.
pub const DEFAULT_CONFIG_PATH: &str = "config/default.toml";

/// How bad a configuration problem is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// The file cannot be used: start-up stops, a reload is rejected.
    Error,
    /// A dynamic value fell back to a safe default.
    Warning,
}

/// One problem found in a configuration, named by its dotted key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Error or warning.
    pub severity: Severity,
    /// The dotted key, e.g. `access.mode`, or the file for syntax errors.
    pub key: String,
    /// What is wrong and what the service does about it.
    pub message: String,
}

impl Problem {
    /// A problem with `key`.
    pub fn new(severity: Severity, key: &str, message: impl Into<String>) -> Self {
        Self {
            severity,
            key: key.to_owned(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let level = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{level}: {}: {}", self.key, self.message)
    }
}

/// The configuration file to read: the named one, else [`DEFAULT_CONFIG_PATH`]
/// when it exists, else none (built-in defaults).
pub fn config_path(named: Option<&Path>) -> Option<PathBuf> {
    match named {
        Some(path) => Some(path.to_owned()),
        None => {
            let default = PathBuf::from(DEFAULT_CONFIG_PATH);
            default.exists().then_some(default)
        }
    }
}

/// Reads the file (if any) and the process environment into a snapshot.
/// `Err` carries at least one [`Severity::Error`] problem; `Ok` may carry warnings.
pub fn load(
    path: Option<&Path>,
    previous: Option<&Settings>,
) -> Result<(Settings, Vec<Problem>), Vec<Problem>> {
    let mut table = match path {
        Some(path) => source::read_file(path).map_err(|message| {
            vec![Problem::new(
                Severity::Error,
                &path.display().to_string(),
                message,
            )]
        })?,
        None => toml::Table::new(),
    };
    if let Some(directory) = path.and_then(Path::parent) {
        targets::anchor_schema_files(&mut table, directory);
    }
    source::apply_env_overrides(&mut table, std::env::vars());
    let (settings, problems) = Settings::from_table(&table, previous);
    if problems.iter().any(|p| p.severity == Severity::Error) {
        Err(problems)
    } else {
        Ok((settings, problems))
    }
}

/// Every key a configuration file may hold, dotted (`batch.max_requests`,
/// `identity.jwt.issuer`); a section whose keys are names of the
/// operator's own (`rate_limit`, `targets`, `windows`) is listed by its
/// name. The reference's configuration page is checked against it.
pub fn known_keys() -> Vec<String> {
    let mut keys = Vec::new();
    for (section, section_keys) in schema::SCHEMA {
        match section_keys {
            None => keys.push((*section).to_owned()),
            Some(section_keys) => {
                keys.extend(section_keys.iter().map(|key| format!("{section}.{key}")));
            }
        }
    }
    keys.extend(
        jwt::JWT_KEYS
            .iter()
            .map(|key| format!("identity.jwt.{key}")),
    );
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(text: &str) -> (Settings, Vec<Problem>) {
        Settings::from_table(&source::parse(text).unwrap(), None)
    }

    fn errors(problems: &[Problem]) -> Vec<String> {
        problems
            .iter()
            .filter(|p| p.severity == Severity::Error)
            .map(|p| p.key.clone())
            .collect()
    }

    #[test]
    fn empty_file_gives_the_documented_defaults() {
        let (settings, problems) = from("");
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(settings.server.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(settings.database.url, "sqlite://data/changegate.db");
        assert_eq!(settings.log.level, "info");
        assert_eq!(settings.access.mode, resolve::AccessMode::TestWindow);
        assert_eq!(settings.flow_order, resolve::FlowOrder::ApprovalFirst);
        assert!(settings.batch.enabled);
        assert_eq!(settings.batch.max_requests, 500);
        assert_eq!(settings.approval.retries, 3);
        assert_eq!(settings.approval.provider, ApprovalProvider::Builtin);
    }

    #[test]
    fn a_target_branch_gitlab_would_refuse_is_an_error_at_load() {
        let (_, problems) = from("[gitlab]\ntarget_branch = \"release 1\"\n");
        assert_eq!(errors(&problems), ["gitlab.target_branch"]);
        assert!(problems[0].message.contains("a space"), "{problems:?}");
        let (settings, problems) = from("[gitlab]\ntarget_branch = \"release/1.2\"\n");
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(settings.gitlab.target_branch, "release/1.2");
    }

    #[test]
    fn static_mistakes_and_unknown_keys_are_errors_named_by_key() {
        let (_, problems) = from(
            r#"
            [server]
            listen = "localhost"
            [database]
            url = "postgres://db/x"
            max_connections = 0
            [gitlab]
            bse_url = "https://gitlab"
            [approval]
            provider = "http"
            [surprise]
            x = 1
            "#,
        );
        assert_eq!(
            errors(&problems),
            [
                "gitlab.bse_url",
                "surprise",
                "server.listen",
                "database.url",
                "database.max_connections",
                "approval.url"
            ]
        );
    }

    #[test]
    fn mysql_url_parameters_are_checked_at_load() {
        let (_, problems) =
            from("[database]\nurl = \"mysql://app@db/changegate?ssl-mode=VERIFY\"\n");
        assert_eq!(errors(&problems), ["database.url"]);
        assert!(
            problems[0].message.contains("ssl-mode \"VERIFY\""),
            "{problems:?}"
        );

        let (settings, problems) = from(
            "[database]\nurl = \"mysql://app@db/changegate?ssl-mode=REQUIRED&ssl-ca=/ca.pem\"\n",
        );
        assert!(errors(&problems).is_empty(), "{problems:?}");
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].key, "database.url");
        assert_eq!(
            settings.database.url,
            "mysql://app@db/changegate?ssl-mode=REQUIRED&ssl-ca=/ca.pem"
        );
    }

    #[test]
    fn identity_header_names_are_checked_once_at_load() {
        let (settings, problems) =
            from("[identity]\nuser_header = \"X-Remote-User\"\nemail_header = \"x email\"\n");
        assert_eq!(errors(&problems), ["identity.email_header"]);
        assert_eq!(settings.identity.user_header.as_str(), "x-remote-user");
    }

    #[test]
    fn dynamic_mistakes_are_warnings_with_safe_values() {
        let (settings, problems) = from(
            r#"
            [access]
            mode = "OPNE"
            [rate_limit]
            apply = -3
            [webhooks]
            silent = "maybe"
            "#,
        );
        assert!(errors(&problems).is_empty());
        let warned: Vec<&str> = problems.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(
            warned,
            ["access.mode", "rate_limit.apply", "webhooks.silent"]
        );
        assert_eq!(settings.access.mode, resolve::AccessMode::Closed);
        assert_eq!(settings.rate_limit["apply"], None);
        assert!(settings.webhooks_silent);
    }

    #[test]
    fn a_reload_keeps_the_last_good_flow_order_and_log_level() {
        let (running, _) =
            from("[workflow]\nflow_order = \"mr_first\"\n[log]\nlevel = \"debug\"\n");
        let table = source::parse("[workflow]\nflow_order = \"??\"\n[log]\nlevel = 5\n").unwrap();
        let (reloaded, problems) = Settings::from_table(&table, Some(&running));
        assert_eq!(reloaded.flow_order, resolve::FlowOrder::MrFirst);
        assert_eq!(reloaded.log.level, "debug");
        assert_eq!(problems.len(), 2);
    }
}
