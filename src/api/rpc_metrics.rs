//! Per-RPC metrics in the names go-grpc-prometheus made the convention:
//! `grpc_server_started_total{grpc_service, grpc_method}`,
//! `grpc_server_handled_total{grpc_service, grpc_method, grpc_code}` and
//! `grpc_server_handling_seconds{grpc_service, grpc_method}`. A call is handled when its status
//! is known: in the response headers of a refused call, in the trailers of an answered one, or
//! CANCELLED when the client went away first. Streaming calls count until the stream ends.
//!
//! A cluster node's front records the same three per method under `matchmaker_cluster_front_*`
//! ([`CLUSTER_FRONT`]): the calls its clients made, whichever node's engine answered them.
//!
//! Metric handles are registered once per method (a registry lookup per call was measurable
//! under load). Only the methods this server defines get labels of their own (`proto/`'s, the
//! health check and reflection); any other path counts as `unknown`. The layer sits in front of
//! auth, so a path chosen by a client, signed in or not, never becomes a label: it can neither
//! grow the label set nor take the place of a real method.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll, ready};
use std::time::Instant;

use http_body::{Body, Frame, SizeHint};
use tonic::Code;
use tonic::codegen::{Bytes, http};
use tower::{Layer, Service};

use crate::telemetry as m;

/// The key and labels every path outside [`m::known_method`] shares.
const UNKNOWN: &str = m::UNKNOWN_METHOD;

/// The names a layer records under.
#[derive(Clone, Copy, Debug)]
pub struct Names {
    pub started: &'static str,
    pub handled: &'static str,
    pub seconds: &'static str,
}

/// A server's own calls: `grpc_server_*`.
pub const SERVER: Names = Names {
    started: m::GRPC_STARTED,
    handled: m::GRPC_HANDLED,
    seconds: m::GRPC_HANDLING_SECONDS,
};

/// The calls clients make to a cluster node, as they saw them: `matchmaker_cluster_front_*`.
pub const CLUSTER_FRONT: Names = Names {
    started: m::CLUSTER_FRONT_STARTED,
    handled: m::CLUSTER_FRONT_HANDLED,
    seconds: m::CLUSTER_FRONT_SECONDS,
};

/// The metric handles of one method.
struct Method {
    started: metrics::Counter,
    handled: [metrics::Counter; 17],
    seconds: metrics::Histogram,
}

impl Method {
    fn new(names: Names, service: &str, method: &str) -> Self {
        let labels = [
            ("grpc_service", service.to_string()),
            ("grpc_method", method.to_string()),
        ];
        Self {
            started: metrics::counter!(names.started, &labels),
            handled: std::array::from_fn(|code| {
                let name = format!("{:?}", Code::from_i32(code as i32));
                metrics::counter!(
                    names.handled,
                    "grpc_service" => service.to_string(),
                    "grpc_method" => method.to_string(),
                    "grpc_code" => to_upper_snake(&name)
                )
            }),
            seconds: metrics::histogram!(names.seconds, &labels),
        }
    }

    fn finish(&self, code: Code, started: Instant) {
        self.handled[(code as i32).clamp(0, 16) as usize].increment(1);
        self.seconds.record(started.elapsed().as_secs_f64());
    }
}

