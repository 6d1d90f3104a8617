//! Routes that talk to Placement through the report loop: reconciliation (`POST
//! /v1/reconcile`) and adoption of the instances a host runs when rtrack takes it over from
//! nova-compute (`POST /v1/adopt`).
//!
//! In: `{"fix": bool}`; `{"apply": bool, "devices": {instance uuid: [PCI address]}}`. Out: the
//! drift (and with `fix`, what stays and what rtrack will not touch and why); the adoption plan
//! (claims, instances held already, problems, notes), committed in one transaction with
//! `apply` when nothing stands in the way (else `409 conflict` with the plan); `409` when
//! Placement is not configured, `503` when it does not answer.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::IntoResponse;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::super::error::{ApiError, ErrorCode};
use super::super::shared::{ReconcileAnswer, UpstreamCommand, UpstreamCommandError};
use super::*;
use crate::probes::pci::PciAddress;
use crate::upstream::adoption::{adoptees, DeviceFacts};
use crate::upstream::reconcile::{Drift, DriftKind};

/// `POST /v1/reconcile`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = ReconcileRequest)]
pub struct ReconcileBody {
    /// Write what rtrack owns (its inventories; with `report_allocations`, the allocations),
    /// then read Placement again. Default false: read and compare only.
    #[serde(default)]
    pub fix: bool,
    /// Consumers with no local claim whose part on this host's providers to remove (their
    /// other parts kept): each refused while it holds a claim here, was released here, or was
    /// first seen unclaimed less than `[placement] unclaimed_grace_s` ago.
    #[serde(default)]
    #[schema(schema_with = uuid_list_schema)]
    pub remove_unclaimed: Vec<uuid::Uuid>,
}

/// `POST /v1/adopt`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = AdoptRequest)]
pub struct AdoptBody {
    /// Commit the plan (one transaction). Default false: the plan only.
    #[serde(default)]
    pub apply: bool,
    /// Which PCI devices instances have, when the operator knows; an instance not named gets
    /// free devices of the providers it holds, in Nova's pool order (the highest addresses first).
    #[serde(default)]
    pub devices: Vec<DeviceMapEntry>,
    /// Adopt consumers of no type as instances (Placement before 1.38, or allocations written
    /// by a Nova that did not set types), once the operator checked no move is in progress.
    #[serde(default)]
    pub assume_instances: bool,
}

/// One instance's devices in an adoption's device map.
#[derive(Debug, Clone, Default, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeviceMapEntry {
    /// The instance.
    #[schema(format = "uuid")]
    pub instance_uuid: String,
    /// Its devices' PCI addresses (`dddd:bb:ss.f`).
    #[schema(schema_with = address_list_schema)]
    pub addresses: Vec<String>,
}

/// An array of UUIDs (what `uuid::Uuid` parses: the hyphenated form is documented).
fn uuid_list_schema() -> utoipa::openapi::schema::Array {
    use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, SchemaFormat, Type};
    ArrayBuilder::new()
        .items(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .format(Some(SchemaFormat::Custom("uuid".into())))
                .pattern(Some(
                    "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$",
                )),
        )
        .build()
}

/// An array of PCI addresses, each matching [`PciAddress::PATTERN`] (what the parser takes).
fn address_list_schema() -> utoipa::openapi::schema::Array {
    use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, Type};
    ArrayBuilder::new()
        .items(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(PciAddress::PATTERN)),
        )
        .build()
}

/// Sends `make(reply)` to the report loop and waits for the answer.
pub(super) async fn ask<T>(
    state: &crate::api::shared::DaemonState,
    make: impl FnOnce(tokio::sync::oneshot::Sender<Result<T, UpstreamCommandError>>) -> UpstreamCommand,
) -> Result<T, ApiError> {
    let not_configured = || {
        ApiError::new(
            ErrorCode::Conflict,
            UpstreamCommandError::NotConfigured.to_string(),
        )
    };
    let tx = state.upstream().ok_or_else(not_configured)?;
    let (reply, answer) = tokio::sync::oneshot::channel();
    tx.send(make(reply)).await.map_err(|_| {
        ApiError::new(
            ErrorCode::ShuttingDown,
            "the report loop stopped (shutting down)",
        )
    })?;
    match answer.await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e @ UpstreamCommandError::NotConfigured)) => {
            Err(ApiError::new(ErrorCode::Conflict, e.to_string()))
        }
        Ok(Err(e)) => Err(ApiError::new(
            ErrorCode::NotReady,
            format!("Placement could not be read: {e}"),
        )),
        Err(_) => Err(ApiError::new(
            ErrorCode::ShuttingDown,
            "the report loop stopped (shutting down)",
        )),
    }
}

