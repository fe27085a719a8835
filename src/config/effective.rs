//! The running configuration as operators see it (`GET /admin/v1/config`):
//! every value in effect after defaults, environment overrides and fail-safe
//! resolution, with secrets redacted and credentials cut out of URLs.

use std::path::{Path, PathBuf};

use secrecy::SecretString;
use serde::Serialize;
use serde_json::{Value, json};
use utoipa::openapi::schema::{AdditionalProperties, Object, ObjectBuilder, Type};

use super::resolve::{AccessMode, AccessWindow, ApproveImpl};
use super::static_settings::{STATIC_KEYS, STATIC_SECTIONS};
use super::{ApprovalProvider, AuthzProvider, LogFormat, Settings, Unverifiable};

const REDACTED: &str = "[redacted]";

fn secret(value: Option<&SecretString>) -> Value {
    value.map_or(Value::Null, |_| json!(REDACTED))
}

/// A retention age, `"0"` when rows are kept for ever.
fn kept(age: Option<std::time::Duration>) -> Value {
    age.map_or(json!("0"), |age| json!(duration(age)))
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

/// The effective configuration: one member per section of the
/// configuration file, each an object of that section's keys in camelCase.
///
/// The document lists the sections, not their keys (each is an object with
/// `additionalProperties`): the keys mirror `config/default.toml` one for
/// one, and `rateLimit`, `targets` and `windows` are keyed by bucket, by
/// target and by window, so a schema of every key would repeat the file and
/// drift from it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EffectiveConfig {
    #[schema(schema_with = section)]
    server: Value,
    #[schema(schema_with = section)]
    database: Value,
    #[schema(schema_with = section)]
    log: Value,
    #[schema(schema_with = section)]
    access: Value,
    #[schema(schema_with = section)]
    rate_limit: Value,
    #[schema(schema_with = section)]
    identity: Value,
    #[schema(schema_with = section)]
    authz: Value,
    #[schema(schema_with = section)]
    targets: Value,
    #[schema(schema_with = section)]
    windows: Value,
    #[schema(schema_with = section)]
    scheduling: Value,
    #[schema(schema_with = section)]
    idempotency: Value,
    #[schema(schema_with = section)]
    executor: Value,
    #[schema(schema_with = section)]
    workflow: Value,
    #[schema(schema_with = section)]
    gitlab: Value,
    #[schema(schema_with = section)]
    approval: Value,
    #[schema(schema_with = section)]
    deploy: Value,
    #[schema(schema_with = section)]
    batch: Value,
    #[schema(schema_with = section)]
    webhooks: Value,
    #[schema(schema_with = section)]
    reconcile: Value,
    #[schema(schema_with = section)]
    drift: Value,
    #[schema(schema_with = section)]
    retention: Value,
    #[schema(schema_with = section)]
    web: Value,
    #[schema(schema_with = section)]
    tls: Value,
    #[schema(schema_with = section)]
    telemetry: Value,
    /// What a reload does not change, as the file names it: whole sections
    /// (`server`) and single keys (`webhooks.concurrency`). A new value in
    /// the file applies after a restart; until then the value shown here
    /// is the one in effect. Every other key changes on a reload.
    static_keys: Vec<&'static str>,
}

/// One section: its keys in camelCase, secrets as `[redacted]`.
fn section() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .additional_properties(Some(AdditionalProperties::FreeForm(true)))
        .build()
}

