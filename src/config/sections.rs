//! Settings of the request edge: identity, authorisation, idempotency and
//! the worker pool.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::http::HeaderName;
use ipnet::IpNet;
use toml::Value;

use super::jwt::JwtSettings;
use super::reader::Reader;
use super::resolve;
use super::secrets::SecretFiles;
use super::webhook_keys::{self, SealingKeys};

/// `[identity]`: who is calling (SPEC §3, identity).
#[derive(Debug, Clone)]
pub struct IdentitySettings {
    /// `trusted_proxies`: CIDRs whose identity headers and `X-Forwarded-For`
    /// are believed. Default: loopback only.
    pub trusted_proxies: Vec<IpNet>,
    /// `user_header`, default `x-auth-request-user`.
    pub user_header: HeaderName,
    /// `email_header`, default `x-auth-request-email`.
    pub email_header: HeaderName,
    /// `employee_id_header`, default `x-auth-request-employee-id`.
    pub employee_id_header: HeaderName,
    /// `canonical_email_domain`: emails in this domain resolve to their local part.
    pub canonical_email_domain: Option<String>,
    /// `[identity.aliases]`: email or employee id → canonical identity.
    pub aliases: BTreeMap<String, String>,
    /// `[identity.jwt]`: bearer tokens.
    pub jwt: JwtSettings,
}

/// `[authz]`: who may do what (SPEC §3, authz).
#[derive(Debug, Clone)]
pub struct AuthzSettings {
    /// `provider`: `static` (default) or `http`.
    pub provider: AuthzProvider,
    /// `url`: the permission service for the `http` provider.
    pub url: String,
    /// `timeout`, default `2s`: a slower permission service means "deny".
    pub timeout: Duration,
    /// `[authz.rules]`: route name → rule codes, any of which grants access.
    /// Dynamic; a route with no (valid) entry is denied.
    pub rules: BTreeMap<String, Option<Vec<String>>>,
    /// `[authz.grants]` (static provider): rule code → identities; `"*"` is
    /// every authenticated identity. Dynamic.
    pub grants: BTreeMap<String, Vec<String>>,
}

/// Where permissions come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthzProvider {
    /// `[authz.grants]` in this file.
    Static,
    /// An HTTP permission service.
    Http,
}

/// `[idempotency]`
#[derive(Debug, Clone)]
pub struct IdempotencySettings {
    /// `ttl`, default `24h`: how long a key answers with the original result.
    pub ttl: Duration,
    /// `cleanup_interval`, default `10m`: how often expired keys are deleted.
    pub cleanup_interval: Duration,
}

/// `[executor]`: the bounded pool that runs the long steps (static).
#[derive(Debug, Clone)]
pub struct ExecutorSettings {
    /// `workers`, default 4.
    pub workers: u32,
    /// `queue_capacity`, default 256: beyond it, submissions fail visibly as busy.
    pub queue_capacity: u32,
    /// `lease`, default `60s`: how long a step may go without its lease being
    /// renewed before another instance takes over (a crashed owner's steps
    /// resume after at most this).
    pub lease: Duration,
    /// `poll_interval`, default `1s`: how often each instance looks for due
    /// operations (waits that ran out, steps whose owner died).
    pub poll_interval: Duration,
}

/// `[workflow]` polling of GitLab (dynamic): waits on a pipeline or on an
/// MR becoming mergeable poll `short_polls` times every `short_poll_interval`
/// (most pipelines are quick), then `long_polls` times every
/// `long_poll_interval`; then the wait's deadline has passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollSchedule {
    /// `short_polls`, default 10.
    pub short_polls: u32,
    /// `short_poll_interval`, default `300ms`.
    pub short_interval: Duration,
    /// `long_polls`, default 20.
    pub long_polls: u32,
    /// `long_poll_interval`, default `3s`.
    pub long_interval: Duration,
}

impl PollSchedule {
    /// The pause after the `polls`-th poll.
    pub fn pause_after(&self, polls: i32) -> Duration {
        if polls < i32::try_from(self.short_polls).unwrap_or(i32::MAX) {
            self.short_interval
        } else {
            self.long_interval
        }
    }

