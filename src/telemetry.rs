//! Logging (with a level that changes at runtime) and the Prometheus recorder.

use std::io::IsTerminal;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry, fmt, reload};

use crate::config::{LevelSetter, LogFormat};
use crate::http::request_id;
use crate::traces::Traces;

/// Installs the global logger with `level` (a level or filter such as
/// `info,sqlx=warn`) and returns the setter that changes it at runtime.
/// With `traces`, spans also go to OpenTelemetry, chosen by their own filter
/// so that the log level neither hides them nor is widened by them.
pub fn init_logging(
    level: &str,
    format: LogFormat,
    traces: Option<&Traces>,
) -> anyhow::Result<LevelSetter> {
    let filter = EnvFilter::try_new(level)?;
    let (filter, handle) = reload::Layer::new(filter);
    match traces {
        // The level filters everything: a span or line below it costs nothing.
        None => Registry::default()
            .with(filter)
            .with(output(format))
            .try_init()?,
        Some(traces) => Registry::default()
            .with(output(format).with_filter(filter))
            .with(traces.layer())
            .try_init()?,
    }
    Ok(Arc::new(move |level: &str| {
        let filter = EnvFilter::try_new(level).map_err(|err| err.to_string())?;
        handle.reload(filter).map_err(|err| err.to_string())
    }))
}

/// Log lines on stdout, for people or as JSON.
fn output<S>(format: LogFormat) -> Box<dyn Layer<S> + Send + Sync>
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    match format {
        LogFormat::Human => fmt::layer()
            .with_ansi(std::io::stdout().is_terminal())
            .with_writer(std::io::stdout)
            .map_event_format(|inner| WithRequestId { inner, json: false })
            .boxed(),
        LogFormat::Json => fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_writer(std::io::stdout)
            .map_event_format(|inner| WithRequestId { inner, json: true })
            .boxed(),
    }
}

/// Adds the id of the request being handled to every line logged while
/// handling it (`request_id=…` at the end of a human line, a `request_id`
/// member of a JSON line).
///
/// The id is read from the request's task-local only when a line is written.
/// A span per request would carry it too, but opening one costs about a
/// microsecond on every request whether or not anything is logged, and
/// nearly all requests log nothing; the request span is therefore at `debug`.
pub struct WithRequestId<F> {
    inner: F,
    json: bool,
}

impl<S, N, F> FormatEvent<S, N> for WithRequestId<F>
where
    S: Subscriber + for<'lookup> LookupSpan<'lookup>,
    N: for<'writer> FormatFields<'writer> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        context: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let Some(id) = request_id::current() else {
            return self.inner.format_event(context, writer, event);
        };
        let mut line = String::new();
        self.inner
            .format_event(context, Writer::new(&mut line), event)?;
        let line = line.strip_suffix('\n').unwrap_or(&line);
        // Request ids are letters, digits and `-_.:` only (request_id.rs),
        // so they need no escaping in either format.
        match line.strip_prefix('{') {
            Some(members) if self.json => writeln!(writer, "{{\"request_id\":\"{id}\",{members}"),
            _ => writeln!(writer, "{line} request_id={id}"),
        }
    }
}

/// The process-wide Prometheus recorder. The `metrics` facade has one global
/// recorder per process, so every application instance in the process (tests
/// start several) shares it.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Suffix("_seconds".to_owned()),
                    LATENCY_BUCKETS_SECONDS,
                )
                .and_then(|builder| {
                    builder.set_buckets_for_metric(
                        Matcher::Full("changegate_submission_group_size".to_owned()),
                        GROUP_SIZE_BUCKETS,
                    )
                })
                .and_then(|builder| {
                    builder.set_buckets_for_metric(
                        Matcher::Full("changegate_step_duration_seconds".to_owned()),
                        STEP_BUCKETS_SECONDS,
                    )
                })
                .and_then(|builder| {
                    builder.set_buckets_for_metric(
                        Matcher::Full("changegate_batch_size".to_owned()),
                        BATCH_SIZE_BUCKETS,
                    )
                })
                .expect("bucket bounds are non-empty")
                .build_recorder();
            let handle = recorder.handle();
            // Fails only if another recorder was installed first; metrics then
            // go there and /metrics shows this recorder's (empty) view.
            let _ = metrics::set_global_recorder(recorder);
            describe_metrics();
            spawn_upkeep(handle.clone());
            handle
        })
        .clone()
}

/// Latency bucket bounds: a millisecond to ten seconds. Histograms rather
/// than the exporter's default summaries, because summaries from several
/// instances cannot be added up.
const LATENCY_BUCKETS_SECONDS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Submission group sizes, up to a group's largest (32).
const GROUP_SIZE_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0];

