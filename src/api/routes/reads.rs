//! Reads: inventory, the ComputeNode, usage, claims and migrations, all from committed state.
//!
//! In: `GET` requests (an instance uuid or a migration id in the path, `?version=X.Y` for the
//! ComputeNode) and the committed tracker. Out: JSON: the `--once` report with the ComputeNode as
//! it is now, the ComputeNode primitive (backported on request), usage per class and PCI pool,
//! claims and migrations; or an [`ApiError`] (`not_found`, `not_ready`...).

use axum::extract::State;
use axum::Json;
use serde_json::Value;

use super::super::bodies::VersionQuery;
use super::super::error::{ApiError, ErrorCode};
use super::super::extract::{ApiQuery, InstanceUuid, MigrationId};
use super::super::views::{
    ClaimShown, ClaimView, ClassUsage, InstanceState, MigrationView, Numa, OfflinePinned, PciPool,
    PowerManagement, Usage,
};
use super::*;
use crate::echo::quoted;
use crate::objects::{current_manifest, ObjVersion};
use crate::tracker::ClaimError;

/// `GET /v1/inventory`: the `--once` report of the probe the tracker holds, with the
/// ComputeNode as it is now.
pub async fn inventory(State(state): St) -> Result<Json<Value>, ApiError> {
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
    Ok(Json(body))
}

/// `GET /v1/compute-node?version=X.Y`.
pub async fn compute_node(
    State(state): St,
    ApiQuery(q): ApiQuery<VersionQuery>,
) -> Result<Json<Value>, ApiError> {
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
    Ok(Json(body))
}

/// `GET /v1/usage`.
pub async fn usage(State(state): St) -> Result<Json<Usage>, ApiError> {
    let usage = blocking(move || {
        Ok(state.service.read(|t| {
            let used = t.used();
            let s = t.state();
            Usage {
                resources: t
                    .inventory()
                    .iter()
                    .map(|(class, inv)| {
                        let u = used.get(class).copied().unwrap_or(0);
                        (class.clone(), ClassUsage::new(inv, u))
                    })
                    .collect(),
                pci_pools: t.pool_usage().into_iter().map(PciPool::from).collect(),
                numa_cells: t.numa_report(),
                instances: s.instances.len(),
                claims: s.claims.len() + s.move_claims.len(),
                migrations_in_progress: s.migrations.values().filter(|m| m.in_progress()).count(),
            }
        }))
    })
    .await?;
    Ok(Json(usage))
}

/// `GET /v1/numa`: every NUMA cell, each core's CPUs with what holds them (and whether they
/// are online), memory and pages, and the PCI devices local to the cell; CPU power management
/// and the pinned CPUs that are offline.
pub async fn numa(State(state): St) -> Result<Json<Numa>, ApiError> {
    let numa = blocking(move || {
        Ok(state.service.read(|t| {
            let host = t.numa_host();
            Numa {
                cells: t.numa_details(),
                legacy_cpus: host.legacy_cpus,
                base_page_kb: host.base_page_kb,
                cpu_power_management: t
                    .settings()
                    .policy
                    .resources
                    .cpu_power_management
                    .as_ref()
                    .map(PowerManagement::from),
                offline_pinned: t
                    .offline_pins()
                    .into_iter()
                    .map(OfflinePinned::from)
                    .collect(),
            }
        }))
    })
    .await?;
    Ok(Json(numa))
}

/// `GET /v1/claims`: every claim, instance claims first, then move claims.
pub async fn list_claims(State(state): St) -> Result<Json<Vec<ClaimView>>, ApiError> {
    let claims = blocking(move || {
        Ok(state.service.read(|t| {
            let s = t.state();
            s.claims
                .values()
                .chain(s.move_claims.values())
                .map(|c| ClaimView::from(&**c))
                .collect::<Vec<_>>()
        }))
    })
    .await?;
    Ok(Json(claims))
}

/// `GET /v1/claims/{instance_uuid}`.
pub async fn show_claim(
    State(state): St,
    InstanceUuid(uuid): InstanceUuid,
) -> Result<Json<ClaimShown>, ApiError> {
    let shown = blocking(move || {
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
            Ok(ClaimShown {
                claim: ClaimView::from(&**claim),
                instance: s.instances.get(&uuid).map(|inst| InstanceState {
                    vm_state: inst.vm_state.clone(),
                    task_state: inst.task_state.clone(),
                    host: inst.host.clone(),
                    node: inst.node.clone(),
                }),
            })
        })
    })
    .await?;
    Ok(Json(shown))
}

/// `GET /v1/migrations`.
pub async fn list_migrations(State(state): St) -> Result<Json<Vec<MigrationView>>, ApiError> {
    let migrations = blocking(move || {
        Ok(state.service.read(|t| {
            t.state()
                .migrations
                .values()
                .map(MigrationView::from)
                .collect::<Vec<_>>()
        }))
    })
    .await?;
    Ok(Json(migrations))
}

/// `GET /v1/migrations/{id}`.
pub async fn show_migration(
    State(state): St,
    MigrationId(id): MigrationId,
) -> Result<Json<MigrationView>, ApiError> {
    let migration = blocking(move || migration_view(&state, id)).await?;
    Ok(Json(migration))
}
