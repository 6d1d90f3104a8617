//! The answers about the daemon and the host: health, usage and the NUMA cells.
//!
//! In: the audit health, the tracker's inventory, usage, PCI pools and NUMA reports. Out: the
//! answers' types. The NUMA cells themselves are the tracker's reports, described by the
//! document's `NumaCell` and `NumaDetail` (`openapi/answers.rs`).

use std::collections::BTreeMap;

use serde::Serialize;
use utoipa::ToSchema;

use crate::config::CpuPowerManagement;
use crate::inventory::resources::{ResourceClass, ResourceInventory};
use crate::tracker::numa::power::OfflinePin;
use crate::tracker::numa::report::{CellDetail, CellReport};
use crate::tracker::PoolUsage;

/// `GET /healthz`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Health {
    /// ok; degraded when audits fail, are late or the store cannot be read; stopping.
    pub status: HealthStatus,
    /// rtrackd's version.
    pub version: String,
    /// Audits that succeeded.
    pub audits_succeeded: u64,
    /// Audits that failed in a row (0 after a success).
    pub audits_failing_in_a_row: u64,
    /// When the last successful audit ended, `YYYY-MM-DDTHH:MM:SSZ`.
    #[schema(required)]
    pub last_audit_at: Option<String>,
    /// How long the last audit took.
    #[schema(required)]
    pub last_audit_seconds: Option<f64>,
    /// The last failure's message.
    #[schema(required)]
    pub last_audit_error: Option<String>,
    /// Why changes are refused (503 store_unavailable), while they are.
    #[schema(required)]
    pub store_unavailable: Option<String>,
    /// The last reconciliation's drift counts by kind (unclaimed, missing, different,
    /// inventory_gone) and when (at); null before the first or without Placement.
    #[schema(required)]
    pub placement_drift: Option<DriftCounts>,
}

/// How the daemon is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum HealthStatus {
    /// Audits succeed and the store is readable.
    Ok,
    /// Audits fail or are late, or the store cannot be read.
    Degraded,
    /// Shutting down (answered 503).
    Stopping,
}

/// Drift counts by kind, and when they were judged.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DriftCounts {
    /// Confirmed drifts per kind.
    #[serde(flatten)]
    pub counts: BTreeMap<&'static str, usize>,
    /// When, `YYYY-MM-DDTHH:MM:SSZ`.
    #[schema(required)]
    pub at: Option<String>,
}

/// `GET /v1/usage`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Usage {
    /// Per resource class.
    #[schema(value_type = BTreeMap<String, ClassUsage>)]
    pub resources: BTreeMap<ResourceClass, ClassUsage>,
    /// PCI pools: size and free devices.
    pub pci_pools: Vec<PciPool>,
    /// Host NUMA cells.
    #[schema(schema_with = numa_cells)]
    pub numa_cells: Vec<CellReport>,
    /// Instances tracked.
    pub instances: usize,
    /// Claims held (instance and move claims).
    pub claims: usize,
    /// Migrations still holding resources.
    pub migrations_in_progress: usize,
}

/// One resource class's inventory and use.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ClassUsage {
    /// Amount the host has.
    pub total: i64,
    /// Amount kept for the host.
    pub reserved: i64,
    /// Overcommit factor.
    pub allocation_ratio: f64,
    /// What consumers may use in all: `(total - reserved) x ratio`.
    pub capacity: i64,
    /// Used by the counted claims.
    pub used: i64,
    /// Capacity less used (never negative).
    pub free: i64,
    /// Largest amount one consumer may take.
    pub max_unit: i64,
}

impl ClassUsage {
    /// A class's inventory with `used` of it used.
    pub fn new(inv: &ResourceInventory, used: i64) -> ClassUsage {
        ClassUsage {
            total: inv.total,
            reserved: inv.reserved,
            allocation_ratio: inv.allocation_ratio,
            capacity: inv.capacity(),
            used,
            free: (inv.capacity() - used).max(0),
            max_unit: inv.max_unit,
        }
    }
}

/// A PCI pool's size and free count.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PciPool {
    /// Vendor id.
    pub vendor_id: String,
    /// Product id.
    pub product_id: String,
    /// NUMA node.
    #[schema(required)]
    pub numa_node: Option<u32>,
    /// Other pool keys: dev_type, address (the PF's, or the device's), physical_network...
    pub tags: BTreeMap<String, String>,
    /// Devices in the pool.
    pub total: u32,
    /// Devices available.
    pub free: u32,
}

impl From<PoolUsage> for PciPool {
    fn from(p: PoolUsage) -> PciPool {
        PciPool {
            vendor_id: p.vendor_id,
            product_id: p.product_id,
            numa_node: p.numa_node,
            tags: p.tags,
            total: p.total,
            free: p.free,
        }
    }
}

/// `GET /v1/numa`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Numa {
    /// Every host NUMA cell, in detail.
    #[schema(schema_with = numa_details)]
    pub cells: Vec<CellDetail>,
    /// No CPU sets configured: every CPU is shared and dedicated.
    pub legacy_cpus: bool,
    /// The base page size, KiB.
    pub base_page_kb: i64,
    /// [resources] cpu_power_management; null when off.
    #[schema(required)]
    pub cpu_power_management: Option<PowerManagement>,
    /// Host CPUs pinned by counted placements that are offline.
    pub offline_pinned: Vec<OfflinePinned>,
}

/// CPU power management as configured.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PowerManagement {
    /// How dedicated CPUs are powered down.
    pub strategy: PowerStrategy,
    /// The governor of a powered-down CPU (`governor` strategy).
    pub governor_low: String,
    /// The governor of a CPU a guest runs on (`governor` strategy).
    pub governor_high: String,
}

/// How dedicated CPUs are powered down.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PowerStrategy {
    /// Taken offline (`cpuN/online` = 0).
    CpuState,
    /// Their cpufreq governor switched (they stay online).
    Governor,
}

impl From<&CpuPowerManagement> for PowerManagement {
    fn from(p: &CpuPowerManagement) -> PowerManagement {
        PowerManagement {
            strategy: match p.strategy {
                crate::config::PowerStrategy::CpuState => PowerStrategy::CpuState,
                crate::config::PowerStrategy::Governor => PowerStrategy::Governor,
            },
            governor_low: p.governor_low.clone(),
            governor_high: p.governor_high.clone(),
        }
    }
}

/// A host CPU pinned by a counted placement that is not online.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct OfflinePinned {
    /// The host CPU.
    pub cpu: u32,
    /// The instance whose placement pins it.
    #[schema(format = "uuid")]
    pub instance: String,
    /// The instance's guest runs.
    pub running: bool,
    /// Offline on purpose: power management on, guest not running.
    pub powered_down: bool,
}

impl From<OfflinePin> for OfflinePinned {
    fn from(p: OfflinePin) -> OfflinePinned {
        OfflinePinned {
            cpu: p.cpu,
            instance: p.instance,
            running: p.running,
            powered_down: p.powered_down,
        }
    }
}

/// `NumaCell`s (the tracker's [`CellReport`]s).
fn numa_cells() -> utoipa::openapi::schema::Array {
    utoipa::openapi::schema::Array::new(utoipa::openapi::Ref::from_schema_name("NumaCell"))
}

/// `NumaDetail`s (the tracker's [`CellDetail`]s).
fn numa_details() -> utoipa::openapi::schema::Array {
    utoipa::openapi::schema::Array::new(utoipa::openapi::Ref::from_schema_name("NumaDetail"))
}
