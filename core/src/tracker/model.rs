//! The tracker's records: what it knows about instances, migrations and their resource needs.
//! Plain data, serializable (the store keeps them as JSON).
//!
//! In: what [`super::request`] checks out of a caller's request, and what the operations record.
//! Out: the [`InstanceRecord`]s and [`MigrationRecord`]s usage is derived from, each instance's
//! [`InstanceRequest`] (a flavor's resources per class: [`FlavorUsage::resources`]), and the JSON
//! the store keeps.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use std::sync::Arc;

use super::nested::{EncryptionModel, NestedAllocation};
use super::numa::constraints::CpuDemand;
use super::numa::{FittedTopology, GuestTopology};
use super::pci::NumaPolicy;
use crate::inventory::resources::ResourceClass;

/// The parts of a flavor that consume host resources.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlavorUsage {
    /// Flavor database id (`instance_type_id`).
    pub id: i64,
    /// Public flavor id.
    pub flavorid: String,
    /// Flavor name (`m1.small`), when the request carried one.
    pub name: Option<String>,
    /// Guest VCPUs; pinned host CPUs (PCPU) when `hw:cpu_policy` is `dedicated`.
    pub vcpus: i64,
    /// Memory, MiB.
    pub memory_mb: i64,
    /// Root disk, GiB.
    pub root_gb: i64,
    /// Ephemeral disk, GiB.
    pub ephemeral_gb: i64,
    /// Swap, MiB.
    pub swap_mb: i64,
    /// Extra specs (`pci_passthrough:alias`, `hw:cpu_policy`, `hw:pci_numa_affinity_policy`...).
    pub extra_specs: BTreeMap<String, String>,
    /// The CPUs Placement is asked for, per class, as the flavor's extra specs and the image
    /// decide them (none in records written before rtrack read them: then `hw:cpu_policy`
    /// decides, as it did).
    #[serde(default)]
    pub cpus: Option<CpuDemand>,
    /// Units of the classes not every host has (VGPU, MEM_ENCRYPTION_CONTEXT, CUSTOM_*), summed
    /// over the flavor's request groups (`resources[N]:CLASS`), MEM_ENCRYPTION_CONTEXT from
    /// `hw:mem_encryption` as Nova's scheduler asks for it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra_resources: BTreeMap<ResourceClass, i64>,
    /// The memory encryption model asked for (`hw:mem_encryption_model`, default amd-sev),
    /// when the flavor asks for encryption.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_encryption_model: Option<EncryptionModel>,
}

/// The rules that turn a flavor into resources per class on this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceRules {
    /// Booted from volume: no root disk here.
    pub is_bfv: bool,
    /// DISK_GB lives on a sharing provider.
    pub shared_disk: bool,
    /// The host has neither `cpu_dedicated_set` nor `cpu_shared_set`: pinned CPUs are counted
    /// as VCPU (Nova's legacy fallback).
    pub legacy_cpus: bool,
}

impl FlavorUsage {
    /// Disk the instance uses on this host, GiB: root (none when booted from volume) plus
    /// ephemeral plus swap in whole GiB. Nova adds swap as `swap / 1024` to the node's running
    /// total and truncates the total each time; rtrack truncates each instance's swap instead,
    /// so adding and removing an instance cancel out exactly.
    pub fn disk_gb(&self, is_bfv: bool) -> i64 {
        let root = if is_bfv { 0 } else { self.root_gb };
        root + self.ephemeral_gb + self.swap_mb / 1024
    }

    /// The CPUs this flavor asks for per class (records older than [`FlavorUsage::cpus`]:
    /// all PCPU when `hw:cpu_policy` is `dedicated`, else all VCPU).
    pub fn cpu_demand(&self) -> CpuDemand {
        self.cpus.unwrap_or_else(|| {
            if self.extra_specs.get("hw:cpu_policy").map(String::as_str) == Some("dedicated") {
                CpuDemand {
                    shared: 0,
                    dedicated: self.vcpus,
                }
            } else {
                CpuDemand {
                    shared: self.vcpus,
                    dedicated: 0,
                }
            }
        })
    }