    /// Whether `polls` polls reach the deadline.
    pub fn deadline_reached(&self, polls: i32) -> bool {
        i64::from(polls) >= i64::from(self.short_polls) + i64::from(self.long_polls)
    }
}

pub(super) fn poll_schedule(r: &mut Reader<'_>) -> PollSchedule {
    PollSchedule {
        short_polls: r.count_at(&["workflow", "short_polls"], 0..=1000, 10),
        short_interval: r.static_duration(
            "workflow",
            "short_poll_interval",
            Duration::from_millis(300),
        ),
        long_polls: r.count_at(&["workflow", "long_polls"], 0..=10_000, 20),
        long_interval: r.static_duration("workflow", "long_poll_interval", Duration::from_secs(3)),
    }
}

/// `[web]`: the single-page app.
#[derive(Debug, Clone, Default)]
pub struct WebSettings {
    /// `demo_identity`, default false: the page offers a user switcher and
    /// sends the chosen name as the identity header. Only for the demo, where
    /// the browser is on loopback and so a trusted proxy.
    pub demo_identity: bool,
}

/// `[drift]`: comparing the target branch with what changegate believes
/// (SPEC §13).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriftSettings {
    /// `interval`, dynamic, default `10m`; `0` turns the job off.
    pub interval: Duration,
    /// `restore_requires_approval`, dynamic, default true: an operator's
    /// restore goes through the usual approval.
    pub restore_requires_approval: bool,
}

pub(super) const DRIFT_KEYS: &[&str] = &["interval", "restore_requires_approval"];

pub(super) fn drift(r: &mut Reader<'_>) -> DriftSettings {
    DriftSettings {
        interval: r.static_duration("drift", "interval", Duration::from_secs(600)),
        restore_requires_approval: r.bool_at(&["drift", "restore_requires_approval"], true),
    }
}

/// `[reconcile]`: closing out lost deploy callbacks (SPEC §8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReconcileSettings {
    /// `interval`, static, default `1m`.
    pub interval: Duration,
    /// `min_age`, default `10m`: a younger MERGED binding may still get its own callback.
    pub min_age: Duration,
    /// `max_age`, default `24h`: older ones are left to operators.
    pub max_age: Duration,
}

pub(super) const RECONCILE_KEYS: &[&str] = &["interval", "min_age", "max_age"];

pub(super) fn reconcile(r: &mut Reader<'_>) -> ReconcileSettings {
    ReconcileSettings {
        interval: r.static_duration("reconcile", "interval", Duration::from_secs(60)),
        min_age: r.static_duration("reconcile", "min_age", Duration::from_secs(600)),
        max_age: r.static_duration("reconcile", "max_age", Duration::from_secs(86_400)),
    }
}

/// Keys of the sections defined here.
pub(super) const IDENTITY_KEYS: &[&str] = &[
    "trusted_proxies",
    "user_header",
    "email_header",
    "employee_id_header",
    "canonical_email_domain",
    "aliases",
    "jwt",
];
pub(super) const AUTHZ_KEYS: &[&str] = &["provider", "url", "timeout", "rules", "grants"];
pub(super) const IDEMPOTENCY_KEYS: &[&str] = &["ttl", "cleanup_interval"];
/// `identity.jwt.leeway`: a duration of at most a minute (zero allowed).
pub(super) const EXECUTOR_KEYS: &[&str] = &["workers", "queue_capacity", "lease", "poll_interval"];
pub(super) const WEB_KEYS: &[&str] = &["demo_identity"];
fn optional(text: String) -> Option<String> {
    (!text.is_empty()).then_some(text)
}

