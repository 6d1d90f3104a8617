//! RequestSpec 1.15 (nova/objects/request_spec.py) with SchedulerLimits 1.0, SchedulerRetries 1.1
//! and ComputeNodeList 1.17, and the translation from and to the legacy `request_spec` and
//! `filter_properties` dicts that older callers send (Nova's `RequestSpec.from_primitives`,
//! `to_legacy_request_spec_dict`, `to_legacy_filter_properties_dict`, in `legacy`).
//!
//! In: a RequestSpec primitive (1.0 to 1.15), or the legacy dicts. Out: a [`RequestSpec`] (its
//! instance uuid, flavor, PCI requests and guest NUMA topology are what the tracker claims for),
//! the legacy dicts back, and primitives backported per the manifest.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::base::{describe, Manifest, NovaObject, ObjVersion, ObjectError, Reader, Writer};
use super::compute_node::ComputeNode;
use super::fields::{
    backport_child, backport_list_children, older, Bool, Int, Kind, ListObj, ListStr, Obj, Str,
    Uuid,
};
use super::flavor::Flavor;
use super::instance::InstanceNUMATopology;
use super::numa::NetworkMetadata;
use super::opaque::{
    DestinationName, ImageMetaName, InstanceGroupName, NetworkRequestListName,
    NumaTopologyLimitsName, Opaque, RequestGroupName, RequestLevelParamsName,
    SecurityGroupListName,
};
use super::pci_request::InstancePCIRequests;

/// DictOfListOfStringsField (scheduler hints).
pub struct DictListStr;
impl Kind for DictListStr {
    type T = BTreeMap<String, Vec<String>>;
    fn decode(v: &Value, path: &str, d: usize) -> Result<Self::T, ObjectError> {
        let m = v.as_object().ok_or_else(|| {
            ObjectError::new(
                path,
                format!("expected an object of string lists, got {}", describe(v)),
            )
        })?;
        m.iter()
            .map(|(k, x)| ListStr::decode(x, &format!("{path}.{k}"), d).map(|l| (k.clone(), l)))
            .collect()
    }
    fn encode(t: &Self::T, w: &mut Writer, n: &str) -> Result<Value, ObjectError> {
        t.iter()
            .map(|(k, v)| ListStr::encode(v, w, n).map(|x| (k.clone(), x)))
            .collect::<Result<Map<_, _>, _>>()
            .map(Value::Object)
    }
}

crate::nova_object_fields! {
    /// RequestSpec: what to schedule (and, for rtrack, what to claim).
    pub struct RequestSpec {
        /// Database id.
        id: req Int,
        /// Nova's `image`: metadata of the image to boot (ImageMeta, carried opaquely).
        image: opt Obj<Opaque<ImageMetaName>>,
        /// Guest NUMA topology.
        numa_topology: opt Obj<InstanceNUMATopology>,
        /// PCI requests.
        pci_requests: opt Obj<InstancePCIRequests>,
        /// Nova's `project_id`: the project the instance belongs to.
        project_id: opt Str,
        /// User (1.9).
        user_id: opt Str,
        /// Availability zone.
        availability_zone: opt Str,
        /// Nova's `flavor`: the flavor to place (the new one, for a resize).
        flavor: req Obj<Flavor>,
        /// Instances to place.
        num_instances: req Int,
        /// Hosts to skip.
        ignore_hosts: opt ListStr,
        /// Forced hosts.
        force_hosts: opt ListStr,
        /// Forced nodes.
        force_nodes: opt ListStr,
        /// Requested destination (1.6).
        requested_destination: opt Obj<Opaque<DestinationName>>,
        /// Nova's `retry`: the scheduling attempts so far and the hosts they tried.
        retry: opt Obj<SchedulerRetries>,
        /// Nova's `limits`: the overcommit limits the scheduler computed for the chosen host.
        limits: opt Obj<SchedulerLimits>,
        /// Server group.
        instance_group: opt Obj<Opaque<InstanceGroupName>>,
        /// Scheduler hints (values are lists).
        scheduler_hints: opt DictListStr,
        /// Nova's `instance_uuid`: the instance the spec is for.
        instance_uuid: req Uuid,
        /// Security groups (1.8).
        security_groups: req Obj<Opaque<SecurityGroupListName>>,
        /// Requested networks' physnets (1.10).
        network_metadata: req Obj<NetworkMetadata>,
        /// Boot from volume (1.11).
        is_bfv: req Bool,
        /// Extra resource groups (1.12).
        requested_resources: opt ListObj<Opaque<RequestGroupName>>,
        /// Request-level parameters (1.13).
        request_level_params: req Obj<Opaque<RequestLevelParamsName>>,
        /// Requested networks (1.14).
        requested_networks: req Obj<Opaque<NetworkRequestListName>>,
    }
}

