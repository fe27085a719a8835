//! The keys each section of the configuration file accepts: an unknown key
//! is reported, never silently ignored.

use super::{retention, scheduling, sections, telemetry, tls};

/// Keys each section accepts; `None` means any key (a map such as `rate_limit`).
pub(super) const SCHEMA: &[(&str, Option<&[&str]>)] = &[
    (
        "server",
        Some(&["listen", "request_timeout", "shutdown_timeout"]),
    ),
    (
        "database",
        Some(&[
            "url",
            "password_file",
            "max_connections",
            "connect_timeout",
            "retry_max_interval",
            "galera_sync_wait",
            "failover_hosts",
            "galera_require_synced",
        ]),
    ),
    ("log", Some(&["level", "format"])),
    ("access", Some(&["mode", "window", "timezone"])),
    ("rate_limit", None),
    ("authz", Some(sections::AUTHZ_KEYS)),
    ("identity", Some(sections::IDENTITY_KEYS)),
    ("targets", None),
    ("windows", None),
    ("scheduling", Some(scheduling::SCHEDULING_KEYS)),
    ("idempotency", Some(sections::IDEMPOTENCY_KEYS)),
    ("executor", Some(sections::EXECUTOR_KEYS)),
    (
        "workflow",
        Some(&[
            "flow_order",
            "short_polls",
            "short_poll_interval",
            "long_polls",
            "long_poll_interval",
            "unreachable_deadline",
        ]),
    ),
    (
        "gitlab",
        Some(&[
            "base_url",
            "project",
            "target_branch",
            "bot_token",
            "bot_token_file",
            "reviewer_tokens",
            "reviewer_token_files",
            "approve_impl",
            "timeout",
        ]),
    ),
    (
        "approval",
        Some(&[
            "provider",
            "url",
            "callback_secret",
            "callback_secret_file",
            "retries",
            "timeout",
        ]),
    ),
    ("deploy", Some(&["callback_secret", "callback_secret_file"])),
    (
        "batch",
        Some(&[
            "enabled",
            "interval",
            "max_requests",
            "freeze",
            "timeout",
            "max_split_depth",
            "partition_by_project",
            "max_in_flight",
            "max_attempts",
        ]),
    ),
    ("webhooks", Some(sections::WEBHOOK_KEYS)),
    ("reconcile", Some(sections::RECONCILE_KEYS)),
    ("drift", Some(sections::DRIFT_KEYS)),
    ("retention", Some(retention::RETENTION_KEYS)),
    ("web", Some(sections::WEB_KEYS)),
    ("tls", Some(tls::TLS_KEYS)),
    ("telemetry", Some(telemetry::TELEMETRY_KEYS)),
];
