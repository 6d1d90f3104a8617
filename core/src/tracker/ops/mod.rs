//! The tracker's operations, one file per kind. Each checks everything before it changes
//! anything, so a refused operation leaves no trace.
//!
//! In: an instance's request ([`InstanceInfo`] and [`InstanceRequest`]), a move ([`MoveRequest`]),
//! a state update ([`InstanceUpdate`]), a new probe. Out: an outcome ([`ClaimOutcome`],
//! [`AuditOutcome`]) and the [`Changes`] to commit.
//!
//! - [`claim`]: build claims, aborts, the failed-build counter;
//! - [`attach`]: devices for a port attached to a running instance, released on detach;
//! - [`moves`]: resize, migration, live migration, evacuation; confirm and revert;
//! - [`instance`]: state updates (`update_usage`);
//! - [`audit`]: a new probe, device re-sync, stale migrations, the ComputeNode;
//! - [`numa`]: per-cell usage and reports, and what a new configuration would strand;
//! - [`pci`]: the PCI index, pools, and device changes written into the records;
//! - [`pci_providers`]: the PCI Placement providers' uuids, and claims held to them.
//!
//! [`Changes`]: crate::tracker::Changes

pub mod adopt;
pub mod attach;
pub mod audit;
pub mod claim;
pub mod instance;
mod move_claim;
pub mod moves;
mod nested;
pub mod numa;
pub mod pci;
pub mod pci_providers;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::model::InstanceRequest;
use super::numa::FittedTopology;
use crate::objects::compute_node::ComputeNode;
use crate::objects::Versioned;
use crate::probes::pci::PciAddress;
use crate::tracker::{Changes, ClaimRecord};

/// Who the instance is (besides what it asks for).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceInfo {
    /// The instance's uuid.
    pub uuid: String,
    /// The instance's project, if known.
    pub project_id: Option<String>,
    /// The instance's user, if known.
    pub user_id: Option<String>,
    /// Guest OS type.
    pub os_type: Option<String>,
    /// VM state (default "building" for a claim).
    pub vm_state: Option<String>,
    /// Task state.
    pub task_state: Option<String>,
    /// Current host (for a move: the source).
    pub host: Option<String>,
    /// Current node (for a move: the source).
    pub node: Option<String>,
    /// Placement's allocation for the instance here, when the caller has it (Nova's compute
    /// has it at spawn and at the move's destination): provider -> class -> amount. vGPUs and
    /// encryption contexts are taken from the providers it names.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocations:
        BTreeMap<uuid::Uuid, BTreeMap<crate::inventory::resources::ResourceClass, i64>>,
    /// A claim for a guest that already runs here (a host taken over from Nova's tracker):
    /// where it is placed (the instance's `numa_topology`). Counted as it is, not fitted
    /// again, when it matches the request and adds no overcommit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placed_numa: Option<crate::tracker::numa::FittedTopology>,
    /// The same guest's PCI devices by request id: its requests take exactly these.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub placed_devices: BTreeMap<String, Vec<crate::probes::pci::PciAddress>>,
}

/// A granted (or, for a dry run, grantable) claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClaimOutcome {
    /// The claim.
    pub claim: ClaimRecord,
    /// The same claim was already held: nothing changed.
    pub existing: bool,
    /// Nothing was claimed: the answer to "would it fit".
    pub dry_run: bool,
}

impl ClaimOutcome {
    /// A claim granted now.
    pub(crate) fn granted(claim: ClaimRecord) -> ClaimOutcome {
        ClaimOutcome {
            claim,
            existing: false,
            dry_run: false,
        }
    }

    /// The answer to "would it fit": `claim` as it would be, nothing changed.
    pub(crate) fn would_fit(claim: ClaimRecord) -> (ClaimOutcome, Changes) {
        (
            ClaimOutcome {
                claim,
                existing: false,
                dry_run: true,
            },
            Changes::default(),
        )
    }
}

/// The kind of move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MoveType {
    /// Resize (flavor changes).
    Resize,
    /// Cold migration.
    Migration,
    /// Live migration.
    LiveMigration,
    /// Evacuation (rebuild on another host).
    Evacuation,
}

