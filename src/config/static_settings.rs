//! The static settings: read once at start-up (the listen address, the
//! database pool, the executor, the jobs' intervals, the webhook worker),
//! so a new value in the file applies only after a restart. A reload keeps
//! their running values in the snapshot it swaps in, so the configuration
//! the service shows (`GET /admin/v1/config`) is the one in effect, and
//! code reading the current snapshot never sees a value start-up did not
//! apply.

use super::Settings;

/// Sections static as a whole.
pub const STATIC_SECTIONS: &[&str] = &["server", "database", "tls", "telemetry"];

/// Declares the static keys of otherwise dynamic sections, each with the
/// field holding it, so that the list the service shows and the values a
/// reload keeps cannot drift apart.
macro_rules! static_keys {
    ($( [$($key:literal),+ $(,)?] => $section:ident . $field:ident ),+ $(,)?) => {
        /// Static keys of sections that are otherwise dynamic.
        pub const STATIC_KEYS: &[&str] = &[$($($key),+),+];

        /// Puts the running value of every static key back into `next`.
        fn keep_static_keys(next: &mut Settings, running: &Settings, changed: &mut Vec<&'static str>) {
            $(
                if next.$section.$field != running.$section.$field {
                    changed.extend([$($key),+]);
                    next.$section.$field = running.$section.$field.clone();
                }
            )+
        }
    };
}

static_keys! {
    ["log.format"] => log.format,
    ["idempotency.cleanup_interval"] => idempotency.cleanup_interval,
    ["executor.workers"] => executor.workers,
    ["executor.queue_capacity"] => executor.queue_capacity,
    ["executor.lease"] => executor.lease,
    ["executor.poll_interval"] => executor.poll_interval,
    ["gitlab.timeout"] => gitlab.timeout,
    ["approval.timeout"] => approval.timeout,
    ["batch.max_split_depth"] => batch.max_split_depth,
    ["reconcile.interval"] => reconcile.interval,
    ["reconcile.min_age"] => reconcile.min_age,
    ["reconcile.max_age"] => reconcile.max_age,
    ["retention.interval"] => retention.interval,
    ["webhooks.allow_private_targets"] => webhooks.allow_private_targets,
    ["webhooks.retry_schedule"] => webhooks.retry_schedule,
    ["webhooks.request_timeout"] => webhooks.request_timeout,
    ["webhooks.poll_interval"] => webhooks.poll_interval,
    ["webhooks.concurrency"] => webhooks.concurrency,
    ["webhooks.breaker_failures"] => webhooks.breaker_failures,
    ["webhooks.breaker_open_for"] => webhooks.breaker_open_for,
    ["webhooks.secret_grace"] => webhooks.secret_grace,
    [
        "webhooks.secret_key",
        "webhooks.secret_key_file",
        "webhooks.previous_secret_keys",
        "webhooks.previous_secret_key_files",
    ] => webhooks.sealing_keys,
}

/// Gives `next` the running value of every static setting; answers the
/// keys (or whole sections) whose value `next` had changed.
pub fn keep_static(next: &mut Settings, running: &Settings) -> Vec<&'static str> {
    let mut changed = Vec::new();
    if next.server != running.server {
        changed.push("server");
        next.server = running.server.clone();
    }
    if next.database != running.database {
        changed.push("database");
        next.database = running.database.clone();
    }
    if next.tls != running.tls {
        changed.push("tls");
        next.tls = running.tls.clone();
    }
    if next.telemetry != running.telemetry {
        changed.push("telemetry");
        next.telemetry = running.telemetry.clone();
    }
    keep_static_keys(next, running, &mut changed);
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::effective::{camel, effective};
    use crate::config::source;

    fn settings(text: &str) -> Settings {
        let (settings, problems) = Settings::from_table(&source::parse(text).unwrap(), None);
        assert!(problems.is_empty(), "{problems:?}");
        settings
    }

    /// Every static setting with a value other than its default.
    const EVERY_STATIC_CHANGED: &str = r#"
        [server]
        listen = "127.0.0.1:9999"
        [database]
        max_connections = 3
        [log]
        format = "json"
        [idempotency]
        cleanup_interval = "7m"
        [executor]
        workers = 2
        queue_capacity = 9
        lease = "9s"
        poll_interval = "2s"
        [gitlab]
        timeout = "9s"
        [approval]
        timeout = "9s"
        [batch]
        max_split_depth = 2
        [reconcile]
        interval = "2m"
        min_age = "20m"
        max_age = "2h"
        [retention]
        interval = "2h"
        [webhooks]
        allow_private_targets = true
        retry_schedule = ["1s"]
        request_timeout = "9s"
        poll_interval = "9s"
        concurrency = 3
        breaker_failures = 9
        breaker_open_for = "9m"
        secret_grace = "9h"
        secret_key = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
        [telemetry]
        service_name = "other"
    "#;

    /// The value of `key` (a section, or `section.key` in the file's
    /// spelling) in the effective configuration.
    fn shown(settings: &Settings, key: &str) -> serde_json::Value {
        let config = serde_json::to_value(effective(settings)).unwrap();
        key.split('.')
            .fold(config, |value, part| value[camel(part)].clone())
    }

    #[test]
    fn a_reload_keeps_every_static_setting_and_names_each_one_changed() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        let certificate = rcgen::generate_simple_self_signed(vec!["ca".to_owned()]).unwrap();
        std::fs::write(&ca, certificate.cert.pem()).unwrap();
        let running = settings("");
        let mut next = settings(&format!(
            "{EVERY_STATIC_CHANGED}\n[tls]\nca_file = {:?}\n",
            ca.display().to_string()
        ));
        let changed = keep_static(&mut next, &running);

        // A changed sealing key names the four keys that can spell it.
        let mut expected: Vec<&str> = STATIC_SECTIONS.iter().chain(STATIC_KEYS).copied().collect();
        expected.sort_unstable();
        let mut named = changed.clone();
        named.sort_unstable();
        assert_eq!(named, expected, "every static setting changed is named");
        for key in STATIC_SECTIONS.iter().chain(STATIC_KEYS) {
            assert_eq!(shown(&next, key), shown(&running, key), "{key} kept");
        }
    }

    #[test]
    fn a_reload_changes_the_dynamic_settings() {
        let running = settings("");
        let mut next = settings(
            "[batch]\nmax_requests = 7\n[workflow]\nshort_polls = 3\n[log]\nlevel = \"debug\"\n",
        );
        assert_eq!(keep_static(&mut next, &running), Vec::<&str>::new());
        assert_eq!(next.batch.max_requests, 7);
        assert_eq!(next.polling.short_polls, 3);
        assert_eq!(next.log.level, "debug");
    }
}
