//! `[retention]`: how long finished history is kept before the retention
//! job deletes it (dynamic). `0` keeps a table's rows for ever; a value that
//! is not a duration keeps them too (with a warning): a mistake never
//! deletes more than was configured.

use std::time::Duration;

use toml::Value;

use super::reader::Reader;

const DAY: u64 = 86_400;

/// Per table, how old a row must be to be deleted; `None` keeps it for ever.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionSettings {
    /// `events`, default `30d`: outbox events already relayed.
    pub events: Option<Duration>,
    /// `webhook_deliveries`, default `30d`: finished deliveries.
    pub webhook_deliveries: Option<Duration>,
    /// `callback_receipts`, default `30d`: the dedupe records of callbacks.
    pub callback_receipts: Option<Duration>,
    /// `deploy_reports`, default `90d`; each project's watermark stays.
    pub deploy_reports: Option<Duration>,
    /// `operation_history`, default `400d`: steps of operations no binding
    /// points at any more.
    pub operation_history: Option<Duration>,
    /// `audit_log`, default `400d`.
    pub audit_log: Option<Duration>,
    /// `interval` (static), default `1h`: how often the job runs.
    pub interval: Duration,
}

pub(super) const RETENTION_KEYS: &[&str] = &[
    "events",
    "webhook_deliveries",
    "callback_receipts",
    "deploy_reports",
    "operation_history",
    "audit_log",
    "interval",
];

pub(super) fn retention(r: &mut Reader<'_>) -> RetentionSettings {
    let mut kept = |key: &str, default_days: u64| {
        let full_key = format!("retention.{key}");
        match r.get("retention", key) {
            None => Some(Duration::from_secs(default_days * DAY)),
            Some(Value::Integer(0)) => None,
            Some(Value::String(text)) if text.trim() == "0" => None,
            Some(Value::String(text)) => match humantime::parse_duration(text.trim()) {
                Ok(age) if !age.is_zero() => Some(age),
                _ => {
                    r.warning(
                        &full_key,
                        format!(
                            "{text:?} is not a duration like \"30d\" (or 0); nothing is deleted"
                        ),
                    );
                    None
                }
            },
            Some(other) => {
                let shown = other.to_string();
                r.warning(
                    &full_key,
                    format!("{shown} is not a duration like \"30d\" (or 0); nothing is deleted"),
                );
                None
            }
        }
    };
    RetentionSettings {
        events: kept("events", 30),
        webhook_deliveries: kept("webhook_deliveries", 30),
        callback_receipts: kept("callback_receipts", 30),
        deploy_reports: kept("deploy_reports", 90),
        operation_history: kept("operation_history", 400),
        audit_log: kept("audit_log", 400),
        interval: r.static_duration("retention", "interval", Duration::from_secs(3600)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Settings, Severity, source};

    fn load(text: &str) -> (RetentionSettings, Vec<(Severity, String)>) {
        let (settings, problems) = Settings::from_table(&source::parse(text).unwrap(), None);
        let problems = problems.into_iter().map(|p| (p.severity, p.key)).collect();
        (settings.retention, problems)
    }

    #[test]
    fn defaults_keep_a_month_of_traffic_and_a_year_of_history() {
        let (kept, problems) = load("");
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(kept.events, Some(Duration::from_secs(30 * DAY)));
        assert_eq!(kept.deploy_reports, Some(Duration::from_secs(90 * DAY)));
        assert_eq!(kept.audit_log, Some(Duration::from_secs(400 * DAY)));
        assert_eq!(kept.interval, Duration::from_secs(3600));
    }

    #[test]
    fn zero_keeps_for_ever_and_a_mistake_deletes_nothing() {
        let (kept, problems) = load(
            "[retention]\naudit_log = 0\nevents = \"0\"\nwebhook_deliveries = \"a month\"\n\
             callback_receipts = -3\ndeploy_reports = \"12h\"\n",
        );
        assert_eq!(kept.audit_log, None);
        assert_eq!(kept.events, None);
        assert_eq!(kept.webhook_deliveries, None);
        assert_eq!(kept.callback_receipts, None);
        assert_eq!(kept.deploy_reports, Some(Duration::from_secs(12 * 3600)));
        assert_eq!(
            problems,
            [
                (Severity::Warning, "retention.webhook_deliveries".to_owned()),
                (Severity::Warning, "retention.callback_receipts".to_owned()),
            ]
        );
    }
}
