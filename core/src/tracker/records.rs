//! The tracker's records, what the store persists: claims, PCI providers' uuids, the consumers
//! released here, the counters, and [`TrackerState`] holding them all with the instances and
//! migrations ([`super::model`]).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use std::sync::Arc;

use super::model::{InstanceRecord, InstanceRequest, MigrationRecord};
use super::numa::FittedTopology;
use super::pci::claim::Assignment;
use super::usage::Usage;
use crate::inventory::resources::ResourceClass;
use crate::probes::pci::PciAddress;
use crate::tracker::pci::devices::TrackedDevices;
use uuid::Uuid;

/// A granted claim, kept for idempotent retries and reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimRecord {
    /// The instance the claim is for.
    pub instance_uuid: String,
    /// For a move claim, the migration.
    pub migration_id: Option<i64>,
    /// What was asked (a retry must ask the same); shared with the instance's record.
    pub request: Arc<InstanceRequest>,
    /// Devices given.
    pub assignments: Vec<Assignment>,
    /// Resources counted, per class.
    pub resources: BTreeMap<ResourceClass, i64>,
    /// Where the guest's NUMA cells were placed, CPUs pinned and page size chosen; shared
    /// with the instance's record (or its migration context, for a move).
    #[serde(default)]
    pub numa_topology: Option<Arc<FittedTopology>>,
    /// vGPUs (and their mdevs) and encryption contexts given, per provider below the compute
    /// node; shared with the instance's record (or its migration context).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nested: Option<Arc<crate::tracker::nested::NestedAllocation>>,
    /// When, seconds since the epoch.
    pub claimed_at: i64,
}

/// The Placement provider of a PCI child (`[pci] report_in_placement`), by the address it is
/// named after. Kept so that the uuid stays what Placement knows whatever changes on the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PciProviderRecord {
    /// The provider's uuid.
    pub uuid: uuid::Uuid,
    /// Where the uuid came from.
    pub origin: PciProviderOrigin,
}

/// Where a PCI provider's uuid came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PciProviderOrigin {
    /// Derived by rtrack from the compute node uuid and the provider name.
    Derived,
    /// Taken over from a provider of the same name under this compute node in Placement (left
    /// there by nova-compute, which gives them random uuids).
    Adopted,
}

/// Everything the tracker keeps (what the store persists).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrackerState {
    // The records are behind `Arc`s: the service's committed view and the changes on their
    // way to the store share them with the working tracker, which copies one only to change it
    // (`Arc::make_mut`).
    /// Tracked PCI devices, by address.
    pub devices: TrackedDevices,
    /// Instances on or moving to/from this node.
    pub instances: BTreeMap<String, Arc<InstanceRecord>>,
    /// Migrations to, from or on this node, by id.
    pub migrations: BTreeMap<i64, MigrationRecord>,
    /// Instance claims, by instance.
    pub claims: BTreeMap<String, Arc<ClaimRecord>>,
    /// Move claims, by migration.
    pub move_claims: BTreeMap<i64, Arc<ClaimRecord>>,
    /// Nova's failed_builds counter.
    pub failed_builds: u64,
    /// Next id for migrations rtrack creates.
    pub next_migration_id: i64,
    /// The ComputeNode primitive of the last audit that changed it (kept only when it changes;
    /// `updated_at` alone does not count as a change).
    #[serde(default)]
    pub compute_node: Option<serde_json::Value>,
    /// PCI child providers' uuids, by the address each is named after.
    #[serde(default)]
    pub pci_providers: BTreeMap<PciAddress, PciProviderRecord>,
    /// Placement consumers released here whose part in Placement is still to be removed.
    #[serde(default)]
    pub released_consumers: BTreeMap<uuid::Uuid, ReleasedConsumer>,
}

impl TrackerState {
    /// Makes each instance claim share its instance's request and NUMA placement when they
    /// are equal (as they are when a claim is made): rows are read one by one, and memory
    /// should not hold each twice.
    pub fn share_requests(&mut self) {
        for (uuid, claim) in self.claims.iter_mut() {
            if let Some(inst) = self.instances.get(uuid) {
                if !Arc::ptr_eq(&claim.request, &inst.request) && claim.request == inst.request {
                    Arc::make_mut(claim).request = inst.request.clone();
                }
                if let (Some(c), Some(i)) = (&claim.numa_topology, &inst.numa_topology) {
                    if !Arc::ptr_eq(c, i) && c == i {
                        let shared = Some(i.clone());
                        Arc::make_mut(claim).numa_topology = shared;
                    }
                }
            }
        }
    }
}

/// Nova's failed-build counter and the next migration id rtrack assigns, as one row.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// Builds that failed in a row.
    pub failed_builds: u64,
    /// The next migration id rtrack assigns.
    pub next_migration_id: i64,
}

/// A consumer released here whose part of its allocation in Placement is still to go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleasedConsumer {
    /// The instance whose claim (or move) it held.
    pub instance_uuid: String,
    /// When it was released, seconds since the epoch: a read of Placement that started later
    /// sees every allocation written before the release.
    pub released_at: i64,
}

/// The Placement consumers each instance's counted resources are held under (its own uuid; a
/// migration's during a move).
pub type Holdings = BTreeMap<String, BTreeSet<Uuid>>;

/// Holders by instance, from usage.
pub fn holdings(usage: &Usage) -> Holdings {
    let mut out = Holdings::new();
    for c in &usage.consumers {
        if let Ok(u) = Uuid::parse_str(&c.holder.uuid) {
            out.entry(c.instance_uuid.clone()).or_default().insert(u);
        }
    }
    out
}
