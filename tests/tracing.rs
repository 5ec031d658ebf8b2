//! Traces leave the process over OTLP: the real binary exports to a real OTLP receiver (the
//! collector's TraceService, served here on loopback), an RPC's span continues the caller's W3C
//! `traceparent`, and the optimizer's ticks are spans too.

mod common;

use std::sync::{Arc, Mutex};

use common::{ServerProcess, poll_until};
use matchmaker::proto;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;

/// Collects every span exported to it.
#[derive(Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<(String, Span)>>>,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().unwrap();
        for resource in request.into_inner().resource_spans {
            let service = resource
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                    Value::StringValue(s) => Some(s.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            for scope in resource.scope_spans {
                for span in scope.spans {
                    spans.push((service.clone(), span));
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
            Value::StringValue(s) => Some(s.clone()),
            other => Some(format!("{other:?}")),
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpc_spans_continue_the_callers_trace_and_reach_an_otlp_collector() {
    let collector = Collector::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(collector.clone()))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );

    let dir = tempfile::tempdir().unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_matchmaker"));
    command
        .args(["serve", "--addr", "127.0.0.1:0", "--metrics-addr", ""])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .env("MATCHMAKER_TELEMETRY__OTLP_ENDPOINT", &endpoint)
        .env(
            "MATCHMAKER_TELEMETRY__SERVICE_NAME",
            "matchmaker-under-test",
        )
        // Export every 100 ms instead of every 5 s.
        .env("OTEL_BSP_SCHEDULE_DELAY", "100");
    let server = ServerProcess::spawn(command);

    // The caller's trace: W3C trace-context, sampled.
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent_id = "00f067aa0ba902b7";
    let mut client = matchmaker::proto::client_service_client::ClientServiceClient::connect(
        format!("http://{}", server.addr),
    )
    .await
    .unwrap();
    let mut request = tonic::Request::new(proto::EnterQueueRequest {
        queue: "1v1".into(),
        player_ids: vec!["traced".into()],
        ..Default::default()
    });
    request.metadata_mut().insert(
        "traceparent",
        format!("00-{trace_id}-{parent_id}-01").parse().unwrap(),
    );
    client.enter_queue(request).await.unwrap();

    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let spans = collector.spans.clone();
    let rpc = poll_until("the EnterQueue span at the collector", || {
        let spans = spans.clone();
        async move {
            let spans = spans.lock().unwrap();
            spans
                .iter()
                .find(|(_, s)| attribute(s, "rpc.method").as_deref() == Some("EnterQueue"))
                .cloned()
                .ok_or(spans.len())
        }
    })
    .await;
    let (service, span) = rpc;
    assert_eq!(service, "matchmaker-under-test");
    assert_eq!(
        hex(&span.trace_id),
        trace_id,
        "the caller's trace continues"
    );
    assert_eq!(
        hex(&span.parent_span_id),
        parent_id,
        "under the caller's span"
    );
    assert_eq!(span.name, "matchmaker.v1.ClientService/EnterQueue");
    assert_eq!(attribute(&span, "rpc.system").as_deref(), Some("grpc"));
    assert_eq!(
        attribute(&span, "rpc.service").as_deref(),
        Some("matchmaker.v1.ClientService")
    );
    // The server kind: 2 in OTLP's enum.
    assert_eq!(span.kind, 2, "{span:?}");
    // The optimizer's ticks are spans of their own.
    poll_until("a tick span at the collector", || {
        let spans = spans.clone();
        async move {
            let spans = spans.lock().unwrap();
            spans
                .iter()
                .any(|(_, s)| s.name == "matchmaker.tick")
                .then_some(())
                .ok_or(spans.len())
        }
    })
    .await;
    drop(server);
}
