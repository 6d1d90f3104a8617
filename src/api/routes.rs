//! Route handlers. Each parses and checks its input (400 with the field), runs the tracker
//! operation on the blocking pool, and answers JSON.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{header, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::bodies::{
    parse_body, ClaimBody, DryRunQuery, MigrationBody, ParsedClaim, ParsedMove, VersionQuery,
};
use super::error::ApiError;
use crate::daemon::metrics::ClaimDecision;
use crate::daemon::shared::DaemonState;
use crate::echo::{bounded_message, quoted};
use crate::inventory::format_utc;
use crate::objects::{current_manifest, ObjVersion};
use crate::service::{Granted, ServiceError, TrackerService};
use crate::tracker::state::{ClaimOutcome, ClaimRecord, InstanceUpdate, MoveRequest};
use crate::tracker::ClaimError;

type St = State<Arc<DaemonState>>;
type ApiResult = Result<Response, ApiError>;

/// Runs `f` on the blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        tracing::error!(error = %e, "an API operation panicked or was cancelled");
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            format!("the operation failed inside rtrackd ({e}); nothing was acknowledged"),
        )
    })?
}

fn body_error(r: BytesRejection, limit_hint: &str) -> ApiError {
    if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("the body is larger than {limit_hint} ([api] max_body_bytes)"),
        )
    } else {
        ApiError::new(
            r.status(),
            "bad_body",
            format!("cannot read the body: {}", bounded_message(&r.to_string())),
        )
    }
}

fn query_error(r: QueryRejection) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "invalid_request",
        format!("query string: {}", bounded_message(&r.body_text())),
    )
}

fn path_error(r: PathRejection) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "invalid_request",
        format!("path: {}", bounded_message(&r.body_text())),
    )
}

fn limit_hint(state: &DaemonState) -> String {
    format!("{} bytes", state.config().max_body_bytes)
}

fn json_body<T: serde::de::DeserializeOwned>(
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
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
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
        "numa_cells": c.request.numa_cells,
        "claimed_at": time::OffsetDateTime::from_unix_timestamp(c.claimed_at).map(format_utc).unwrap_or_default(),
    })
}

fn outcome_view(o: &ClaimOutcome) -> Value {
    let mut v = claim_view(&o.claim);
    if let Value::Object(m) = &mut v {
        m.insert("existing".into(), json!(o.existing));
        m.insert("dry_run".into(), json!(o.dry_run));
    }
    v
}

/// Logs and counts one claim decision.
fn record_decision(
    state: &DaemonState,
    operation: &'static str,
    uuid: &str,
    result: &Result<ClaimOutcome, ServiceError>,
) {
    match result {
        Ok(o) => {
            let decision = if o.dry_run {
                ClaimDecision::DryRun
            } else if o.existing {
                ClaimDecision::Existing
            } else {
                ClaimDecision::Granted
            };
            state.metrics.count_claim(operation, Ok(decision));
            let resources: Vec<String> = o
                .claim
                .resources
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            tracing::info!(
                target: "rtrack::claims",
                operation, instance = uuid, decision = ?decision,
                migration = ?o.claim.migration_id,
                resources = %resources.join(","), pci_devices = o.claim.assignments.len(),
                "claim granted"
            );
        }
        Err(ServiceError::Claim(e)) => {
            state.metrics.count_claim(operation, Err(e));
            tracing::info!(target: "rtrack::claims", operation, instance = uuid, code = e.code(), reason = %e, "claim refused");
        }
        Err(e) => {
            state.metrics.count_claim_error(operation);
            tracing::warn!(target: "rtrack::claims", operation, instance = uuid, error = %e, "claim failed");
        }
    }
}

/// Logs and counts a claim whose request could not be read.
fn reject_malformed(state: &DaemonState, operation: &'static str, e: &ApiError) {
    state
        .metrics
        .count_claim_outcome(operation, e.code, String::new());
    tracing::info!(target: "rtrack::claims", operation, code = e.code, reason = %e.message, "claim refused");
}

