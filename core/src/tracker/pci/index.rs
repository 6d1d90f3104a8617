//! An index of the tracked devices for claims: every device's position, its pool (by key, in
//! Nova's pool order), and its PF and VFs. It depends only on which devices are tracked and on the
//! device specs, not on their states, so a claim reads states from the device map and never
//! copies it.
//!
//! In: the tracked devices (address order) and the device specs. Out: a [`PciIndex`].

use std::collections::{BTreeMap, HashMap};

use super::devices::PoolKey;
use super::spec::DeviceSpec;
use crate::probes::pci::{PciAddress, PciDevType};
use crate::tracker::pci::devices::TrackedDevices;

/// One pool of the index: its key, the key flattened as requests match it, and its members (all
/// of them, whatever their state), by position, in address order.
#[derive(Debug, Clone)]
pub struct IndexedPool {
    /// The pool's key.
    pub key: PoolKey,
    /// vendor_id, product_id, numa_node and the tags, as request specs are matched against.
    pub flat: BTreeMap<String, Option<String>>,
    /// Member positions, ascending (address order).
    pub members: Vec<usize>,
    /// With PCI in Placement: the provider of the pool's devices.
    pub rp_uuid: Option<uuid::Uuid>,
}

/// The index.
#[derive(Debug, Clone, Default)]
pub struct PciIndex {
    /// Device addresses by position (address order, as the device map iterates).
    pub addresses: Vec<PciAddress>,
    position: HashMap<PciAddress, usize>,
    /// Pools in Nova's order: fewest keys first, then the address of their first device.
    pub pools: Vec<IndexedPool>,
    /// Each device's PF, by position.
    pub parent: Vec<Option<usize>>,
    /// Each PF's VFs, by position.
    pub children: Vec<Vec<usize>>,
    /// Each device's type.
    pub dev_type: Vec<PciDevType>,
}

impl PciIndex {
    /// Indexes `devices` (in address order) under `specs`; `providers` gives the Placement
    /// provider of each device reported there.
    pub fn build(
        devices: &TrackedDevices,
        specs: &[DeviceSpec],
        providers: &HashMap<PciAddress, uuid::Uuid>,
    ) -> PciIndex {
        let addresses: Vec<PciAddress> = devices.keys().copied().collect();
        let position: HashMap<PciAddress, usize> =
            addresses.iter().enumerate().map(|(i, a)| (*a, i)).collect();
        let mut by_key: BTreeMap<PoolKey, Vec<usize>> = BTreeMap::new();
        let mut parent = Vec::with_capacity(addresses.len());
        let mut children = vec![Vec::new(); addresses.len()];
        let mut dev_type = Vec::with_capacity(addresses.len());
        for (i, d) in devices.values().enumerate() {
            by_key.entry(d.pool_key(specs)).or_default().push(i);
            let p = d.parent_addr.and_then(|a| position.get(&a).copied());
            if let Some(p) = p {
                children[p].push(i);
            }
            parent.push(p);
            dev_type.push(d.dev_type);
        }
        let mut pools: Vec<IndexedPool> = by_key
            .into_iter()
            .map(|(key, members)| IndexedPool {
                flat: key.flat(),
                key,
                rp_uuid: members
                    .iter()
                    .find_map(|i| providers.get(&addresses[*i]).copied()),
                members,
            })
            .collect();
        pools.sort_by(|a, b| {
            a.key
                .tags
                .len()
                .cmp(&b.key.tags.len())
                .then_with(|| a.members.first().cmp(&b.members.first()))
        });
        PciIndex {
            addresses,
            position,
            pools,
            parent,
            children,
            dev_type,
        }
    }

    /// The position of `address`, if tracked.
    pub fn position(&self, address: &PciAddress) -> Option<usize> {
        self.position.get(address).copied()
    }

    /// Number of devices.
    pub fn len(&self) -> usize {
        self.addresses.len()
    }

    /// True when no device is tracked.
    pub fn is_empty(&self) -> bool {
        self.addresses.is_empty()
    }
}