    /// The resources one instance of this flavor takes, per class: VCPU or PCPU or both (VCPU
    /// alone for a guest with no CPUs at all), MEMORY_MB, and DISK_GB unless it is shared.
    pub fn resources(&self, rules: ResourceRules) -> BTreeMap<ResourceClass, i64> {
        let mut r = BTreeMap::new();
        let cpus = self.cpu_demand();
        if rules.legacy_cpus {
            r.insert(ResourceClass::Vcpu, cpus.shared + cpus.dedicated);
        } else {
            // Placement is asked for the classes the guest uses: a pinned guest asks no VCPU.
            if cpus.shared > 0 || cpus.dedicated == 0 {
                r.insert(ResourceClass::Vcpu, cpus.shared);
            }
            if cpus.dedicated > 0 {
                r.insert(ResourceClass::Pcpu, cpus.dedicated);
            }
        }
        r.insert(ResourceClass::MemoryMb, self.memory_mb);
        if !rules.shared_disk {
            r.insert(ResourceClass::DiskGb, self.disk_gb(rules.is_bfv));
        }
        for (class, amount) in &self.extra_resources {
            r.insert(class.clone(), *amount);
        }
        r
    }
}

/// A PCI request: `count` devices matching any of `specs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PciRequest {
    /// Request id (an InstancePCIRequest's, or derived from the instance and the alias).
    pub request_id: String,
    /// How many devices.
    pub count: u32,
    /// Spec dicts; a device (pool) must match one of them.
    pub specs: Vec<BTreeMap<String, String>>,
    /// Alias name, or none for neutron port requests.
    pub alias_name: Option<String>,
    /// NUMA affinity policy.
    pub numa_policy: NumaPolicy,
    /// The neutron port, for port requests.
    pub requester_id: Option<String>,
    /// With PCI in Placement: the provider each device was allocated from, once per device
    /// (Nova's `rp_uuids` spec key, or the RequestSpec's request group mapping). Devices are
    /// then taken from those providers only. Empty: any provider.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rp_uuids: Vec<uuid::Uuid>,
    /// Only these devices may be taken (an adopted instance's devices, as the operator named
    /// them). Empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<crate::probes::pci::PciAddress>,
}

/// What an instance asks of a host, from a RequestSpec (or legacy dicts) and the instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceRequest {
    /// The flavor the instance is sized by: the CPUs, memory and disk it takes here.
    pub flavor: FlavorUsage,
    /// Booted from volume: no root disk here.
    pub is_bfv: bool,
    /// PCI requests.
    pub pci_requests: Vec<PciRequest>,
    /// The guest's NUMA constraints (from the flavor and image); none when it asks for no
    /// NUMA topology.
    #[serde(default)]
    pub numa: Option<GuestTopology>,
}

/// A move in progress, as the instance records it (Nova's MigrationContext).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrationContext {
    /// The migration.
    pub migration_id: i64,
    /// PCI requests before the move.
    pub old_pci_requests: Vec<PciRequest>,
    /// PCI requests after the move.
    pub new_pci_requests: Vec<PciRequest>,
    /// The guest's placement before the move (Nova's `old_numa_topology`).
    #[serde(default)]
    pub old_numa_topology: Option<Arc<FittedTopology>>,
    /// The guest's placement after the move, on the destination (`new_numa_topology`).
    #[serde(default)]
    pub new_numa_topology: Option<Arc<FittedTopology>>,
    /// vGPUs and encryption contexts before the move (on the source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_nested: Option<Arc<NestedAllocation>>,
    /// vGPUs and encryption contexts after the move (on the destination).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_nested: Option<Arc<NestedAllocation>>,
}

