//! OpenTelemetry traces, exported over OTLP/HTTP when
//! `telemetry.otlp_endpoint` is set: a span per request, per workflow step,
//! per merge batch round and per outbound call, with W3C trace context
//! carried in and out ([`propagation`]). Without the setting there is no
//! exporter and no layer, and the spans (all at debug) stay disabled.

pub mod propagation;

use std::time::Duration;

use anyhow::Context as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::runtime;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;
use tracing::level_filters::LevelFilter;
use tracing::subscriber::Interest;
use tracing::{Level, Metadata, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, Filter};
use tracing_subscriber::registry::LookupSpan;

use crate::clients::http::Outbound;
use crate::config::TelemetrySettings;

/// One export may take this long (connect, send, answer); a slow collector
/// costs spans, never requests: spans wait in the batch queue, which drops
/// the newest when full.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The running export pipeline; flush it with [`Traces::shutdown`].
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
    /// The pipeline for `settings`, or `None` when no endpoint is set.
    /// Sends with a client of `outbound`'s trust and proxies, batching on
    /// the current tokio runtime (call it inside one).
    pub fn start(
        settings: &TelemetrySettings,
        outbound: &Outbound,
    ) -> anyhow::Result<Option<Self>> {
        let Some(endpoint) = &settings.otlp_endpoint else {
            return Ok(None);
        };
        let url = endpoint
            .join("v1/traces")
            .context("telemetry.otlp_endpoint")?;
        let client = outbound
            .client_builder()?
            .timeout(EXPORT_TIMEOUT)
            .build()
            .context("building the OTLP HTTP client")?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(url.as_str())
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .context("building the OTLP exporter")?;
        let provider = SdkTracerProvider::builder()
            .with_span_processor(BatchSpanProcessor::builder(exporter, runtime::Tokio).build())
            .with_resource(
                Resource::builder()
                    .with_service_name(settings.service_name.clone())
                    .build(),
            )
            .build();
        Ok(Some(Self { provider }))
    }

    /// The layer that turns changegate's spans into OpenTelemetry spans.
    pub fn layer<S>(&self) -> impl Layer<S> + Send + Sync + 'static
    where
        S: Subscriber + for<'span> LookupSpan<'span> + Send + Sync,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer("changegate"))
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_filter(Traced)
    }

    /// Exports what is still queued and stops.
    pub async fn shutdown(self) {
        // Blocks until the batch task on the runtime has exported: off the
        // runtime's threads, so that task can run.
        let provider = self.provider;
        match tokio::task::spawn_blocking(move || provider.shutdown()).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => tracing::warn!("cannot export the last spans: {err}"),
            Err(err) => tracing::warn!("cannot export the last spans: {err}"),
        }
    }
}

/// What reaches OpenTelemetry: changegate's spans (debug and above, the
/// level they are created at so that logging alone never enables them) and
/// its warnings and errors, as events of the span they happen in. Decided per
/// call site once, so nothing else costs anything per call.
struct Traced;

impl Traced {
    fn wanted(metadata: &Metadata<'_>) -> bool {
        let level = if metadata.is_span() {
            Level::DEBUG
        } else {
            Level::WARN
        };
        let target = metadata.target();
        *metadata.level() <= level && (target == "changegate" || target.starts_with("changegate::"))
    }
}

impl<S> Filter<S> for Traced {
    fn enabled(&self, metadata: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        Self::wanted(metadata)
    }

    fn callsite_enabled(&self, metadata: &'static Metadata<'static>) -> Interest {
        if Self::wanted(metadata) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::DEBUG)
    }
}
