//! The metrics listener: `GET /metrics` (Prometheus text; any other path outside `/console`
//! answers the same, as the exporter's own listener did), `GET /health`, and the console: its
//! page and assets under `/console/`, its JSON API under `/console/api/`.

use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio_util::sync::CancellationToken;

use super::{Console, api, records};

const INDEX_HTML: &str = include_str!("assets/index.html");
const CONSOLE_JS: &str = include_str!("assets/console.js");
const CONSOLE_CSS: &str = include_str!("assets/console.css");

/// Serves `listener` until `shutdown`: metrics from `metrics` (none when another server in
/// this process installed the recorder), the console when `console` is given.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Option<PrometheusHandle>,
    console: Option<Arc<Console>>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let metrics_route = get(move || render(metrics.clone()));
    let mut router = Router::new()
        .route("/health", get(|| async { "OK" }))
        .route("/metrics", metrics_route.clone());
    if let Some(console) = console {
        router = router.merge(routes(console));
    }
    let router = router.fallback(metrics_route);
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}

async fn render(metrics: Option<PrometheusHandle>) -> Response {
    let Some(handle) = metrics else {
        return (
            StatusCode::NOT_FOUND,
            "no metrics recorder in this server\n",
        )
            .into_response();
    };
    match tokio::task::spawn_blocking(move || handle.render()).await {
        Ok(body) => ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

fn routes(console: Arc<Console>) -> Router {
    Router::new()
        .route(
            "/console",
            get(|| async { Redirect::permanent("/console/") }),
        )
        .route(
            "/console/",
            get(|| asset(INDEX_HTML, "text/html; charset=utf-8")),
        )
        .route(
            "/console/console.js",
            get(|| asset(CONSOLE_JS, "text/javascript; charset=utf-8")),
        )
        .route(
            "/console/console.css",
            get(|| asset(CONSOLE_CSS, "text/css; charset=utf-8")),
        )
        .route("/console/api/session", get(api::session))
        .route("/console/api/queues", get(api::queues))
        .route("/console/api/matches", get(records::matches))
        .route("/console/api/matches/{id}", get(records::one_match))
        .route("/console/api/players/{id}", get(records::player))
        .route("/console/api/leaderboard", get(api::leaderboard))
        .route("/console/api/seasons", get(api::seasons))
        .route("/console/api/seasons/reset", post(api::season_reset))
        .route("/console/api/seasons/end", post(api::end_season))
        .route("/console/{*rest}", get(not_found).post(not_found))
        .with_state(console)
}

async fn not_found() -> (StatusCode, &'static str) {
    (StatusCode::NOT_FOUND, "not found\n")
}

/// A compiled-in asset, with headers that keep the page to its own origin: scripts and styles
/// only from the console itself, no framing (clickjacking), no referrer.
async fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
             img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        ),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}
