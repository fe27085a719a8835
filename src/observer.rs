//! Business and API metrics behind one small trait, so that observability can
//! be swapped (tests inject a failing one) and can never change an outcome:
//! every call is made through [`observe`], which normalises labels, skips
//! samples with empty labels and swallows failures, panics included.

use std::panic::{AssertUnwindSafe, catch_unwind};

use dashmap::DashMap;
use metrics::{Counter, Histogram};

/// Longest label value kept; longer ones are cut (bounded series size).
pub const MAX_LABEL_LEN: usize = 128;

/// Where metric samples go.
pub trait Observer: Send + Sync + 'static {
    /// One API request finished: route template, method, status, duration.
    fn api_request(&self, route: &str, method: &str, status: u16, seconds: f64);
    /// A business activity started (counted on arrival).
    fn activity_received(&self, activity: &str);
    /// A business activity succeeded (2xx only).
    fn activity_succeeded(&self, activity: &str);
    /// A request was refused by a rate limit; never counted as business.
    fn rate_limited(&self, bucket: &str);
}

/// Label value made safe: trimmed, control characters replaced, cut at
/// [`MAX_LABEL_LEN`] characters; `None` when nothing is left.
pub fn label(value: &str) -> Option<String> {
    let cleaned: String = value
        .trim()
        .chars()
        .map(|c| if c.is_control() { '_' } else { c })
        .take(MAX_LABEL_LEN)
        .collect();
    (!cleaned.is_empty()).then_some(cleaned)
}

/// Runs one observation; a failure is logged and otherwise ignored.
pub fn observe(what: &'static str, sample: impl FnOnce()) {
    if catch_unwind(AssertUnwindSafe(sample)).is_err() {
        tracing::warn!(what, "metric recording failed; the request is unaffected");
    }
}

/// Records through the `metrics` facade (exported at `/metrics`).
///
/// Series handles are kept per label set: looking a series up through the
/// facade cleans, allocates and hashes its labels on every sample, which was
/// most of the per-request cost of the metric layers; a kept handle records
/// with one atomic operation. Label sets are bounded (route templates,
/// methods, statuses, the activity allow-list), so the cache is too.
#[derive(Default)]
pub struct PrometheusObserver {
    api: DashMap<Box<str>, Vec<ApiSeries>, foldhash::fast::RandomState>,
    activities: DashMap<Box<str>, ActivitySeries, foldhash::fast::RandomState>,
}

struct ApiSeries {
    method: Box<str>,
    status: u16,
    duration: Histogram,
    requests: Counter,
}

struct ActivitySeries {
    received: Counter,
    succeeded: Counter,
}

impl PrometheusObserver {
    fn api_series(route: &str, method: &str, status: u16) -> Option<ApiSeries> {
        let (Some(route_label), Some(method_label)) = (label(route), label(method)) else {
            return None;
        };
        let status_label = status.to_string();
        Some(ApiSeries {
            method: method.into(),
            status,
            duration: metrics::histogram!("changegate_http_request_duration_seconds",
                "route" => route_label.clone(), "method" => method_label.clone(), "status" => status_label.clone()),
            requests: metrics::counter!("changegate_http_requests_total",
                "route" => route_label, "method" => method_label, "status" => status_label),
        })
    }

    fn activity(&self, activity: &str, record: impl Fn(&ActivitySeries)) {
        if let Some(series) = self.activities.get(activity) {
            return record(&series);
        }
        let Some(activity_label) = label(activity) else {
            return;
        };
        let series = ActivitySeries {
            received: metrics::counter!("changegate_activity_received_total", "activity" => activity_label.clone()),
            succeeded: metrics::counter!("changegate_activity_succeeded_total", "activity" => activity_label),
        };
        record(&series);
        self.activities.insert(activity.into(), series);
    }
}

impl Observer for PrometheusObserver {
    fn api_request(&self, route: &str, method: &str, status: u16, seconds: f64) {
        let known = |series: &ApiSeries| series.status == status && *series.method == *method;
        if let Some(routes) = self.api.get(route)
            && let Some(series) = routes.iter().find(|series| known(series))
        {
            series.duration.record(seconds);
            series.requests.increment(1);
            return;
        }
        let Some(series) = Self::api_series(route, method, status) else {
            return;
        };
        series.duration.record(seconds);
        series.requests.increment(1);
        let mut routes = self.api.entry(route.into()).or_default();
        if !routes.iter().any(known) {
            routes.push(series);
        }
    }

    fn activity_received(&self, activity: &str) {
        self.activity(activity, |series| series.received.increment(1));
    }

    fn activity_succeeded(&self, activity: &str) {
        self.activity(activity, |series| series.succeeded.increment(1));
    }

    fn rate_limited(&self, bucket: &str) {
        if let Some(bucket) = label(bucket) {
            metrics::counter!("changegate_rate_limited_total", "bucket" => bucket).increment(1);
        }
    }
}

/// Describes the metrics [`PrometheusObserver`] records.
pub fn describe_metrics() {
    metrics::describe_histogram!(
        "changegate_http_request_duration_seconds",
        "API request latency, by route template, method and status."
    );
    metrics::describe_counter!(
        "changegate_http_requests_total",
        "API requests answered, by route template, method and status."
    );
    metrics::describe_counter!(
        "changegate_activity_received_total",
        "Business activities (apply, close, ...) received, by activity."
    );
    metrics::describe_counter!(
        "changegate_activity_succeeded_total",
        "Business activities answered 2xx, by activity."
    );
    metrics::describe_counter!(
        "changegate_rate_limited_total",
        "Requests refused by a rate limit (429), by bucket."
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_cleaned_and_bounded() {
        assert_eq!(label("  /api/v1/x "), Some("/api/v1/x".to_owned()));
        assert_eq!(label("a\nb\u{0}"), Some("a_b_".to_owned()));
        assert_eq!(
            label(&"é".repeat(300)).map(|l| l.chars().count()),
            Some(MAX_LABEL_LEN)
        );
        assert_eq!(label("   "), None);
    }

    #[test]
    fn a_panicking_observation_is_contained() {
        observe("test", || panic!("broken recorder"));
    }
}
