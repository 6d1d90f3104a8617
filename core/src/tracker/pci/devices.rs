//! Tracked PCI devices: the probed functions a `[pci] device_spec` selects, with their state and
//! owner (Nova's PciDevice rows, without the database).
//!
//! In: the probed PCI functions ([`PciDevice`]s) and the device specs ([`DeviceSpec`]s). Out:
//! [`TrackedDevice`]s, all available, each with the index and tags of the spec that selected it;
//! and each device's [`PoolKey`].
//!
//! Bridges (class 06xx) are never tracked. Unlike Nova, functions in PCI domains wider than 16
//! bits are tracked.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

use crate::probes::pci::{PciAddress, PciDevType, PciDevice};

use super::spec::{first_match, DeviceSpec};

/// Nova's device statuses (`removed` devices are dropped from the tracker instead of kept).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum DeviceStatus {
    /// Free to claim: no holder, and no related PF or VF in use.
    Available,
    /// Held by a claim not yet turned into an allocation.
    Claimed,
    /// In use by an instance.
    Allocated,
    /// A PF whose VF is claimed: it cannot be claimed itself.
    Unclaimable,
    /// A PF whose VF is allocated, or a VF whose PF is allocated.
    Unavailable,
    /// A one-time-use device freed after use: kept from every claim until an operator releases
    /// it (Nova keeps only its Placement inventory reserved).
    Reserved,
}

impl DeviceStatus {
    /// Nova's string.
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceStatus::Available => "available",
            DeviceStatus::Claimed => "claimed",
            DeviceStatus::Allocated => "allocated",
            DeviceStatus::Unclaimable => "unclaimable",
            DeviceStatus::Unavailable => "unavailable",
            DeviceStatus::Reserved => "reserved",
        }
    }
}

/// What Placement holds for a one-time-use device's provider, as a report read it from
/// Placement or wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OneTimeUseReading {
    /// `reserved` is the whole total.
    pub whole: bool,
    /// The report re-read Placement (so `used` is current too), not only wrote the inventory.
    pub read: bool,
    /// What Placement says is allocated from it.
    pub used: u64,
}

/// What `Tracker::note_one_time_use_reservations` changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OneTimeUseNoted {
    /// Devices reserved after use that an operator cleaned in Placement: available again.
    pub cleaned: Vec<PciAddress>,
    /// Available devices whose provider Placement holds reserved whole with nothing allocated
    /// (used before rtrack tracked them): reserved until cleaned.
    pub found_reserved: Vec<PciAddress>,
}

/// Who holds a device.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, serde::Deserialize)]
pub struct DeviceOwner {
    /// Instance (or migration) uuid holding it.
    pub instance_uuid: String,
    /// The InstancePCIRequest it satisfies.
    pub request_id: Option<String>,
}

/// Tracked devices by address. Each is behind an `Arc`, shared by the tracker's working and
/// committed views until one of them changes it (`Arc::make_mut`).
pub type TrackedDevices = BTreeMap<PciAddress, Arc<TrackedDevice>>;