impl MoveType {
    /// Every kind, in the order the API lists them.
    pub const ALL: [MoveType; 4] = [
        MoveType::Resize,
        MoveType::Migration,
        MoveType::LiveMigration,
        MoveType::Evacuation,
    ];

    /// Nova's migration_type string.
    pub fn as_str(self) -> &'static str {
        match self {
            MoveType::Resize => "resize",
            MoveType::Migration => "migration",
            MoveType::LiveMigration => "live-migration",
            MoveType::Evacuation => "evacuation",
        }
    }
}

/// A move to claim (at the destination) or to register (at the source).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveRequest {
    /// The instance as it is now (host/node = source).
    pub instance: InstanceInfo,
    /// What it has now; `None`: what this host records for it, else the same as `new`
    /// (filled under the tracker lock, so it cannot change between reading and claiming).
    pub current: Option<InstanceRequest>,
    /// What it will have at the destination (same flavor unless resizing).
    pub new: InstanceRequest,
    /// Where its NUMA cells are now, as the caller knows it (the instance's `numa_topology`);
    /// used when this host does not record the instance (a live migration keeps its page size).
    #[serde(default)]
    pub current_numa: Option<FittedTopology>,
    /// Kind; default: resize when the flavor changes, else migration.
    pub move_type: Option<MoveType>,
    /// An existing migration to reuse (Nova's migration id), else rtrack creates one.
    pub migration_id: Option<i64>,
    /// The migration's uuid, when the caller has one.
    pub migration_uuid: Option<String>,
    /// Source host; default the instance's host.
    pub source_compute: Option<String>,
    /// Source node; default the instance's node.
    pub source_node: Option<String>,
    /// Destination host; default this host.
    pub dest_compute: Option<String>,
    /// Destination node; default this node.
    pub dest_node: Option<String>,
}

/// Changes to an instance's state (`update_usage`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceUpdate {
    /// New VM state.
    pub vm_state: Option<String>,
    /// New task state (`""` clears it).
    pub task_state: Option<String>,
    /// New host (e.g. the destination after finish_resize).
    pub host: Option<String>,
    /// New node.
    pub node: Option<String>,
    /// Switch the instance to its new flavor (finish_resize).
    #[serde(default)]
    pub apply_new_flavor: bool,
}

/// A PCI pool's size and free count (for `/v1/usage` and metrics).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PoolUsage {
    /// Vendor id.
    pub vendor_id: String,
    /// Product id.
    pub product_id: String,
    /// NUMA node.
    pub numa_node: Option<u32>,
    /// Other pool keys: dev_type, address (the PF's, or the device's), physical_network...
    pub tags: BTreeMap<String, String>,
    /// Devices in the pool.
    pub total: u32,
    /// Devices available.
    pub free: u32,
}

/// What an audit found.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditOutcome {
    /// The node as it is now.
    pub compute_node: Versioned<ComputeNode>,
    /// Devices that appeared.
    pub devices_added: Vec<PciAddress>,
    /// Devices that vanished and were free (removed).
    pub devices_removed: Vec<PciAddress>,
    /// Devices that vanished or changed while in use (kept until freed).
    pub devices_deferred: Vec<PciAddress>,
    /// Devices freed because their owner is no longer known.
    pub devices_reclaimed: Vec<PciAddress>,
    /// Migrations marked error because their instance moved on.
    pub stale_migrations: Vec<i64>,
    /// Mediated devices the host shows now and did not at the previous audit.
    pub mdevs_appeared: Vec<String>,
    /// Mediated devices the host showed at the previous audit and does not now.
    pub mdevs_vanished: Vec<String>,
    /// Mdevs given to a counted claim, existing when given, that the host no longer shows:
    /// (instance, mdev uuid).
    pub mdevs_missing: Vec<(String, String)>,
    /// vPMEM namespaces given to a counted claim that are no longer offered (gone from the
    /// host or from `[devices] pmem_namespaces`): (instance, namespace name).
    pub pmem_missing: Vec<(String, String)>,
}
