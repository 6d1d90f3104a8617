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

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::State;
use axum::http::{header, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::bodies::parse_body;
use super::error::{ApiError, ErrorCode};
use crate::api::shared::DaemonState;
use crate::echo::{bounded_message, quoted};
use crate::inventory::format_utc;
use crate::tracker::numa::nova::instance_object;
use crate::tracker::ClaimError;
use crate::tracker::ClaimOutcome;
use crate::tracker::ClaimRecord;

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

pub(super) fn body_error(r: BytesRejection, limit_hint: &str) -> ApiError {
    if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(
            ErrorCode::PayloadTooLarge,
            format!("the body is larger than {limit_hint} ([api] max_body_bytes)"),
        )
    } else {
        ApiError::new(
            ErrorCode::BadBody,
            format!("cannot read the body: {}", bounded_message(&r.to_string())),
        )
    }
}

pub(super) fn query_error(r: QueryRejection) -> ApiError {
    ApiError::new(
        ErrorCode::InvalidRequest,
        format!("query string: {}", bounded_message(&r.body_text())),
    )
}

pub(super) fn path_error(r: PathRejection) -> ApiError {
    ApiError::new(
        ErrorCode::InvalidRequest,
        format!("path: {}", bounded_message(&r.body_text())),
    )
}

pub(super) fn limit_hint(state: &DaemonState) -> String {
    format!("{} bytes", state.config().api.max_body_bytes)
}

pub(super) fn json_body<T: serde::de::DeserializeOwned>(
    state: &DaemonState,
    headers: &axum::http::HeaderMap,
    body: Result<Bytes, BytesRejection>,
    what: &str,
) -> Result<T, ApiError> {
    if let Some(ct) = headers.get(header::CONTENT_TYPE) {
        let ct = ct.to_str().unwrap_or("");
        let essence = ct.split(';').next().unwrap_or("").trim();
        if !(essence.eq_ignore_ascii_case("application/json") || essence.ends_with("+json")) {
            return Err(ApiError::new(
                ErrorCode::UnsupportedMediaType,
                format!("Content-Type {}: expected application/json", quoted(ct)),
            ));
        }
    }
    let bytes = body.map_err(|r| body_error(r, &limit_hint(state)))?;
    parse_body(&bytes, what)
}

/// A claim as the API shows it.
pub fn claim_view(c: &ClaimRecord) -> Value {
    let f = &c.request.flavor;
    json!({
        "instance_uuid": c.instance_uuid,
        "migration_id": c.migration_id,
        "resources": c.resources.iter().map(|(k, v)| (k.as_str().to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "pci_devices": c.assignments,
        "flavor": {
            "id": f.id, "flavorid": f.flavorid, "name": f.name, "vcpus": f.vcpus,
            "memory_mb": f.memory_mb, "root_gb": f.root_gb, "ephemeral_gb": f.ephemeral_gb,
            "swap": f.swap_mb,
        },
        "is_bfv": c.request.is_bfv,
        "numa_cells": c.numa_topology.as_ref().map(|t| t.host_cells()).unwrap_or_default(),
        "numa_topology": c.numa_topology.as_ref().map(|t| instance_object(t).to_primitive()),
        "mdevs": c.nested.as_ref().map(|n| n.mdevs.clone()).unwrap_or_default(),
        "pmem_namespaces": c.nested.as_ref().map(|n| n.pmem.clone()).unwrap_or_default(),
        "nested": c.nested.as_ref().map(|n| n.units.clone()).unwrap_or_default(),
        "claimed_at": time::OffsetDateTime::from_unix_timestamp(c.claimed_at).map(format_utc).unwrap_or_default(),
    })
}

pub(super) fn outcome_view(o: &ClaimOutcome) -> Value {
    let mut v = claim_view(&o.claim);
    if let Value::Object(m) = &mut v {
        m.insert("existing".into(), json!(o.existing));
        m.insert("dry_run".into(), json!(o.dry_run));
    }
    v
}

/// An instance uuid from the path, checked; the request's span records it.
pub(super) fn check_uuid(u: &str, field: &str) -> Result<String, ApiError> {
    let uuid = uuid::Uuid::parse_str(u)
        .map(|x| x.hyphenated().to_string())
        .map_err(|_| ApiError::invalid(field, format!("{} is not a UUID", quoted(u))))?;
    tracing::Span::current().record("instance_uuid", uuid.as_str());
    Ok(uuid)
}

pub(super) fn migration_view(state: &DaemonState, id: i64) -> Result<Value, ApiError> {
    state.service.read(|t| {
        t.state()
            .migrations
            .get(&id)
            .map(|m| serde_json::to_value(m).unwrap_or(Value::Null))
            .ok_or_else(|| {
                ApiError::from(ClaimError::NotFound {
                    what: "migration",
                    id: id.to_string(),
                })
            })
    })
}

/// `GET /healthz`.
pub async fn healthz(State(state): St) -> Response {
    let h = state.health();
    let interval = state.config().audit.interval_s;
    let stale = h
        .last_success
        .is_none_or(|t| t.elapsed().as_secs() > 3 * interval + 60);
    let store_unavailable = state.service.store_unavailable();
    let status = if h.failing_in_a_row > 0 || stale || store_unavailable.is_some() {
        "degraded"
    } else {
        "ok"
    };
    let code = if state.stopping() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    (
        code,
        Json(json!({
            "status": if state.stopping() { "stopping" } else { status },
            "version": env!("CARGO_PKG_VERSION"),
            "audits_succeeded": h.succeeded,
            "audits_failing_in_a_row": h.failing_in_a_row,
            "last_audit_at": h.last_success_at,
            "last_audit_seconds": h.last_duration.map(|d| d.as_secs_f64()),
            "last_audit_error": h.last_error,
            "store_unavailable": store_unavailable,
            "placement_drift": state.drift().map(|d| {
                let mut v = json!(d.counts);
                v["at"] = json!(d.at);
                v
            }),
        })),
    )
        .into_response()
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