pub(super) fn identity(r: &mut Reader<'_>, files: &mut SecretFiles) -> IdentitySettings {
    let trusted_proxies = match r.at(&["identity", "trusted_proxies"]) {
        None => vec![
            "127.0.0.0/8".parse().expect("valid CIDR"),
            "::1/128".parse().expect("valid CIDR"),
        ],
        Some(_) => r
            .string_list_at(&["identity", "trusted_proxies"])
            .into_iter()
            .filter_map(|text| {
                let parsed = text
                    .parse::<IpNet>()
                    .or_else(|_| text.parse::<std::net::IpAddr>().map(IpNet::from));
                if parsed.is_err() {
                    r.error(
                        "identity.trusted_proxies",
                        format!("{text:?} is not an address or CIDR"),
                    );
                }
                parsed.ok()
            })
            .collect(),
    };
    let mut aliases = BTreeMap::new();
    if let Some(value) = r.at(&["identity", "aliases"]) {
        r.check_keys("identity.aliases", value, None);
        for (alias, target) in value.as_table().into_iter().flatten() {
            match target.as_str().map(str::trim).filter(|t| !t.is_empty()) {
                Some(canonical) => {
                    aliases.insert(alias.trim().to_lowercase(), canonical.to_owned());
                }
                None => r.error(
                    &format!("identity.aliases.{alias}"),
                    "must be a canonical identity string",
                ),
            }
        }
    }
    let jwt = super::jwt::jwt(r, files);
    IdentitySettings {
        trusted_proxies,
        user_header: header_name(r, "user_header", "x-auth-request-user"),
        email_header: header_name(r, "email_header", "x-auth-request-email"),
        employee_id_header: header_name(r, "employee_id_header", "x-auth-request-employee-id"),
        canonical_email_domain: optional(
            r.string_at(&["identity", "canonical_email_domain"], "")
                .to_lowercase(),
        ),
        aliases,
        jwt,
    }
}

/// An identity header's name, parsed once here rather than on every request.
fn header_name(r: &mut Reader<'_>, key: &str, default: &'static str) -> HeaderName {
    let text = r.string_at(&["identity", key], default);
    HeaderName::try_from(text.as_str()).unwrap_or_else(|_| {
        r.error(
            &format!("identity.{key}"),
            format!("{text:?} is not an HTTP header name"),
        );
        HeaderName::from_static(default)
    })
}

pub(super) fn authz(r: &mut Reader<'_>) -> AuthzSettings {
    let provider = match r.string_at(&["authz", "provider"], "static").as_str() {
        "static" => AuthzProvider::Static,
        "http" => AuthzProvider::Http,
        other => {
            r.error("authz.provider", format!("{other:?} is not static or http"));
            AuthzProvider::Static
        }
    };
    let url = r.string_at(&["authz", "url"], "");
    if provider == AuthzProvider::Http && url.is_empty() {
        r.error("authz.url", "required when authz.provider = \"http\"");
    }
    let mut rules = BTreeMap::new();
    match r.at(&["authz", "rules"]) {
        None => {}
        Some(Value::Table(table)) => {
            for (route, raw) in table {
                let value = r.resolved(
                    &format!("authz.rules.{route}"),
                    resolve::authz_rule(Some(raw)),
                );
                rules.insert(route.clone(), value);
            }
        }
        Some(_) => r.error("authz.rules", "must be a table of route = [rule codes]"),
    }
    let mut grants = BTreeMap::new();
    match r.at(&["authz", "grants"]) {
        None => {}
        Some(Value::Table(table)) => {
            for code in table.keys() {
                let holders = r.string_list_at(&["authz", "grants", code]);
                grants.insert(code.clone(), holders);
            }
        }
        Some(_) => r.error(
            "authz.grants",
            "must be a table of rule code = [identities]",
        ),
    }
    AuthzSettings {
        provider,
        url,
        timeout: r.static_duration_at(&["authz", "timeout"], Duration::from_secs(2)),
        rules,
        grants,
    }
}

pub(super) fn idempotency(r: &mut Reader<'_>) -> IdempotencySettings {
    IdempotencySettings {
        ttl: r.static_duration_at(&["idempotency", "ttl"], Duration::from_secs(24 * 3600)),
        cleanup_interval: r.static_duration_at(
            &["idempotency", "cleanup_interval"],
            Duration::from_secs(600),
        ),
    }
}

pub(super) fn executor(r: &mut Reader<'_>) -> ExecutorSettings {
    ExecutorSettings {
        workers: r.count_at(&["executor", "workers"], 1..=256, 4),
        queue_capacity: r.count_at(&["executor", "queue_capacity"], 1..=100_000, 256),
        lease: r.static_duration("executor", "lease", Duration::from_secs(60)),
        poll_interval: r.static_duration("executor", "poll_interval", Duration::from_secs(1)),
    }
}

