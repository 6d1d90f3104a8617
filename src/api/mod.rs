//! The local API: HTTP/1.1 and JSON over a Unix socket, for the hypervisor driver or
//! orchestrator on the same host. Routes are declared once in [`ROUTES`] and described in the
//! OpenAPI document served at `/v1/openapi.json`; `docs/api.md` shows examples.
//!
//! In: connections on the socket and the [`shared::DaemonState`]. Out: JSON answers, metrics,
//! and log lines in a span per request.
//!
//! Every request runs through, in order: a `request` tracing span (method, route, request id,
//! instance uuid), the peer check (SO_PEERCRED, [`peer`]), a request timeout, a body size
//! limit, then the route. Tracker operations run on the blocking
//! pool: they wait for their commit (fsync), and must not stall the runtime.

pub mod bodies;
pub mod disk_facts;
pub mod error;
pub mod extract;
pub mod metrics;
pub mod openapi;
pub mod peer;
pub mod routes;
pub mod server;
pub mod shared;
pub mod views;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, DefaultBodyLimit, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::api::peer::Peer;
use crate::api::shared::DaemonState;
pub use error::{ApiError, ErrorCode};

/// The peer of a socket connection, taken when it connects.
#[derive(Debug, Clone)]
pub struct PeerInfo(pub Arc<Peer>);

/// Limits applied to every request.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest body accepted, bytes.
    pub max_body_bytes: usize,
    /// Longest a request may take.
    pub timeout: Duration,
}

/// Declares every route once: [`ROUTES`] (method and path, which the OpenAPI document must
/// list exactly) and the router's table are both generated from this list, so a route cannot be
/// served without being in the list, nor listed without being served.
macro_rules! route_table {
    ($($method:literal $filter:ident $path:literal => $handler:path),* $(,)?) => {
        /// Every route the socket API serves: method and path template.
        pub const ROUTES: &[(&str, &str)] = &[$(($method, $path)),*];

        fn served_routes(router: Router<Arc<DaemonState>>) -> Router<Arc<DaemonState>> {
            router $(.route($path, axum::routing::$filter($handler)))*
        }
    };
}

route_table! {
    "GET" get "/healthz" => routes::healthz,
    "GET" get "/metrics" => routes::metrics,
    "GET" get "/v1/openapi.json" => routes::openapi,
    "GET" get "/v1/inventory" => routes::inventory,
    "GET" get "/v1/compute-node" => routes::compute_node,
    "GET" get "/v1/usage" => routes::usage,
    "GET" get "/v1/numa" => routes::numa,
    "GET" get "/v1/claims" => routes::list_claims,
    "POST" post "/v1/claims" => routes::create_claim,
    "GET" get "/v1/claims/{instance_uuid}" => routes::show_claim,
    "DELETE" delete "/v1/claims/{instance_uuid}" => routes::delete_claim,
    "GET" get "/v1/migrations" => routes::list_migrations,
    "POST" post "/v1/migrations" => routes::create_migration,
    "GET" get "/v1/migrations/{id}" => routes::show_migration,
    "POST" post "/v1/migrations/{id}/confirm" => routes::confirm_migration,
    "POST" post "/v1/migrations/{id}/revert" => routes::revert_migration,
    "POST" post "/v1/instances/{uuid}/state" => routes::update_instance,
    "POST" post "/v1/instances/{uuid}/pci-requests" => routes::attach_pci,
    "DELETE" delete "/v1/instances/{uuid}/pci-requests/{request_id}" => routes::detach_pci,
    "GET" get "/v1/pci-devices" => routes::list_pci_devices,
    "POST" post "/v1/pci-devices/{address}/release" => routes::release_pci_device,
    "POST" post "/v1/reconcile" => routes::reconcile,
    "POST" post "/v1/adopt" => routes::adopt,
    "POST" post "/v1/refresh" => routes::refresh,
}

/// The socket API.
pub fn router(state: Arc<DaemonState>, limits: Limits) -> Router {
    served_routes(Router::new())
        .fallback(routes::no_route)
        .method_not_allowed_fallback(routes::wrong_method)
        .layer(DefaultBodyLimit::max(limits.max_body_bytes))
        .layer(middleware::from_fn_with_state(limits.timeout, timeout))
        .route_layer(middleware::from_fn(record_route))
        .layer(middleware::from_fn_with_state(state.clone(), check_peer))
        .layer(middleware::from_fn(request_span))
        .with_state(state)
}

/// Request ids a caller may pass in `X-Request-Id` (OpenStack's `req-<uuid>` among them): short
/// and plain, so that they can be logged and echoed as they are.
fn caller_request_id(req: &Request) -> Option<String> {
    let v = req.headers().get(REQUEST_ID)?.to_str().ok()?;
    let plain = !v.is_empty()
        && v.len() <= 64
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    plain.then(|| v.to_string())
}

/// The header that carries a request's id, both ways.
pub const REQUEST_ID: &str = "x-request-id";

