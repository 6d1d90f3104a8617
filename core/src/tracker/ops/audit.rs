//! The periodic audit (`update_available_resource`): devices re-synced with a new probe, stale
//! migrations marked, the ComputeNode rebuilt.
//!
//! In: the [`HostView`] of a new probe (or the [`HostInventory`], whose view is derived here) and
//! the time. Out: an [`AuditOutcome`] (devices added, removed, deferred and reclaimed, stale
//! migrations, the ComputeNode) and the [`Changes`] to commit.
//!
//! [`Changes`]: crate::tracker::Changes

use std::collections::BTreeSet;
use std::sync::Arc;

use super::AuditOutcome;
use crate::probes::HostInventory;
use crate::tracker::host_view::HostView;
use crate::tracker::node_template::without_volatile_fields;
use crate::tracker::pci::claim::recompute_relatives_in;
use crate::tracker::pci::devices::TrackedDevice;
use crate::tracker::{Changes, Tracker};

impl Tracker {
    /// [`Tracker::audit_view`] of a probe, deriving its view here (tests and tools; the
    /// service derives the view before it takes the lock).
    pub fn audit(
        &mut self,
        mut host: HostInventory,
        now: time::OffsetDateTime,
    ) -> (AuditOutcome, Changes) {
        crate::tracker::numa::power::carry_offline_topology(&self.view.host, &mut host);
        let view = Arc::new(self.view_of(Arc::new(host)).with_uptime_at(now));
        self.audit_view(view, now)
    }

    /// The periodic audit (`update_available_resource`): takes the view of a new probe,
    /// re-syncs PCI devices (new ones become available; vanished free ones are removed; busy
    /// ones are kept, unchanged, until freed), frees devices held by instances the tracker no
    /// longer knows, marks stale migrations `error`, and builds the ComputeNode. Only the
    /// devices that change are touched, so that the part under the lock stays small.
    pub fn audit_view(
        &mut self,
        view: Arc<HostView>,
        now: time::OffsetDateTime,
    ) -> (AuditOutcome, Changes) {
        self.invalidate_usage();
        // Devices may come, go or change: the index is built again on next use.
        *self.pci_index.get_mut() = None;
        let mdevs_before: BTreeSet<String> = mdev_uuids(&self.view.host);
        self.view = if view.generation == self.generation {
            view
        } else {
            // The settings were reloaded while the probe ran.
            let mut again = self.view_of(view.host.clone());
            again.uptime = view.uptime.clone();
            Arc::new(again)
        };
        let view = self.view.clone();
        let mut changes = Changes::default();
        let (mut added, mut removed, mut deferred) = (Vec::new(), Vec::new(), Vec::new());
        let mut touched = BTreeSet::new();
        for (addr, old) in self.state.devices.iter_mut() {
            let busy = old.owner.is_some();
            match view.tracked.get(addr) {
                // Free: take the probe's properties, keep the state.
                Some(new) if !busy => {
                    if !same_properties(old, new) {
                        *old = Arc::new(TrackedDevice {
                            status: old.status,
                            owner: None,
                            returned: old.returned,
                            reservation_seen: old.reservation_seen,
                            unreserve_pending: old.unreserve_pending,
                            ..TrackedDevice::clone(new)
                        });
                        touched.insert(*addr);
                    }
                }
                Some(new) => {
                    if !same_properties(old, new) {
                        deferred.push(*addr);
                    }
                }
                None if busy => deferred.push(*addr),
                None => removed.push(*addr),
            }
        }
        for addr in &removed {
            self.state.devices.remove(addr);
            changes.devices.insert(*addr, None);
        }
        for (addr, new) in &view.tracked {
            if !self.state.devices.contains_key(addr) {
                added.push(*addr);
                touched.insert(*addr);
                self.state.devices.insert(*addr, new.clone());
            }
        }
        // Owners that are neither instances nor moving instances (Nova's clean_usage).
        let mut reclaimed = Vec::new();
        for d in self.state.devices.values_mut() {
            let orphan = d
                .owner
                .as_ref()
                .is_some_and(|o| !self.state.instances.contains_key(&o.instance_uuid));
            if orphan {
                reclaimed.push(d.address);
                let d = Arc::make_mut(d);
                d.owner = None;
                d.status = d.freed_status();
                touched.insert(d.address);
            }
        }
        touched.extend(recompute_relatives_in(&mut self.state.devices));
        self.record_new_pci_providers(&mut changes);
        for addr in touched {
            if let Some(d) = self.state.devices.get(&addr) {
                changes.devices.insert(addr, Some(d.clone()));
            }
        }

        let usage = self.usage();
        let mdevs_now = mdev_uuids(&view.host);
        let (mdevs_missing, pmem_missing) = missing_named(&view, &usage);
        for id in &usage.stale_migrations {
            self.set_migration_status(*id, "error", &mut changes);
        }
        let compute_node = self.compute_node(&usage, now);
        // Persisted only when it changed (Nova's _resource_change): the audit time and the
        // uptime alone are not a change.
        let primitive = without_volatile_fields(&compute_node.to_primitive());
        if self
            .state
            .compute_node
            .as_ref()
            .map(without_volatile_fields)
            != Some(primitive)
        {
            let primitive = compute_node.to_primitive();
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
                mdevs_appeared: mdevs_now.difference(&mdevs_before).cloned().collect(),
                mdevs_vanished: mdevs_before.difference(&mdevs_now).cloned().collect(),
                mdevs_missing,
                pmem_missing,
            },
            changes,
        )
    }
}

fn mdev_uuids(host: &HostInventory) -> BTreeSet<String> {
    host.mediated_devices
        .devices
        .iter()
        .map(|d| d.uuid.clone())
        .collect()
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

/// (instance, what it holds).
type Held = (String, String);

/// Mdevs and vPMEM namespaces given to counted claims that the host no longer has (or no longer
/// offers): (instance, mdev uuid) and (instance, namespace name).
fn missing_named(
    view: &crate::tracker::host_view::HostView,
    usage: &crate::tracker::usage::Usage,
) -> (Vec<Held>, Vec<Held>) {
    let held = || {
        usage
            .consumers
            .iter()
            .filter_map(|c| c.nested.as_ref().map(|n| (c.instance_uuid.as_str(), n)))
    };
    let mdevs = crate::tracker::nested::missing_mdevs(&view.host, held())
        .into_iter()
        .map(|(instance, m)| (instance, m.uuid))
        .collect();
    let pmem = crate::tracker::nested::pmem::missing_namespaces(&view.pmem, held());
    (mdevs, pmem)
}
