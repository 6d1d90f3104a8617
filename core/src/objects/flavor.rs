//! Flavor 1.2 (nova/objects/flavor.py): an instance's size.
//!
//! In: a Flavor primitive (1.0 to 1.2), as a RequestSpec carries it. Out: a [`Flavor`] whose sizes
//! and extra specs ([`Flavor::extra_spec`]) the tracker reads; backported to 1.0 or 1.1, its
//! primitive has no `description`.

use serde_json::{Map, Value};

use super::base::{Manifest, NovaObject, ObjVersion, ObjectError, Reader, Writer};
use super::fields::{older, Bool, DateTime, DictStr, Float, Int, ListStr, Str};

crate::nova_object_fields! {
    /// Nova's Flavor object: the size an instance is built to (CPUs, memory, disks, extra specs).
    pub struct Flavor {
        /// Database id (the instance's `instance_type_id`).
        id: req Int,
        /// Nova's `name`: the flavor's display name (`m1.small`).
        name: opt Str,
        /// Memory, MiB.
        memory_mb: req Int,
        /// Nova's `vcpus`: guest VCPUs an instance of the flavor gets.
        vcpus: req Int,
        /// Root disk, GiB (0 for boot-from-volume flavors).
        root_gb: req Int,
        /// Ephemeral disk, GiB.
        ephemeral_gb: req Int,
        /// Public flavor id.
        flavorid: req Str,
        /// Swap, MiB.
        swap: req Int,
        /// Network bandwidth factor.
        rxtx_factor: opt Float,
        /// CPU weight.
        vcpu_weight: opt Int,
        /// Nova's `disabled`: true when the flavor is withdrawn and new servers may not use it.
        disabled: req Bool,
        /// Nova's `is_public`: true when every project may use it, else only those in `projects`.
        is_public: req Bool,
        /// Extra specs (`pci_passthrough:alias`, `hw:...`).
        extra_specs: req DictStr,
        /// Projects with access.
        projects: req ListStr,
        /// Description (1.2).
        description: opt Str,
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

impl NovaObject for Flavor {
    const NAME: &'static str = "Flavor";
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
        _: Option<&Manifest>,
    ) -> Result<(), ObjectError> {
        if older(target, 1, 2) {
            data.remove("description");
        }
        Ok(())
    }
}

impl Flavor {
    /// An extra spec's value.
    pub fn extra_spec(&self, key: &str) -> Option<&str> {
        self.extra_specs
            .get()
            .and_then(|m| m.get(key))
            .map(String::as_str)
    }
}