/// One tracked device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct TrackedDevice {
    /// The function's PCI address (`dddd:bb:ss.f`); also its key in the tracker.
    pub address: PciAddress,
    /// Vendor id.
    pub vendor_id: String,
    /// Product id.
    pub product_id: String,
    /// Nova's device type.
    pub dev_type: PciDevType,
    /// NUMA node.
    pub numa_node: Option<u32>,
    /// A VF's PF.
    pub parent_addr: Option<PciAddress>,
    /// A VF's PF network interface (Nova's extra_info.parent_ifname).
    pub parent_ifname: Option<String>,
    /// Index of the device_spec that selected it.
    pub spec_index: usize,
    /// That spec's tags, values as Nova stores them.
    pub tags: BTreeMap<String, String>,
    /// Where the device is in its claim and allocation life cycle.
    pub status: DeviceStatus,
    /// Holder, when claimed or allocated.
    pub owner: Option<DeviceOwner>,
    /// When the device last went back to its pool (freed, or its PF or VFs freed): a rising
    /// tracker-wide number, 0 until that first happens. A pool gives the device returned last
    /// first, then the highest address: Nova's pools append what comes back and pop the last.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub returned: u64,
    /// A one-time-use device's reservation was seen in Placement (`reserved` = total on its
    /// provider) since it was last claimed: from then on `reserved` there is the operator's,
    /// and an operator lowering it releases the device (Nova's way of cleaning one).
    #[serde(default, skip_serializing_if = "is_false")]
    pub reservation_seen: bool,
    /// A one-time-use device released by `rtrackctl pci release` whose provider Placement may
    /// still hold reserved: the next report writes `reserved` 0 there (rtrack otherwise leaves
    /// a PCI provider's `reserved` as Placement holds it, as Nova does).
    #[serde(default, skip_serializing_if = "is_false")]
    pub unreserve_pending: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl TrackedDevice {
    /// Its device spec says `one_time_use = true`.
    pub fn one_time_use(&self) -> bool {
        self.tags.get("one_time_use").map(String::as_str) == Some("true")
    }

    /// The status it takes when its holder frees it: available, or reserved for a
    /// one-time-use device.
    pub fn freed_status(&self) -> DeviceStatus {
        if self.one_time_use() {
            DeviceStatus::Reserved
        } else {
            DeviceStatus::Available
        }
    }

    /// The pool this device belongs to while available: Nova's `_create_pool_keys_from_dev`.
    pub fn pool_key(&self, specs: &[DeviceSpec]) -> PoolKey {
        let mut tags: BTreeMap<String, String> = specs
            .get(self.spec_index)
            .map(|s| s.pool_tags().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        tags.insert("dev_type".into(), self.dev_type.as_str().into());
        // One pool per PF (or per device): Placement maps one provider per PF.
        tags.insert(
            "address".into(),
            self.parent_addr.unwrap_or(self.address).to_string(),
        );
        if let Some(ifname) = &self.parent_ifname {
            tags.insert("parent_ifname".into(), ifname.clone());
        }
        // remote_managed defaults to "false" on network-capable types (Nova's
        // _ensure_remote_managed_tag: PFs, VFs and vDPA devices).
        if matches!(
            self.dev_type,
            PciDevType::Pf | PciDevType::Vf | PciDevType::Vdpa
        ) {
            tags.entry("remote_managed".into())
                .or_insert_with(|| "false".into());
        }
        PoolKey {
            vendor_id: self.vendor_id.clone(),
            product_id: self.product_id.clone(),
            numa_node: self.numa_node,
            tags,
        }
    }
}

/// What makes devices interchangeable: ids, NUMA node, and tags (dev_type, address, spec tags,
/// parent_ifname, remote_managed).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct PoolKey {
    /// Vendor id.
    pub vendor_id: String,
    /// Product id.
    pub product_id: String,
    /// NUMA node.
    pub numa_node: Option<u32>,
    /// Every other key.
    pub tags: BTreeMap<String, String>,
}

impl PoolKey {
    /// Nova's flat pool dict (`PciDevicePool.to_dict()` minus count), values as strings; the
    /// form request specs are matched against.
    pub fn flat(&self) -> BTreeMap<String, Option<String>> {
        let mut m: BTreeMap<String, Option<String>> = self
            .tags
            .iter()
            .map(|(k, v)| (k.clone(), Some(v.clone())))
            .collect();
        m.insert("vendor_id".into(), Some(self.vendor_id.clone()));
        m.insert("product_id".into(), Some(self.product_id.clone()));
        m.insert("numa_node".into(), self.numa_node.map(|n| n.to_string()));
        m
    }
}

/// The probed functions that rtrack tracks: not bridges, and matched by a device spec (the first
/// one that matches). All start available.
pub fn select_tracked(probed: &[PciDevice], specs: &[DeviceSpec]) -> Vec<TrackedDevice> {
    if specs.is_empty() {
        return Vec::new();
    }
    let by_addr: BTreeMap<PciAddress, &PciDevice> = probed.iter().map(|d| (d.address, d)).collect();
    probed
        .iter()
        .filter(|d| !d.is_bridge())
        .filter_map(|d| {
            let (spec_index, spec) = first_match(specs, d, probed)?;
            // Nova (libvirt) names the PF's interface only for a VF that is a network interface
            // itself (a VF without `net/`, e.g. bound to vfio-pci, has none).
            let parent_ifname = (!d.net_interfaces.is_empty())
                .then(|| d.parent_addr.and_then(|p| by_addr.get(&p)))
                .flatten()
                .and_then(|pf| pf.net_interfaces.first().cloned());
            Some(TrackedDevice {
                address: d.address,
                vendor_id: d.vendor_id.clone(),
                product_id: d.product_id.clone(),
                dev_type: d.dev_type,
                numa_node: d.numa_node,
                parent_addr: d.parent_addr,
                parent_ifname,
                spec_index,
                tags: spec.tags.clone(),
                status: DeviceStatus::Available,
                owner: None,
                returned: 0,
                reservation_seen: false,
                unreserve_pending: false,
            })
        })
        .collect()
}
