//! Logging (with a level that changes at runtime) and the Prometheus recorder.

use std::io::IsTerminal;
use std::sync::{Arc, OnceLock};

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry, fmt, reload};

use crate::config::{LevelSetter, LogFormat};

/// Installs the global logger with `level` (a level or filter such as
/// `info,sqlx=warn`) and returns the setter that changes it at runtime.
pub fn init_logging(level: &str, format: LogFormat) -> anyhow::Result<LevelSetter> {
    let filter = EnvFilter::try_new(level)?;
    let (filter, handle) = reload::Layer::new(filter);
    let output = match format {
        LogFormat::Human => fmt::layer()
            .with_ansi(std::io::stdout().is_terminal())
            .with_writer(std::io::stdout)
            .boxed(),
        LogFormat::Json => fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_writer(std::io::stdout)
            .boxed(),
    };
    Registry::default().with(filter).with(output).try_init()?;
    Ok(Arc::new(move |level: &str| {
        let filter = EnvFilter::try_new(level).map_err(|err| err.to_string())?;
        handle.reload(filter).map_err(|err| err.to_string())
    }))
}

/// The process-wide Prometheus recorder. The `metrics` facade has one global
/// recorder per process, so every application instance in the process (tests
/// start several) shares it.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new().build_recorder();
            let handle = recorder.handle();
            // Fails only if another recorder was installed first; metrics then
            // go there and /metrics shows this recorder's (empty) view.
            let _ = metrics::set_global_recorder(recorder);
            describe_metrics();
            handle
        })
        .clone()
}

fn describe_metrics() {
    metrics::describe_counter!(
        "changegate_config_reloads_total",
        "Configuration reloads applied."
    );
    metrics::describe_counter!(
        "changegate_config_reload_failures_total",
        "Configuration reloads rejected because the file was invalid."
    );
    metrics::describe_gauge!(
        "changegate_database_ready",
        "1 when the database answers and migrations are applied."
    );
}
