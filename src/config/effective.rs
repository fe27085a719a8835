//! The running configuration as operators see it (`GET /admin/v1/config`):
//! every value in effect after defaults, environment overrides and fail-safe
//! resolution, with secrets redacted and credentials cut out of URLs.

use std::path::{Path, PathBuf};

use secrecy::SecretString;
use serde_json::{Value, json};

use super::resolve::{AccessMode, AccessWindow, ApproveImpl};
use super::{ApprovalProvider, AuthzProvider, LogFormat, Settings};

const REDACTED: &str = "[redacted]";

fn secret(value: Option<&SecretString>) -> Value {
    value.map_or(Value::Null, |_| json!(REDACTED))
}

/// A file's path as text; paths that are not UTF-8 are shown lossily.
fn path(value: Option<&Path>) -> Value {
    value.map_or(Value::Null, |path| json!(path.display().to_string()))
}

/// The file a secret was read from (`key` is its `_file` key), if it was.
fn secret_file(settings: &Settings, key: &str) -> Value {
    path(settings.secret_files.get(key).first().map(PathBuf::as_path))
}

/// `scheme://user:password@host/db?query` without the user and password.
/// Only the authority (up to the first `/`, `?` or `#`) can hold them: an `@`
/// in the path or the query (`ssl-ca=/etc/ssl/ops@corp.pem`) is kept.
fn without_credentials(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let rest = &url[scheme_end..];
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    match authority.rfind('@') {
        Some(at) => format!("{}{REDACTED}{}", &url[..scheme_end], &rest[at..]),
        None => url.to_owned(),
    }
}

/// A duration the way the file writes it: `30s`, or `250ms`.
fn duration(value: std::time::Duration) -> String {
    match value.as_millis() {
        ms if ms % 1000 == 0 => format!("{}s", ms / 1000),
        ms => format!("{ms}ms"),
    }
}

