//! ComputeNode 1.19 (nova/objects/compute_node.py): what a host offers and uses. Every field of
//! Nova 34, in Nova's order, with `obj_make_compatible` down to 1.0.
//!
//! In: a ComputeNode primitive (1.0 to 1.19), or the fields the tracker's `NodeTemplate` sets. Out:
//! a [`ComputeNode`]; its primitive at 1.19 or backported to any older 1.x (the HVSpec and
//! PciDevicePoolList children per the manifest), and its NUMA topology decoded.
//!
//! Three fields hold JSON *text*: `cpu_info` (an object), `metrics` (a list) and
//! `numa_topology` (a whole NUMATopology primitive); `stats` is a real object whose values are
//! strings. Decoding checks that `numa_topology` and `metrics` parse, since Nova's consumers
//! (the scheduler, the hypervisors API) would fail on them later.

use serde_json::{Map, Value};

use super::base::{Manifest, NovaObject, ObjVersion, ObjectError, Reader, Versioned, Writer};
use super::fields::{
    backport_child, drop_fields, older, Bool, DateTime, DictNullStr, Float, Int, Ip, ListObj, Obj,
    Str, Uuid,
};
use super::hv_spec::HVSpec;
use super::numa::NUMATopology;
use super::pci_device_pool::PciDevicePoolList;

crate::nova_object_fields! {
    /// Nova's ComputeNode object: one hypervisor node, what it offers and what is used of it.
    pub struct ComputeNode {
        /// Database id (read-only in Nova).
        id: req Int,
        /// Stable node uuid (1.15).
        uuid: req Uuid,
        /// Service id (nullable since 1.13).
        service_id: opt Int,
        /// Service host (1.7).
        host: opt Str,
        /// Nova's `vcpus`: host CPUs the node offers for guest VCPUs, before the allocation ratio.
        vcpus: req Int,
        /// Memory, MiB.
        memory_mb: req Int,
        /// Local disk, GiB.
        local_gb: req Int,
        /// VCPUs used (starts at reserved).
        vcpus_used: req Int,
        /// Memory used, MiB (starts at reserved).
        memory_mb_used: req Int,
        /// Disk used, GiB (starts at reserved).
        local_gb_used: req Int,
        /// Hypervisor type.
        hypervisor_type: req Str,
        /// Hypervisor version (libvirt: major*1e6+minor*1e3+micro).
        hypervisor_version: req Int,
        /// Node name.
        hypervisor_hostname: opt Str,
        /// memory_mb - memory_mb_used (may be negative).
        free_ram_mb: opt Int,
        /// local_gb - local_gb_used (may be negative).
        free_disk_gb: opt Int,
        /// Instances with a task in progress.
        current_workload: opt Int,
        /// Instances on the node.
        running_vms: opt Int,
        /// JSON text of the CPU description.
        cpu_info: opt Str,
        /// Disk actually free for new instances, GiB.
        disk_available_least: opt Int,
        /// JSON text of the monitor metrics list.
        metrics: opt Str,
        /// Counters (1.3); values are strings.
        stats: opt DictNullStr,
        /// Host IP (1.4).
        host_ip: opt Ip,
        /// JSON text of a NUMATopology primitive (1.5).
        numa_topology: opt Str,
        /// Supported (arch, hv_type, vm_mode) (1.6).
        supported_hv_specs: req ListObj<HVSpec>,
        /// PCI pools (1.9); DB column `pci_stats`.
        pci_device_pools: opt Obj<PciDevicePoolList>,
        /// VCPU ratio (1.14).
        cpu_allocation_ratio: req Float,
        /// Memory ratio (1.14).
        ram_allocation_ratio: req Float,
        /// Disk ratio (1.16).
        disk_allocation_ratio: req Float,
        /// Mapped to a cell (1.17).
        mapped: req Int,
        /// Persistent-object timestamps.
        created_at: opt DateTime,
        /// Last update.
        updated_at: opt DateTime,
        /// Deletion time.
        deleted_at: opt DateTime,
        /// Nova's `deleted`: true once the record is soft-deleted (kept, but marked gone).
        deleted: req Bool,
    }
}

impl NovaObject for ComputeNode {
    const NAME: &'static str = "ComputeNode";
    const VERSION: ObjVersion = ObjVersion::new(1, 19);

    fn decode(r: &mut Reader<'_>) -> Result<Self, ObjectError> {
        let node = Self::decode_fields(r)?;
        if let Some(text) = node.numa_topology.get() {
            Versioned::<NUMATopology>::from_json(text).map_err(|e| {
                ObjectError::new(
                    format!("{}.numa_topology", r.path),
                    format!("must be the JSON text of a NUMATopology primitive: {e}"),
                )
            })?;
        }
        if let Some(text) = node.metrics.get() {
            match serde_json::from_str::<Value>(text) {
                Ok(Value::Array(_)) => {}
                _ => {
                    return Err(ObjectError::new(
                        format!("{}.metrics", r.path),
                        "must be the JSON text of a list of metrics, like \"[]\"",
                    ))
                }
            }
        }
        Ok(node)
    }

    fn encode(&self, w: &mut Writer) -> Result<(), ObjectError> {
        self.encode_fields(w)
    }

    fn make_compatible(
        data: &mut Map<String, Value>,
        target: ObjVersion,
        m: Option<&Manifest>,
    ) -> Result<(), ObjectError> {
        backport_child::<HVSpec>(data, "supported_hv_specs", Self::NAME, m)?;
        backport_child::<PciDevicePoolList>(data, "pci_device_pools", Self::NAME, m)?;
        if older(target, 1, 17) {
            data.remove("mapped");
        }
        if older(target, 1, 16) {
            data.remove("disk_allocation_ratio");
        }
        if older(target, 1, 15) {
            data.remove("uuid");
        }
        if older(target, 1, 14) {
            drop_fields(data, &["ram_allocation_ratio", "cpu_allocation_ratio"]);
        }
        if older(target, 1, 13) && data.get("service_id").is_none_or(Value::is_null) {
            // service_id was not nullable before 1.13. Nova looks the service up by host and
            // falls back to -1; rtrack has no service table, so a node without one gets -1.
            data.insert("service_id".into(), Value::from(-1));
        }
        if older(target, 1, 9) {
            data.remove("pci_device_pools");
        }
        if older(target, 1, 7) {
            data.remove("host");
        }
        if older(target, 1, 6) {
            data.remove("supported_hv_specs");
        }
        if older(target, 1, 5) {
            data.remove("numa_topology");
        }
        if older(target, 1, 4) {
            data.remove("host_ip");
        }
        if older(target, 1, 3) {
            data.remove("stats");
        }
        Ok(())
    }
}

impl ComputeNode {
    /// The NUMA topology carried in `numa_topology`, decoded.
    pub fn numa(&self) -> Result<Option<Versioned<NUMATopology>>, ObjectError> {
        match self.numa_topology.get() {
            None => Ok(None),
            Some(text) => Versioned::from_json(text).map(Some),
        }
    }
}
