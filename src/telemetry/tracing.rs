//! Logs and traces: the `tracing` subscriber the binary installs, and, with
//! `[telemetry] otlp_endpoint` set, OpenTelemetry spans exported over OTLP/gRPC. Every RPC is a
//! server span (`rpc.system`, `rpc.service`, `rpc.method`) that continues the caller's W3C
//! `traceparent`, so a game client's trace runs into the matchmaker; every optimizer tick is a
//! span of its own.

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use serde::{Deserialize, Serialize};
use tonic::codegen::http;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::rejection::FieldError;

/// `[telemetry]`: where traces go.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// The OTLP/gRPC endpoint of a collector (`http://otel-collector:4317`); empty: no traces
    /// leave the process.
    pub otlp_endpoint: String,
    /// `service.name` of the exported spans.
    pub service_name: String,
    /// Share of traces started here that are recorded, in [0, 1]; a caller's sampling decision
    /// (its `traceparent` flag) is followed.
    pub sampling_ratio: f64,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            otlp_endpoint: String::new(),
            service_name: "matchmaker".into(),
            sampling_ratio: 1.0,
        }
    }
}

impl TelemetryConfig {
    /// The endpoint is an http(s) URL, the name is set, the ratio is a probability.
    pub fn validate(&self) -> Result<(), FieldError> {
        let url = &self.otlp_endpoint;
        let http = url.starts_with("http://") || url.starts_with("https://");
        if !url.is_empty() && !http {
            return Err(FieldError::new(
                "telemetry.otlp_endpoint",
                format!("must be an http(s) URL such as http://collector:4317 (got {url:?})"),
            ));
        }
        if self.service_name.is_empty() {
            return Err(FieldError::new(
                "telemetry.service_name",
                "must not be empty",
            ));
        }
        if !(0.0..=1.0).contains(&self.sampling_ratio) {
            return Err(FieldError::new(
                "telemetry.sampling_ratio",
                format!("must be in [0, 1] (got {})", self.sampling_ratio),
            ));
        }
        Ok(())
    }
}

/// Why tracing could not start.
#[derive(Debug, thiserror::Error)]
pub enum TracingError {
    #[error("telemetry.otlp_endpoint: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
}

/// Keeps the trace exporter running; dropping it sends the spans still buffered.
pub struct TracingGuard(Option<SdkTracerProvider>);

impl Drop for TracingGuard {
    fn drop(&mut self) {
        if let Some(provider) = self.0.take()
            && let Err(e) = provider.shutdown()
        {
            eprintln!("warning: traces not all exported at exit: {e}");
        }
    }
}

/// The log filter without `RUST_LOG`: `info`, but only errors of the Redis client, whose
/// cluster connection warns every few milliseconds while a Redis node is down (about a hundred
/// lines per node in a failover of a few seconds); the node's own warnings say what a Redis
/// outage does to it.
pub const DEFAULT_LOG: &str = "info,redis=error";

/// Installs the process's subscriber: logs on stderr (JSON lines with `json`), filtered by
/// `RUST_LOG` (default [`DEFAULT_LOG`]), and spans to `config.otlp_endpoint` when set. With an endpoint,
/// call it inside a tokio runtime (the exporter's connection lives there).
pub fn init(json: bool, config: Option<&TelemetryConfig>) -> Result<TracingGuard, TracingError> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_LOG));
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    // Logs follow RUST_LOG; traces take the matchmaker's own spans at info and above whatever
    // the log level, and none of its dependencies' internals.
    let logs = if json {
        logs.json().with_filter(filter).boxed()
    } else {
        logs.with_filter(filter).boxed()
    };
    let provider = match config.filter(|c| !c.otlp_endpoint.is_empty()) {
        Some(c) => Some(provider(c)?),
        None => None,
    };
    let traces = provider.as_ref().map(|p| {
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer("matchmaker"))
            .with_filter(
                tracing_subscriber::filter::Targets::new()
                    .with_target("matchmaker", tracing::Level::INFO),
            )
    });
    tracing_subscriber::registry()
        .with(logs)
        .with(traces)
        .init();
    Ok(TracingGuard(provider))
}

fn provider(config: &TelemetryConfig) -> Result<SdkTracerProvider, TracingError> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(config.otlp_endpoint.clone())
        .build()?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(config.service_name.clone())
        .with_attribute(opentelemetry::KeyValue::new(
            "service.version",
            env!("CARGO_PKG_VERSION"),
        ))
        .build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            config.sampling_ratio,
        ))))
        .with_resource(resource)
        .build())
}

/// The span of one RPC, continuing the caller's trace from its `traceparent` header.
pub fn rpc_span(request: &http::Request<()>) -> tracing::Span {
    let (path, service, method) = span_names(request.uri().path());
    let span = tracing::info_span!(
        "rpc",
        otel.name = %path,
        otel.kind = "server",
        rpc.system = "grpc",
        rpc.service = %service,
        rpc.method = %method,
    );
    let parent = TraceContextPropagator::new().extract(&Headers(request.headers()));
    let _ = span.set_parent(parent);
    span
}

/// A call's span name, service and method: the method's own for a method this server
/// defines, `unknown` for any other path (a path a client makes up would otherwise be a new
/// operation in the trace store per call).
fn span_names(path: &str) -> (&'static str, &'static str, &'static str) {
    let path = super::known_method(path).unwrap_or(super::UNKNOWN_METHOD);
    let name = path.trim_start_matches('/');
    let (service, method) = name.split_once('/').unwrap_or(("", name));
    (name, service, method)
}

/// Request headers as the propagator reads them.
struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_checked() {
        assert!(TelemetryConfig::default().validate().is_ok());
        let bad = |f: fn(&mut TelemetryConfig)| {
            let mut c = TelemetryConfig::default();
            f(&mut c);
            c.validate().unwrap_err().field
        };
        assert_eq!(
            bad(|c| c.otlp_endpoint = "collector:4317".into()),
            "telemetry.otlp_endpoint"
        );
        assert_eq!(bad(|c| c.sampling_ratio = 1.5), "telemetry.sampling_ratio");
        assert_eq!(bad(|c| c.service_name.clear()), "telemetry.service_name");
    }

    #[test]
    fn a_span_is_named_after_a_method_of_the_server_and_any_other_path_shares_one_name() {
        assert_eq!(
            span_names("/matchmaker.v1.ClientService/EnterQueue"),
            (
                "matchmaker.v1.ClientService/EnterQueue",
                "matchmaker.v1.ClientService",
                "EnterQueue"
            )
        );
        assert_eq!(
            span_names("/grpc.health.v1.Health/Check"),
            (
                "grpc.health.v1.Health/Check",
                "grpc.health.v1.Health",
                "Check"
            )
        );
        for made_up in ["/x/0b7c2f", "/matchmaker.v1.ClientService/Nope", "", "/"] {
            assert_eq!(
                span_names(made_up),
                ("unknown/unknown", "unknown", "unknown"),
                "{made_up}"
            );
        }
    }
}
