//! The tracker's state: the records (what the store persists), the [`Changes`] an operation
//! makes to them, and the [`Tracker`] that holds them with the probed host and the settings and
//! derives usage, pools and the ComputeNode from them. The operations are in [`super::ops`].
//!
//! In: records loaded from the store, a probe, settings. Out: usage, pools, the ComputeNode.
//! No I/O and no clock: callers pass the time and the probed host.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use std::sync::Arc;

use super::error::{ClaimError, ResourceShortfall};
use super::host_view::HostView;
use super::model::{FlavorUsage, HostNames, InstanceRecord, InstanceRequest, MigrationRecord};
use super::node_template::NodeUsage;
use super::numa::nova::host_object;
use super::numa::FittedTopology;
use super::pci::claim::Assignment;
use super::pci::devices::TrackedDevice;
use super::pci::index::PciIndex;
use super::released::{Holdings, ReleasedConsumer};
use super::usage::{compute_usage, current_workload, stats, CountingRules, Usage};
use crate::config::{Resources, ValidConfig};
use crate::inventory::resources::{ResourceClass, ResourceInventory};
use crate::objects::compute_node::ComputeNode;
use crate::objects::Versioned;
use crate::pci_policy::DeviceSpec;
use crate::probes::pci::PciAddress;
use crate::probes::HostInventory;

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
    /// Tracked PCI devices, by address.
    pub devices: BTreeMap<PciAddress, TrackedDevice>,
    /// Instances on or moving to/from this node.
    pub instances: BTreeMap<String, InstanceRecord>,
    /// Migrations to, from or on this node, by id.
    pub migrations: BTreeMap<i64, MigrationRecord>,
    /// Instance claims, by instance.
    pub claims: BTreeMap<String, ClaimRecord>,
    /// Move claims, by migration.
    pub move_claims: BTreeMap<i64, ClaimRecord>,
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
                    claim.request = inst.request.clone();
                }
                if let (Some(c), Some(i)) = (&claim.numa_topology, &inst.numa_topology) {
                    if !Arc::ptr_eq(c, i) && c == i {
                        claim.numa_topology = Some(i.clone());
                    }
                }
            }
        }
    }

    /// Applies committed changes it owns (no copies), as the store does: `Some` writes a row,
    /// `None` deletes it.
    pub fn apply_owned(&mut self, c: Changes) {
        fn put<K: Ord, V>(map: &mut BTreeMap<K, V>, rows: BTreeMap<K, Option<V>>) {
            for (k, v) in rows {
                match v {
                    Some(v) => {
                        map.insert(k, v);
                    }
                    None => {
                        map.remove(&k);
                    }
                }
            }
        }
        put(&mut self.devices, c.devices);
        put(&mut self.instances, c.instances);
        put(&mut self.migrations, c.migrations);
        put(&mut self.claims, c.claims);
        put(&mut self.move_claims, c.move_claims);
        put(&mut self.pci_providers, c.pci_providers);
        put(&mut self.released_consumers, c.released_consumers);
        if let Some(counters) = c.counters {
            self.failed_builds = counters.failed_builds;
            self.next_migration_id = counters.next_migration_id;
        }
        if let Some(node) = c.compute_node {
            self.compute_node = Some(node);
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

/// What an operation changed: rows to write (`Some`) or delete (`None`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Changes {
    /// Tracked PCI devices written or removed, by address.
    pub devices: BTreeMap<PciAddress, Option<TrackedDevice>>,
    /// Instance records written or removed, by uuid.
    pub instances: BTreeMap<String, Option<InstanceRecord>>,
    /// Migration records written or removed, by id.
    pub migrations: BTreeMap<i64, Option<MigrationRecord>>,
    /// Instance claims.
    pub claims: BTreeMap<String, Option<ClaimRecord>>,
    /// Move claims.
    pub move_claims: BTreeMap<i64, Option<ClaimRecord>>,
    /// Counters changed.
    pub counters: Option<Counters>,
    /// A new ComputeNode primitive to keep.
    pub compute_node: Option<serde_json::Value>,
    /// PCI provider uuids written or removed, by address.
    pub pci_providers: BTreeMap<PciAddress, Option<PciProviderRecord>>,
    /// Released consumers recorded or forgotten.
    pub released_consumers: BTreeMap<uuid::Uuid, Option<ReleasedConsumer>>,
}

impl Changes {
    /// True when nothing changed.
    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
            && self.instances.is_empty()
            && self.migrations.is_empty()
            && self.claims.is_empty()
            && self.move_claims.is_empty()
            && self.counters.is_none()
            && self.compute_node.is_none()
            && self.pci_providers.is_empty()
            && self.released_consumers.is_empty()
    }

    /// The instances these changes concern: an operation on one of them must wait until these
    /// are committed (or rolled back) before it can see them.
    pub fn instances_touched(&self) -> BTreeSet<String> {
        let mut out: BTreeSet<String> = self.instances.keys().cloned().collect();
        out.extend(self.claims.keys().cloned());
        out.extend(
            self.move_claims
                .values()
                .flatten()
                .map(|c| c.instance_uuid.clone()),
        );
        out.extend(
            self.migrations
                .values()
                .flatten()
                .map(|m| m.instance_uuid.clone()),
        );
        out.extend(
            self.devices
                .values()
                .flatten()
                .filter_map(|d| d.owner.as_ref().map(|o| o.instance_uuid.clone())),
        );
        out
    }

    /// Adds later changes on top of these.
    pub fn merge(&mut self, later: Changes) {
        self.devices.extend(later.devices);
        self.instances.extend(later.instances);
        self.migrations.extend(later.migrations);
        self.claims.extend(later.claims);
        self.move_claims.extend(later.move_claims);
        self.pci_providers.extend(later.pci_providers);
        self.released_consumers.extend(later.released_consumers);
        if later.counters.is_some() {
            self.counters = later.counters;
        }
        if later.compute_node.is_some() {
            self.compute_node = later.compute_node;
        }
    }
}

