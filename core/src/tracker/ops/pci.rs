//! The tracker's PCI devices: the index claims read, the pools (for the ComputeNode, usage and
//! metrics) derived from it, and the writing of changed device states into the records.
//!
//! In: the tracked devices and the device specs. Out: the [`PciIndex`], [`Pool`]s and
//! [`PoolUsage`], and device changes recorded in [`Changes`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::PoolUsage;
use crate::probes::pci::PciAddress;
use crate::tracker::error::ClaimError;
use crate::tracker::pci::claim::{free_owner, recompute_relatives_in};
use crate::tracker::pci::devices::TrackedDevices;
use crate::tracker::pci::devices::{
    DeviceStatus, OneTimeUseNoted, OneTimeUseReading, TrackedDevice,
};
use crate::tracker::pci::free::Held;
use crate::tracker::pci::index::PciIndex;
use crate::tracker::pci::pools::Pool;
use crate::tracker::{Changes, Tracker};

impl Tracker {
    /// The index of the tracked devices (built on first use after the devices or the device
    /// specs changed).
    pub fn pci_index(&self) -> Arc<PciIndex> {
        if let Some(i) = self.pci_index.borrow().as_ref() {
            return i.clone();
        }
        let index = Arc::new(PciIndex::build(
            &self.state.devices,
            &self.settings.policy.device_specs,
            &self.pci_device_providers(),
        ));
        *self.pci_index.borrow_mut() = Some(index.clone());
        index
    }

    /// The current PCI pools (the ComputeNode's `pci_device_pools`, which the scheduler's
    /// PciPassthroughFilter reads): available devices, in the order claims use them, and the
    /// one-time-use devices reserved after use whose reservation Placement holds. Nova's pools
    /// never hide those: Placement keeps the scheduler from them until an operator lowers the
    /// reservation there, and a claim Placement allocated on one cleans it.
    pub fn pools(&self) -> Vec<Pool> {
        let index = self.pci_index();
        let free: Vec<bool> = self
            .state
            .devices
            .values()
            .map(|d| match d.status {
                DeviceStatus::Available => true,
                DeviceStatus::Reserved => d.one_time_use() && d.reservation_seen,
                _ => false,
            })
            .collect();
        index
            .pools
            .iter()
            .filter_map(|p| {
                let devices: Vec<usize> = p.members.iter().copied().filter(|i| free[*i]).collect();
                (!devices.is_empty()).then(|| Pool {
                    key: p.key.clone(),
                    devices,
                    rp_uuid: p.rp_uuid,
                })
            })
            .collect()
    }

    /// Every PCI pool with how many devices it has in all and how many are free. Devices in
    /// use count in the pool they belong to when free.
    pub fn pool_usage(&self) -> Vec<PoolUsage> {
        let index = self.pci_index();
        let status: Vec<DeviceStatus> = self.state.devices.values().map(|d| d.status).collect();
        let mut out: Vec<PoolUsage> = index
            .pools
            .iter()
            .map(|p| PoolUsage {
                vendor_id: p.key.vendor_id.clone(),
                product_id: p.key.product_id.clone(),
                numa_node: p.key.numa_node,
                tags: p.key.tags.clone(),
                total: p.members.len() as u32,
                free: p
                    .members
                    .iter()
                    .filter(|i| status[**i] == DeviceStatus::Available)
                    .count() as u32,
            })
            .collect();
        // Reported by key, as before the index existed.
        out.sort_by(|a, b| {
            (&a.vendor_id, &a.product_id, a.numa_node, &a.tags).cmp(&(
                &b.vendor_id,
                &b.product_id,
                b.numa_node,
                &b.tags,
            ))
        });
        out
    }

    /// Writes the devices whose state changed into the records and the changes. A device that
    /// becomes available again is stamped as returned last (in the order given), so its pool
    /// gives it first, as Nova's does.
    pub(crate) fn replace_devices(
        &mut self,
        new: Option<Vec<TrackedDevice>>,
        changes: &mut Changes,
    ) {
        let mut last_returned = None;
        for mut d in new.into_iter().flatten() {
            let old = self.state.devices.get(&d.address);
            if d.status == DeviceStatus::Available
                && old.is_some_and(|o| o.status != DeviceStatus::Available)
            {
                let last = last_returned.get_or_insert_with(|| {
                    self.state
                        .devices
                        .values()
                        .map(|d| d.returned)
                        .max()
                        .unwrap_or(0)
                });
                *last += 1;
                d.returned = *last;
            }
            if self.state.devices.get(&d.address).map(|s| &**s) != Some(&d) {
                let d = Arc::new(d);
                changes.devices.insert(d.address, Some(d.clone()));
                self.state.devices.insert(d.address, d);
            }
        }
    }