/// The effective configuration of `settings`.
pub fn effective(settings: &Settings) -> EffectiveConfig {
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
    // The zone only matters to a daily window, which holds it.
    let timezone = match s.access.window {
        AccessWindow::Daily { tz, .. } => json!(tz.name()),
        _ => Value::Null,
    };
    let targets: serde_json::Map<String, Value> = s
        .targets
        .iter()
        .map(|(key, target)| {
            let value = json!({
                "description": target.description,
                "project": if target.project.is_empty() { &s.gitlab.project } else { &target.project },
                "layout": target.layout.summary(),
                "ruleCodes": target.rule_codes,
                "selfOnly": target.self_only,
                "paramsSchema": target.params.schema(),
                "windows": target.windows,
                "revertRequiresApproval": target.revert_requires_approval,
            });
            (key.clone(), value)
        })
        .collect();
    let windows: serde_json::Map<String, Value> = s
        .windows
        .iter()
        .map(|(name, window)| {
            let value = match &window.rule {
                Some(rule) => json!({
                    "kind": window.kind.as_str(),
                    "dtstart": rule.dtstart.format("%Y-%m-%dT%H:%M:%S").to_string(),
                    "duration": duration(rule.duration),
                    "rrule": rule.rrule,
                    "timezone": rule.timezone.name(),
                }),
                None => json!("invalid (never opens)"),
            };
            (name.to_owned(), value)
        })
        .collect();
    EffectiveConfig {
        server: json!({
            "listen": s.server.listen.to_string(),
            "requestTimeout": duration(s.server.request_timeout),
            "shutdownTimeout": duration(s.server.shutdown_timeout),
        }),
        database: json!({
            "url": without_credentials(&s.database.url),
            "passwordFile": path(s.database.password_file.as_deref()),
            "maxConnections": s.database.max_connections,
            "connectTimeout": duration(s.database.connect_timeout),
            "retryMaxInterval": duration(s.database.retry_max_interval),
            "galeraSyncWait": s.database.galera_sync_wait,
            "failoverHosts": s.database.failover_hosts.iter().map(|(host, port)| format!("{host}:{port}")).collect::<Vec<_>>(),
            "galeraRequireSynced": s.database.galera_require_synced,
        }),
        log: json!({
            "level": s.log.level,
            "format": match s.log.format { LogFormat::Human => "human", LogFormat::Json => "json" },
        }),
        access: json!({ "mode": access_mode, "window": window, "timezone": timezone }),
        rate_limit: json!(s.rate_limit),
        identity: json!({
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
                "discovery": s.identity.jwt.discovery,
                "jwksUrl": s.identity.jwt.jwks_url.as_deref().map(without_credentials),
                "usernameClaim": s.identity.jwt.username_claim,
                "usernamePrefix": s.identity.jwt.username_prefix,
                "groupsClaim": s.identity.jwt.groups_claim,
                "unverifiableFromTrustedProxy": match s.identity.jwt.unverifiable_from_trusted_proxy {
                    Unverifiable::Refuse => "refuse",
                    Unverifiable::Ignore => "ignore",
                },
            },
        }),
        authz: json!({
            "provider": match s.authz.provider { AuthzProvider::Static => "static", AuthzProvider::Http => "http" },
            "url": without_credentials(&s.authz.url),
            "timeout": duration(s.authz.timeout),
            "rules": s.authz.rules,
            "grants": s.authz.grants,
        }),
        targets: Value::Object(targets),
        windows: Value::Object(windows),
        scheduling: json!({ "maxAhead": duration(s.scheduling.max_ahead) }),
        idempotency: json!({
            "ttl": duration(s.idempotency.ttl),
            "cleanupInterval": duration(s.idempotency.cleanup_interval),
        }),
        executor: json!({
            "workers": s.executor.workers,
            "queueCapacity": s.executor.queue_capacity,
            "lease": duration(s.executor.lease),
            "pollInterval": duration(s.executor.poll_interval),
        }),
        workflow: json!({
            "flowOrder": s.flow_order.as_str(),
            "shortPolls": s.polling.short_polls,
            "shortPollInterval": duration(s.polling.short_interval),
            "longPolls": s.polling.long_polls,
            "longPollInterval": duration(s.polling.long_interval),
            "unreachableDeadline": duration(s.unreachable_deadline),
        }),
        gitlab: json!({
            "baseUrl": without_credentials(&s.gitlab.base_url),
            "project": s.gitlab.project,
            "targetBranch": s.gitlab.target_branch,
            "botToken": secret(s.gitlab.bot_token.as_ref()),
            "botTokenFile": secret_file(s, "gitlab.bot_token_file"),
            "reviewerTokens": s.gitlab.reviewer_tokens.iter().map(|_| REDACTED).collect::<Vec<_>>(),
            "reviewerTokenFiles": s.secret_files.get("gitlab.reviewer_token_files").iter().map(|file| path(Some(file))).collect::<Vec<_>>(),
            "timeout": duration(s.gitlab.timeout),
            "approveImpl": match s.gitlab.approve_impl { ApproveImpl::Standard => "standard", ApproveImpl::Checklist => "checklist" },
        }),
        approval: json!({
            "provider": match s.approval.provider { ApprovalProvider::Builtin => "builtin", ApprovalProvider::Http => "http" },
            "url": without_credentials(&s.approval.url),
            "callbackSecret": secret(s.approval.callback_secret.as_ref()),
            "callbackSecretFile": secret_file(s, "approval.callback_secret_file"),
            "retries": s.approval.retries,
            "timeout": duration(s.approval.timeout),
        }),
        deploy: json!({
            "callbackSecret": secret(s.deploy_callback_secret.as_ref()),
            "callbackSecretFile": secret_file(s, "deploy.callback_secret_file"),
        }),
        batch: json!({
            "enabled": s.batch.enabled,
            "interval": duration(s.batch.interval),
            "maxRequests": s.batch.max_requests,
            "freeze": s.batch.freeze,
            "timeout": duration(s.batch.timeout),
            "maxSplitDepth": s.batch.max_split_depth,
            "partitionByProject": s.batch.partition_by_project,
            "maxInFlight": s.batch.max_in_flight,
            "maxAttempts": s.batch.max_attempts,
        }),
        webhooks: json!({
            "silent": s.webhooks_silent,
            "allowPrivateTargets": s.webhooks.allow_private_targets,
            "retrySchedule": s.webhooks.retry_schedule.iter().map(|d| duration(*d)).collect::<Vec<_>>(),
            "requestTimeout": duration(s.webhooks.request_timeout),
            "pollInterval": duration(s.webhooks.poll_interval),
            "concurrency": s.webhooks.concurrency,
            "breakerFailures": s.webhooks.breaker_failures,
            "breakerOpenFor": duration(s.webhooks.breaker_open_for),
            "secretGrace": duration(s.webhooks.secret_grace),
            "secretKey": s.webhooks.sealing_keys.current.as_ref().map_or(Value::Null, |_| json!(REDACTED)),
            "secretKeyFile": secret_file(s, "webhooks.secret_key_file"),
            "previousSecretKeys": s.webhooks.sealing_keys.previous.iter().map(|_| REDACTED).collect::<Vec<_>>(),
            "previousSecretKeyFiles": s.secret_files.get("webhooks.previous_secret_key_files").iter().map(|file| path(Some(file))).collect::<Vec<_>>(),
        }),
        drift: json!({
            "interval": duration(s.drift.interval),
            "restoreRequiresApproval": s.drift.restore_requires_approval,
        }),
        reconcile: json!({
            "interval": duration(s.reconcile.interval),
            "minAge": duration(s.reconcile.min_age),
            "maxAge": duration(s.reconcile.max_age),
        }),
        retention: json!({
            "events": kept(s.retention.events),
            "webhookDeliveries": kept(s.retention.webhook_deliveries),
            "callbackReceipts": kept(s.retention.callback_receipts),
            "deployReports": kept(s.retention.deploy_reports),
            "operationHistory": kept(s.retention.operation_history),
            "auditLog": kept(s.retention.audit_log),
            "interval": duration(s.retention.interval),
        }),
        web: json!({ "demoIdentity": s.web.demo_identity }),
        tls: json!({ "caFile": path(s.tls.ca_file.as_deref()) }),
        telemetry: json!({
            "otlpEndpoint": s.telemetry.otlp_endpoint.as_ref().map(|url| without_credentials(url.as_str())),
            "serviceName": s.telemetry.service_name,
        }),
        static_keys: STATIC_SECTIONS.iter().chain(STATIC_KEYS).copied().collect(),
    }
}

