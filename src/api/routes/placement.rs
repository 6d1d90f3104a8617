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

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use super::super::bodies::{AdoptBody, ReconcileBody, RefreshBody};
use super::super::error::{ApiError, ErrorCode};
use super::super::extract::{check_uuid, OptionalJson};
use super::super::shared::{ReconcileAnswer, UpstreamCommand, UpstreamCommandError};
use super::super::views::{AdoptNote, AdoptionPlanView, Reconciled, Refreshed};
use super::*;
use crate::probes::pci::PciAddress;
use crate::upstream::adoption::{adoptees, DeviceFacts};

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

/// `POST /v1/reconcile`: Placement read now and compared with the local claims and the host.
pub async fn reconcile(
    State(state): St,
    OptionalJson(body): OptionalJson<ReconcileBody>,
) -> Result<Json<Reconciled>, ApiError> {
    let fix = body.fix;
    let remove = body.remove_unclaimed;
    let answer = ask(&state, |reply| UpstreamCommand::Reconcile {
        fix,
        remove,
        reply,
    })
    .await?;
    let reconciled = match answer {
        ReconcileAnswer::Inspected(d) => {
            tracing::info!(target: "rtrack::upstream", counts = ?d.counts(), "reconciliation asked for");
            Reconciled::inspected(d)
        }
        ReconcileAnswer::Fixed(f) => {
            tracing::info!(target: "rtrack::upstream", found = ?f.found.counts(), remaining = ?f.remaining.counts(), "reconciliation with --fix");
            Reconciled::fixed(f)
        }
        ReconcileAnswer::Removed(r, d) => {
            tracing::info!(target: "rtrack::upstream", removed = ?r.removed, refused = r.refused.len(), "removal of unclaimed consumers asked for");
            Reconciled::removed(r, d)
        }
    };
    Ok(Json(reconciled))
}

/// `POST /v1/refresh`: an audit now (the host probed again), then a report to Placement now;
/// answered once both are done. `503 not_ready` when either failed. The body may give the
/// caller's DISK_GB totals first.
pub async fn refresh(
    State(state): St,
    OptionalJson(body): OptionalJson<RefreshBody>,
) -> Result<Json<Refreshed>, ApiError> {
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
    // Logged as JSON, the error as {"error": ...}.
    let logged = match &a.placement {
        None => Value::Null,
        Some(Ok(r)) => serde_json::to_value(r).unwrap_or(Value::Null),
        Some(Err(e)) => json!({"error": e}),
    };
    tracing::info!(target: "rtrack::upstream", audit_error = ?a.audit_error, placement = %logged, "refresh asked for");
    let failed = a.audit_error.is_some() || matches!(a.placement, Some(Err(_)));
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
    Ok(Json(Refreshed {
        audited: true,
        // A failed report was answered above.
        placement: a.placement.and_then(Result::ok),
    }))
}

/// `POST /v1/adopt`: the instances Placement says this host runs, as local claims.
pub async fn adopt(
    State(state): St,
    OptionalJson(body): OptionalJson<AdoptBody>,
) -> Result<Json<AdoptionPlanView>, ApiError> {
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
    let notes = notes
        .into_iter()
        .map(|(consumer, note)| AdoptNote { consumer, note })
        .collect();
    let view = AdoptionPlanView::new(&plan, notes);
    tracing::info!(target: "rtrack::claims", operation = "adopt", apply, applied = plan.applied, claims = plan.claims.len(), existing = plan.existing.len(), problems = plan.problems.len(), "adoption");
    if apply && !plan.applied && !plan.problems.is_empty() {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            format!(
                "nothing adopted: {} consumer(s) cannot be adopted (a running instance left out would count as free room); see details.problems",
                plan.problems.len()
            ),
        )
        // The plan as a 200 would show it.
        .with_details(serde_json::to_value(&view).unwrap_or(Value::Null)));
    }
    Ok(Json(view))
}