    /// Frees what `owner` holds (only `request_ids` when given); returns the freed addresses.
    pub(crate) fn free_devices(
        &mut self,
        owner: &str,
        request_ids: Option<&BTreeSet<String>>,
        changes: &mut Changes,
    ) -> Vec<PciAddress> {
        let which = request_ids.map_or(Held::All, Held::ForRequests);
        self.free_held(owner, which, changes)
    }

    /// Frees what `owner` holds that `which` selects; returns the freed addresses.
    pub(crate) fn free_held(
        &mut self,
        owner: &str,
        which: Held<'_>,
        changes: &mut Changes,
    ) -> Vec<PciAddress> {
        let index = self.pci_index();
        let (changed, freed) = free_owner(&self.state.devices, &index, owner, which);
        self.replace_devices(Some(changed), changes);
        freed
    }

    /// Releases a one-time-use device reserved after use: it becomes available (unless a PF or
    /// VF of it is in use) and its provider's inventory is no longer reserved.
    pub fn release_device(&mut self, address: &PciAddress) -> Result<Changes, ClaimError> {
        let Some(d) = self.state.devices.get(address) else {
            return Err(ClaimError::NotFound {
                what: "PCI device",
                id: address.to_string(),
            });
        };
        if d.status != DeviceStatus::Reserved {
            return Err(ClaimError::Conflict {
                id: address.to_string(),
                message: format!(
                    "PCI device {address} is {}; only a one-time-use device reserved after use is released",
                    d.status.as_str()
                ),
            });
        }
        let mut devices = self.state.devices.clone();
        if let Some(d) = devices.get_mut(address).map(Arc::make_mut) {
            d.status = DeviceStatus::Available;
            d.reservation_seen = false;
            d.unreserve_pending = true;
        }
        recompute_relatives_in(&mut devices);
        let mut changes = Changes::default();
        let changed: Vec<TrackedDevice> = devices
            .into_values()
            .filter(|d| self.state.devices.get(&d.address) != Some(d))
            .map(Arc::unwrap_or_clone)
            .collect();
        self.replace_devices(Some(changed), &mut changes);
        Ok(changes)
    }

    /// One-time-use devices whose provider's inventory rtrack reserves whole: in use, or
    /// reserved after use before their reservation was seen in Placement.
    pub fn one_time_used(&self) -> BTreeSet<PciAddress> {
        self.state
            .devices
            .values()
            .filter(|d| {
                d.one_time_use()
                    && match d.status {
                        DeviceStatus::Claimed | DeviceStatus::Allocated => true,
                        DeviceStatus::Reserved => !d.reservation_seen,
                        _ => false,
                    }
            })
            .map(|d| d.address)
            .collect()
    }

    /// One-time-use devices released by `rtrackctl pci release` whose provider's `reserved`
    /// rtrack has yet to lower in Placement.
    pub fn one_time_unreserve(&self) -> BTreeSet<PciAddress> {
        self.state
            .devices
            .values()
            .filter(|d| d.unreserve_pending && d.status == DeviceStatus::Available)
            .map(|d| d.address)
            .collect()
    }

    /// One-time-use devices reserved after use whose reservation Placement has shown: their
    /// provider's `reserved` is left as Placement holds it (an operator lowers it to clean one).
    pub fn one_time_kept(&self) -> BTreeSet<PciAddress> {
        self.state
            .devices
            .values()
            .filter(|d| {
                d.one_time_use() && d.status == DeviceStatus::Reserved && d.reservation_seen
            })
            .map(|d| d.address)
            .collect()
    }

