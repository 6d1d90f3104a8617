//! The tracker: the records ([`super::records`]) with the probed host and the settings, and
//! what it derives from them: usage, pools and the ComputeNode. The operations are in
//! [`super::ops`]; each returns the [`Changes`] the caller persists before answering.
//!
//! In: records loaded from the store, a probe, settings. Out: usage, pools, the ComputeNode.
//! No I/O and no clock: callers pass the time and the probed host.

use std::collections::BTreeMap;

use std::sync::Arc;

use super::changes::Changes;
use super::error::{ClaimError, ResourceShortfall};
use super::host_view::HostView;
use super::model::FlavorUsage;
use super::node_template::NodeUsage;
use super::numa::nova::host_object;
use super::pci::index::PciIndex;
use super::records::{Counters, Holdings, TrackerState};
use super::settings::TrackerSettings;
use super::usage::{compute_usage, current_workload, stats, Usage};
use crate::inventory::resources::{ResourceClass, ResourceInventory};
use crate::objects::compute_node::ComputeNode;
use crate::objects::Versioned;
use crate::probes::HostInventory;

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
