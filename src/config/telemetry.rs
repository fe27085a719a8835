//! `[telemetry]`: where traces go (static). Without `otlp_endpoint`
//! nothing is traced beyond the logs, and nothing costs anything.

use url::Url;

use super::reader::Reader;

/// `[telemetry]`, static.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelemetrySettings {
    /// `otlp_endpoint`: the OpenTelemetry collector's OTLP/HTTP base URL
    /// (`http://collector:4318`); spans are sent to its `/v1/traces`.
    /// Default none: no spans are exported.
    pub otlp_endpoint: Option<Url>,
    /// `service_name`, default `changegate`: the `service.name` of the spans.
    pub service_name: String,
}

impl Default for TelemetrySettings {
    fn default() -> Self {
        Self {
            otlp_endpoint: None,
            service_name: DEFAULT_SERVICE_NAME.to_owned(),
        }
    }
}

const DEFAULT_SERVICE_NAME: &str = "changegate";

pub(super) const TELEMETRY_KEYS: &[&str] = &["otlp_endpoint", "service_name"];

pub(super) fn telemetry(r: &mut Reader<'_>) -> TelemetrySettings {
    let text = r.string_at(&["telemetry", "otlp_endpoint"], "");
    let otlp_endpoint = match text.trim() {
        "" => None,
        text => match Url::parse(text) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => Some(url),
            _ => {
                r.error(
                    "telemetry.otlp_endpoint",
                    format!("{text:?} is not an http(s) URL like \"http://collector:4318\""),
                );
                None
            }
        },
    };
    let service_name = r.string_at(&["telemetry", "service_name"], DEFAULT_SERVICE_NAME);
    if service_name.trim().is_empty() {
        r.error("telemetry.service_name", "must not be empty");
    }
    TelemetrySettings {
        otlp_endpoint,
        service_name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Problem, source};

    fn load(text: &str) -> (TelemetrySettings, Vec<Problem>) {
        let table = source::parse(text).unwrap();
        let mut r = Reader::new(&table);
        let telemetry = telemetry(&mut r);
        (telemetry, r.into_problems())
    }

    #[test]
    fn no_endpoint_exports_nothing() {
        assert_eq!(load(""), (TelemetrySettings::default(), Vec::new()));
        assert_eq!(
            load("[telemetry]\notlp_endpoint = \"\"\n").0.otlp_endpoint,
            None
        );
    }

    #[test]
    fn an_http_endpoint_and_a_service_name_are_kept() {
        let (telemetry, problems) = load(
            "[telemetry]\notlp_endpoint = \"https://otel.example:4318\"\nservice_name = \"cg-eu\"\n",
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            telemetry.otlp_endpoint.map(String::from).as_deref(),
            Some("https://otel.example:4318/")
        );
        assert_eq!(telemetry.service_name, "cg-eu");
    }

    #[test]
    fn an_endpoint_that_is_not_an_http_url_stops_start_up() {
        for wrong in ["otel:4317", "grpc://otel:4317", "not a url"] {
            let (telemetry, problems) = load(&format!("[telemetry]\notlp_endpoint = {wrong:?}\n"));
            assert_eq!(telemetry.otlp_endpoint, None, "{wrong}");
            assert_eq!(problems.len(), 1, "{wrong}: {problems:?}");
            assert_eq!(problems[0].key, "telemetry.otlp_endpoint");
            assert_eq!(problems[0].severity, crate::config::Severity::Error);
        }
    }
}
