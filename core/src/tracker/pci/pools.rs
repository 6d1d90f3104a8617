//! PCI device pools: available devices grouped by [`PoolKey`], as Nova's `PciDeviceStats`
//! builds them, and turned into the `PciDevicePoolList` a ComputeNode carries.
//!
//! In: the tracked devices with their states ([`TrackedDevice`]s) and the device specs (whose tags
//! go into the keys). Out: [`Pool`]s of available devices ([`build_pools`]), and the
//! [`PciDevicePoolList`] a ComputeNode carries ([`pools_object`]).
//!
//! Pools are a pure function of device states: a pool exists while it has an available device,
//! and its `count` is the number available (Nova keeps some emptied pools at count 0 depending on
//! history and forgets them on restart; rtrack reports what a restarted Nova would). Pools are
//! ordered plainest first (fewest keys), then in discovery order (the address of their first
//! device), as Nova's stable sort of pools appended in discovery order leaves them.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::objects::pci_device_pool::{PciDevicePool, PciDevicePoolList};
use crate::objects::{Field, NField, Versioned};

use super::devices::{DeviceStatus, PoolKey, TrackedDevice};
use super::spec::DeviceSpec;

/// One pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pool {
    /// The pool's key.
    pub key: PoolKey,
    /// Available devices (indexes into the tracker's device list, in address order).
    pub devices: Vec<usize>,
    /// With PCI in Placement: the provider holding the pool's devices (Nova's pool metadata
    /// `rp_uuid`, reported as a tag).
    pub rp_uuid: Option<uuid::Uuid>,
}

impl Pool {
    /// Devices available.
    pub fn count(&self) -> usize {
        self.devices.len()
    }
}

/// Groups the available devices into pools.
pub fn build_pools<'a>(
    devices: impl IntoIterator<Item = &'a TrackedDevice>,
    specs: &[DeviceSpec],
) -> Vec<Pool> {
    let mut by_key: BTreeMap<PoolKey, Vec<usize>> = BTreeMap::new();
    for (i, d) in devices.into_iter().enumerate() {
        if d.status == DeviceStatus::Available {
            by_key.entry(d.pool_key(specs)).or_default().push(i);
        }
    }
    let mut pools: Vec<Pool> = by_key
        .into_iter()
        .map(|(key, devices)| Pool {
            key,
            devices,
            rp_uuid: None,
        })
        .collect();
    // Nova sorts by the number of keys so that devices with fewer tags are used first; pools
    // that tie stay in discovery order, the address order of their first device.
    pools.sort_by(|a, b| {
        a.key
            .tags
            .len()
            .cmp(&b.key.tags.len())
            .then_with(|| a.devices.first().cmp(&b.devices.first()))
    });
    pools
}

/// The `PciDevicePoolList` object for a ComputeNode.
pub fn pools_object(pools: &[Pool]) -> Versioned<PciDevicePoolList> {
    let objects = pools
        .iter()
        .map(|p| {
            Versioned::new(PciDevicePool {
                product_id: Field::Set(p.key.product_id.clone()),
                vendor_id: Field::Set(p.key.vendor_id.clone()),
                numa_node: NField::from_option(p.key.numa_node.map(i64::from)),
                tags: Field::Set(
                    p.key
                        .tags
                        .iter()
                        .map(|(k, v)| (k.clone(), Some(v.clone())))
                        .chain(
                            p.rp_uuid
                                .map(|u| ("rp_uuid".to_string(), Some(u.to_string()))),
                        )
                        .collect(),
                ),
                count: Field::Set(p.count() as i64),
            })
        })
        .collect();
    Versioned::new(PciDevicePoolList {
        objects: Field::Set(objects),
    })
}