/// `GET /healthz`.
pub async fn healthz(State(state): St) -> Response {
    let h = state.health();
    let interval = state.config().audit_interval_s;
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

/// `GET /v1/inventory`: the `--once` report of the probe the tracker holds, with the
/// ComputeNode as it is now.
pub async fn inventory(State(state): St) -> ApiResult {
    let probed_at = state.probed_at().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_ready",
            "no probe has completed yet",
        )
    })?;
    let body = blocking(move || {
        let (report, node) = state.service.read(|t| {
            let report = crate::inventory::InventoryReport {
                rtrack_version: env!("CARGO_PKG_VERSION").to_string(),
                probed_at,
                inventory: t.host().clone(),
                compute_node: None,
            };
            let node = t
                .compute_node(&t.usage(), time::OffsetDateTime::now_utc())
                .to_primitive();
            (report, node)
        });
        let mut v = serde_json::to_value(&report).map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal_error",
                format!("cannot encode the report: {e}"),
            )
        })?;
        if let Value::Object(m) = &mut v {
            m.insert("compute_node".into(), node);
        }
        Ok(v)
    })
    .await?;
    Ok(Json(body).into_response())
}

/// `GET /v1/compute-node?version=X.Y`.
pub async fn compute_node(
    State(state): St,
    q: Result<Query<VersionQuery>, QueryRejection>,
) -> ApiResult {
    let Query(q) = q.map_err(query_error)?;
    let version = match &q.version {
        None => None,
        Some(v) => Some(ObjVersion::parse(v).ok_or_else(|| {
            ApiError::invalid(
                "version",
                format!("{} is not a version like 1.16", quoted(v)),
            )
        })?),
    };
    let body = blocking(move || {
        let node = state
            .service
            .read(|t| t.compute_node(&t.usage(), time::OffsetDateTime::now_utc()));
        match version {
            None => Ok(node.to_primitive()),
            Some(v) => node
                .to_primitive_at(v, Some(&current_manifest()))
                .map_err(|e| ApiError::invalid("version", e.message)),
        }
    })
    .await?;
    Ok(Json(body).into_response())
}

/// `GET /v1/usage`.
pub async fn usage(State(state): St) -> ApiResult {
    let body = blocking(move || {
        Ok(state.service.read(|t| {
            let used = t.used();
            let resources: serde_json::Map<String, Value> = t
                .inventory()
                .iter()
                .map(|(class, inv)| {
                    let u = used.get(class).copied().unwrap_or(0);
                    (
                        class.as_str().to_string(),
                        json!({
                            "total": inv.total,
                            "reserved": inv.reserved,
                            "allocation_ratio": inv.allocation_ratio,
                            "capacity": inv.capacity(),
                            "used": u,
                            "free": (inv.capacity() - u).max(0),
                            "max_unit": inv.max_unit,
                        }),
                    )
                })
                .collect();
            let s = t.state();
            json!({
                "resources": resources,
                "pci_pools": t.pool_usage(),
                "instances": s.instances.len(),
                "claims": s.claims.len() + s.move_claims.len(),
                "migrations_in_progress": s.migrations.values().filter(|m| m.in_progress()).count(),
            })
        }))
    })
    .await?;
    Ok(Json(body).into_response())
}

/// `GET /v1/claims`: every claim, instance claims first, then move claims.
pub async fn list_claims(State(state): St) -> ApiResult {
    let body = blocking(move || {
        Ok(state.service.read(|t| {
            let s = t.state();
            s.claims
                .values()
                .chain(s.move_claims.values())
                .map(claim_view)
                .collect::<Vec<_>>()
        }))
    })
    .await?;
    Ok(Json(body).into_response())
}

/// Runs a claim on the blocking pool and answers its caller. A new claim whose caller has gone
/// by the time it is granted is aborted by the service's caller-left rule ([`Granted`]); `view`
/// adds what the answer shows besides the claim (read from committed state).
async fn claim_for_caller<V: Send + 'static>(
    state: &Arc<DaemonState>,
    operation: &'static str,
    uuid: String,
    claim: impl FnOnce(&TrackerService) -> Result<Granted<'_>, ServiceError> + Send + 'static,
    dry_run: impl FnOnce(&TrackerService) -> Result<ClaimOutcome, ServiceError> + Send + 'static,
    view: impl FnOnce(&DaemonState, &ClaimOutcome) -> Result<V, ApiError> + Send + 'static,
    is_dry_run: bool,
) -> Result<(ClaimOutcome, V), ApiError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let st = state.clone();
    tokio::task::spawn_blocking(move || {
        let service: &TrackerService = &st.service;
        if is_dry_run {
            let r = dry_run(service);
            record_decision(&st, operation, &uuid, &r);
            let answer = r
                .map_err(ApiError::from)
                .and_then(|o| view(&st, &o).map(|v| (o, v)));
            let _ = tx.send(answer);
            return;
        }
        match claim(service) {
            Ok(granted) => {
                let r = Ok(granted.outcome.clone());
                record_decision(&st, operation, &uuid, &r);
                match view(&st, &granted.outcome) {
                    Ok(v) => {
                        if tx.send(Ok((granted.outcome.clone(), v))).is_ok() {
                            granted.answered();
                        }
                        // Else the caller is gone: dropping `granted` applies the rule.
                    }
                    Err(e) => {
                        // Not answered with the claim: it does not stay.
                        drop(granted);
                        let _ = tx.send(Err(e));
                    }
                }
            }
            Err(e) => {
                let r: Result<ClaimOutcome, ServiceError> = Err(e);
                record_decision(&st, operation, &uuid, &r);
                if let Err(e) = r {
                    let _ = tx.send(Err(ApiError::from(e)));
                }
            }
        }
    });
    rx.await.map_err(|_| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            "the claim operation ended without an answer; nothing was acknowledged",
        )
    })?
}

