//! The tracker: records in, decisions out. Every operation checks everything before it changes
//! anything, so a refused or failed operation leaves no trace; a successful one returns the
//! [`Changes`] the store must commit before the caller is answered.
//!
//! No I/O and no clock: callers pass the time and the probed host.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::compute_node::{build_compute_node, without_updated_at, NodeIdentity, NodeUsage};
use super::error::{ClaimError, Refusal, ResourceShortfall};
use super::model::{
    FlavorUsage, HostNames, InstanceRecord, InstanceRequest, MigrationContext, MigrationRecord,
};
use super::pci::claim::{claim_devices, free_owner, recompute_relatives, Assignment, CellSockets};
use super::pci::devices::{select_tracked, TrackedDevice};
use super::pci::pools::{build_pools, Pool};
use super::states::{check_task_state, check_vm_state, move_is_counted, releases_resources};
use super::usage::{compute_usage, current_workload, on_node, stats, Usage};
use crate::config::ValidConfig;
use crate::inventory::resources::{
    compute_inventory, InventoryOptions, ResourceClass, ResourceInventory,
};
use crate::objects::compute_node::ComputeNode;
use crate::objects::Versioned;
use crate::probes::pci::PciAddress;
use crate::probes::HostInventory;

/// A granted claim, kept for idempotent retries and reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimRecord {
    /// Instance.
    pub instance_uuid: String,
    /// For a move claim, the migration.
    pub migration_id: Option<i64>,
    /// What was asked (a retry must ask the same).
    pub request: InstanceRequest,
    /// Devices given.
    pub assignments: Vec<Assignment>,
    /// Resources counted, per class.
    pub resources: BTreeMap<ResourceClass, i64>,
    /// When, seconds since the epoch.
    pub claimed_at: i64,
}

/// Everything the tracker keeps (what the store persists).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrackerState {
    /// Tracked PCI devices, by address.
    pub devices: BTreeMap<PciAddress, TrackedDevice>,
    /// Instances on or moving to/from this node.
    pub instances: BTreeMap<String, InstanceRecord>,
    /// Migrations.
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
}

impl TrackerState {
    /// Applies committed changes, as the store does: `Some` writes a row, `None` deletes it.
    pub fn apply(&mut self, c: &Changes) {
        fn put<K: Ord + Clone, V: Clone>(map: &mut BTreeMap<K, V>, rows: &BTreeMap<K, Option<V>>) {
            for (k, v) in rows {
                match v {
                    Some(v) => {
                        map.insert(k.clone(), v.clone());
                    }
                    None => {
                        map.remove(k);
                    }
                }
            }
        }
        put(&mut self.devices, &c.devices);
        put(&mut self.instances, &c.instances);
        put(&mut self.migrations, &c.migrations);
        put(&mut self.claims, &c.claims);
        put(&mut self.move_claims, &c.move_claims);
        if let Some(counters) = c.counters {
            self.failed_builds = counters.failed_builds;
            self.next_migration_id = counters.next_migration_id;
        }
        if let Some(node) = &c.compute_node {
            self.compute_node = Some(node.clone());
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
    /// Devices.
    pub devices: BTreeMap<PciAddress, Option<TrackedDevice>>,
    /// Instances.
    pub instances: BTreeMap<String, Option<InstanceRecord>>,
    /// Migrations.
    pub migrations: BTreeMap<i64, Option<MigrationRecord>>,
    /// Instance claims.
    pub claims: BTreeMap<String, Option<ClaimRecord>>,
    /// Move claims.
    pub move_claims: BTreeMap<i64, Option<ClaimRecord>>,
    /// Counters changed.
    pub counters: Option<Counters>,
    /// A new ComputeNode primitive to keep.
    pub compute_node: Option<serde_json::Value>,
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
        if later.counters.is_some() {
            self.counters = later.counters;
        }
        if later.compute_node.is_some() {
            self.compute_node = later.compute_node;
        }
    }
}

/// Who the instance is (besides what it asks for).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceInfo {
    /// Uuid.
    pub uuid: String,
    /// Project.
    pub project_id: Option<String>,
    /// User.
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
}

/// A claim that passed its test: the device states after it, the devices given, the resources.
type TestedClaim = (
    Option<Vec<TrackedDevice>>,
    Vec<Assignment>,
    BTreeMap<ResourceClass, i64>,
);

/// Settings the tracker needs from the configuration.
#[derive(Debug, Clone)]
pub struct TrackerSettings {
    /// Validated configuration (resources, device specs, aliases...).
    pub config: ValidConfig,
    /// This host's names.
    pub names: HostNames,
    /// The node's uuid.
    pub node_uuid: String,
    /// When the node was created.
    pub node_created_at: time::OffsetDateTime,
}

impl TrackerSettings {
    fn shared_disk(&self) -> bool {
        self.config.resources.shared_storage_provider.is_some()
    }
}

/// The tracker.
#[derive(Debug, Clone)]
pub struct Tracker {
    settings: TrackerSettings,
    /// Shared with the service's committed view: one copy of the probe in memory.
    host: std::sync::Arc<HostInventory>,
    inventory: BTreeMap<ResourceClass, ResourceInventory>,
    sockets: CellSockets,
    state: TrackerState,
    /// Usage per class, kept between operations: a claim adds to it; anything else clears it
    /// and the next read derives it again from the records.
    used_cache: std::cell::RefCell<Option<BTreeMap<ResourceClass, i64>>>,
}

