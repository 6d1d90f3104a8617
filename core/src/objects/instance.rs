//! Instance 2.8 (nova/objects/instance.py) with the objects the tracker reads from it:
//! InstanceNUMATopology 1.3 / InstanceNUMACell 1.6 and MigrationContext 1.2. Every Instance field
//! decodes; child objects the tracker does not use are carried opaquely.
//!
//! In: an Instance primitive (2.0 to 2.8), or one of its children. Out: the decoded objects
//! ([`Instance`], [`InstanceNUMATopology`], [`MigrationContext`]...), with the children rtrack does
//! not interpret kept as they came, and primitives backported to older versions (children per the
//! manifest).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::base::{describe, Manifest, NovaObject, ObjVersion, ObjectError, Reader, Writer};
use super::fields::{
    backport_child, older, Bool, DateTime, DictNullStr, DictStr, Int, Kind, ListInt, ListObj, Obj,
    Str, Uuid,
};
use super::flavor::Flavor;
use super::opaque::{
    Ec2IdsName, InstanceDeviceMetadataName, InstanceFaultName, InstanceInfoCacheName,
    KeyPairListName, Opaque, PciDeviceListName, ResourceListName, SecurityGroupListName,
    ServiceListName, TagListName, TrustedCertsName, VirtCpuModelName, VirtCpuTopologyName,
};
use super::pci_request::InstancePCIRequests;