/// What the tracker takes from the configuration, and nothing else: the resource rules, the PCI
/// device specs, and the ComputeNode's configured fields. Aliases stay with the API, which
/// turns them into requests.
#[derive(Debug, Clone)]
pub struct TrackerPolicy {
    /// `[resources]`: reserved amounts, allocation ratios, CPU sets, shared storage.
    pub resources: Resources,
    /// `[pci] device_spec`, in file order (the first that matches a device decides).
    pub device_specs: Vec<DeviceSpec>,
    /// The ComputeNode's `hypervisor_type`.
    pub hypervisor_type: String,
    /// The ComputeNode's `host_ip`.
    pub host_ip: Option<std::net::IpAddr>,
    /// The ComputeNode's `service_id`.
    pub service_id: Option<i64>,
    /// `[pci] report_in_placement`: tracked devices are Placement providers, and claims follow
    /// the providers Placement allocated from.
    pub report_pci_in_placement: bool,
    /// `[devices]` and `[mdev.*]`: which mdev types are vGPUs, where, as which class; SEV guests.
    pub mdev: crate::config::devices::MdevPolicy,
    /// Operators' own inventories and traits (provider.yaml).
    pub provider_configs: crate::config::provider_yaml::ProviderConfigs,
    /// The networks' NUMA affinity (NUMA-aware vSwitches).
    pub network_affinity: crate::config::neutron::NetworkAffinity,
}

impl From<&ValidConfig> for TrackerPolicy {
    fn from(c: &ValidConfig) -> TrackerPolicy {
        TrackerPolicy {
            resources: c.resources.clone(),
            device_specs: c.device_specs.clone(),
            hypervisor_type: c.hypervisor_type.clone(),
            host_ip: c.host_ip,
            service_id: c.service_id,
            report_pci_in_placement: c.report_pci_in_placement,
            mdev: c.mdev.clone(),
            provider_configs: c.provider_configs.clone(),
            network_affinity: c.network_affinity.clone(),
        }
    }
}

impl From<ValidConfig> for TrackerPolicy {
    fn from(c: ValidConfig) -> TrackerPolicy {
        TrackerPolicy {
            resources: c.resources,
            device_specs: c.device_specs,
            hypervisor_type: c.hypervisor_type,
            host_ip: c.host_ip,
            service_id: c.service_id,
            report_pci_in_placement: c.report_pci_in_placement,
            mdev: c.mdev,
            provider_configs: c.provider_configs,
            network_affinity: c.network_affinity,
        }
    }
}

/// Settings the tracker needs: its policy, and the node's names and identity.
#[derive(Debug, Clone)]
pub struct TrackerSettings {
    /// What the tracker takes from the configuration.
    pub policy: TrackerPolicy,
    /// This host's names.
    pub names: HostNames,
    /// The node's uuid.
    pub node_uuid: String,
    /// When the node was created.
    pub node_created_at: time::OffsetDateTime,
}

impl TrackerSettings {
    pub(super) fn shared_disk(&self) -> bool {
        self.policy.resources.shared_storage_provider.is_some()
    }

    /// Nova's legacy CPU mode (pinned guests consume VCPU): see [`Resources::legacy_cpus`].
    pub fn legacy_cpus(&self) -> bool {
        self.policy.resources.legacy_cpus()
    }