/// `DeadlineExceeded` → `DEADLINE_EXCEEDED`, as gRPC spells its codes.
fn to_upper_snake(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// `/pkg.Service/Method` → (`pkg.Service`, `Method`).
fn split_path(path: &str) -> Option<(&str, &str)> {
    let (service, method) = path.strip_prefix('/')?.split_once('/')?;
    (!service.is_empty() && !method.is_empty() && !method.contains('/'))
        .then_some((service, method))
}

/// The handles of every method seen, shared by the layer's clones.
#[derive(Clone)]
pub struct RpcMetricsLayer {
    methods: Arc<RwLock<HashMap<String, Arc<Method>>>>,
    names: Names,
}

impl Default for RpcMetricsLayer {
    /// A server's own calls ([`SERVER`]).
    fn default() -> Self {
        Self::new(SERVER)
    }
}

impl RpcMetricsLayer {
    /// A layer recording under `names`.
    pub fn new(names: Names) -> Self {
        Self {
            methods: Arc::default(),
            names,
        }
    }

    fn registered(&self, key: &str) -> Option<Arc<Method>> {
        self.methods
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned()
    }

    /// The handles of `path`'s method, or the shared `unknown` ones for a path this server does
    /// not define. The map only ever holds known methods and `unknown`.
    fn method(&self, path: &str) -> Arc<Method> {
        if let Some(method) = self.registered(path) {
            return method;
        }
        let key = m::known_method(path).unwrap_or(UNKNOWN);
        if let Some(method) = self.registered(key) {
            return method;
        }
        let mut methods = self.methods.write().unwrap_or_else(|p| p.into_inner());
        methods
            .entry(key.to_string())
            .or_insert_with(|| {
                let (service, method) = split_path(key).unwrap_or(("unknown", "unknown"));
                Arc::new(Method::new(self.names, service, method))
            })
            .clone()
    }
}

impl<S> Layer<S> for RpcMetricsLayer {
    type Service = RpcMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RpcMetrics {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service [`RpcMetricsLayer`] makes.
#[derive(Clone)]
pub struct RpcMetrics<S> {
    inner: S,
    layer: RpcMetricsLayer,
}

impl<S, ReqBody, ResBody> Service<http::Request<ReqBody>> for RpcMetrics<S>
where
    S: Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<tower::BoxError>,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = Metered<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        let method = self.layer.method(request.uri().path());
        method.started.increment(1);
        Metered {
            inner: self.inner.call(request),
            call: Some(Call {
                method,
                started: Instant::now(),
            }),
        }
    }
}

/// One call being measured; recorded once, as handled with the code it ended with.
struct Call {
    method: Arc<Method>,
    started: Instant,
}

impl Call {
    fn finish(self, code: Code) {
        self.method.finish(code, self.started);
    }
}

fn status_of(headers: &http::HeaderMap) -> Option<Code> {
    let value = headers.get("grpc-status")?.to_str().ok()?;
    Some(Code::from_i32(value.parse().ok()?))
}

pin_project_lite::pin_project! {
    /// The response future: measures the call once the answer's headers are known.
    pub struct Metered<F> {
        #[pin]
        inner: F,
        call: Option<Call>,
    }

    impl<F> PinnedDrop for Metered<F> {
        fn drop(this: Pin<&mut Self>) {
            // Dropped before an answer: the client went away.
            if let Some(call) = this.project().call.take() {
                call.finish(Code::Cancelled);
            }
        }
    }
}

impl<F, B, E> Future for Metered<F>
where
    F: Future<Output = Result<http::Response<B>, E>>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<tower::BoxError>,
{
    type Output = Result<http::Response<tonic::body::Body>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let answer = ready!(this.inner.poll(cx));
        let call = this.call.take();
        Poll::Ready(match answer {
            Ok(response) => {
                // A refusal carries its status in the headers (trailers-only); an answer's comes
                // in the trailers at the end of the body.
                let call = match (status_of(response.headers()), call) {
                    (Some(code), Some(call)) => {
                        call.finish(code);
                        None
                    }
                    (_, call) => call,
                };
                Ok(response.map(|inner| tonic::body::Body::new(MeteredBody { inner, call })))
            }
            Err(e) => {
                if let Some(call) = call {
                    call.finish(Code::Internal);
                }
                Err(e)
            }
        })
    }
}

pin_project_lite::pin_project! {
    /// A response body that records its call's status from the trailers.
    pub struct MeteredBody<B> {
        #[pin]
        inner: B,
        call: Option<Call>,
    }

    impl<B> PinnedDrop for MeteredBody<B> {
        fn drop(this: Pin<&mut Self>) {
            // Dropped before its trailers: the client cancelled the call (or the stream).
            if let Some(call) = this.project().call.take() {
                call.finish(Code::Cancelled);
            }
        }
    }
}

impl<B> Body for MeteredBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.project();
        let frame = ready!(this.inner.poll_frame(cx));
        match &frame {
            Some(Ok(f)) => {
                if let Some(trailers) = f.trailers_ref()
                    && let Some(call) = this.call.take()
                {
                    call.finish(status_of(trailers).unwrap_or(Code::Unknown));
                }
            }
            Some(Err(_)) => {
                if let Some(call) = this.call.take() {
                    call.finish(Code::Internal);
                }
            }
            None => {
                if let Some(call) = this.call.take() {
                    call.finish(Code::Unknown);
                }
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_spelled_as_grpc_spells_them() {
        assert_eq!(to_upper_snake("Ok"), "OK");
        assert_eq!(to_upper_snake("DeadlineExceeded"), "DEADLINE_EXCEEDED");
        assert_eq!(to_upper_snake("ResourceExhausted"), "RESOURCE_EXHAUSTED");
    }

    #[test]
    fn paths_split_into_service_and_method() {
        assert_eq!(
            split_path("/matchmaker.v1.ClientService/EnterQueue"),
            Some(("matchmaker.v1.ClientService", "EnterQueue"))
        );
        assert_eq!(split_path("/nothing"), None);
        assert_eq!(split_path("/a/b/c"), None);
    }

    #[test]
    fn only_the_servers_own_methods_get_labels() {
        let layer = RpcMetricsLayer::default();
        let made_up = layer.method("/svc/Method0");
        for i in 0..1000 {
            let method = layer.method(&format!("/svc/Method{i}"));
            assert!(Arc::ptr_eq(&method, &made_up), "/svc/Method{i}");
            layer.method(&format!("/matchmaker.v1.ClientService/Made{i}"));
            layer.method(&format!("/grpc.health.v1.Health/Made{i}"));
        }
        assert_eq!(
            layer.methods.read().unwrap().keys().collect::<Vec<_>>(),
            [UNKNOWN],
            "every made-up path shares one entry"
        );
        let real = [
            "/matchmaker.v1.ClientService/EnterQueue",
            "/matchmaker.v1.GameServerService/ReportMatchResult",
            "/matchmaker.v1.AdminService/SeasonReset",
            "/grpc.health.v1.Health/Check",
            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        ];
        for path in real {
            assert!(!Arc::ptr_eq(&layer.method(path), &made_up), "{path}");
        }
        let methods = layer.methods.read().unwrap();
        assert_eq!(methods.len(), real.len() + 1);
        assert!(real.iter().all(|path| methods.contains_key(*path)));
        assert!(
            crate::proto::METHODS.len() > real.len(),
            "{:?}",
            crate::proto::METHODS
        );
    }
}