impl NovaObject for RequestSpec {
    const NAME: &'static str = "RequestSpec";
    const VERSION: ObjVersion = ObjVersion::new(1, 15);
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
        backport_child::<Opaque<ImageMetaName>>(data, "image", Self::NAME, m)?;
        backport_child::<InstanceNUMATopology>(data, "numa_topology", Self::NAME, m)?;
        backport_child::<InstancePCIRequests>(data, "pci_requests", Self::NAME, m)?;
        backport_child::<Flavor>(data, "flavor", Self::NAME, m)?;
        backport_child::<Opaque<DestinationName>>(data, "requested_destination", Self::NAME, m)?;
        backport_child::<SchedulerRetries>(data, "retry", Self::NAME, m)?;
        backport_child::<SchedulerLimits>(data, "limits", Self::NAME, m)?;
        backport_child::<Opaque<InstanceGroupName>>(data, "instance_group", Self::NAME, m)?;
        backport_child::<Opaque<SecurityGroupListName>>(data, "security_groups", Self::NAME, m)?;
        backport_child::<NetworkMetadata>(data, "network_metadata", Self::NAME, m)?;
        backport_child::<Opaque<RequestGroupName>>(data, "requested_resources", Self::NAME, m)?;
        backport_child::<Opaque<RequestLevelParamsName>>(
            data,
            "request_level_params",
            Self::NAME,
            m,
        )?;
        backport_child::<Opaque<NetworkRequestListName>>(
            data,
            "requested_networks",
            Self::NAME,
            m,
        )?;
        for (field, version) in [
            ("requested_networks", (1, 14)),
            ("request_level_params", (1, 13)),
            ("requested_resources", (1, 12)),
            ("is_bfv", (1, 11)),
            ("network_metadata", (1, 10)),
            ("user_id", (1, 9)),
            ("security_groups", (1, 8)),
            ("requested_destination", (1, 6)),
        ] {
            if older(target, version.0, version.1) {
                data.remove(field);
            }
        }
        Ok(())
    }
}

crate::nova_object_fields! {
    /// Limits the scheduler computed for the chosen host.
    pub struct SchedulerLimits {
        /// NUMA limits.
        numa_topology: opt Obj<Opaque<NumaTopologyLimitsName>>,
        /// VCPU limit.
        vcpu: opt Int,
        /// Disk limit, GiB.
        disk_gb: opt Int,
        /// Memory limit, MiB.
        memory_mb: opt Int,
    }
}

impl NovaObject for SchedulerLimits {
    const NAME: &'static str = "SchedulerLimits";
    const VERSION: ObjVersion = ObjVersion::new(1, 0);
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
        backport_child::<Opaque<NumaTopologyLimitsName>>(data, "numa_topology", Self::NAME, m)
    }
}

crate::nova_object_fields! {
    /// Hosts already tried.
    pub struct SchedulerRetries {
        /// Attempts so far.
        num_attempts: req Int,
        /// Tried (host, node) pairs as ComputeNodes.
        hosts: req Obj<ComputeNodeList>,
    }
}

impl NovaObject for SchedulerRetries {
    const NAME: &'static str = "SchedulerRetries";
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
        backport_child::<ComputeNodeList>(data, "hosts", Self::NAME, m)
    }
}

crate::nova_object_fields! {
    /// A list of ComputeNodes.
    pub struct ComputeNodeList {
        /// Nova's `objects`: the ComputeNodes in the list.
        objects: req ListObj<ComputeNode>,
    }
}

impl NovaObject for ComputeNodeList {
    const NAME: &'static str = "ComputeNodeList";
    const VERSION: ObjVersion = ObjVersion::new(1, 17);
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
        backport_list_children::<ComputeNode>(data, Self::NAME, m)
    }
}

// ---------------------------------------------------------------------------------------------
// Legacy dicts

mod legacy;