    /// How usage is counted on this host.
    pub fn counting_rules(&self) -> CountingRules {
        CountingRules {
            shared_disk: self.shared_disk(),
            legacy_cpus: self.legacy_cpus(),
        }
    }
}

/// The tracker.
#[derive(Debug, Clone)]
pub struct Tracker {
    pub(super) settings: TrackerSettings,
    /// Bumped by every [`Tracker::set_settings`]: a view built for older settings is derived
    /// again.
    pub(super) generation: u64,
    /// What the last probe means under the settings; shared with the service's committed view.
    pub(super) view: Arc<HostView>,
    pub(super) state: TrackerState,
    /// Usage per class, kept between operations: a claim adds to it; anything else clears it
    /// and the next read derives it again from the records.
    pub(super) used_cache: std::cell::RefCell<Option<BTreeMap<ResourceClass, i64>>>,
    /// The PCI index of the tracked devices (positions, pools, PF/VF links), built when first
    /// needed and dropped when the set of devices or the device specs change (a claim changes
    /// only states, which the index does not hold).
    pub(super) pci_index: std::cell::RefCell<Option<Arc<PciIndex>>>,
    /// vGPU and encryption providers nova-compute created, found by name at the last report:
    /// rtrack's derived uuid -> theirs (claims follow allocations made against theirs).
    pub(super) nested_adopted: BTreeMap<uuid::Uuid, uuid::Uuid>,
    /// The Placement consumers each instance is held under, derived from the records and kept
    /// in step by every operation (see `released`).
    pub(super) holders: Holdings,
}

impl Tracker {
    /// A tracker for `host` with `state` (as loaded from the store). Devices are synced with
    /// the host at the first audit, not here.
    pub fn new(settings: TrackerSettings, host: HostInventory, mut state: TrackerState) -> Tracker {
        super::upgrade::upgrade_flavors(&mut state);
        let view = Arc::new(HostView::build(Arc::new(host), &settings, 0));
        let mut t = Tracker {
            settings,
            generation: 0,
            view,
            state,
            used_cache: std::cell::RefCell::new(None),
            pci_index: std::cell::RefCell::new(None),
            nested_adopted: BTreeMap::new(),
            holders: Holdings::new(),
        };
        t.derive_holders();
        t
    }

    /// The state (for the store and tests).
    pub fn state(&self) -> &TrackerState {
        &self.state
    }

    /// The settings.
    pub fn settings(&self) -> &TrackerSettings {
        &self.settings
    }

    /// The probed host the tracker works from.
    pub fn host(&self) -> &HostInventory {
        &self.view.host
    }

    /// What the tracker derived from the last probe, shared (the service hands it to its
    /// committed view; readers serialize from it after letting go of the lock).
    pub fn view(&self) -> Arc<HostView> {
        self.view.clone()
    }

    /// Derives the view of `host` under the current settings (the service does this outside
    /// the lock with [`Tracker::settings_snapshot`]).
    pub fn view_of(&self, host: Arc<HostInventory>) -> HostView {
        HostView::build(host, &self.settings, self.generation)
    }

    /// The settings and their generation, to build a [`HostView`] outside the lock.
    pub fn settings_snapshot(&self) -> (TrackerSettings, u64) {
        (self.settings.clone(), self.generation)
    }

    /// Applies changes that were committed by another tracker working on the same records
    /// (the service's committed view follows its working tracker this way), with the view
    /// that tracker audited against, if it changed. Returns the view replaced, for the caller
    /// to drop after letting go of its lock.
    pub fn apply_committed(
        &mut self,
        view: Option<Arc<HostView>>,
        changes: Changes,
    ) -> Option<Arc<HostView>> {
        self.invalidate_usage();
        let new_devices = view.is_some()
            || !changes.pci_providers.is_empty()
            || changes
                .devices
                .iter()
                .any(|(a, d)| d.is_none() || !self.state.devices.contains_key(a));
        if new_devices {
            *self.pci_index.get_mut() = None;
        }
        let touched = changes.instances_touched();
        self.state.apply_owned(changes);
        self.refresh_holders(&touched);
        view.map(|v| std::mem::replace(&mut self.view, v))
    }

    /// Replaces the settings (a reloaded configuration) and derives the view again. Claims
    /// already granted stay.
    pub fn set_settings(&mut self, settings: TrackerSettings) {
        self.invalidate_usage();
        *self.pci_index.get_mut() = None;
        self.settings = settings;
        self.generation += 1;
        let mut view = self.view_of(self.view.host.clone());
        view.uptime = self.view.uptime.clone();
        self.view = Arc::new(view);
    }