/// Workflow step rounds: a few milliseconds when GitLab answers at once, up
/// to minutes when its calls time out and are retried (`gitlab.timeout` is
/// 30 s by default). A full matcher wins over the `_seconds` suffix.
const STEP_BUCKETS_SECONDS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// Merge batch sizes, up to `batch.max_requests`' default (500).
const BATCH_SIZE_BUCKETS: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0];

/// How often recorded histogram samples are folded into their buckets.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// The recorder keeps every histogram sample until they are folded into the
/// buckets, which a scrape of /metrics or this upkeep does: without it, an
/// instance nobody scrapes would grow by every request it serves. A thread
/// rather than a task because the recorder is the process's, not one
/// runtime's.
fn spawn_upkeep(handle: PrometheusHandle) {
    std::thread::Builder::new()
        .name("metrics-upkeep".to_owned())
        .spawn(move || {
            loop {
                std::thread::sleep(UPKEEP_EVERY);
                handle.run_upkeep();
            }
        })
        .expect("the metrics upkeep thread starts");
}

/// Describes every metric changegate exports (and starts the counters that
/// alerts read at zero) on the recorder in effect: the one
/// [`metrics_handle`] installs, or the reference's check of the metrics page.
pub fn describe_metrics() {
    metrics::describe_counter!(
        "changegate_config_reloads_total",
        "Configuration reloads applied."
    );
    metrics::describe_counter!(
        "changegate_config_reload_failures_total",
        "Configuration reloads rejected because the file was invalid."
    );
    metrics::describe_gauge!(
        "changegate_config_last_reload_successful",
        "0 while the configuration file holds something the last reload rejected, else 1."
    );
    metrics::describe_gauge!(
        "changegate_database_ready",
        "1 when the database answers and migrations are applied."
    );
    // Counted from zero, so that an alert on their increase sees the first.
    metrics::counter!("changegate_config_reloads_total").increment(0);
    metrics::counter!("changegate_config_reload_failures_total").increment(0);
    // A process runs only on a configuration that loaded.
    metrics::gauge!("changegate_config_last_reload_successful").set(1.0);
    crate::db::describe_retry_metrics();
    crate::observer::describe_metrics();
    crate::store::describe_metrics();
    crate::workflow::describe_metrics();
    crate::batch::describe_metrics();
    crate::drift::describe_metrics();
    crate::jobs::progress::describe_metrics();
    crate::clients::describe_metrics();
    crate::webhooks::worker::describe_metrics();
    crate::jobs::retention::describe_metrics();
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use axum::http::HeaderValue;
    use tracing_subscriber::fmt::MakeWriter;

    use super::*;

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .expect("not poisoned")
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Self;
        fn make_writer(&'a self) -> Self {
            self.clone()
        }
    }

    /// Logs one line outside any request and one while handling a request
    /// that sent `x-request-id: req-42`; returns the output.
    fn log_inside_and_outside_a_request(json: bool) -> String {
        let captured = Captured::default();
        let layer = fmt::layer().with_ansi(false).with_writer(captured.clone());
        let output = if json {
            layer
                .json()
                .flatten_event(true)
                .map_event_format(|inner| WithRequestId { inner, json: true })
                .boxed()
        } else {
            layer
                .map_event_format(|inner| WithRequestId { inner, json: false })
                .boxed()
        };
        let subscriber = Registry::default().with(output);
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!("outside");
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("runtime");
            runtime.block_on(request_id::scope(
                HeaderValue::from_static("req-42"),
                async { tracing::warn!(detail = "x", "inside") },
            ));
        });
        let bytes = captured.0.lock().expect("not poisoned").clone();
        String::from_utf8(bytes).expect("utf-8")
    }

    #[test]
    fn human_lines_logged_in_a_request_end_with_its_id() {
        let output = log_inside_and_outside_a_request(false);
        let lines: Vec<&str> = output.lines().collect();
        assert_eq!(lines.len(), 2, "{output}");
        assert!(lines[0].ends_with("outside"), "{output}");
        assert!(lines[1].contains("inside"), "{output}");
        assert!(lines[1].ends_with(" request_id=req-42"), "{output}");
    }

    #[test]
    fn json_lines_logged_in_a_request_carry_its_id() {
        let output = log_inside_and_outside_a_request(true);
        let lines: Vec<serde_json::Value> = output
            .lines()
            .map(|line| serde_json::from_str(line).expect("each line is JSON"))
            .collect();
        assert_eq!(lines.len(), 2, "{output}");
        assert_eq!(lines[0].get("request_id"), None);
        assert_eq!(lines[1]["request_id"], "req-42");
        assert_eq!(lines[1]["message"], "inside");
        assert_eq!(lines[1]["detail"], "x");
    }
}
