//! Adapters for the systems changegate talks to, each with timeouts on every
//! call and retries where a retry is safe.

pub mod approval;
pub mod gitlab;
pub mod health;
pub mod http;

/// Describes the outbound call counters ([`http::SystemClient`] counts
/// every call, [`health::Dependencies`] the failures by cause).
pub fn describe_metrics() {
    metrics::describe_counter!(
        "changegate_outbound_requests_total",
        "Calls to other systems, by system and result: ok, client_error (4xx), server_error (5xx), timeout, unreachable (no connection), failed (broken after sending)."
    );
    metrics::describe_counter!(
        "changegate_outbound_failures_total",
        "Calls to other systems that could not connect or that the system refused changegate itself, by system and reason."
    );
}