    /// The devices, with the one-time-use devices reserved after use that `requests` were
    /// allocated from in Placement made available again; None when there are none. Placement
    /// let such an allocation through though rtrack had seen the device's provider reserved
    /// whole, so an operator lowered `reserved`: Nova's way of cleaning the device.
    pub(crate) fn cleaned_in_placement(
        &self,
        requests: &[crate::tracker::model::PciRequest],
    ) -> Option<TrackedDevices> {
        // Only requests held to Placement's providers (a port's are not, as in Nova).
        let named: BTreeSet<uuid::Uuid> = requests
            .iter()
            .filter(|r| r.alias_name.is_some())
            .flat_map(|r| r.rp_uuids.iter().copied())
            .collect();
        if named.is_empty() {
            return None;
        }
        let cleaned: Vec<PciAddress> = self
            .pci_provider_uuids()
            .into_iter()
            .filter(|(a, u)| {
                named.contains(u)
                    && self.state.devices.get(a).is_some_and(|d| {
                        d.one_time_use() && d.status == DeviceStatus::Reserved && d.reservation_seen
                    })
            })
            .map(|(a, _)| a)
            .collect();
        if cleaned.is_empty() {
            return None;
        }
        let mut devices = self.state.devices.clone();
        for a in &cleaned {
            if let Some(d) = devices.get_mut(a).map(Arc::make_mut) {
                d.status = DeviceStatus::Available;
                d.reservation_seen = false;
            }
        }
        recompute_relatives_in(&mut devices);
        Some(devices)
    }

    /// What a report found of one-time-use devices' providers in Placement (read, or written
    /// this cycle). A whole reservation is taken as rtrack's own seen there while the device is
    /// in use, or once it is reserved after use when Placement was read and holds no allocation
    /// there (an allocation made before the reservation landed must not later pass for an
    /// operator's clean). A device reserved after use whose reservation was seen and which a
    /// read finds lowered was cleaned by an operator, Nova's way, and is available again. An
    /// available device whose provider a read finds reserved whole with nothing allocated was
    /// used before rtrack tracked it (nova-compute's tracker reserved it, or an operator did):
    /// it is reserved here too, until cleaned.
    pub fn note_one_time_use_reservations(
        &mut self,
        readings: &BTreeMap<PciAddress, OneTimeUseReading>,
    ) -> (Changes, OneTimeUseNoted) {
        let mut devices = self.state.devices.clone();
        let mut noted = OneTimeUseNoted::default();
        for (address, r) in readings {
            let Some(d) = devices.get_mut(address).map(Arc::make_mut) else {
                continue;
            };
            if !d.one_time_use() {
                continue;
            }
            if !r.whole {
                d.unreserve_pending = false;
            }
            match d.status {
                DeviceStatus::Claimed | DeviceStatus::Allocated if r.whole => {
                    d.reservation_seen = true;
                }
                DeviceStatus::Reserved if r.whole && r.read && r.used == 0 => {
                    d.reservation_seen = true;
                }
                DeviceStatus::Reserved if d.reservation_seen && !r.whole && r.read => {
                    d.status = DeviceStatus::Available;
                    d.reservation_seen = false;
                    noted.cleaned.push(*address);
                }
                DeviceStatus::Available
                    if !d.unreserve_pending && r.whole && r.read && r.used == 0 =>
                {
                    d.status = DeviceStatus::Reserved;
                    d.reservation_seen = true;
                    noted.found_reserved.push(*address);
                }
                _ => {}
            }
        }
        if !noted.cleaned.is_empty() || !noted.found_reserved.is_empty() {
            recompute_relatives_in(&mut devices);
        }
        let changed: Vec<TrackedDevice> = devices
            .into_values()
            .filter(|d| self.state.devices.get(&d.address) != Some(d))
            .map(Arc::unwrap_or_clone)
            .collect();
        let mut changes = Changes::default();
        if !changed.is_empty() {
            self.replace_devices(Some(changed), &mut changes);
        }
        (changes, noted)
    }

    /// Free PCI devices per NUMA node (Nova orders host cells by them).
    pub(crate) fn pci_free_per_cell(&self) -> BTreeMap<u32, i64> {
        let mut out = BTreeMap::new();
        for d in self.state.devices.values() {
            if d.status == DeviceStatus::Available {
                if let Some(n) = d.numa_node {
                    *out.entry(n).or_default() += 1;
                }
            }
        }
        out
    }
}
