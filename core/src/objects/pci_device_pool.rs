//! PciDevicePool 1.1 and PciDevicePoolList 1.1 (nova/objects/pci_device_pool.py): the summary of
//! a host's available PCI devices that the scheduler matches requests against. ComputeNode
//! carries it in `pci_device_pools` (the database column is `pci_stats`).
//!
//! In: the tracker's pools (pool key and available count), or a primitive of either object (1.0 to
//! 1.1). Out: a [`PciDevicePoolList`] for the ComputeNode; backported to 1.0, the pools lose
//! `numa_node`.

use serde_json::{Map, Value};

use super::base::{Manifest, NovaObject, ObjVersion, ObjectError, Reader, Writer};
use super::fields::{backport_list_children, older, DictNullStr, Int, ListObj, Str};

crate::nova_object_fields! {
    /// One pool: devices with the same ids, NUMA node and tags.
    pub struct PciDevicePool {
        /// Product id.
        product_id: req Str,
        /// Vendor id.
        vendor_id: req Str,
        /// NUMA node (1.1).
        numa_node: opt Int,
        /// Every other pool key: dev_type, address, physical_network, remote_managed...
        tags: req DictNullStr,
        /// Devices available.
        count: req Int,
    }
}

impl NovaObject for PciDevicePool {
    const NAME: &'static str = "PciDevicePool";
    const VERSION: ObjVersion = ObjVersion::new(1, 1);
    fn decode(r: &mut Reader<'_>) -> Result<Self, ObjectError> {
        Self::decode_fields(r)
    }
    fn encode(&self, w: &mut Writer) -> Result<(), ObjectError> {
        self.encode_fields(w)
    }
    fn make_compatible(
        data: &mut Map<String, Value>,
        target: ObjVersion,
        _: Option<&Manifest>,
    ) -> Result<(), ObjectError> {
        if older(target, 1, 1) {
            data.remove("numa_node");
        }
        Ok(())
    }
}

crate::nova_object_fields! {
    /// The list of pools.
    pub struct PciDevicePoolList {
        /// Nova's `objects`: the pools, one per set of ids, NUMA node and tags.
        objects: req ListObj<PciDevicePool>,
    }
}

impl NovaObject for PciDevicePoolList {
    const NAME: &'static str = "PciDevicePoolList";
    const VERSION: ObjVersion = ObjVersion::new(1, 1);
    fn decode(r: &mut Reader<'_>) -> Result<Self, ObjectError> {
        Self::decode_fields(r)
    }
    fn encode(&self, w: &mut Writer) -> Result<(), ObjectError> {
        self.encode_fields(w)
    }
    fn make_compatible(
        data: &mut Map<String, Value>,
        _: ObjVersion,
        m: Option<&Manifest>,
    ) -> Result<(), ObjectError> {
        backport_list_children::<PciDevicePool>(data, Self::NAME, m)
    }
}