crate::nova_object_fields! {
    /// Nova's Instance object: one server, where it runs and what it was built with.
    pub struct Instance {
        /// Database id.
        id: req Int,
        /// Owner user.
        user_id: opt Str,
        /// Owner project.
        project_id: opt Str,
        /// Nova's `image_ref`: the image it was built from (empty when booted from a volume).
        image_ref: opt Str,
        /// Kernel image.
        kernel_id: opt Str,
        /// Ramdisk image.
        ramdisk_id: opt Str,
        /// Nova's `hostname`: the guest's host name, as the metadata service gives it.
        hostname: opt Str,
        /// Index in a multi-create.
        launch_index: opt Int,
        /// Key pair.
        key_name: opt Str,
        /// Key data.
        key_data: opt Str,
        /// Power state.
        power_state: opt Int,
        /// VM state (active, stopped, resized, shelved_offloaded, deleted...).
        vm_state: opt Str,
        /// Task state (resize_migrating, migrating, rebuilding...).
        task_state: opt Str,
        /// Services (2.1).
        services: req Obj<Opaque<ServiceListName>>,
        /// Memory, MiB (legacy copy of the flavor's).
        memory_mb: opt Int,
        /// VCPUs (legacy).
        vcpus: opt Int,
        /// Root disk (legacy).
        root_gb: opt Int,
        /// Ephemeral disk (legacy).
        ephemeral_gb: opt Int,
        /// Ephemeral encryption key.
        ephemeral_key_uuid: opt Uuid,
        /// Service host.
        host: opt Str,
        /// Nova's `node`: the hypervisor node it runs on (a ComputeNode's `hypervisor_hostname`).
        node: opt Str,
        /// ComputeNode id (2.8).
        compute_id: opt Int,
        /// Flavor id (legacy).
        instance_type_id: opt Int,
        /// User data.
        user_data: opt Str,
        /// Nova's `reservation_id`: shared by the instances of one multi-create request.
        reservation_id: opt Str,
        /// Launch time.
        launched_at: opt DateTime,
        /// Termination time.
        terminated_at: opt DateTime,
        /// Availability zone.
        availability_zone: opt Str,
        /// Display name.
        display_name: opt Str,
        /// Display description.
        display_description: opt Str,
        /// Host it was first launched on.
        launched_on: opt Str,
        /// Nova's `locked`: true when the instance is locked against changes (see `locked_by`).
        locked: req Bool,
        /// Who locked it.
        locked_by: opt Str,
        /// Guest OS type.
        os_type: opt Str,
        /// Guest architecture.
        architecture: opt Str,
        /// Guest VM mode.
        vm_mode: opt Str,
        /// Nova's `uuid`: the instance's id everywhere outside Nova's database.
        uuid: req Uuid,
        /// Root device.
        root_device_name: opt Str,
        /// Ephemeral device.
        default_ephemeral_device: opt Str,
        /// Swap device.
        default_swap_device: opt Str,
        /// Config drive.
        config_drive: opt Str,
        /// Access IPv4 (IPV4AddressField).
        access_ip_v4: opt Str,
        /// Access IPv6 (IPV6AddressField).
        access_ip_v6: opt Str,
        /// Auto disk config.
        auto_disk_config: req Bool,
        /// Nova's `progress`: percentage done of the current operation (build, resize...).
        progress: opt Int,
        /// Shutdown terminates.
        shutdown_terminate: req Bool,
        /// Termination disabled.
        disable_terminate: req Bool,
        /// Cells v1 name.
        cell_name: opt Str,
        /// Nova's `metadata`: the user's key-value server metadata.
        metadata: req DictStr,
        /// System metadata.
        system_metadata: req DictNullStr,
        /// Network info cache.
        info_cache: opt Obj<Opaque<InstanceInfoCacheName>>,
        /// Security groups.
        security_groups: req Obj<Opaque<SecurityGroupListName>>,
        /// Last fault.
        fault: opt Obj<Opaque<InstanceFaultName>>,
        /// Cleaned up.
        cleaned: req Bool,
        /// Assigned PCI devices.
        pci_devices: opt Obj<Opaque<PciDeviceListName>>,
        /// NUMA placement.
        numa_topology: opt Obj<InstanceNUMATopology>,
        /// PCI requests.
        pci_requests: opt Obj<InstancePCIRequests>,
        /// Device metadata (2.3).
        device_metadata: opt Obj<Opaque<InstanceDeviceMetadataName>>,
        /// Nova's `tags`: the user's server tags.
        tags: req Obj<Opaque<TagListName>>,
        /// Current flavor.
        flavor: req Obj<Flavor>,
        /// Flavor before a resize.
        old_flavor: opt Obj<Flavor>,
        /// Flavor after a resize.
        new_flavor: opt Obj<Flavor>,
        /// CPU model.
        vcpu_model: opt Obj<Opaque<VirtCpuModelName>>,
        /// EC2 ids.
        ec2_ids: req Obj<Opaque<Ec2IdsName>>,
        /// Move in progress.
        migration_context: opt Obj<MigrationContext>,
        /// Key pairs (2.2).
        keypairs: req Obj<Opaque<KeyPairListName>>,
        /// Trusted certificates (2.4).
        trusted_certs: opt Obj<Opaque<TrustedCertsName>>,
        /// Hidden (2.6).
        hidden: req Bool,
        /// Assigned resources (2.7).
        resources: opt Obj<Opaque<ResourceListName>>,
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

impl NovaObject for Instance {
    const NAME: &'static str = "Instance";
    const VERSION: ObjVersion = ObjVersion::new(2, 8);
    fn decode(r: &mut Reader<'_>) -> Result<Self, ObjectError> {
        Self::decode_fields(r)
    }
    fn encode(&self, w: &mut Writer) -> Result<(), ObjectError> {
        self.encode_fields(w)
    }
    fn make_compatible(
        data: &mut Map<String, Value>,
        target: ObjVersion,
        m: Option<&Manifest>,
    ) -> Result<(), ObjectError> {
        backport_child::<InstanceNUMATopology>(data, "numa_topology", Self::NAME, m)?;
        backport_child::<InstancePCIRequests>(data, "pci_requests", Self::NAME, m)?;
        backport_child::<Flavor>(data, "flavor", Self::NAME, m)?;
        backport_child::<Flavor>(data, "old_flavor", Self::NAME, m)?;
        backport_child::<Flavor>(data, "new_flavor", Self::NAME, m)?;
        backport_child::<MigrationContext>(data, "migration_context", Self::NAME, m)?;
        for (field, version) in [
            ("compute_id", (2, 8)),
            ("resources", (2, 7)),
            ("hidden", (2, 6)),
            ("trusted_certs", (2, 4)),
            ("device_metadata", (2, 3)),
            ("keypairs", (2, 2)),
            ("services", (2, 1)),
        ] {
            if older(target, version.0, version.1) {
                data.remove(field);
            }
        }
        Ok(())
    }
}

/// DictOfIntegersField (InstanceNUMACell.cpu_pinning_raw: guest CPU to host CPU).
pub struct DictInt;
impl Kind for DictInt {
    type T = BTreeMap<String, i64>;
    fn decode(v: &Value, path: &str, _: usize) -> Result<Self::T, ObjectError> {
        let m = v.as_object().ok_or_else(|| {
            ObjectError::new(
                path,
                format!("expected an object of integers, got {}", describe(v)),
            )
        })?;
        m.iter()
            .map(|(k, x)| {
                x.as_i64().map(|i| (k.clone(), i)).ok_or_else(|| {
                    ObjectError::new(
                        format!("{path}.{k}"),
                        format!("expected integer, got {}", describe(x)),
                    )
                })
            })
            .collect()
    }
    fn encode(t: &Self::T, _: &mut Writer, _: &str) -> Result<Value, ObjectError> {
        Ok(Value::Object(
            t.iter()
                .map(|(k, v)| (k.clone(), Value::from(*v)))
                .collect(),
        ))
    }
}

crate::nova_object_fields! {
    /// Where an instance's NUMA cells are placed.
    pub struct InstanceNUMATopology {
        /// Unused id.
        id: req Int,
        /// Nova's `instance_uuid`: the instance whose guest topology this is.
        instance_uuid: req Uuid,
        /// Nova's `cells`: the guest's NUMA cells, each with the host cell it is placed on.
        cells: req ListObj<InstanceNUMACell>,
        /// Emulator threads policy (1.3).
        emulator_threads_policy: opt Str,
    }
}

impl NovaObject for InstanceNUMATopology {
    const NAME: &'static str = "InstanceNUMATopology";
    const VERSION: ObjVersion = ObjVersion::new(1, 3);
    fn decode(r: &mut Reader<'_>) -> Result<Self, ObjectError> {
        Self::decode_fields(r)
    }
    fn encode(&self, w: &mut Writer) -> Result<(), ObjectError> {
        self.encode_fields(w)
    }
    fn make_compatible(
        data: &mut Map<String, Value>,
        target: ObjVersion,
        m: Option<&Manifest>,
    ) -> Result<(), ObjectError> {
        backport_child::<InstanceNUMACell>(data, "cells", Self::NAME, m)?;
        if older(target, 1, 3) {
            data.remove("emulator_threads_policy");
        }
        Ok(())
    }
}

crate::nova_object_fields! {
    /// One guest NUMA cell and the host cell it is on (`id`).
    pub struct InstanceNUMACell {
        /// Host NUMA cell id.
        id: req Int,
        /// Guest CPUs (unpinned).
        cpuset: req ListInt,
        /// Guest CPUs (pinned, 1.5).
        pcpuset: req ListInt,
        /// Host CPUs reserved for emulator threads.
        cpuset_reserved: opt ListInt,
        /// Memory, MiB.
        memory: req Int,
        /// Page size, KiB.
        pagesize: opt Int,
        /// Guest CPU topology.
        cpu_topology: opt Obj<Opaque<VirtCpuTopologyName>>,
        /// Guest CPU to host CPU.
        cpu_pinning_raw: opt DictInt,
        /// dedicated, shared or mixed.
        cpu_policy: opt Str,
        /// prefer, isolate or require.
        cpu_thread_policy: opt Str,
    }
}

impl NovaObject for InstanceNUMACell {
    const NAME: &'static str = "InstanceNUMACell";
    const VERSION: ObjVersion = ObjVersion::new(1, 6);
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
        let policy = data
            .get("cpu_policy")
            .and_then(Value::as_str)
            .map(str::to_string);
        if older(target, 1, 6) && policy.as_deref() == Some("mixed") {
            return Err(ObjectError::new(
                "InstanceNUMACell.data.cpu_policy",
                format!("\"mixed\" cannot be represented in InstanceNUMACell {target}"),
            ));
        }
        if older(target, 1, 5) {
            // Before 1.5 pinned CPUs lived in cpuset.
            if policy.as_deref() == Some("dedicated") {
                if let Some(p) = data.get("pcpuset").cloned() {
                    data.insert("cpuset".into(), p);
                }
            }
            data.remove("pcpuset");
        }
        Ok(())
    }
}

crate::nova_object_fields! {
    /// An instance's move in progress: what it holds on each side.
    pub struct MigrationContext {
        /// Nova's `instance_uuid`: the instance being moved.
        instance_uuid: req Uuid,
        /// Migration id.
        migration_id: req Int,
        /// NUMA placement after the move.
        new_numa_topology: opt Obj<InstanceNUMATopology>,
        /// NUMA placement before.
        old_numa_topology: opt Obj<InstanceNUMATopology>,
        /// PCI devices after (1.1).
        new_pci_devices: opt Obj<Opaque<PciDeviceListName>>,
        /// PCI devices before (1.1).
        old_pci_devices: opt Obj<Opaque<PciDeviceListName>>,
        /// PCI requests after (1.1).
        new_pci_requests: opt Obj<InstancePCIRequests>,
        /// PCI requests before (1.1).
        old_pci_requests: opt Obj<InstancePCIRequests>,
        /// Resources after (1.2).
        new_resources: opt Obj<Opaque<ResourceListName>>,
        /// Resources before (1.2).
        old_resources: opt Obj<Opaque<ResourceListName>>,
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

impl NovaObject for MigrationContext {
    const NAME: &'static str = "MigrationContext";
    const VERSION: ObjVersion = ObjVersion::new(1, 2);
    fn decode(r: &mut Reader<'_>) -> Result<Self, ObjectError> {
        Self::decode_fields(r)
    }
    fn encode(&self, w: &mut Writer) -> Result<(), ObjectError> {
        self.encode_fields(w)
    }
    fn make_compatible(
        data: &mut Map<String, Value>,
        target: ObjVersion,
        m: Option<&Manifest>,
    ) -> Result<(), ObjectError> {
        // Nova's MigrationContext.obj_make_compatible does not call the base class, so child
        // objects are not backported through the manifest.
        let _ = m;
        if older(target, 1, 2) {
            data.remove("old_resources");
            data.remove("new_resources");
        }
        if older(target, 1, 1) {
            for f in [
                "old_pci_devices",
                "new_pci_devices",
                "old_pci_requests",
                "new_pci_requests",
            ] {
                data.remove(f);
            }
        }
        Ok(())
    }
}