pub(super) fn web(r: &mut Reader<'_>) -> WebSettings {
    WebSettings {
        demo_identity: r.bool_at(&["web", "demo_identity"], false),
    }
}

/// `[webhooks]`: outbound deliveries (SPEC §9). `silent` is read separately
/// (dynamic, [`super::Settings::webhooks_silent`]); these are static.
#[derive(Debug, Clone)]
pub struct WebhookSettings {
    /// `allow_private_targets`, default false: endpoints on loopback,
    /// private or link-local addresses are refused unless true.
    pub allow_private_targets: bool,
    /// `retry_schedule`: the pause before each attempt, the first usually
    /// zero; its length is the number of attempts. Default
    /// `["0s", "5s", "5m", "30m", "2h", "5h", "10h", "10h"]`.
    pub retry_schedule: Vec<Duration>,
    /// `request_timeout`, default `30s`: a slower answer is a failed attempt.
    pub request_timeout: Duration,
    /// `poll_interval`, default `1s`: how often each instance looks for due deliveries.
    pub poll_interval: Duration,
    /// `concurrency`, default 16: deliveries one instance sends at once.
    pub concurrency: u32,
    /// `breaker_failures`, default 5: consecutive failures that open an endpoint's breaker.
    pub breaker_failures: u32,
    /// `breaker_open_for`, default `1m`: how long an open breaker holds deliveries back.
    pub breaker_open_for: Duration,
    /// `secret_grace`, default `24h`: after a rotation, the old secret signs too for this long.
    pub secret_grace: Duration,
    /// `secret_key[_file]` and `previous_secret_keys` (or
    /// `previous_secret_key_files`): the keys sealing signing secrets at rest.
    pub sealing_keys: SealingKeys,
}

pub(super) const WEBHOOK_KEYS: &[&str] = &[
    "silent",
    "allow_private_targets",
    "retry_schedule",
    "request_timeout",
    "poll_interval",
    "concurrency",
    "breaker_failures",
    "breaker_open_for",
    "secret_grace",
    "secret_key",
    "secret_key_file",
    "previous_secret_keys",
    "previous_secret_key_files",
];

const DEFAULT_RETRY_SCHEDULE: &[&str] = &["0s", "5s", "5m", "30m", "2h", "5h", "10h", "10h"];

pub(super) fn webhooks(r: &mut Reader<'_>, files: &mut SecretFiles) -> WebhookSettings {
    let schedule_key = ["webhooks", "retry_schedule"];
    let retry_schedule = if r.at(&schedule_key).is_none() {
        DEFAULT_RETRY_SCHEDULE
            .iter()
            .filter_map(|text| humantime::parse_duration(text).ok())
            .collect()
    } else {
        let texts = r.string_list_at(&schedule_key);
        let parsed: Option<Vec<Duration>> = texts
            .iter()
            .map(|text| humantime::parse_duration(text).ok())
            .collect();
        match parsed {
            Some(list) if !list.is_empty() && list.len() <= 50 => list,
            _ => {
                r.error(
                    "webhooks.retry_schedule",
                    "must be a list of 1 to 50 durations like [\"0s\", \"5s\", \"5m\"]",
                );
                Vec::from([Duration::ZERO])
            }
        }
    };
    WebhookSettings {
        allow_private_targets: r.bool_at(&["webhooks", "allow_private_targets"], false),
        retry_schedule,
        request_timeout: r.static_duration("webhooks", "request_timeout", Duration::from_secs(30)),
        poll_interval: r.static_duration("webhooks", "poll_interval", Duration::from_secs(1)),
        concurrency: r.count_at(&["webhooks", "concurrency"], 1..=256, 16),
        breaker_failures: r.count_at(&["webhooks", "breaker_failures"], 1..=1000, 5),
        breaker_open_for: r.static_duration(
            "webhooks",
            "breaker_open_for",
            Duration::from_secs(60),
        ),
        secret_grace: r.static_duration("webhooks", "secret_grace", Duration::from_secs(86_400)),
        sealing_keys: webhook_keys::read(r, files),
    }
}