fn cell_sockets(host: &HostInventory) -> CellSockets {
    host.numa_nodes
        .iter()
        .map(|n| {
            let pkgs: BTreeSet<i64> = host
                .cpu
                .cpus
                .iter()
                .filter(|c| n.cpus.contains(c.id))
                .filter_map(|c| c.package)
                .collect();
            (
                n.id,
                if pkgs.len() == 1 {
                    pkgs.into_iter().next()
                } else {
                    None
                },
            )
        })
        .collect()
}

impl Tracker {
    /// A tracker for `host` with `state` (as loaded from the store). Devices are synced with
    /// the host at the first audit, not here.
    pub fn new(settings: TrackerSettings, host: HostInventory, state: TrackerState) -> Tracker {
        let mut t = Tracker {
            inventory: BTreeMap::new(),
            sockets: cell_sockets(&host),
            settings,
            host: std::sync::Arc::new(host),
            state,
            used_cache: std::cell::RefCell::new(None),
        };
        t.refresh_inventory();
        t
    }

    fn refresh_inventory(&mut self) {
        let opts = InventoryOptions {
            shared_disk: self.settings.shared_disk(),
        };
        self.inventory = compute_inventory(&self.host, &self.settings.config.resources, opts)
            .into_iter()
            .map(|r| (r.class, r))
            .collect();
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
        &self.host
    }

    /// The probed host, shared (the service hands it to its committed view).
    pub fn host_shared(&self) -> std::sync::Arc<HostInventory> {
        self.host.clone()
    }

    /// Applies changes that were committed by another tracker working on the same records
    /// (the service's committed view follows its working tracker this way), with the probe
    /// that tracker audited against, if it changed.
    pub fn apply_committed(
        &mut self,
        host: Option<std::sync::Arc<HostInventory>>,
        changes: &Changes,
    ) {
        self.invalidate_usage();
        if let Some(host) = host {
            self.sockets = cell_sockets(&host);
            self.host = host;
            self.refresh_inventory();
        }
        self.state.apply(changes);
    }

    /// Replaces the settings (a reloaded configuration). Claims already granted stay.
    pub fn set_settings(&mut self, settings: TrackerSettings) {
        self.invalidate_usage();
        self.settings = settings;
        self.refresh_inventory();
    }

    /// Inventory per class.
    pub fn inventory(&self) -> &BTreeMap<ResourceClass, ResourceInventory> {
        &self.inventory
    }

