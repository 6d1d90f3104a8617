//! Nova's versioned objects, byte-compatible with the JSON primitives of
//! oslo.versionedobjects as Nova 34 emits and loads them.
//!
//! In: JSON primitives as Nova sends them, at any version rtrack supports, and objects rtrack
//! builds (the ComputeNode). Out: typed objects ([`Versioned`]) or an [`ObjectError`] naming the
//! path, and primitives at a requested version, backported per a [`Manifest`] ([`current_manifest`]
//! by default).
//!
//! - [`base`]: versions, the primitive envelope, errors, the [`NovaObject`] trait.
//! - [`fields`]: field kinds (strictly typed), backport helpers.
//! - one module per object family, each with Nova's fields and `obj_make_compatible` rules.
//!
//! Each object is a plain struct whose fields are [`Field`] (non-nullable: unset or set) or
//! [`NField`] (nullable: unset, null or set), declared with `nova_object_fields!`, plus a
//! hand-written `impl NovaObject` carrying its name, version and backport rules.

pub mod base;
pub mod compute_node;
pub mod enums;
pub mod fields;
pub mod flavor;
pub mod hv_spec;
pub mod instance;
pub mod migration;
pub mod nested;
pub mod numa;
pub mod opaque;
pub mod pci_device;
pub mod pci_device_pool;
pub mod pci_request;
pub mod request_spec;
pub mod service;

pub use base::{ChangedFields, Manifest, NovaObject, ObjVersion, ObjectError, Versioned};
pub use fields::{Field, NField};

/// Declares an object's fields: the struct, and `decode_fields`/`encode_fields` reading and
/// writing them in declaration order. `req` fields cannot be null, `opt` fields can.
#[macro_export]
macro_rules! nova_object_fields {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$fmeta:meta])* $field:ident : $mode:ident $kind:ty ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Default)]
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $crate::nova_object_fields!(@ty $mode $kind), )*
        }
        impl $name {
            fn decode_fields(
                r: &$crate::objects::base::Reader<'_>,
            ) -> Result<Self, $crate::objects::ObjectError> {
                Ok($name { $( $field: r.$mode::<$kind>(stringify!($field))?, )* })
            }
            fn encode_fields(
                &self,
                w: &mut $crate::objects::base::Writer,
            ) -> Result<(), $crate::objects::ObjectError> {
                $( w.$mode::<$kind>(stringify!($field), &self.$field)?; )*
                Ok(())
            }
        }
    };
    (@ty req $kind:ty) => { $crate::objects::Field<<$kind as $crate::objects::fields::Kind>::T> };
    (@ty opt $kind:ty) => { $crate::objects::NField<<$kind as $crate::objects::fields::Kind>::T> };
}

/// The newest version of every object rtrack implements: the manifest a same-release peer
/// would send, and the default for backports when no manifest is given.
pub fn current_manifest() -> Manifest {
    fn add<T: NovaObject>(m: &mut Manifest) {
        m.insert(T::NAME.to_string(), T::VERSION);
    }
    let mut m = Manifest::new();
    add::<compute_node::ComputeNode>(&mut m);
    add::<pci_device_pool::PciDevicePool>(&mut m);
    add::<pci_device_pool::PciDevicePoolList>(&mut m);
    add::<hv_spec::HVSpec>(&mut m);
    add::<numa::NUMATopology>(&mut m);
    add::<numa::NUMACell>(&mut m);
    add::<numa::NUMAPagesTopology>(&mut m);
    add::<numa::NetworkMetadata>(&mut m);
    add::<pci_device::PciDevice>(&mut m);
    add::<migration::Migration>(&mut m);
    add::<flavor::Flavor>(&mut m);
    add::<service::Service>(&mut m);
    add::<pci_request::InstancePCIRequest>(&mut m);
    add::<pci_request::InstancePCIRequests>(&mut m);
    add::<request_spec::RequestSpec>(&mut m);
    add::<instance::Instance>(&mut m);
    for (name, version) in opaque::KNOWN_OPAQUE {
        m.insert(name.to_string(), *version);
    }
    m
}

#[cfg(test)]
mod tests;