    /// Takes the settings and view another tracker derived (the service's committed view
    /// follows its working tracker's reload this way).
    pub fn follow_settings(&mut self, other: &Tracker) {
        self.invalidate_usage();
        *self.pci_index.get_mut() = None;
        self.settings = other.settings.clone();
        self.generation = other.generation;
        self.view = other.view.clone();
    }

    /// Inventory per class.
    pub fn inventory(&self) -> &BTreeMap<ResourceClass, ResourceInventory> {
        &self.view.inventory
    }

    /// Current usage.
    pub fn usage(&self) -> Usage {
        compute_usage(
            &self.settings.names,
            &self.state.instances,
            &self.state.migrations,
            self.settings.counting_rules(),
        )
    }

    /// Usage per class (cached; see `used_cache`).
    pub fn used(&self) -> BTreeMap<ResourceClass, i64> {
        if let Some(u) = self.used_cache.borrow().as_ref() {
            debug_assert_eq!(
                u,
                &self.usage().used,
                "cached usage drifted from the records"
            );
            return u.clone();
        }
        let u = self.usage().used;
        *self.used_cache.borrow_mut() = Some(u.clone());
        u
    }

    pub(super) fn invalidate_usage(&mut self) {
        *self.used_cache.get_mut() = None;
    }

    /// Checks `resources` against the inventory and current usage.
    pub(super) fn shortfalls(
        &self,
        resources: &BTreeMap<ResourceClass, i64>,
        usage: &BTreeMap<ResourceClass, i64>,
    ) -> Vec<ResourceShortfall> {
        let mut out = Vec::new();
        for (class, requested) in resources {
            if *requested == 0 {
                continue;
            }
            let used = *usage.get(class).unwrap_or(&0);
            let (capacity, max_unit) = match self.view.inventory.get(class) {
                Some(inv) => (inv.capacity(), inv.max_unit),
                None => (0, 0),
            };
            if used + requested > capacity || *requested > max_unit {
                out.push(ResourceShortfall {
                    class: class.clone(),
                    requested: *requested,
                    used,
                    capacity,
                    max_unit,
                    provider: None,
                });
            }
        }
        out
    }

    /// The ComputeNode for the current state: the view's host facts with `usage`.
    pub fn compute_node(&self, usage: &Usage, now: time::OffsetDateTime) -> Versioned<ComputeNode> {
        let mut node_usage = NodeUsage {
            vcpus: usage.used(ResourceClass::Vcpu) + usage.used(ResourceClass::Pcpu),
            memory_mb: usage.used(ResourceClass::MemoryMb),
            disk_gb: usage.used(ResourceClass::DiskGb),
            running_vms: usage.tracked_instances.len() as i64,
            stats: stats(&self.state.instances, usage, self.state.failed_builds),
            ..NodeUsage::default()
        };
        node_usage.current_workload = current_workload(&node_usage.stats);
        if let Some(u) = &self.view.uptime {
            node_usage.stats.insert("uptime".into(), u.clone());
        }
        let numa = host_object(&self.view.numa, &self.numa_usage(usage));
        self.view
            .node
            .with_usage(&node_usage, &numa, &self.pools(), now)
    }

    pub(super) fn counters(&self) -> Counters {
        Counters {
            failed_builds: self.state.failed_builds,
            next_migration_id: self.state.next_migration_id,
        }
    }

    /// Replaces the whole state: after a failed commit the service reloads what the store holds.
    pub fn replace_state(&mut self, state: TrackerState) {
        self.invalidate_usage();
        *self.pci_index.get_mut() = None;
        self.state = state;
        self.derive_holders();
    }
}

pub(super) fn validate_uuid(uuid: &str, field: &str) -> Result<(), ClaimError> {
    uuid::Uuid::parse_str(uuid)
        .map(|_| ())
        .map_err(|_| ClaimError::Invalid {
            field: field.to_string(),
            message: format!("{uuid:?} is not a UUID"),
        })
}

/// The flavor a caller names, checked (for requests built without a Flavor object).
pub fn check_flavor(f: &FlavorUsage, field: &str) -> Result<(), ClaimError> {
    if f.vcpus <= 0 || f.memory_mb <= 0 || f.root_gb < 0 || f.ephemeral_gb < 0 || f.swap_mb < 0 {
        return Err(ClaimError::Invalid {
            field: field.to_string(),
            message: format!(
                "vcpus {} and memory_mb {} must be positive; root_gb {}, ephemeral_gb {}, swap {} must not be negative",
                f.vcpus, f.memory_mb, f.root_gb, f.ephemeral_gb, f.swap_mb
            ),
        });
    }
    Ok(())
}
