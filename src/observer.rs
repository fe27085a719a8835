//! Business and API metrics behind one small trait, so that observability can
//! be swapped (tests inject a failing one) and can never change an outcome:
//! every call is made through [`observe`], which normalises labels, skips
//! samples with empty labels and swallows failures, panics included.

use std::panic::{AssertUnwindSafe, catch_unwind};

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
pub struct PrometheusObserver;

impl Observer for PrometheusObserver {
    fn api_request(&self, route: &str, method: &str, status: u16, seconds: f64) {
        let (Some(route), Some(method)) = (label(route), label(method)) else {
            return;
        };
        let status = status.to_string();
        metrics::histogram!("changegate_http_request_duration_seconds",
            "route" => route.clone(), "method" => method.clone(), "status" => status.clone())
        .record(seconds);
        metrics::counter!("changegate_http_requests_total",
            "route" => route, "method" => method, "status" => status)
        .increment(1);
    }

    fn activity_received(&self, activity: &str) {
        if let Some(activity) = label(activity) {
            metrics::counter!("changegate_activity_received_total", "activity" => activity)
                .increment(1);
        }
    }

    fn activity_succeeded(&self, activity: &str) {
        if let Some(activity) = label(activity) {
            metrics::counter!("changegate_activity_succeeded_total", "activity" => activity)
                .increment(1);
        }
    }

    fn rate_limited(&self, bucket: &str) {
        if let Some(bucket) = label(bucket) {
            metrics::counter!("changegate_rate_limited_total", "bucket" => bucket).increment(1);
        }
    }
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