/// `POST /v1/claims[?dry_run=true]`.
pub async fn create_claim(
    State(state): St,
    q: Result<Query<DryRunQuery>, QueryRejection>,
    headers: axum::http::HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let Query(q) = q.map_err(query_error)?;
    let dry_run = q.flag()?;
    let body: ClaimBody = json_body(&state, &headers, body, "a claim")?;
    let config = state.config();
    let ParsedClaim { info, request } = body
        .parse(&config.aliases)
        .inspect_err(|e| reject_malformed(&state, "instance_claim", e))?;
    let (info2, request2) = (info.clone(), request.clone());
    let (outcome, ()) = claim_for_caller(
        &state,
        "instance_claim",
        info.uuid.clone(),
        move |s| s.guarded_claim(&info, &request),
        move |s| s.instance_claim(&info2, &request2, true),
        |_, _| Ok(()),
        dry_run,
    )
    .await?;
    if outcome.dry_run {
        return Ok(Json(json!({"fits": true, "claim": outcome_view(&outcome)})).into_response());
    }
    let status = if outcome.existing {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, Json(outcome_view(&outcome))).into_response())
}

fn check_uuid(u: &str, field: &str) -> Result<String, ApiError> {
    uuid::Uuid::parse_str(u)
        .map(|x| x.hyphenated().to_string())
        .map_err(|_| ApiError::invalid(field, format!("{} is not a UUID", quoted(u))))
}

/// `GET /v1/claims/{instance_uuid}`.
pub async fn show_claim(State(state): St, p: Result<Path<String>, PathRejection>) -> ApiResult {
    let Path(uuid) = p.map_err(path_error)?;
    let uuid = check_uuid(&uuid, "instance_uuid")?;
    let body = blocking(move || {
        state.service.read(|t| {
            let s = t.state();
            let claim = s
                .claims
                .get(&uuid)
                .or_else(|| s.move_claims.values().find(|c| c.instance_uuid == uuid))
                .ok_or_else(|| {
                    ApiError::from(ClaimError::NotFound {
                        what: "claim",
                        id: uuid.clone(),
                    })
                })?;
            let mut v = claim_view(claim);
            if let (Value::Object(m), Some(inst)) = (&mut v, s.instances.get(&uuid)) {
                m.insert(
                    "instance".into(),
                    json!({"vm_state": inst.vm_state, "task_state": inst.task_state,
                           "host": inst.host, "node": inst.node}),
                );
            }
            Ok(v)
        })
    })
    .await?;
    Ok(Json(body).into_response())
}

/// `DELETE /v1/claims/{instance_uuid}`: abort the instance's claim (or its move claim here).
pub async fn delete_claim(State(state): St, p: Result<Path<String>, PathRejection>) -> ApiResult {
    let Path(uuid) = p.map_err(path_error)?;
    let uuid = check_uuid(&uuid, "instance_uuid")?;
    let u = uuid.clone();
    blocking(move || {
        let r = state.service.abort(&u);
        match &r {
            Ok(()) => tracing::info!(target: "rtrack::claims", operation = "abort", instance = %u, "claim aborted"),
            Err(e) => tracing::info!(target: "rtrack::claims", operation = "abort", instance = %u, error = %e, "abort refused"),
        }
        r.map_err(ApiError::from)
    })
    .await?;
    Ok(Json(json!({"instance_uuid": uuid, "aborted": true})).into_response())
}