/// A file's key as the effective configuration spells it (`max_requests`
/// → `maxRequests`).
#[cfg(test)]
pub(super) fn camel(key: &str) -> String {
    let mut words = key.split('_');
    let first = words.next().unwrap_or_default().to_owned();
    words.fold(first, |mut camel, word| {
        let mut letters = word.chars();
        if let Some(initial) = letters.next() {
            camel.extend(initial.to_uppercase());
            camel.push_str(letters.as_str());
        }
        camel
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The configuration view is built by hand: every key a configuration
    /// file may hold (the same list that refuses unknown keys) must be in it,
    /// so a key added to changegate cannot be missing from the view.
    #[test]
    fn every_configuration_key_is_shown() {
        let (settings, _) = Settings::from_table(&toml::Table::new(), None);
        let shown = serde_json::to_value(effective(&settings)).unwrap();
        let mut missing = Vec::new();
        for (section, keys) in super::super::schema::SCHEMA {
            let Some(section_view) = shown.get(camel(section)) else {
                missing.push((*section).to_owned());
                continue;
            };
            for key in keys.unwrap_or_default() {
                if section_view.get(camel(key)).is_none() {
                    missing.push(format!("{section}.{key}"));
                }
            }
        }
        assert!(
            missing.is_empty(),
            "not in the configuration view: {missing:?}"
        );
    }

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
