//! Reads: inventory, the ComputeNode, usage, claims and migrations, all from committed state.
//!
//! In: `GET` requests (an instance uuid or a migration id in the path, `?version=X.Y` for the
//! ComputeNode) and the committed tracker. Out: JSON: the `--once` report with the ComputeNode as
//! it is now, the ComputeNode primitive (backported on request), usage per class and PCI pool,
//! claims and migrations; or an [`ApiError`] (`not_found`, `not_ready`...).

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::response::IntoResponse;
use axum::Json;
use serde_json::{json, Value};

use super::super::bodies::VersionQuery;
use super::super::error::{ApiError, ErrorCode};
use super::*;
use crate::echo::quoted;
use crate::objects::{current_manifest, ObjVersion};
use crate::tracker::ClaimError;

/// `GET /v1/inventory`: the `--once` report of the probe the tracker holds, with the
/// ComputeNode as it is now.
pub async fn inventory(State(state): St) -> ApiResult {
    let probed_at = state
        .probed_at()
        .ok_or_else(|| ApiError::new(ErrorCode::NotReady, "no probe has completed yet"))?;
    let body = blocking(move || {
        // Under the lock: the ComputeNode (it carries the usage) and the shared view.
        let (view, node, dedicated) = state.service.read(|t| {
            let node = t.compute_node(&t.usage(), time::OffsetDateTime::now_utc());
            let dedicated = crate::inventory::dedicated::dedicated_cpus(
                &t.view().host,
                &t.settings().policy.resources,
            );
            (t.view(), node, dedicated)
        });
        /// The `--once` report, borrowed from the view (same keys as `InventoryReport`).
        #[derive(serde::Serialize)]
        struct Report<'a> {
            rtrack_version: &'a str,
            probed_at: &'a str,
            #[serde(flatten)]
            inventory: &'a crate::probes::HostInventory,
            offered: crate::inventory::offered::Offered,
            #[serde(skip_serializing_if = "Option::is_none")]
            dedicated_cpus: Option<crate::inventory::dedicated::DedicatedCpus>,
            compute_node: Value,
        }
        let report = Report {
            rtrack_version: env!("CARGO_PKG_VERSION"),
            probed_at: &probed_at,
            inventory: &view.host,
            offered: view.offered(),
            dedicated_cpus: dedicated,
            compute_node: node.to_primitive(),
        };
        serde_json::to_value(&report).map_err(|e| {
            ApiError::new(
                ErrorCode::InternalError,
                format!("cannot encode the report: {e}"),
            )
        })
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
                "numa_cells": t.numa_report(),
                "instances": s.instances.len(),
                "claims": s.claims.len() + s.move_claims.len(),
                "migrations_in_progress": s.migrations.values().filter(|m| m.in_progress()).count(),
            })
        }))
    })
    .await?;
    Ok(Json(body).into_response())
}

/// `GET /v1/numa`: every NUMA cell, each core's CPUs with what holds them (and whether they
/// are online), memory and pages, and the PCI devices local to the cell; CPU power management
/// and the pinned CPUs that are offline.
pub async fn numa(State(state): St) -> ApiResult {
    let body = blocking(move || {
        Ok(state.service.read(|t| {
            let host = t.numa_host();
            json!({
                "cells": t.numa_details(),
                "legacy_cpus": host.legacy_cpus,
                "base_page_kb": host.base_page_kb,
                "cpu_power_management": t.settings().policy.resources.cpu_power_management,
                "offline_pinned": t.offline_pins(),
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
