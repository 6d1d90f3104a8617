//! InstancePCIRequest 1.4 and InstancePCIRequests 1.1 (nova/objects/instance_pci_requests.py):
//! what PCI devices an instance asks for.
//!
//! In: an InstancePCIRequests primitive (1.0 to 1.1) carried by a RequestSpec, with
//! InstancePCIRequest 1.0 to 1.4 inside. Out: [`InstancePCIRequests`] whose requests (count, specs,
//! alias, NUMA policy, requester) the tracker turns into its own PCI requests.

use serde_json::{Map, Value};

use super::base::{Manifest, NovaObject, ObjVersion, ObjectError, Reader, Writer};
use super::enums::PciNumaAffinityPolicy;
use super::fields::{
    backport_child, older, Bool, DictNullStr, Enum, Int, Kind, ListObj, Str, Uuid,
};

/// ListOfDictOfNullableStringsField: the request's spec, any of which a device may match.
pub struct SpecList;
impl Kind for SpecList {
    type T = Vec<std::collections::BTreeMap<String, Option<String>>>;
    fn decode(v: &Value, path: &str, d: usize) -> Result<Self::T, ObjectError> {
        let items = v.as_array().ok_or_else(|| {
            ObjectError::new(
                path,
                format!(
                    "expected a list of objects, got {}",
                    super::base::describe(v)
                ),
            )
        })?;
        items
            .iter()
            .enumerate()
            .map(|(i, x)| DictNullStr::decode(x, &format!("{path}[{i}]"), d))
            .collect()
    }
    fn encode(t: &Self::T, w: &mut Writer, n: &str) -> Result<Value, ObjectError> {
        t.iter()
            .map(|x| DictNullStr::encode(x, w, n))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array)
    }
}

crate::nova_object_fields! {
    /// One request: `count` devices matching any dict of `spec`.
    pub struct InstancePCIRequest {
        /// How many.
        count: req Int,
        /// Specs (vendor_id, product_id, dev_type, physical_network...).
        spec: req SpecList,
        /// The flavor alias, or null for neutron port requests.
        alias_name: opt Str,
        /// Nova's `is_new` flag of the request, carried as Nova sends it (rtrack does not use it).
        is_new: req Bool,
        /// Request id (1.1).
        request_id: opt Uuid,
        /// Neutron port id for port requests (1.3).
        requester_id: opt Str,
        /// NUMA affinity policy (1.2; 'socket' since 1.4).
        numa_policy: opt Enum<PciNumaAffinityPolicy>,
    }
}

impl NovaObject for InstancePCIRequest {
    const NAME: &'static str = "InstancePCIRequest";
    const VERSION: ObjVersion = ObjVersion::new(1, 4);
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
        if older(target, 1, 3) {
            data.remove("requester_id");
        }
        if older(target, 1, 2) {
            data.remove("numa_policy");
        }
        if older(target, 1, 1) {
            data.remove("request_id");
        }
        Ok(())
    }
}

crate::nova_object_fields! {
    /// An instance's requests.
    pub struct InstancePCIRequests {
        /// Nova's `instance_uuid`: the instance making the requests.
        instance_uuid: req Uuid,
        /// Nova's `requests`: the instance's PCI requests, from flavor aliases and Neutron ports.
        requests: req ListObj<InstancePCIRequest>,
    }
}

impl NovaObject for InstancePCIRequests {
    const NAME: &'static str = "InstancePCIRequests";
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
        backport_child::<InstancePCIRequest>(data, "requests", Self::NAME, m)
    }
}