/// An instance the tracker knows: on this node, or moving to or from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceRecord {
    /// The instance's uuid.
    pub uuid: String,
    /// The instance's project, if known (stats, and the owner of its Placement allocations).
    pub project_id: Option<String>,
    /// The instance's user, if known (the owner of its Placement allocations).
    pub user_id: Option<String>,
    /// Guest OS type (stats).
    pub os_type: Option<String>,
    /// VM state.
    pub vm_state: String,
    /// Task state.
    pub task_state: Option<String>,
    /// Service host the instance is on.
    pub host: Option<String>,
    /// Node the instance is on.
    pub node: Option<String>,
    /// Current flavor, booted from volume, PCI requests and NUMA constraints; shared with its
    /// claim.
    pub request: Arc<InstanceRequest>,
    /// Where its NUMA cells are on this host, CPUs pinned and page size (Nova's instance
    /// `numa_topology`); none for a guest without NUMA topology or not placed here.
    #[serde(default)]
    pub numa_topology: Option<Arc<FittedTopology>>,
    /// Its vGPUs (with their mdevs) and encryption context on this host, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nested: Option<Arc<NestedAllocation>>,
    /// Flavor before a resize.
    pub old_flavor: Option<FlavorUsage>,
    /// Flavor after a resize.
    pub new_flavor: Option<FlavorUsage>,
    /// Move in progress.
    pub migration_context: Option<MigrationContext>,
}

impl InstanceRecord {
    /// Nova's `allow_resource_removal` (see [`super::nova_states::releases_resources`]).
    pub fn releases_resources(&self) -> bool {
        super::nova_states::releases_resources(&self.vm_state, self.task_state.as_deref())
    }

    /// Nova's `_instance_in_resize_state` (see [`super::nova_states::in_resize_state`]).
    pub fn in_resize_state(&self) -> bool {
        super::nova_states::in_resize_state(&self.vm_state, self.task_state.as_deref())
    }

    /// Nova's `_instance_is_live_migrating` (see [`super::nova_states::live_migrating`]).
    pub fn live_migrating(&self) -> bool {
        super::nova_states::live_migrating(&self.vm_state, self.task_state.as_deref())
    }
}

/// Migration statuses that no longer hold resources. `error` is not among them: a failed move
/// keeps its resources until an operator cleans it up, as in Nova.
pub const FINISHED_MIGRATION_STATUSES: &[&str] = &[
    "confirmed",
    "reverted",
    "failed",
    "completed",
    "cancelled",
    "done",
];

/// A migration the tracker knows (the fields of Nova's Migration it uses).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrationRecord {
    /// Id (Nova's database id, or one rtrack assigned).
    pub id: i64,
    /// Uuid: the Placement consumer of the source side during the move.
    pub uuid: String,
    /// Instance moving.
    pub instance_uuid: String,
    /// Source service host.
    pub source_compute: Option<String>,
    /// Source node.
    pub source_node: Option<String>,
    /// Destination service host.
    pub dest_compute: Option<String>,
    /// Destination node.
    pub dest_node: Option<String>,
    /// Nova's migration status (`migrating`, `finished`...); see [`FINISHED_MIGRATION_STATUSES`].
    pub status: String,
    /// migration, resize, live-migration or evacuation.
    pub migration_type: String,
    /// Flavor id before.
    pub old_instance_type_id: Option<i64>,
    /// Flavor id after.
    pub new_instance_type_id: Option<i64>,
    /// Seconds since the epoch.
    pub created_at: i64,
    /// Seconds since the epoch.
    pub updated_at: i64,
}

impl MigrationRecord {
    /// Still holding resources.
    pub fn in_progress(&self) -> bool {
        !FINISHED_MIGRATION_STATUSES.contains(&self.status.as_str())
    }
}

/// This host's names, to tell incoming from outgoing migrations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostNames {
    /// Service host name.
    pub host: String,
    /// Node name.
    pub node: String,
}
