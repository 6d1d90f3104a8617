//! The answers about claims and moves: a claim as every answer shows it, the answer to a claim
//! request (retry and dry run told apart), a claim with its instance's state, a move claim with
//! its migration, and the answers to an abort, a confirm or revert and a state update.
//!
//! In: the tracker's [`ClaimRecord`], [`ClaimOutcome`] and [`MigrationRecord`]. Out: types whose
//! serialization is the answer and whose schema is the document's.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::inventory::format_utc;
use crate::inventory::resources::ResourceClass;
use crate::tracker::model::MigrationRecord;
use crate::tracker::numa::nova::instance_object;
use crate::tracker::{ClaimOutcome, ClaimRecord};

/// A claim held.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = Claim)]
pub struct ClaimView {
    /// The instance the claim is for.
    #[schema(format = "uuid")]
    pub instance_uuid: String,
    /// For a move claim, its migration.
    #[schema(required, minimum = 1)]
    pub migration_id: Option<i64>,
    /// Amounts counted, per resource class.
    #[schema(value_type = BTreeMap<String, i64>)]
    pub resources: BTreeMap<ResourceClass, i64>,
    /// PCI devices given, each to the request it satisfies.
    pub pci_devices: Vec<DeviceGiven>,
    /// The flavor the instance is sized by.
    pub flavor: FlavorView,
    /// Booted from volume: no root disk here.
    pub is_bfv: bool,
    /// Host NUMA cells the guest's cells are on, in guest order.
    pub numa_cells: Vec<u32>,
    /// The fitted InstanceNUMATopology primitive (Nova's): per guest cell the host cell (id),
    /// cpuset, pcpuset, cpu_pinning_raw, cpuset_reserved, memory, pagesize, policies.
    #[schema(required, value_type = Option<Object>)]
    pub numa_topology: Option<Value>,
    /// Mediated devices given, one per vGPU.
    pub mdevs: Vec<MdevView>,
    /// Persistent memory namespaces given (vPMEM), one per unit of a CUSTOM_PMEM_NAMESPACE_
    /// class (Nova's LibvirtVPMEMDevice).
    pub pmem_namespaces: Vec<PmemNamespaceView>,
    /// Units held below (vPMEM: on) the compute node.
    pub nested: Vec<NestedUnitsView>,
    /// When it was granted, `YYYY-MM-DDTHH:MM:SSZ`.
    pub claimed_at: String,
}

/// A PCI device given to a request.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DeviceGiven {
    /// The device's PCI address.
    pub address: String,
    /// The InstancePCIRequest it satisfies.
    pub request_id: String,
}

/// A claim's flavor, as the tracker sized it.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = ClaimFlavor)]
pub struct FlavorView {
    /// Flavor database id (`instance_type_id`).
    pub id: i64,
    /// Public flavor id.
    pub flavorid: String,
    /// Flavor name, when the request carried one.
    #[schema(required)]
    pub name: Option<String>,
    /// Guest VCPUs.
    pub vcpus: i64,
    /// Memory, MiB.
    pub memory_mb: i64,
    /// Root disk, GiB.
    pub root_gb: i64,
    /// Ephemeral disk, GiB.
    pub ephemeral_gb: i64,
    /// Swap, MiB.
    pub swap: i64,
}

/// A mediated device given to a claim.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = Mdev)]
pub struct MdevView {
    /// Its uuid: an existing mdev's, or a new one for the hypervisor side to create.
    pub uuid: String,
    /// The parent it is (to be) created on.
    pub parent: String,
    /// Its mdev type.
    #[serde(rename = "type")]
    pub type_id: String,
    /// It existed when given; else the hypervisor side creates it with this uuid.
    pub existing: bool,
}

/// A persistent memory namespace given to a claim.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = PmemNamespace)]
pub struct PmemNamespaceView {
    /// Its name (the kernel's `alt_name`).
    pub name: String,
    /// The label `[devices] pmem_namespaces` gives it.
    pub label: String,
    /// `CUSTOM_PMEM_NAMESPACE_<LABEL>`.
    pub resource_class: String,
    /// Its character device, `/dev/dax0.0`.
    pub devpath: String,
    /// Bytes.
    pub size: u64,
    /// The dax region's alignment, bytes.
    pub align: u64,
}