/// Runs each request inside a `request` span (method, route, request id; the routes add the
/// instance uuid or migration id), so that every log line says which request it belongs to.
/// The id is the caller's `X-Request-Id` when it is plain, else a new `req-<uuid>`; it is sent
/// back in `X-Request-Id`.
async fn request_span(req: Request, next: Next) -> Response {
    use tracing::Instrument;
    let id = caller_request_id(&req).unwrap_or_else(|| format!("req-{}", uuid::Uuid::new_v4()));
    let span = tracing::info_span!(
        "request",
        method = %req.method(),
        route = tracing::field::Empty,
        request_id = %id,
        instance_uuid = tracing::field::Empty,
        migration_id = tracing::field::Empty,
    );
    let mut response = next.run(req).instrument(span).await;
    if let Ok(v) = axum::http::HeaderValue::from_str(&id) {
        response.headers_mut().insert(REQUEST_ID, v);
    }
    response
}

/// Records the matched route template (not the path: ids go in their own fields).
async fn record_route(
    matched: Option<axum::extract::MatchedPath>,
    req: Request,
    next: Next,
) -> Response {
    if let Some(m) = matched {
        tracing::Span::current().record("route", m.as_str());
    }
    next.run(req).await
}

/// The TCP metrics listener: `/metrics` and nothing else.
pub fn metrics_router(state: Arc<DaemonState>) -> Router {
    Router::new()
        .route("/metrics", get(routes::metrics))
        .fallback(routes::no_route)
        .with_state(state)
}

async fn check_peer(
    State(state): State<Arc<DaemonState>>,
    ConnectInfo(peer): ConnectInfo<PeerInfo>,
    req: Request,
    next: Next,
) -> Response {
    if !state.access().allows(&peer.0) {
        state.metrics.forbidden_peers.inc();
        let group = state
            .access()
            .group
            .map(|(_, name)| name)
            .unwrap_or_else(|| "(none: the configured group does not exist)".into());
        tracing::warn!(peer = %peer.0.describe(), method = %req.method(), path = %req.uri().path(), %group,
            "API request refused: the peer is neither root nor in the socket group");
        return ApiError::new(
            ErrorCode::Forbidden,
            format!(
                "{} may not use rtrackd: only root and members of group {group} may",
                peer.0.describe()
            ),
        )
        .into_response();
    }
    if state.stopping() {
        return ApiError::new(
            ErrorCode::ShuttingDown,
            "rtrackd is shutting down; retry once it is back",
        )
        .into_response();
    }
    let route = req
        .uri()
        .path()
        .split('/')
        .take(3)
        .collect::<Vec<_>>()
        .join("/");
    let method = req.method().to_string();
    let started = std::time::Instant::now();
    let response = next.run(req).await;
    let seconds = started.elapsed().as_secs_f64();
    let route = if ROUTES.iter().any(|(_, p)| p.starts_with(&route)) {
        route
    } else {
        "other".to_string()
    };
    state
        .metrics
        .api_requests
        .get_or_create(&vec![
            ("method", method.clone()),
            ("route", route.clone()),
            ("status", response.status().as_u16().to_string()),
        ])
        .inc();
    state
        .metrics
        .api_request_seconds
        .get_or_create(&vec![("method", method), ("route", route)])
        .observe(seconds);
    response
}

async fn timeout(State(limit): State<Duration>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(r) => r,
        Err(_) => {
            tracing::warn!(%path, limit_s = limit.as_secs_f64(), "API request timed out");
            ApiError::new(ErrorCode::Timeout,
                format!(
                    "the request took longer than {} s and was abandoned; a claim it was making is aborted once decided, unless a retry of it was answered meanwhile (claims are idempotent: retry to learn which)",
                    limit.as_secs_f64()
                ),
            )
            .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use tower::ServiceExt;

    async fn answered_id(sent: Option<&str>) -> String {
        let app: Router = Router::new()
            .route("/x", get(|| async { "ok" }))
            .layer(middleware::from_fn(request_span));
        let mut req = axum::http::Request::builder().uri("/x");
        if let Some(id) = sent {
            req = req.header(REQUEST_ID, id);
        }
        let resp = app.oneshot(req.body(Body::empty()).unwrap()).await.unwrap();
        resp.headers()[REQUEST_ID].to_str().unwrap().to_string()
    }

    #[tokio::test]
    async fn request_ids_are_the_callers_when_plain_else_new() {
        let theirs = "req-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";
        assert_eq!(answered_id(Some(theirs)).await, theirs);
        for odd in ["two words", "<script>", &"x".repeat(65), ""] {
            let got = answered_id(Some(odd)).await;
            assert!(got.starts_with("req-") && got != odd, "{odd:?} -> {got}");
        }
        let a = answered_id(None).await;
        let b = answered_id(None).await;
        assert!(a.starts_with("req-") && a.len() == 40 && a != b, "{a} {b}");
    }
}
