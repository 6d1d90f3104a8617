//! Service 1.22 (nova/objects/service.py): every field decodes; rtrack uses host, binary,
//! disabled, forced_down and version.
//!
//! In: a Service primitive (1.0 to 1.22), with a ComputeNode primitive as its `compute_node`. Out:
//! a [`Service`]; backported to an older 1.x, newer fields are dropped and `compute_node` is
//! backported per the manifest (and required before 1.10).

use serde_json::{Map, Value};

use super::base::{Manifest, NovaObject, ObjVersion, ObjectError, Reader, Writer};
use super::compute_node::ComputeNode;
use super::fields::{backport_child, older, Bool, DateTime, Int, Obj, Str, Uuid};

crate::nova_object_fields! {
    /// Nova's Service object: one Nova service (a binary such as `nova-compute`) on one host.
    pub struct Service {
        /// Database id.
        id: req Int,
        /// Uuid (1.21).
        uuid: req Uuid,
        /// Nova's `host`: the host name the service runs under (`[DEFAULT] host`).
        host: opt Str,
        /// Binary (`nova-compute`).
        binary: opt Str,
        /// RPC topic.
        topic: opt Str,
        /// Nova's `report_count`: heartbeats the service has reported so far.
        report_count: req Int,
        /// Disabled by an operator.
        disabled: req Bool,
        /// Nova's `disabled_reason`: the operator's reason for disabling the service, if given.
        disabled_reason: opt Str,
        /// Availability zone.
        availability_zone: opt Str,
        /// The node (loaded on demand in Nova).
        compute_node: req Obj<ComputeNode>,
        /// Last heartbeat (1.13).
        last_seen_up: opt DateTime,
        /// Forced down (1.14).
        forced_down: req Bool,
        /// Service version (1.16).
        version: req Int,
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

impl NovaObject for Service {
    const NAME: &'static str = "Service";
    const VERSION: ObjVersion = ObjVersion::new(1, 22);
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
        backport_child::<ComputeNode>(data, "compute_node", Self::NAME, m)?;
        if older(target, 1, 21) {
            data.remove("uuid");
        }
        if older(target, 1, 16) {
            data.remove("version");
        }
        if older(target, 1, 14) {
            data.remove("forced_down");
        }
        if older(target, 1, 13) {
            data.remove("last_seen_up");
        }
        if older(target, 1, 10) && !data.contains_key("compute_node") {
            // Before 1.10 the node was always included; Nova loads it from its database, which
            // rtrack does not have.
            return Err(ObjectError::new(
                "Service.data.compute_node",
                format!("a Service backported to {target} must carry its compute_node, and this one has none"),
            ));
        }
        Ok(())
    }
}