/// The effective configuration of `settings`.
pub fn effective(settings: &Settings) -> Value {
    let s = settings;
    let access_mode = match s.access.mode {
        AccessMode::Open => "OPEN",
        AccessMode::TestWindow => "TEST_WINDOW",
        AccessMode::Closed => "CLOSED",
    };
    let window = match s.access.window {
        AccessWindow::Unset => Value::Null,
        AccessWindow::AllDay => json!("all day"),
        AccessWindow::Daily { start, end, tz } => {
            json!({ "start": start.to_string(), "end": end.to_string(), "timezone": tz.name() })
        }
        AccessWindow::Never => json!("invalid (treated as closed)"),
    };
    let targets: serde_json::Map<String, Value> = s
        .targets
        .iter()
        .map(|(key, target)| {
            let value = json!({
                "description": target.description,
                "project": if target.project.is_empty() { &s.gitlab.project } else { &target.project },
                "path": target.path,
                "ruleCodes": target.rule_codes,
                "selfOnly": target.self_only,
                "params": target.params,
            });
            (key.clone(), value)
        })
        .collect();
    json!({
        "server": {
            "listen": s.server.listen.to_string(),
            "requestTimeout": duration(s.server.request_timeout),
            "shutdownTimeout": duration(s.server.shutdown_timeout),
        },
        "database": {
            "url": without_credentials(&s.database.url),
            "passwordFile": path(s.database.password_file.as_deref()),
            "maxConnections": s.database.max_connections,
            "connectTimeout": duration(s.database.connect_timeout),
            "galeraSyncWait": s.database.galera_sync_wait,
            "failoverHosts": s.database.failover_hosts.iter().map(|(host, port)| format!("{host}:{port}")).collect::<Vec<_>>(),
            "galeraRequireSynced": s.database.galera_require_synced,
        },
        "log": {
            "level": s.log.level,
            "format": match s.log.format { LogFormat::Human => "human", LogFormat::Json => "json" },
        },
        "access": { "mode": access_mode, "window": window },
        "rateLimit": s.rate_limit,
        "identity": {
            "trustedProxies": s.identity.trusted_proxies.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "userHeader": s.identity.user_header.as_str(),
            "emailHeader": s.identity.email_header.as_str(),
            "employeeIdHeader": s.identity.employee_id_header.as_str(),
            "canonicalEmailDomain": s.identity.canonical_email_domain,
            "aliases": s.identity.aliases,
            "jwt": {
                "hs256Secret": secret(s.identity.jwt.hs256_secret.as_ref()),
                "hs256SecretFile": secret_file(s, "identity.jwt.hs256_secret_file"),
                "rs256PublicKey": s.identity.jwt.rs256_public_key.is_some(),
                "rs256PublicKeyFile": secret_file(s, "identity.jwt.rs256_public_key_file"),
                "issuer": s.identity.jwt.issuer,
                "audience": s.identity.jwt.audience,
                "leeway": duration(s.identity.jwt.leeway),
            },
        },
        "authz": {
            "provider": match s.authz.provider { AuthzProvider::Static => "static", AuthzProvider::Http => "http" },
            "url": without_credentials(&s.authz.url),
            "timeout": duration(s.authz.timeout),
            "rules": s.authz.rules,
            "grants": s.authz.grants,
        },
        "targets": targets,
        "idempotency": {
            "ttl": duration(s.idempotency.ttl),
            "cleanupInterval": duration(s.idempotency.cleanup_interval),
        },
        "executor": {
            "workers": s.executor.workers,
            "queueCapacity": s.executor.queue_capacity,
            "lease": duration(s.executor.lease),
            "pollInterval": duration(s.executor.poll_interval),
        },
        "workflow": {
            "flowOrder": s.flow_order.as_str(),
            "shortPolls": s.polling.short_polls,
            "shortPollInterval": duration(s.polling.short_interval),
            "longPolls": s.polling.long_polls,
            "longPollInterval": duration(s.polling.long_interval),
            "unreachableDeadline": duration(s.unreachable_deadline),
        },
        "gitlab": {
            "baseUrl": without_credentials(&s.gitlab.base_url),
            "project": s.gitlab.project,
            "targetBranch": s.gitlab.target_branch,
            "botToken": secret(s.gitlab.bot_token.as_ref()),
            "botTokenFile": secret_file(s, "gitlab.bot_token_file"),
            "reviewerTokens": s.gitlab.reviewer_tokens.iter().map(|_| REDACTED).collect::<Vec<_>>(),
            "reviewerTokenFiles": s.secret_files.get("gitlab.reviewer_token_files").iter().map(|file| path(Some(file))).collect::<Vec<_>>(),
            "timeout": duration(s.gitlab.timeout),
            "approveImpl": match s.gitlab.approve_impl { ApproveImpl::Standard => "standard", ApproveImpl::Checklist => "checklist" },
        },
        "approval": {
            "provider": match s.approval.provider { ApprovalProvider::Builtin => "builtin", ApprovalProvider::Http => "http" },
            "url": without_credentials(&s.approval.url),
            "callbackSecret": secret(s.approval.callback_secret.as_ref()),
            "callbackSecretFile": secret_file(s, "approval.callback_secret_file"),
            "retries": s.approval.retries,
            "timeout": duration(s.approval.timeout),
        },
        "deploy": {
            "callbackSecret": secret(s.deploy_callback_secret.as_ref()),
            "callbackSecretFile": secret_file(s, "deploy.callback_secret_file"),
        },
        "batch": {
            "enabled": s.batch.enabled,
            "interval": duration(s.batch.interval),
            "maxRequests": s.batch.max_requests,
            "maxAttempts": s.batch.max_attempts,
        },
        "webhooks": {
            "silent": s.webhooks_silent,
            "allowPrivateTargets": s.webhooks.allow_private_targets,
            "retrySchedule": s.webhooks.retry_schedule.iter().map(|d| duration(*d)).collect::<Vec<_>>(),
            "requestTimeout": duration(s.webhooks.request_timeout),
            "pollInterval": duration(s.webhooks.poll_interval),
            "concurrency": s.webhooks.concurrency,
            "breakerFailures": s.webhooks.breaker_failures,
            "breakerOpenFor": duration(s.webhooks.breaker_open_for),
            "secretGrace": duration(s.webhooks.secret_grace),
        },
        "reconcile": {
            "interval": duration(s.reconcile.interval),
            "minAge": duration(s.reconcile.min_age),
            "maxAge": duration(s.reconcile.max_age),
        },
        "web": { "demoIdentity": s.web.demo_identity },
        "tls": { "caFile": path(s.tls.ca_file.as_deref()) },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_never_leave_in_urls() {
        assert_eq!(
            without_credentials("mysql://app:s3cret@db:3306/changegate"),
            "mysql://[redacted]@db:3306/changegate"
        );
        assert_eq!(
            without_credentials("sqlite://data/changegate.db"),
            "sqlite://data/changegate.db"
        );
        assert_eq!(
            without_credentials(
                "mysql://app:p@ss@db:3306/changegate?ssl-mode=VERIFY_IDENTITY&ssl-ca=/etc/ssl/ops@corp.pem"
            ),
            "mysql://[redacted]@db:3306/changegate?ssl-mode=VERIFY_IDENTITY&ssl-ca=/etc/ssl/ops@corp.pem"
        );
        assert_eq!(
            without_credentials("mysql://db/changegate?ssl-ca=/etc/ssl/ops@corp.pem"),
            "mysql://db/changegate?ssl-ca=/etc/ssl/ops@corp.pem"
        );
        assert_eq!(
            without_credentials("sqlite:///var/lib/ops@corp/changegate.db"),
            "sqlite:///var/lib/ops@corp/changegate.db"
        );
    }
}