/// Units a claim holds on one provider below the compute node.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = NestedUnits)]
pub struct NestedUnitsView {
    /// Which provider: `{"mdev": parent}`, `{"mem_encryption": model}`, `{"operator":
    /// {provider, class}}` or `{"pmem": class}`.
    #[schema(value_type = Object)]
    pub provider: Value,
    /// The resource class.
    pub class: String,
    /// How many units.
    pub amount: i64,
}

impl From<&ClaimRecord> for ClaimView {
    fn from(c: &ClaimRecord) -> ClaimView {
        let f = &c.request.flavor;
        let nested = c.nested.as_deref();
        ClaimView {
            instance_uuid: c.instance_uuid.clone(),
            migration_id: c.migration_id,
            resources: c.resources.clone(),
            pci_devices: c
                .assignments
                .iter()
                .map(|a| DeviceGiven {
                    address: a.address.to_string(),
                    request_id: a.request_id.clone(),
                })
                .collect(),
            flavor: FlavorView {
                id: f.id,
                flavorid: f.flavorid.clone(),
                name: f.name.clone(),
                vcpus: f.vcpus,
                memory_mb: f.memory_mb,
                root_gb: f.root_gb,
                ephemeral_gb: f.ephemeral_gb,
                swap: f.swap_mb,
            },
            is_bfv: c.request.is_bfv,
            numa_cells: c
                .numa_topology
                .as_ref()
                .map(|t| t.host_cells())
                .unwrap_or_default(),
            numa_topology: c
                .numa_topology
                .as_ref()
                .map(|t| instance_object(t).to_primitive()),
            mdevs: nested
                .map(|n| n.mdevs.iter().map(MdevView::from).collect())
                .unwrap_or_default(),
            pmem_namespaces: nested
                .map(|n| n.pmem.iter().map(PmemNamespaceView::from).collect())
                .unwrap_or_default(),
            nested: nested
                .map(|n| n.units.iter().map(NestedUnitsView::from).collect())
                .unwrap_or_default(),
            claimed_at: time::OffsetDateTime::from_unix_timestamp(c.claimed_at)
                .map(format_utc)
                .unwrap_or_default(),
        }
    }
}

impl From<&crate::tracker::nested::MdevGiven> for MdevView {
    fn from(m: &crate::tracker::nested::MdevGiven) -> MdevView {
        MdevView {
            uuid: m.uuid.clone(),
            parent: m.parent.clone(),
            type_id: m.type_id.clone(),
            existing: m.existing,
        }
    }
}

impl From<&crate::inventory::offered::VpmemNamespace> for PmemNamespaceView {
    fn from(p: &crate::inventory::offered::VpmemNamespace) -> PmemNamespaceView {
        PmemNamespaceView {
            name: p.name.clone(),
            label: p.label.clone(),
            resource_class: p.resource_class.clone(),
            devpath: p.devpath.clone(),
            size: p.size,
            align: p.align,
        }
    }
}

impl From<&crate::tracker::nested::NestedUnits> for NestedUnitsView {
    fn from(u: &crate::tracker::nested::NestedUnits) -> NestedUnitsView {
        NestedUnitsView {
            // The key's own serialization (an externally tagged enum) is the answer's.
            provider: serde_json::to_value(&u.provider).unwrap_or(Value::Null),
            class: u.class.as_str().to_string(),
            amount: u.amount,
        }
    }
}

/// A claim as a claim request is answered.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ClaimAnswer {
    /// The claim.
    #[serde(flatten)]
    pub claim: ClaimView,
    /// Already held: this answer is a retry's.
    pub existing: bool,
    /// Nothing was claimed: the answer to "would it fit".
    pub dry_run: bool,
}

