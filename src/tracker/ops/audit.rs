//! The periodic audit (`update_available_resource`): a new probe in; devices re-synced, stale
//! migrations marked, the ComputeNode rebuilt, and the [`Changes`] out.
//!
//! [`Changes`]: super::super::state::Changes

use std::collections::BTreeMap;

use super::AuditOutcome;
use crate::probes::pci::PciAddress;
use crate::probes::HostInventory;
use crate::tracker::compute_node::without_updated_at;
use crate::tracker::pci::claim::recompute_relatives;
use crate::tracker::pci::devices::{select_tracked, TrackedDevice};
use crate::tracker::state::{cell_sockets, Changes, Tracker};

impl Tracker {
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
                d.status = crate::tracker::pci::DeviceStatus::Available;
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