    /// Current usage.
    pub fn usage(&self) -> Usage {
        compute_usage(
            &self.settings.names,
            &self.state.instances,
            &self.state.migrations,
            self.settings.shared_disk(),
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

    fn invalidate_usage(&mut self) {
        *self.used_cache.get_mut() = None;
    }

    /// Current PCI pools.
    pub fn pools(&self) -> Vec<Pool> {
        let devices: Vec<TrackedDevice> = self.state.devices.values().cloned().collect();
        build_pools(&devices, &self.settings.config.device_specs)
    }

    /// Every PCI pool with how many devices it has in all and how many are free. Devices in
    /// use count in the pool they belong to when free.
    pub fn pool_usage(&self) -> Vec<PoolUsage> {
        let specs = &self.settings.config.device_specs;
        let mut by_key: BTreeMap<super::pci::devices::PoolKey, (u32, u32)> = BTreeMap::new();
        for d in self.state.devices.values() {
            let e = by_key.entry(d.pool_key(specs)).or_default();
            e.0 += 1;
            if d.status == super::pci::devices::DeviceStatus::Available {
                e.1 += 1;
            }
        }
        by_key
            .into_iter()
            .map(|(key, (total, free))| PoolUsage {
                vendor_id: key.vendor_id,
                product_id: key.product_id,
                numa_node: key.numa_node,
                tags: key.tags,
                total,
                free,
            })
            .collect()
    }

    /// Checks `resources` against the inventory and current usage.
    fn shortfalls(
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
            let (capacity, max_unit) = match self.inventory.get(class) {
                Some(inv) => (inv.capacity(), inv.max_unit),
                None => (0, 0),
            };
            if used + requested > capacity || *requested > max_unit {
                out.push(ResourceShortfall {
                    class: *class,
                    requested: *requested,
                    used,
                    capacity,
                    max_unit,
                });
            }
        }
        out
    }

    fn device_vec(&self) -> Vec<TrackedDevice> {
        self.state.devices.values().cloned().collect()
    }

    /// Claims devices and checks resources; nothing is changed. Returns the new device states.
    fn test_claim(
        &self,
        uuid: &str,
        req: &InstanceRequest,
        claim_pci: bool,
        cache_usage: bool,
    ) -> Result<TestedClaim, ClaimError> {
        let resources = req
            .flavor
            .resources(req.is_bfv, self.settings.shared_disk());
        // Only an instance claim keeps the cache up to date as it changes the records; a move
        // claim changes them in ways only a full derivation follows.
        let usage = if cache_usage {
            self.used()
        } else {
            self.usage().used
        };
        let shortfalls = self.shortfalls(&resources, &usage);
        let pci = if claim_pci && !req.pci_requests.is_empty() {
            claim_devices(
                &self.device_vec(),
                &self.settings.config.device_specs,
                &req.pci_requests,
                &req.numa_cells,
                &self.sockets,
                uuid,
            )
            .map(|(d, a)| (Some(d), a))
        } else {
            Ok((None, Vec::new()))
        };
        match (shortfalls.is_empty(), pci) {
            (true, Ok((devs, assigned))) => Ok((devs, assigned, resources)),
            (_, pci) => Err(ClaimError::Refused(Box::new(Refusal {
                instance_uuid: uuid.to_string(),
                resources: shortfalls,
                pci: pci.err(),
            }))),
        }
    }

    fn replace_devices(&mut self, new: Option<Vec<TrackedDevice>>, changes: &mut Changes) {
        for d in new.into_iter().flatten() {
            if self.state.devices.get(&d.address) != Some(&d) {
                changes.devices.insert(d.address, Some(d.clone()));
                self.state.devices.insert(d.address, d);
            }
        }
    }

    fn free_devices(
        &mut self,
        owner: &str,
        request_ids: Option<&BTreeSet<String>>,
        changes: &mut Changes,
    ) -> Vec<PciAddress> {
        let mut devs = self.device_vec();
        let freed = free_owner(&mut devs, owner, request_ids);
        self.replace_devices(Some(devs), changes);
        freed
    }

    /// Nova's `instance_claim` (build): checks resources and PCI, then records the instance on
    /// this node with its devices allocated. The same instance claimed again with the same
    /// request returns the existing claim; with another request it is a conflict.
    pub fn instance_claim(
        &mut self,
        info: &InstanceInfo,
        req: &InstanceRequest,
        now: i64,
        dry_run: bool,
    ) -> Result<(ClaimOutcome, Changes), ClaimError> {
        let uuid = &info.uuid;
        validate_uuid(uuid, "instance.uuid")?;
        let vm_state = info.vm_state.as_deref().unwrap_or("building");
        check_vm_state(vm_state, "instance.vm_state")?;
        if let Some(t) = &info.task_state {
            check_task_state(t, "instance.task_state", false)?;
        }
        if releases_resources(vm_state, info.task_state.as_deref()) {
            // Granted but never counted: refuse rather than hand out what no rule holds.
            return Err(ClaimError::Conflict {
                id: uuid.clone(),
                message: format!(
                    "instance {uuid} with vm_state {vm_state} uses no resources under Nova's rules, so nothing claimed for it would be counted; claim it in the state it will run in (e.g. building)"
                ),
            });
        }
        if let Some(existing) = self.state.claims.get(uuid) {
            if existing.request == *req {
                return Ok((
                    ClaimOutcome {
                        claim: existing.clone(),
                        existing: true,
                        dry_run,
                    },
                    Changes::default(),
                ));
            }
            return Err(ClaimError::Conflict {
                id: uuid.clone(),
                message: format!(
                    "instance {uuid} already holds a claim on this host with a different request; abort it first"
                ),
            });
        }
        if let Some(inst) = self.state.instances.get(uuid) {
            return Err(ClaimError::Conflict {
                id: uuid.clone(),
                message: format!(
                    "instance {uuid} is already known here ({}, vm_state {}); a move uses a migration claim",
                    inst.host.as_deref().unwrap_or("no host"),
                    inst.vm_state
                ),
            });
        }
        let (devices, assignments, resources) = self.test_claim(uuid, req, true, true)?;
        let claim = ClaimRecord {
            instance_uuid: uuid.clone(),
            migration_id: None,
            request: req.clone(),
            assignments,
            resources,
            claimed_at: now,
        };
        if dry_run {
            return Ok((
                ClaimOutcome {
                    claim,
                    existing: false,
                    dry_run: true,
                },
                Changes::default(),
            ));
        }
        let mut changes = Changes::default();
        self.replace_devices(devices, &mut changes);
        let record = InstanceRecord {
            uuid: uuid.clone(),
            project_id: info.project_id.clone(),
            user_id: info.user_id.clone(),
            os_type: info.os_type.clone(),
            vm_state: vm_state.to_string(),
            task_state: info.task_state.clone(),
            host: Some(self.settings.names.host.clone()),
            node: Some(self.settings.names.node.clone()),
            request: req.clone(),
            old_flavor: None,
            new_flavor: None,
            migration_context: None,
        };
        self.state.instances.insert(uuid.clone(), record.clone());
        changes.instances.insert(uuid.clone(), Some(record));
        self.state.claims.insert(uuid.clone(), claim.clone());
        changes.claims.insert(uuid.clone(), Some(claim.clone()));
        if let Some(used) = self.used_cache.get_mut().as_mut() {
            for (class, amount) in &claim.resources {
                *used.entry(*class).or_default() += amount;
            }
        }
        Ok((
            ClaimOutcome {
                claim,
                existing: false,
                dry_run: false,
            },
            changes,
        ))
    }

    /// Aborts a claim: an instance claim (`abort_instance_claim`: the instance leaves this node
    /// and its devices are freed) or, failing that, the instance's move claim here.
    pub fn abort(&mut self, uuid: &str) -> Result<Changes, ClaimError> {
        self.invalidate_usage();
        let mut changes = Changes::default();
        if self.state.claims.contains_key(uuid) {
            self.free_devices(uuid, None, &mut changes);
            self.state.claims.remove(uuid);
            changes.claims.insert(uuid.to_string(), None);
            self.forget_instance_unless_moving(uuid, &mut changes);
            return Ok(changes);
        }
        let move_id = self
            .state
            .move_claims
            .iter()
            .find(|(_, c)| c.instance_uuid == uuid)
            .map(|(id, _)| *id);
        match move_id {
            Some(id) => {
                // The move did not happen: the migration ends, holding nothing.
                self.drop_move_claim(id, "failed", &mut changes);
                Ok(changes)
            }
            None => Err(ClaimError::NotFound {
                what: "claim",
                id: uuid.to_string(),
            }),
        }
    }

    fn forget_instance_unless_moving(&mut self, uuid: &str, changes: &mut Changes) {
        let moving = self
            .state
            .migrations
            .values()
            .any(|m| m.instance_uuid == uuid && m.in_progress());
        if !moving && self.state.instances.remove(uuid).is_some() {
            changes.instances.insert(uuid.to_string(), None);
        }
    }

    fn set_migration_status(&mut self, id: i64, status: &str, changes: &mut Changes) {
        if let Some(m) = self.state.migrations.get_mut(&id) {
            if m.status != status {
                m.status = status.to_string();
                changes.migrations.insert(id, Some(m.clone()));
            }
        }
    }

    /// Drops the destination side of a move: frees its devices, ends the migration with
    /// `status`, and forgets the instance if it is not on this node.
    fn drop_move_claim(&mut self, id: i64, status: &str, changes: &mut Changes) {
        if let Some(claim) = self.state.move_claims.remove(&id) {
            let ids: BTreeSet<String> = claim
                .assignments
                .iter()
                .map(|a| a.request_id.clone())
                .collect();
            self.free_devices(&claim.instance_uuid, Some(&ids), changes);
            changes.move_claims.insert(id, None);
        }
        self.set_migration_status(id, status, changes);
        if let Some(m) = self.state.migrations.get(&id).cloned() {
            if let Some(inst) = self.state.instances.get_mut(&m.instance_uuid) {
                if !on_node(inst, &self.settings.names) {
                    let uuid = inst.uuid.clone();
                    self.state.instances.remove(&uuid);
                    changes.instances.insert(uuid, None);
                } else if inst
                    .migration_context
                    .as_ref()
                    .is_some_and(|c| c.migration_id == id)
                {
                    inst.migration_context = None;
                    inst.new_flavor = None;
                    changes
                        .instances
                        .insert(inst.uuid.clone(), Some(inst.clone()));
                }
            }
        }
    }

    /// Nova's `_move_claim` (resize, cold or live migration, evacuation): at the destination,
    /// checks and claims the new flavor's resources and PCI devices (not for live migration, as
    /// Nova) and records the migration (status `pre-migrating`; `accepted` stays for live
    /// migration). At the source, records the outgoing migration without claiming anything.
    pub fn move_claim(
        &mut self,
        mv: &MoveRequest,
        now: i64,
        dry_run: bool,
    ) -> Result<(ClaimOutcome, Changes), ClaimError> {
        self.invalidate_usage();
        let uuid = mv.instance.uuid.clone();
        validate_uuid(&uuid, "instance.uuid")?;
        let current = match &mv.current {
            Some(c) => c.clone(),
            None => self
                .state
                .instances
                .get(&uuid)
                .map(|r| r.request.clone())
                .unwrap_or_else(|| mv.new.clone()),
        };
        let names = self.settings.names.clone();
        let source_compute = mv
            .source_compute
            .clone()
            .or_else(|| mv.instance.host.clone());
        let source_node = mv.source_node.clone().or_else(|| mv.instance.node.clone());
        let dest_compute = mv
            .dest_compute
            .clone()
            .unwrap_or_else(|| names.host.clone());
        let dest_node = mv.dest_node.clone().unwrap_or_else(|| names.node.clone());
        let incoming = dest_compute == names.host && dest_node == names.node;
        let outgoing = source_compute.as_deref() == Some(names.host.as_str())
            && source_node.as_deref() == Some(names.node.as_str());
        if !incoming && !outgoing {
            return Err(ClaimError::Invalid {
                field: "migration".into(),
                message: format!(
                    "neither source ({}/{}) nor destination ({dest_compute}/{dest_node}) is this host ({}/{})",
                    source_compute.as_deref().unwrap_or("?"),
                    source_node.as_deref().unwrap_or("?"),
                    names.host,
                    names.node
                ),
            });
        }
        let move_type = mv
            .move_type
            .unwrap_or(if mv.new.flavor.id != current.flavor.id {
                MoveType::Resize
            } else {
                MoveType::Migration
            });
        let default_task = match move_type {
            MoveType::LiveMigration => "migrating",
            MoveType::Evacuation => "rebuilding",
            _ => "resize_prep",
        };
        let vm_state = mv.instance.vm_state.as_deref().unwrap_or("active");
        let task_state = mv.instance.task_state.as_deref().unwrap_or(default_task);
        check_vm_state(vm_state, "instance.vm_state")?;
        check_task_state(task_state, "instance.task_state", false)?;
        if incoming && !move_is_counted(vm_state, Some(task_state)) {
            // Nova's usage rules count a move only while its instance is resizing or
            // live-migrating; one granted in any other state would hold nothing.
            return Err(ClaimError::Conflict {
                id: uuid.clone(),
                message: format!(
                    "a move of instance {uuid} with vm_state {vm_state} and task_state {task_state} would not be counted by Nova's usage rules, so it is refused; moves are counted for vm_state active or stopped with a resize or rebuild task state, resized, or active or paused with task_state migrating"
                ),
            });
        }
        let id = match mv.migration_id {
            Some(id) if id > 0 => id,
            Some(id) => {
                return Err(ClaimError::Invalid {
                    field: "migration_id".into(),
                    message: format!("{id} is not a positive id"),
                })
            }
            None => self.state.next_migration_id.max(1),
        };

        // Idempotent retry of the same move claim.
        if let Some(existing) = self.state.move_claims.get(&id) {
            if existing.instance_uuid == uuid && existing.request == mv.new {
                return Ok((
                    ClaimOutcome {
                        claim: existing.clone(),
                        existing: true,
                        dry_run,
                    },
                    Changes::default(),
                ));
            }
            return Err(ClaimError::Conflict {
                id: id.to_string(),
                message: format!("migration {id} already holds a different claim on this host"),
            });
        }
        if let Some(m) = self.state.migrations.get(&id) {
            if m.instance_uuid != uuid {
                return Err(ClaimError::Conflict {
                    id: id.to_string(),
                    message: format!(
                        "migration {id} belongs to instance {}, not {uuid}",
                        m.instance_uuid
                    ),
                });
            }
        }
        if let Some(existing) = self.state.instances.get(&uuid) {
            // What the tracker knows about the instance must agree with the move.
            if on_node(existing, &names) && !outgoing {
                return Err(ClaimError::Conflict {
                    id: uuid.clone(),
                    message: format!(
                        "instance {uuid} is on this host; a move to this host must come from it (a same-node resize), not from {}/{}",
                        source_compute.as_deref().unwrap_or("?"),
                        source_node.as_deref().unwrap_or("?")
                    ),
                });
            }
            if let Some(ctx) = &existing.migration_context {
                let other_in_progress = ctx.migration_id != id
                    && self
                        .state
                        .migrations
                        .get(&ctx.migration_id)
                        .is_some_and(MigrationRecord::in_progress);
                if other_in_progress {
                    return Err(ClaimError::Conflict {
                        id: uuid.clone(),
                        message: format!(
                            "instance {uuid} is already moving (migration {}); confirm or revert it first",
                            ctx.migration_id
                        ),
                    });
                }
            }
        }

        let (devices, assignments, resources) = if incoming {
            let claim_pci = move_type != MoveType::LiveMigration;
            self.test_claim(&uuid, &mv.new, claim_pci, false)?
        } else {
            (None, Vec::new(), BTreeMap::new())
        };
        let claim = ClaimRecord {
            instance_uuid: uuid.clone(),
            migration_id: Some(id),
            request: mv.new.clone(),
            assignments,
            resources,
            claimed_at: now,
        };
        if dry_run {
            return Ok((
                ClaimOutcome {
                    claim,
                    existing: false,
                    dry_run: true,
                },
                Changes::default(),
            ));
        }

        let mut changes = Changes::default();
        self.replace_devices(devices, &mut changes);
        let previous = self.state.migrations.get(&id).cloned();
        let status = match (move_type, previous.as_ref().map(|m| m.status.as_str())) {
            (MoveType::LiveMigration, Some("accepted")) => "accepted".to_string(),
            _ => "pre-migrating".to_string(),
        };
        let migration = MigrationRecord {
            id,
            uuid: mv
                .migration_uuid
                .clone()
                .or(previous.as_ref().map(|m| m.uuid.clone()))
                .unwrap_or_else(|| {
                    uuid::Uuid::new_v5(
                        &uuid::Uuid::NAMESPACE_OID,
                        format!("rtrack.migration.{uuid}.{id}").as_bytes(),
                    )
                    .hyphenated()
                    .to_string()
                }),
            instance_uuid: uuid.clone(),
            source_compute: source_compute.clone(),
            source_node: source_node.clone(),
            dest_compute: Some(dest_compute),
            dest_node: Some(dest_node),
            status,
            migration_type: move_type.as_str().to_string(),
            old_instance_type_id: Some(current.flavor.id),
            new_instance_type_id: Some(mv.new.flavor.id),
            created_at: previous.as_ref().map_or(now, |m| m.created_at),
            updated_at: now,
        };
        self.state.migrations.insert(id, migration.clone());
        changes.migrations.insert(id, Some(migration));
        if self.state.next_migration_id <= id {
            self.state.next_migration_id = id + 1;
            changes.counters = Some(self.counters());
        }

        let existing = self.state.instances.get(&uuid).cloned();
        let record = InstanceRecord {
            uuid: uuid.clone(),
            project_id: mv
                .instance
                .project_id
                .clone()
                .or(existing.as_ref().and_then(|i| i.project_id.clone())),
            user_id: mv
                .instance
                .user_id
                .clone()
                .or(existing.as_ref().and_then(|i| i.user_id.clone())),
            os_type: mv
                .instance
                .os_type
                .clone()
                .or(existing.as_ref().and_then(|i| i.os_type.clone())),
            vm_state: vm_state.to_string(),
            task_state: Some(task_state.to_string()),
            host: source_compute,
            node: source_node,
            request: existing
                .as_ref()
                .map(|i| i.request.clone())
                .unwrap_or_else(|| current.clone()),
            old_flavor: Some(current.flavor.clone()),
            new_flavor: Some(mv.new.flavor.clone()),
            migration_context: Some(MigrationContext {
                migration_id: id,
                old_pci_requests: current.pci_requests.clone(),
                new_pci_requests: mv.new.pci_requests.clone(),
                old_numa_cells: current.numa_cells.clone(),
                new_numa_cells: mv.new.numa_cells.clone(),
            }),
        };
        self.state.instances.insert(uuid.clone(), record.clone());
        changes.instances.insert(uuid.clone(), Some(record));
        if incoming {
            self.state.move_claims.insert(id, claim.clone());
            changes.move_claims.insert(id, Some(claim.clone()));
        }
        Ok((
            ClaimOutcome {
                claim,
                existing: false,
                dry_run: false,
            },
            changes,
        ))
    }

    fn migration(&self, id: i64) -> Result<MigrationRecord, ClaimError> {
        self.state
            .migrations
            .get(&id)
            .cloned()
            .ok_or(ClaimError::NotFound {
                what: "migration",
                id: id.to_string(),
            })
    }

    fn sides(&self, m: &MigrationRecord) -> (bool, bool) {
        let n = &self.settings.names;
        (
            m.source_compute.as_deref() == Some(n.host.as_str())
                && m.source_node.as_deref() == Some(n.node.as_str()),
            m.dest_compute.as_deref() == Some(n.host.as_str())
                && m.dest_node.as_deref() == Some(n.node.as_str()),
        )
    }

    /// Confirms a move (`drop_move_claim_at_source` and the destination's completion): the
    /// migration becomes `confirmed`; at the source the old flavor's usage and devices are
    /// dropped; at the destination the instance now lives here with its new flavor and keeps the
    /// devices claimed for it.
    pub fn confirm_move(&mut self, id: i64, now: i64) -> Result<Changes, ClaimError> {
        self.invalidate_usage();
        let m = self.migration(id)?;
        if !m.in_progress() {
            return Err(ClaimError::Conflict {
                id: id.to_string(),
                message: format!("migration {id} is already {}", m.status),
            });
        }
        let (at_source, at_dest) = self.sides(&m);
        let mut changes = Changes::default();
        let uuid = m.instance_uuid.clone();
        let names = self.settings.names.clone();
        if at_source {
            // Old devices: those held for the old requests (all the instance's, unless the move
            // claimed new ones on this same node).
            let new_ids: BTreeSet<String> = self
                .state
                .move_claims
                .get(&id)
                .map(|c| c.assignments.iter().map(|a| a.request_id.clone()).collect())
                .unwrap_or_default();
            let old_ids: BTreeSet<String> = self
                .state
                .devices
                .values()
                .filter_map(|d| d.owner.as_ref())
                .filter(|o| o.instance_uuid == uuid)
                .filter_map(|o| o.request_id.clone())
                .filter(|r| !new_ids.contains(r))
                .collect();
            self.free_devices(&uuid, Some(&old_ids), &mut changes);
            if !at_dest {
                self.state.claims.remove(&uuid);
                changes.claims.insert(uuid.clone(), None);
            }
        }
        self.set_migration_status(id, "confirmed", &mut changes);
        if let Some(m) = self.state.migrations.get_mut(&id) {
            m.updated_at = now;
            changes.migrations.insert(id, Some(m.clone()));
        }
        if at_dest {
            if let Some(inst) = self.state.instances.get_mut(&uuid) {
                let new_flavor = inst
                    .new_flavor
                    .clone()
                    .unwrap_or_else(|| inst.request.flavor.clone());
                let new_ctx = inst.migration_context.clone();
                inst.host = Some(names.host.clone());
                inst.node = Some(names.node.clone());
                inst.request.flavor = new_flavor;
                if let Some(ctx) = new_ctx {
                    inst.request.pci_requests = ctx.new_pci_requests;
                    inst.request.numa_cells = ctx.new_numa_cells;
                }
                inst.old_flavor = None;
                inst.new_flavor = None;
                inst.migration_context = None;
                inst.task_state = None;
                if inst.vm_state == "resized" {
                    inst.vm_state = "active".into();
                }
                changes.instances.insert(uuid.clone(), Some(inst.clone()));
                let request = inst.request.clone();
                if let Some(mut claim) = self.state.move_claims.remove(&id) {
                    changes.move_claims.insert(id, None);
                    claim.migration_id = None;
                    claim.request = request;
                    self.state.claims.insert(uuid.clone(), claim.clone());
                    changes.claims.insert(uuid.clone(), Some(claim));
                }
            }
        } else {
            self.forget_instance_unless_moving(&uuid, &mut changes);
        }
        Ok(changes)
    }

    /// Reverts a move (`drop_move_claim_at_dest` and the source's side): the migration becomes
    /// `reverted`; at the destination the new flavor's usage and devices are dropped; at the
    /// source the instance is back with its old flavor.
    pub fn revert_move(&mut self, id: i64, now: i64) -> Result<Changes, ClaimError> {
        self.invalidate_usage();
        let m = self.migration(id)?;
        if !m.in_progress() {
            return Err(ClaimError::Conflict {
                id: id.to_string(),
                message: format!("migration {id} is already {}", m.status),
            });
        }
        let (at_source, at_dest) = self.sides(&m);
        let mut changes = Changes::default();
        let names = self.settings.names.clone();
        if at_dest {
            self.drop_move_claim(id, "reverted", &mut changes);
        } else {
            self.set_migration_status(id, "reverted", &mut changes);
        }
        if let Some(m) = self.state.migrations.get_mut(&id) {
            m.updated_at = now;
            changes.migrations.insert(id, Some(m.clone()));
        }
        if at_source {
            if let Some(inst) = self.state.instances.get_mut(&m.instance_uuid) {
                if let Some(old) = inst.old_flavor.take() {
                    inst.request.flavor = old;
                }
                if let Some(ctx) = inst.migration_context.take() {
                    inst.request.pci_requests = ctx.old_pci_requests;
                    inst.request.numa_cells = ctx.old_numa_cells;
                }
                inst.new_flavor = None;
                inst.host = Some(names.host.clone());
                inst.node = Some(names.node.clone());
                inst.task_state = None;
                if inst.vm_state == "resized" {
                    inst.vm_state = "active".into();
                }
                changes
                    .instances
                    .insert(inst.uuid.clone(), Some(inst.clone()));
            }
        }
        Ok(changes)
    }

    /// Nova's `update_usage`: applies an instance's new state; a deleted or shelved-offloaded
    /// instance stops counting and its devices are freed.
    pub fn update_instance(
        &mut self,
        uuid: &str,
        up: &InstanceUpdate,
    ) -> Result<Changes, ClaimError> {
        self.invalidate_usage();
        if let Some(v) = &up.vm_state {
            check_vm_state(v, "vm_state")?;
        }
        if let Some(t) = &up.task_state {
            check_task_state(t, "task_state", true)?;
        }
        let Some(before) = self.state.instances.get(uuid).cloned() else {
            return Err(ClaimError::NotFound {
                what: "instance",
                id: uuid.to_string(),
            });
        };
        let used_before = self.usage().used;
        let Some(inst) = self.state.instances.get_mut(uuid) else {
            return Err(ClaimError::NotFound {
                what: "instance",
                id: uuid.to_string(),
            });
        };
        if let Some(v) = &up.vm_state {
            inst.vm_state = v.clone();
        }
        if let Some(t) = &up.task_state {
            inst.task_state = if t.is_empty() { None } else { Some(t.clone()) };
        }
        if let Some(h) = &up.host {
            inst.host = Some(h.clone());
        }
        if let Some(n) = &up.node {
            inst.node = Some(n.clone());
        }
        if up.apply_new_flavor {
            let Some(new) = inst.new_flavor.clone() else {
                return Err(ClaimError::Invalid {
                    field: "apply_new_flavor".into(),
                    message: format!("instance {uuid} has no new flavor (no resize in progress)"),
                });
            };
            inst.request.flavor = new;
        }
        let inst = inst.clone();
        // A state change may make the rules count again what they had stopped counting (an
        // instance back from `deleted`, a move back in a resize state): that is a grant, and
        // it must fit like one.
        let used_after = self.usage().used;
        let grown: BTreeMap<ResourceClass, i64> = used_after
            .iter()
            .filter(|(class, after)| **after > used_before.get(class).copied().unwrap_or(0))
            .map(|(class, after)| (*class, after - used_before.get(class).copied().unwrap_or(0)))
            .collect();
        let shortfalls = self.shortfalls(&grown, &used_before);
        if !shortfalls.is_empty() {
            self.state.instances.insert(uuid.to_string(), before);
            return Err(ClaimError::Refused(Box::new(Refusal {
                instance_uuid: uuid.to_string(),
                resources: shortfalls,
                pci: None,
            })));
        }
        let mut changes = Changes::default();
        if inst.releases_resources() {
            // Deleted (or offloaded) while moving: its moves here end too.
            let moves: Vec<i64> = self
                .state
                .move_claims
                .iter()
                .filter(|(_, c)| c.instance_uuid == uuid)
                .map(|(id, _)| *id)
                .collect();
            for id in moves {
                self.state.move_claims.remove(&id);
                changes.move_claims.insert(id, None);
            }
            let in_progress: Vec<i64> = self
                .state
                .migrations
                .values()
                .filter(|m| m.instance_uuid == uuid && m.in_progress())
                .map(|m| m.id)
                .collect();
            for id in in_progress {
                self.set_migration_status(id, "error", &mut changes);
            }
            self.free_devices(uuid, None, &mut changes);
            if self.state.claims.remove(uuid).is_some() {
                changes.claims.insert(uuid.to_string(), None);
            }
            self.state.instances.insert(uuid.to_string(), inst.clone());
            changes.instances.insert(uuid.to_string(), Some(inst));
            self.forget_instance_unless_moving(uuid, &mut changes);
        } else {
            changes.instances.insert(uuid.to_string(), Some(inst));
        }
        Ok(changes)
    }

    /// Nova's failed-build counter.
    pub fn build_result(&mut self, failed: bool) -> Changes {
        self.state.failed_builds = if failed {
            self.state.failed_builds + 1
        } else {
            0
        };
        Changes {
            counters: Some(self.counters()),
            ..Changes::default()
        }
    }

    /// The periodic audit (`update_available_resource`): takes the new probe, re-syncs PCI
    /// devices (new ones become available; vanished free ones are removed; busy ones are kept,
    /// unchanged, until freed), frees devices held by instances the tracker no longer knows,
    /// marks stale migrations `error`, and builds the ComputeNode.
    pub fn audit(
        &mut self,
        host: HostInventory,
        now: time::OffsetDateTime,
    ) -> (AuditOutcome, Changes) {
        self.invalidate_usage();
        self.sockets = cell_sockets(&host);
        self.host = std::sync::Arc::new(host);
        self.refresh_inventory();
        let mut changes = Changes::default();

        let desired: BTreeMap<PciAddress, TrackedDevice> =
            select_tracked(&self.host.pci_devices, &self.settings.config.device_specs)
                .into_iter()
                .map(|d| (d.address, d))
                .collect();
        let (mut added, mut removed, mut deferred) = (Vec::new(), Vec::new(), Vec::new());
        let mut devices: BTreeMap<PciAddress, TrackedDevice> = BTreeMap::new();
        for (addr, old) in &self.state.devices {
            let busy = old.owner.is_some();
            match desired.get(addr) {
                Some(new) if !busy => {
                    // Free: take the probe's properties, keep the state.
                    devices.insert(
                        *addr,
                        TrackedDevice {
                            status: old.status,
                            owner: None,
                            ..new.clone()
                        },
                    );
                }
                Some(new) => {
                    if !same_properties(old, new) {
                        deferred.push(*addr);
                    }
                    devices.insert(*addr, old.clone());
                }
                None if busy => {
                    deferred.push(*addr);
                    devices.insert(*addr, old.clone());
                }
                None => removed.push(*addr),
            }
        }
        for (addr, new) in desired {
            if !devices.contains_key(&addr) && !self.state.devices.contains_key(&addr) {
                added.push(addr);
                devices.insert(addr, new);
            }
        }
        // Owners that are neither instances nor moving instances (Nova's clean_usage).
        let mut reclaimed = Vec::new();
        for d in devices.values_mut() {
            let orphan = d
                .owner
                .as_ref()
                .is_some_and(|o| !self.state.instances.contains_key(&o.instance_uuid));
            if orphan {
                reclaimed.push(d.address);
                d.owner = None;
                d.status = super::pci::DeviceStatus::Available;
            }
        }
        let mut list: Vec<TrackedDevice> = devices.into_values().collect();
        recompute_relatives(&mut list);
        let new_map: BTreeMap<PciAddress, TrackedDevice> =
            list.into_iter().map(|d| (d.address, d)).collect();
        for addr in self.state.devices.keys() {
            if !new_map.contains_key(addr) {
                changes.devices.insert(*addr, None);
            }
        }
        for (addr, d) in &new_map {
            if self.state.devices.get(addr) != Some(d) {
                changes.devices.insert(*addr, Some(d.clone()));
            }
        }
        self.state.devices = new_map;

        let usage = self.usage();
        for id in &usage.stale_migrations {
            self.set_migration_status(*id, "error", &mut changes);
        }
        let compute_node = self.compute_node(&usage, now);
        // Persisted only when it changed (Nova's _resource_change): the audit time alone is
        // not a change.
        let primitive = compute_node.to_primitive();
        if self.state.compute_node.as_ref().map(without_updated_at)
            != Some(without_updated_at(&primitive))
        {
            self.state.compute_node = Some(primitive.clone());
            changes.compute_node = Some(primitive);
        }
        (
            AuditOutcome {
                compute_node,
                devices_added: added,
                devices_removed: removed,
                devices_deferred: deferred,
                devices_reclaimed: reclaimed,
                stale_migrations: usage.stale_migrations.clone(),
            },
            changes,
        )
    }

    /// The ComputeNode for the current state.
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
        let identity = NodeIdentity {
            uuid: self.settings.node_uuid.clone(),
            hypervisor_hostname: self.settings.names.node.clone(),
            host: self.settings.names.host.clone(),
            created_at: self.settings.node_created_at,
        };
        build_compute_node(
            &self.host,
            &self.settings.config,
            &identity,
            &node_usage,
            &self.pools(),
            now,
        )
    }

    fn counters(&self) -> Counters {
        Counters {
            failed_builds: self.state.failed_builds,
            next_migration_id: self.state.next_migration_id,
        }
    }

    /// Replaces the whole state: after a failed commit the service reloads what the store holds.
    pub fn replace_state(&mut self, state: TrackerState) {
        self.invalidate_usage();
        self.state = state;
    }
}

fn same_properties(a: &TrackedDevice, b: &TrackedDevice) -> bool {
    a.vendor_id == b.vendor_id
        && a.product_id == b.product_id
        && a.dev_type == b.dev_type
        && a.numa_node == b.numa_node
        && a.parent_addr == b.parent_addr
        && a.parent_ifname == b.parent_ifname
        && a.spec_index == b.spec_index
        && a.tags == b.tags
}

fn validate_uuid(uuid: &str, field: &str) -> Result<(), ClaimError> {
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