impl From<&ClaimOutcome> for ClaimAnswer {
    fn from(o: &ClaimOutcome) -> ClaimAnswer {
        ClaimAnswer {
            claim: ClaimView::from(&o.claim),
            existing: o.existing,
            dry_run: o.dry_run,
        }
    }
}

/// A claim with its instance's state.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ClaimShown {
    /// The claim.
    #[serde(flatten)]
    pub claim: ClaimView,
    /// The instance's states and host, when this host tracks the instance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<InstanceState>,
}

/// An instance's states and where it is.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct InstanceState {
    /// Nova's vm_state.
    pub vm_state: String,
    /// Nova's task_state.
    #[schema(required)]
    pub task_state: Option<String>,
    /// Service host the instance is on.
    #[schema(required)]
    pub host: Option<String>,
    /// Node the instance is on.
    #[schema(required)]
    pub node: Option<String>,
}

/// A claim request's dry run that fits.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DryRun {
    /// Always true: a dry run that does not fit is answered 409.
    pub fits: bool,
    /// The claim as it would be.
    pub claim: ClaimAnswer,
}

/// A move claim with the migration it recorded.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MoveClaim {
    /// The migration.
    pub migration: MigrationView,
    /// The claim on this host.
    pub claim: ClaimAnswer,
}

/// A move's dry run that fits.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MoveDryRun {
    /// null: a dry run records no migration.
    #[schema(required)]
    pub migration: Option<MigrationView>,
    /// The claim as it would be.
    pub claim: ClaimAnswer,
    /// Always true: a dry run that does not fit is answered 409.
    pub fits: bool,
}

/// A migration to, from or on this host.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = Migration)]
pub struct MigrationView {
    /// Id (Nova's database id, or one rtrack assigned).
    pub id: i64,
    /// Uuid: the Placement consumer of the source side during the move.
    pub uuid: String,
    /// The instance moving.
    pub instance_uuid: String,
    /// Source service host.
    #[schema(required)]
    pub source_compute: Option<String>,
    /// Source node.
    #[schema(required)]
    pub source_node: Option<String>,
    /// Destination service host.
    #[schema(required)]
    pub dest_compute: Option<String>,
    /// Destination node.
    #[schema(required)]
    pub dest_node: Option<String>,
    /// Nova's migration status (`pre-migrating`, `finished`, `confirmed`...).
    pub status: String,
    /// migration, resize, live-migration or evacuation.
    pub migration_type: String,
    /// Flavor id before.
    #[schema(required)]
    pub old_instance_type_id: Option<i64>,
    /// Flavor id after.
    #[schema(required)]
    pub new_instance_type_id: Option<i64>,
    /// Seconds since the epoch.
    pub created_at: i64,
    /// Seconds since the epoch.
    pub updated_at: i64,
}

impl From<&MigrationRecord> for MigrationView {
    fn from(m: &MigrationRecord) -> MigrationView {
        MigrationView {
            id: m.id,
            uuid: m.uuid.clone(),
            instance_uuid: m.instance_uuid.clone(),
            source_compute: m.source_compute.clone(),
            source_node: m.source_node.clone(),
            dest_compute: m.dest_compute.clone(),
            dest_node: m.dest_node.clone(),
            status: m.status.clone(),
            migration_type: m.migration_type.clone(),
            old_instance_type_id: m.old_instance_type_id,
            new_instance_type_id: m.new_instance_type_id,
            created_at: m.created_at,
            updated_at: m.updated_at,
        }
    }
}

/// `DELETE /v1/claims/{instance_uuid}`: the claim is gone.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Aborted {
    /// The instance whose claim was aborted.
    #[schema(format = "uuid")]
    pub instance_uuid: String,
    /// Always true.
    pub aborted: bool,
}

/// A migration confirmed or reverted.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MigrationFinished {
    /// The migration as it is now.
    pub migration: MigrationView,
}

/// An instance's state changed.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct InstanceUpdated {
    /// The instance as now tracked (the tracker's record); null when the change leaves it no
    /// longer tracked here.
    #[schema(required, value_type = Option<Object>)]
    pub instance: Option<Value>,
}
