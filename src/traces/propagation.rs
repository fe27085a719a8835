//! W3C trace context (`traceparent`, `tracestate`): read from the requests
//! of trusted proxies, written on every outbound call, and kept with an
//! operation (its `trace_parent`) so that the work done for it later, in
//! other tasks and other requests, joins the trace of the request that
//! submitted it.

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::KeyValue;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{SpanContext, TraceContextExt};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The header that carries the trace and the calling span.
pub const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

/// Makes the trace context `headers` carry, if any, the parent of `span`
/// (the server span of the request; call this only for a trusted peer,
/// before `span` is entered).
pub fn continue_incoming(span: &Span, headers: &HeaderMap) {
    let context = TraceContextPropagator::new().extract(&Reading(headers));
    if context.span().span_context().is_valid() {
        // Fails only for a disabled span, which has nothing to continue.
        let _ = span.set_parent(context);
    }
}

/// Writes `span`'s trace context into `headers`; nothing when it has none
/// (no traces exported).
pub fn inject(span: &Span, headers: &mut HeaderMap) {
    let context = span.context();
    if context.span().span_context().is_valid() {
        TraceContextPropagator::new().inject_context(&context, &mut Writing(headers));
    }
}

/// The `traceparent` of the current span, to be kept with the operation it
/// creates; `None` when no traces are exported.
pub fn current_trace_parent() -> Option<String> {
    let context = Span::current().context();
    let span = context.span();
    let span = span.span_context();
    span.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            span.trace_id(),
            span.span_id(),
            span.trace_flags().to_u8()
        )
    })
}

/// Makes the submitting request's span (kept as `trace_parent`) the parent
/// of `span`, so that the operation's steps are part of its trace. Call it
/// before `span` is entered.
pub fn continue_stored(span: &Span, trace_parent: Option<&str>) {
    if let Some(context) = trace_parent.and_then(stored) {
        let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(context));
    }
}

/// Links `span` (a callback, a batch round: work for several operations,
/// or arriving from outside) to the request that submitted `operation_id`.
pub fn link_stored(span: &Span, trace_parent: Option<&str>, operation_id: &str) {
    if let Some(context) = trace_parent.and_then(stored) {
        span.add_link_with_attributes(
            context,
            vec![KeyValue::new("operation.id", operation_id.to_owned())],
        );
    }
}

/// A kept `traceparent`, if it is one.
fn stored(trace_parent: &str) -> Option<SpanContext> {
    let context = TraceContextPropagator::new().extract(&Stored(trace_parent));
    let span = context.span().span_context().clone();
    span.is_valid().then_some(span)
}

struct Reading<'a>(&'a HeaderMap);

impl Extractor for Reading<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key)?.to_str().ok()
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

struct Writing<'a>(&'a mut HeaderMap);

impl Injector for Writing<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(key.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

/// A kept `traceparent` as the only header.
struct Stored<'a>(&'a str);

impl Extractor for Stored<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        (key == "traceparent").then_some(self.0)
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent"]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_traceparent_is_read_back_and_garbage_is_not() {
        let kept = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let context = stored(kept).expect("a valid traceparent");
        assert_eq!(
            context.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(context.span_id().to_string(), "00f067aa0ba902b7");
        assert!(context.is_sampled());
        assert_eq!(stored("not-a-traceparent"), None);
    }

    #[test]
    fn without_an_exporter_nothing_is_kept_or_sent() {
        assert_eq!(current_trace_parent(), None);
        let mut headers = HeaderMap::new();
        inject(&Span::current(), &mut headers);
        assert!(headers.is_empty());
    }
}