fn migration_view(state: &DaemonState, id: i64) -> Result<Value, ApiError> {
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

/// `GET /v1/migrations`.
pub async fn list_migrations(State(state): St) -> ApiResult {
    let body = blocking(move || {
        Ok(state.service.read(|t| {
            t.state()
                .migrations
                .values()
                .map(|m| serde_json::to_value(m).unwrap_or(Value::Null))
                .collect::<Vec<_>>()
        }))
    })
    .await?;
    Ok(Json(body).into_response())
}

/// `GET /v1/migrations/{id}`.
pub async fn show_migration(State(state): St, p: Result<Path<i64>, PathRejection>) -> ApiResult {
    let Path(id) = p.map_err(path_error)?;
    let body = blocking(move || migration_view(&state, id)).await?;
    Ok(Json(body).into_response())
}

/// `POST /v1/migrations[?dry_run=true]`: a resize, cold or live migration or evacuation.
pub async fn create_migration(
    State(state): St,
    q: Result<Query<DryRunQuery>, QueryRejection>,
    headers: axum::http::HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let Query(q) = q.map_err(query_error)?;
    let dry_run = q.flag()?;
    let body: MigrationBody = json_body(&state, &headers, body, "a migration")?;
    let config = state.config();
    let ParsedMove { info, new, current } = body
        .parse(&config.aliases)
        .inspect_err(|e| reject_malformed(&state, "move_claim", e))?;
    let uuid = info.uuid.clone();
    let mv = MoveRequest {
        instance: info,
        current,
        new,
        move_type: body.move_type,
        migration_id: body.migration_id,
        migration_uuid: body.migration_uuid,
        source_compute: body.source_compute,
        source_node: body.source_node,
        dest_compute: body.dest_compute,
        dest_node: body.dest_node,
    };
    let mv2 = mv.clone();
    let (outcome, migration) = claim_for_caller(
        &state,
        "move_claim",
        uuid,
        move |s| s.guarded_move(&mv),
        move |s| s.move_claim(&mv2, true),
        |st, o| match o.claim.migration_id {
            Some(id) if !o.dry_run => migration_view(st, id),
            _ => Ok(Value::Null),
        },
        dry_run,
    )
    .await?;
    let mut body = json!({
        "migration": migration,
        "claim": outcome_view(&outcome),
    });
    if outcome.dry_run {
        body["fits"] = json!(true);
        return Ok(Json(body).into_response());
    }
    let status = if outcome.existing {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, Json(body)).into_response())
}

async fn finish_migration(state: Arc<DaemonState>, id: i64, confirm: bool) -> ApiResult {
    let body = blocking(move || {
        let r = if confirm {
            state.service.confirm(id)
        } else {
            state.service.revert(id)
        };
        let op = if confirm { "confirm" } else { "revert" };
        match &r {
            Ok(()) => tracing::info!(target: "rtrack::claims", operation = op, migration = id, "migration finished"),
            Err(e) => tracing::info!(target: "rtrack::claims", operation = op, migration = id, error = %e, "refused"),
        }
        r.map_err(ApiError::from)?;
        migration_view(&state, id)
    })
    .await?;
    Ok(Json(json!({"migration": body})).into_response())
}

/// `POST /v1/migrations/{id}/confirm`.
pub async fn confirm_migration(State(state): St, p: Result<Path<i64>, PathRejection>) -> ApiResult {
    let Path(id) = p.map_err(path_error)?;
    finish_migration(state, id, true).await
}

/// `POST /v1/migrations/{id}/revert`.
pub async fn revert_migration(State(state): St, p: Result<Path<i64>, PathRejection>) -> ApiResult {
    let Path(id) = p.map_err(path_error)?;
    finish_migration(state, id, false).await
}

/// `POST /v1/instances/{uuid}/state`.
pub async fn update_instance(
    State(state): St,
    p: Result<Path<String>, PathRejection>,
    headers: axum::http::HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let Path(uuid) = p.map_err(path_error)?;
    let uuid = check_uuid(&uuid, "uuid")?;
    let update: InstanceUpdate = json_body(&state, &headers, body, "an instance state update")?;
    super::bodies::check_update(&update)?;
    let body = blocking(move || {
        state
            .service
            .update_instance(&uuid, &update)
            .map_err(ApiError::from)?;
        tracing::info!(target: "rtrack::claims", operation = "update_instance", instance = %uuid,
            vm_state = ?update.vm_state, task_state = ?update.task_state, "instance updated");
        Ok(state.service.read(|t| {
            t.state()
                .instances
                .get(&uuid)
                .map(|i| serde_json::to_value(i).unwrap_or(Value::Null))
                .unwrap_or(Value::Null)
        }))
    })
    .await?;
    Ok(Json(json!({"instance": body})).into_response())
}

/// Unknown path.
pub async fn no_route(uri: Uri) -> Response {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no_such_route",
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
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!(
            "{method} is not accepted on {}; use {}",
            uri.path(),
            allowed.join(" or ")
        ),
    )
    .into_response()
}