/// Why rtrack leaves a drift as it is.
fn not_touched(d: &Drift, report_allocations: bool) -> Vec<Value> {
    let mut out = Vec::new();
    for c in &d.consumers {
        let why = if !report_allocations {
            "allocations here are written by Nova's scheduler and conductor ([placement] report_allocations = false): nova-manage placement heal_allocations and audit repair them"
        } else if c.kind == DriftKind::Unclaimed {
            "no local claim here: rtrack removes only what it released; if no build for it is on its way, `rtrackctl reconcile --remove-unclaimed <uuid>` removes this host's part"
        } else {
            "Placement refused the allocation (see rtrackd's log: over capacity, a class it lacks)"
        };
        out.push(json!({"consumer": c.consumer, "kind": c.kind, "why": why}));
    }
    for i in &d.inventories {
        let why = if i.used.unwrap_or(0) > 0 {
            "allocations still use it: Placement refuses to remove inventory in use; it goes once they do"
        } else {
            "rtrack removes it at its next report (or Placement refused: see rtrackd's log)"
        };
        out.push(json!({"provider": i.provider, "class": i.class, "why": why}));
    }
    out
}

/// `POST /v1/reconcile`: Placement read now and compared with the local claims and the host.
pub async fn reconcile(
    State(state): St,
    headers: axum::http::HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let body: ReconcileBody = if body.as_ref().is_ok_and(|b| b.is_empty()) {
        ReconcileBody::default()
    } else {
        json_body(&state, &headers, body, "a reconcile request")?
    };
    let fix = body.fix;
    let remove = body.remove_unclaimed;
    let answer = ask(&state, |reply| UpstreamCommand::Reconcile {
        fix,
        remove,
        reply,
    })
    .await?;
    let v = match answer {
        ReconcileAnswer::Inspected(d) => {
            tracing::info!(target: "rtrack::upstream", counts = ?d.counts(), "reconciliation asked for");
            json!({"drift": d, "counts": d.counts(), "fixed": false})
        }
        ReconcileAnswer::Fixed(f) => {
            tracing::info!(target: "rtrack::upstream", found = ?f.found.counts(), remaining = ?f.remaining.counts(), "reconciliation with --fix");
            json!({
                "drift": f.remaining,
                "counts": f.remaining.counts(),
                "found": f.found,
                "found_counts": f.found.counts(),
                "fixed": true,
                "report_allocations": f.report_allocations,
                "not_touched": not_touched(&f.remaining, f.report_allocations),
            })
        }
        ReconcileAnswer::Removed(r, d) => {
            tracing::info!(target: "rtrack::upstream", removed = ?r.removed, refused = r.refused.len(), "removal of unclaimed consumers asked for");
            json!({"drift": d, "counts": d.counts(), "fixed": false, "removed": r.removed, "refused": r.refused})
        }
    };
    Ok(Json(v).into_response())
}

/// `POST /v1/refresh`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = RefreshRequest)]
pub struct RefreshBody {
    /// DISK_GB totals from the caller, in GiB (only with `[host] disk_source = "caller"`): kept
    /// in the state directory and used by this and every later audit until the next.
    #[serde(default)]
    pub disk_gb: Option<crate::api::disk_facts::DiskTotals>,
}

/// `POST /v1/refresh`: an audit now (the host probed again), then a report to Placement now;
/// answered once both are done. `503 not_ready` when either failed. The body may give the
/// caller's DISK_GB totals first.
pub async fn refresh(
    State(state): St,
    headers: axum::http::HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let body: RefreshBody = if body.as_ref().is_ok_and(|b| b.is_empty()) {
        RefreshBody::default()
    } else {
        json_body(&state, &headers, body, "a refresh request")?
    };
    if let Some(totals) = body.disk_gb {
        if state.config().host.disk_source != crate::config::DiskSource::Caller {
            // A well-formed request this daemon's configuration does not take.
            return Err(ApiError::new(
                ErrorCode::Conflict,
                "disk_gb: accepted only with [host] disk_source = \"caller\" (DISK_GB is measured from the instances path here)",
            )
            .with_details(json!({"field": "disk_gb"})));
        }
        totals
            .check()
            .map_err(|(field, why)| ApiError::invalid(&field, why))?;
        let st = state.clone();
        blocking(move || {
            st.set_caller_disk(totals).map_err(|e| {
                ApiError::new(
                    ErrorCode::StoreFailed,
                    format!("the DISK_GB totals could not be kept in the state directory: {e}"),
                )
            })
        })
        .await?;
    }
    let tx = state
        .refresh()
        .ok_or_else(|| ApiError::new(ErrorCode::NotReady, "rtrackd is not serving yet"))?;
    let (reply, answer) = tokio::sync::oneshot::channel();
    let stopped = || {
        ApiError::new(
            ErrorCode::ShuttingDown,
            "the refresh task stopped (shutting down)",
        )
    };
    tx.send(reply).await.map_err(|_| stopped())?;
    let a = answer.await.map_err(|_| stopped())?;
    let placement = match &a.placement {
        None => Value::Null,
        Some(Ok(r)) => serde_json::to_value(r).unwrap_or(Value::Null),
        Some(Err(e)) => json!({"error": e}),
    };
    let failed = a.audit_error.is_some() || matches!(a.placement, Some(Err(_)));
    tracing::info!(target: "rtrack::upstream", audit_error = ?a.audit_error, placement = %placement, "refresh asked for");
    if failed {
        return Err(ApiError::new(
            ErrorCode::NotReady,
            format!(
                "refresh incomplete: audit: {}; placement: {}",
                a.audit_error.as_deref().unwrap_or("ok"),
                match &a.placement {
                    Some(Err(e)) => e.as_str(),
                    _ => "ok",
                }
            ),
        ));
    }
    Ok(Json(json!({"audited": true, "placement": placement})).into_response())
}

