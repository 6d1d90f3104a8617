//! Objects rtrack carries without interpreting them (an Instance's `info_cache`, a RequestSpec's
//! `image`...): the envelope is checked (name, namespace, version of the same major) and the
//! data is kept as it came, so that re-encoding gives it back unchanged. rtrack cannot backport
//! them: a manifest asking for an older version than the one held is an error.
//!
//! In: a child primitive of a type listed in [`KNOWN_OPAQUE`] (any minor of its major). Out: an
//! [`Opaque`] holding its `nova_object.data` as received, encoded back unchanged; a backport of it
//! is an [`ObjectError`].

use std::marker::PhantomData;

use serde_json::{Map, Value};

use super::base::{Manifest, NovaObject, ObjVersion, ObjectError, Reader, Writer};

/// Names and Nova 34 versions of the objects carried opaquely.
pub const KNOWN_OPAQUE: &[(&str, ObjVersion)] = &[
    ("CellMapping", ObjVersion::new(1, 1)),
    ("Destination", ObjVersion::new(1, 4)),
    ("EC2Ids", ObjVersion::new(1, 0)),
    ("ImageMeta", ObjVersion::new(1, 8)),
    ("InstanceDeviceMetadata", ObjVersion::new(1, 0)),
    ("InstanceFault", ObjVersion::new(1, 2)),
    ("InstanceGroup", ObjVersion::new(1, 11)),
    ("InstanceInfoCache", ObjVersion::new(1, 5)),
    ("KeyPairList", ObjVersion::new(1, 3)),
    ("NUMATopologyLimits", ObjVersion::new(1, 1)),
    ("NetworkRequestList", ObjVersion::new(1, 1)),
    ("PciDeviceList", ObjVersion::new(1, 3)),
    ("RequestGroup", ObjVersion::new(1, 3)),
    ("RequestLevelParams", ObjVersion::new(1, 1)),
    ("ResourceList", ObjVersion::new(1, 0)),
    ("SecurityGroupList", ObjVersion::new(1, 1)),
    ("ServiceList", ObjVersion::new(1, 19)),
    ("TagList", ObjVersion::new(1, 1)),
    ("TrustedCerts", ObjVersion::new(1, 0)),
    ("VirtCPUModel", ObjVersion::new(1, 0)),
    ("VirtCPUTopology", ObjVersion::new(1, 0)),
];

/// Names an opaque object type.
pub trait OpaqueName: Clone + std::fmt::Debug + PartialEq {
    /// `nova_object.name`.
    const NAME: &'static str;
    /// Major version accepted; any minor of it is carried.
    const MAJOR: u16;
}

/// An object kept as raw data.
#[derive(Debug, Clone, PartialEq)]
pub struct Opaque<N> {
    /// `nova_object.data` as received.
    pub data: Map<String, Value>,
    _name: PhantomData<N>,
}

impl<N: OpaqueName> Opaque<N> {
    /// Wraps raw data.
    pub fn new(data: Map<String, Value>) -> Opaque<N> {
        Opaque {
            data,
            _name: PhantomData,
        }
    }
}

impl<N: OpaqueName> NovaObject for Opaque<N> {
    const NAME: &'static str = N::NAME;
    // Any minor of the major is carried as is (the data is not interpreted).
    const VERSION: ObjVersion = ObjVersion::new(N::MAJOR, u16::MAX);
    const OPAQUE: bool = true;

    fn decode(r: &mut Reader<'_>) -> Result<Self, ObjectError> {
        Ok(Opaque::new(r.data.clone()))
    }

    fn encode(&self, w: &mut Writer) -> Result<(), ObjectError> {
        w.data = self.data.clone();
        Ok(())
    }

    fn make_compatible(
        _: &mut Map<String, Value>,
        target: ObjVersion,
        _: Option<&Manifest>,
    ) -> Result<(), ObjectError> {
        Err(ObjectError::new(
            N::NAME,
            format!(
                "rtrack carries {} without interpreting it and cannot backport it to {target}",
                N::NAME
            ),
        ))
    }
}

macro_rules! opaque_names {
    ($($ty:ident = $name:literal major $major:literal;)*) => {
        $(
            #[doc = concat!("`", $name, "`, carried opaquely.")]
            #[derive(Debug, Clone, PartialEq)]
            pub struct $ty;
            impl OpaqueName for $ty {
                const NAME: &'static str = $name;
                const MAJOR: u16 = $major;
            }
        )*
    };
}

opaque_names! {
    CellMappingName = "CellMapping" major 1;
    DestinationName = "Destination" major 1;
    Ec2IdsName = "EC2Ids" major 1;
    ImageMetaName = "ImageMeta" major 1;
    InstanceDeviceMetadataName = "InstanceDeviceMetadata" major 1;
    InstanceFaultName = "InstanceFault" major 1;
    InstanceGroupName = "InstanceGroup" major 1;
    InstanceInfoCacheName = "InstanceInfoCache" major 1;
    KeyPairListName = "KeyPairList" major 1;
    NumaTopologyLimitsName = "NUMATopologyLimits" major 1;
    NetworkRequestListName = "NetworkRequestList" major 1;
    PciDeviceListName = "PciDeviceList" major 1;
    RequestGroupName = "RequestGroup" major 1;
    RequestLevelParamsName = "RequestLevelParams" major 1;
    ResourceListName = "ResourceList" major 1;
    SecurityGroupListName = "SecurityGroupList" major 1;
    ServiceListName = "ServiceList" major 1;
    TagListName = "TagList" major 1;
    TrustedCertsName = "TrustedCerts" major 1;
    VirtCpuModelName = "VirtCPUModel" major 1;
    VirtCpuTopologyName = "VirtCPUTopology" major 1;
}
