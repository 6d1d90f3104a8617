//! Route handlers. Each parses and checks its input (400 with the field), runs the tracker
//! operation on the blocking pool, and answers JSON: `reads` answer from committed state,
//! `writes` change it through the service; this file holds what both use, and the routes of
//! the daemon itself (health, metrics, the document, fallbacks).
//!
//! In: an HTTP request (path, query, headers, body) and the shared [`DaemonState`]. Out: a JSON
//! answer, or an [`ApiError`] with its status and stable code.

mod pci;
mod placement;
mod reads;
mod writes;

pub use pci::*;
pub use placement::*;
pub use reads::*;
pub use writes::*;

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::error::{ApiError, ErrorCode};
use super::views::{DriftCounts, Health, HealthStatus, MigrationView};
use crate::api::shared::DaemonState;
use crate::tracker::ClaimError;

pub(super) type St = State<Arc<DaemonState>>;
pub(super) type ApiResult = Result<Response, ApiError>;

/// Runs `f` on the blocking pool.
pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    // The blocking pool does not inherit the request's span: carry it over.
    let span = tracing::Span::current();
    tokio::task::spawn_blocking(move || span.in_scope(f))
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "an API operation panicked or was cancelled");
            ApiError::new(
                ErrorCode::InternalError,
                format!("the operation failed inside rtrackd ({e}); nothing was acknowledged"),
            )
        })?
}

/// A migration as the API shows it.
pub(super) fn migration_view(state: &DaemonState, id: i64) -> Result<MigrationView, ApiError> {
    state.service.read(|t| {
        t.state()
            .migrations
            .get(&id)
            .map(MigrationView::from)
            .ok_or_else(|| {
                ApiError::from(ClaimError::NotFound {
                    what: "migration",
                    id: id.to_string(),
                })
            })
    })
}

/// `GET /healthz`.
pub async fn healthz(State(state): St) -> (StatusCode, Json<Health>) {
    let h = state.health();
    let interval = state.config().audit.interval_s;
    let stale = h
        .last_success
        .is_none_or(|t| t.elapsed().as_secs() > 3 * interval + 60);
    let store_unavailable = state.service.store_unavailable();
    let status = if state.stopping() {
        HealthStatus::Stopping
    } else if h.failing_in_a_row > 0 || stale || store_unavailable.is_some() {
        HealthStatus::Degraded
    } else {
        HealthStatus::Ok
    };
    let code = if state.stopping() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    let health = Health {
        status,
        version: env!("CARGO_PKG_VERSION").to_string(),
        audits_succeeded: h.succeeded,
        audits_failing_in_a_row: h.failing_in_a_row,
        last_audit_at: h.last_success_at,
        last_audit_seconds: h.last_duration.map(|d| d.as_secs_f64()),
        last_audit_error: h.last_error,
        store_unavailable,
        placement_drift: state.drift().map(|d| DriftCounts {
            counts: d.counts,
            at: d.at,
        }),
    };
    (code, Json(health))
}

/// `GET /metrics`: OpenMetrics when the scraper asks for it, else the Prometheus text format.
pub async fn metrics(State(state): St, headers: axum::http::HeaderMap) -> ApiResult {
    let openmetrics = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("application/openmetrics-text"));
    let text = blocking(move || Ok(state.metrics.render(&state.service, openmetrics))).await?;
    let content_type = if openmetrics {
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    } else {
        "text/plain; version=0.0.4; charset=utf-8"
    };
    Ok(([(header::CONTENT_TYPE, content_type)], text).into_response())
}

/// `GET /v1/openapi.json`.
pub async fn openapi() -> Response {
    Json(super::openapi::document()).into_response()
}

/// Unknown path.
pub async fn no_route(uri: Uri) -> Response {
    ApiError::new(
        ErrorCode::NoSuchRoute,
        format!(
            "{} is not a route of this API; see GET /v1/openapi.json",
            uri.path()
        ),
    )
    .into_response()
}

/// Known path, wrong method.
pub async fn wrong_method(method: Method, uri: Uri) -> Response {
    let allowed: Vec<&str> = super::openapi::ROUTES
        .iter()
        .filter(|(_, p)| super::openapi::path_matches(p, uri.path()))
        .map(|(m, _)| *m)
        .collect();
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        format!(
            "{method} is not accepted on {}; use {}",
            uri.path(),
            allowed.join(" or ")
        ),
    )
    .into_response()
}