/// `POST /v1/adopt`: the instances Placement says this host runs, as local claims.
pub async fn adopt(
    State(state): St,
    headers: axum::http::HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let body: AdoptBody = if body.as_ref().is_ok_and(|b| b.is_empty()) {
        AdoptBody::default()
    } else {
        json_body(&state, &headers, body, "an adopt request")?
    };
    let mut map: BTreeMap<uuid::Uuid, Vec<PciAddress>> = BTreeMap::new();
    for (i, entry) in body.devices.iter().enumerate() {
        let u = check_uuid(&entry.instance_uuid, &format!("devices[{i}].instance_uuid"))?;
        let u = uuid::Uuid::parse_str(&u).map_err(|_| {
            ApiError::invalid(&format!("devices[{i}].instance_uuid"), "is not a uuid")
        })?;
        for a in &entry.addresses {
            let addr = PciAddress::parse(a).ok_or_else(|| {
                ApiError::invalid(
                    &format!("devices[{i}].addresses"),
                    format!(
                        "{} is not a PCI address (dddd:bb:ss.f)",
                        crate::echo::quoted(a)
                    ),
                )
            })?;
            map.entry(u).or_default().push(addr);
        }
    }
    let read = ask(&state, |reply| UpstreamCommand::ReadAllocations { reply }).await?;
    if let Some(p) = &read.root_problem {
        return Err(ApiError::new(ErrorCode::Conflict, p.clone()));
    }
    let apply = body.apply;
    let assume_instances = body.assume_instances;
    let st = state.clone();
    let (plan, notes) = blocking(move || {
        // nova-compute's PCI and nested providers: claims follow allocations against them.
        if !read.adopted_pci.is_empty() {
            st.service.adopt_pci_providers(&read.adopted_pci)?;
        }
        st.service.adopt_nested_providers(&read.adopted_nested);
        let (facts, legacy) = st.service.read(|t| {
            let facts: Vec<DeviceFacts> = t
                .state()
                .devices
                .values()
                .map(|d| DeviceFacts {
                    address: d.address,
                    vendor_id: d.vendor_id.clone(),
                    product_id: d.product_id.clone(),
                    dev_type: d.dev_type,
                    available: d.status == crate::tracker::pci::devices::DeviceStatus::Available,
                })
                .collect();
            (facts, t.numa_host().legacy_cpus)
        });
        let tr = adoptees(
            &read.holdings,
            &read.desired,
            &facts,
            &map,
            legacy,
            assume_instances,
        );
        let plan = st.service.adopt(&tr.adoptees, tr.problems, apply)?;
        Ok((plan, tr.notes))
    })
    .await?;
    let notes: Vec<Value> = notes
        .iter()
        .map(|(c, n)| json!({"consumer": c, "note": n}))
        .collect();
    let claims: Vec<Value> = plan.claims.iter().map(claim_view).collect();
    let v = json!({
        "applied": plan.applied,
        "claims": claims,
        "existing": plan.existing,
        "problems": plan.problems,
        "notes": notes,
    });
    tracing::info!(target: "rtrack::claims", operation = "adopt", apply, applied = plan.applied, claims = plan.claims.len(), existing = plan.existing.len(), problems = plan.problems.len(), "adoption");
    if apply && !plan.applied && !plan.problems.is_empty() {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            format!(
                "nothing adopted: {} consumer(s) cannot be adopted (a running instance left out would count as free room); see details.problems",
                plan.problems.len()
            ),
        )
        .with_details(v));
    }
    Ok(Json(v).into_response())
}
