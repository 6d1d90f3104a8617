//! Freeing PCI devices with Nova's PF/VF rules (`nova/pci/device.py`: `free`, and the stats'
//! re-adding of a freed PF's VFs or a VF's PF), and re-deriving the states of relatives after a
//! device sync.
//!
//! In: the tracker's devices and [`PciIndex`], an owner (and optionally some of its request
//! ids). Out: the devices whose state changes and the addresses freed. A one-time-use device
//! freed is reserved, not available.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::devices::{DeviceStatus, TrackedDevice};
use super::index::PciIndex;
use crate::probes::pci::{PciAddress, PciDevType};
use crate::tracker::pci::devices::TrackedDevices;

/// Which of an owner's devices to free.
#[derive(Debug, Clone, Copy)]
pub enum Held<'a> {
    /// Every device it holds.
    All,
    /// Those held for these request ids.
    ForRequests(&'a BTreeSet<String>),
    /// Those at these addresses (a same-node move holds old and new devices for the same
    /// request ids: a Neutron port keeps its request across a resize).
    At(&'a BTreeSet<PciAddress>),
}

/// Frees the devices `owner` holds that `which` selects and restores exactly what their
/// allocation made unavailable: a freed PF's VFs become available; a freed VF's PF becomes
/// available once none of its VFs is in use. Returns the devices whose state changed (with
/// their new state) and the freed addresses; `devices` is not changed.
pub fn free_owner(
    devices: &TrackedDevices,
    index: &PciIndex,
    owner: &str,
    which: Held<'_>,
) -> (Vec<TrackedDevice>, Vec<PciAddress>) {
    let mut status: BTreeMap<usize, DeviceStatus> = BTreeMap::new();
    let mut freed = Vec::new();
    for (i, d) in devices.values().enumerate() {
        let mine = d.owner.as_ref().is_some_and(|o| {
            o.instance_uuid == owner
                && match which {
                    Held::All => true,
                    Held::ForRequests(ids) => {
                        o.request_id.as_ref().is_some_and(|r| ids.contains(r))
                    }
                    Held::At(addresses) => addresses.contains(&d.address),
                }
        });
        if mine {
            status.insert(i, d.freed_status());
            freed.push(i);
        }
    }
    if freed.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let current = |i: usize, status: &BTreeMap<usize, DeviceStatus>| -> DeviceStatus {
        status.get(&i).copied().unwrap_or_else(|| {
            devices
                .get(&index.addresses[i])
                .map_or(DeviceStatus::Available, |d| d.status)
        })
    };
    // The relatives whose state may change: the freed devices, their PFs and their VFs.
    let mut related: BTreeSet<usize> = BTreeSet::new();
    for &i in &freed {
        related.insert(i);
        related.extend(index.parent[i]);
        related.extend(index.children[i].iter().copied());
    }
    let updates: Vec<(usize, DeviceStatus)> = related
        .iter()
        .filter(|i| !is_busy(current(**i, &status)))
        .map(|&i| {
            let blocked = match index.dev_type[i] {
                PciDevType::Pf => index.children[i]
                    .iter()
                    .any(|c| is_busy(current(*c, &status))),
                PciDevType::Vf | PciDevType::Vdpa => {
                    index.parent[i].is_some_and(|p| is_busy(current(p, &status)))
                }
                PciDevType::Pci => false,
            };
            (
                i,
                if blocked {
                    DeviceStatus::Unavailable
                } else {
                    DeviceStatus::Available
                },
            )
        })
        .collect();
    status.extend(updates);
    let changed = status
        .iter()
        .filter_map(|(i, st)| {
            let d = devices.get(&index.addresses[*i])?;
            let freeing = freed.contains(i);
            (d.status != *st || freeing).then(|| {
                let mut d = TrackedDevice::clone(d);
                d.status = *st;
                if freeing {
                    d.owner = None;
                }
                d
            })
        })
        .collect();
    (changed, freed.iter().map(|i| index.addresses[*i]).collect())
}

/// Re-derives the unavailable/available states of relatives over the tracker's device map (a PF
/// is unavailable while any VF is allocated or claimed; VFs are unavailable while their PF is;
/// every other non-owned device is available); returns the devices whose status changed.
pub fn recompute_relatives_in(devices: &mut TrackedDevices) -> Vec<PciAddress> {
    let blocked = BlockedRelatives::of(devices.values().map(|d| &**d));
    let mut changed = Vec::new();
    for d in devices.values_mut() {
        match blocked.status_of(d) {
            Some(status) if status != d.status => {
                Arc::make_mut(d).status = status;
                changed.push(d.address);
            }
            _ => {}
        }
    }
    changed
}

/// The PFs that are busy and the PFs that have a busy VF: their relatives are unavailable.
struct BlockedRelatives {
    busy_pfs: BTreeSet<PciAddress>,
    pfs_with_busy_vfs: BTreeSet<PciAddress>,
}

impl BlockedRelatives {
    fn of<'a>(devices: impl Iterator<Item = &'a TrackedDevice> + Clone) -> BlockedRelatives {
        BlockedRelatives {
            busy_pfs: devices
                .clone()
                .filter(|d| d.dev_type == PciDevType::Pf && is_busy(d.status))
                .map(|d| d.address)
                .collect(),
            pfs_with_busy_vfs: devices
                .filter(|d| d.dev_type.is_child() && is_busy(d.status))
                .filter_map(|d| d.parent_addr)
                .collect(),
        }
    }

    /// The status a free device should have; `None` for a busy one (it keeps its own).
    fn status_of(&self, d: &TrackedDevice) -> Option<DeviceStatus> {
        if is_busy(d.status) {
            return None;
        }
        let blocked = match d.dev_type {
            PciDevType::Pf => self.pfs_with_busy_vfs.contains(&d.address),
            PciDevType::Vf | PciDevType::Vdpa => {
                d.parent_addr.is_some_and(|p| self.busy_pfs.contains(&p))
            }
            PciDevType::Pci => false,
        };
        Some(if blocked {
            DeviceStatus::Unavailable
        } else {
            DeviceStatus::Available
        })
    }
}

/// Held by an instance, or reserved after one use: its PF or VFs cannot be given out.
fn is_busy(s: DeviceStatus) -> bool {
    matches!(
        s,
        DeviceStatus::Allocated | DeviceStatus::Claimed | DeviceStatus::Reserved
    )
}
