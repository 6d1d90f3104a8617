//! HVSpec 1.2: one (architecture, hypervisor type, VM mode) the host can run.
//!
//! In: the probed architecture, hypervisor type and VM mode (or an HVSpec primitive, 1.0 to 1.2).
//! Out: an [`HVSpec`] for the ComputeNode's `supported_hv_specs`; backported to 1.0, `vz` becomes
//! `parallels`.

use serde_json::{Map, Value};

use super::base::{Manifest, NovaObject, ObjVersion, ObjectError, Reader, Writer};
use super::enums::{Architecture, HvType, VmMode};
use super::fields::{older, Enum};

crate::nova_object_fields! {
    /// HVSpec (nova/objects/hv_spec.py).
    pub struct HVSpec {
        /// Guest architecture.
        arch: req Enum<Architecture>,
        /// Virtualization type.
        hv_type: req Enum<HvType>,
        /// Guest ABI.
        vm_mode: req Enum<VmMode>,
    }
}

impl NovaObject for HVSpec {
    const NAME: &'static str = "HVSpec";
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
        // 1.1 added 'vz'; older peers know it as 'parallels'. (1.2 added 'lxd' without a
        // conversion in Nova.)
        if older(target, 1, 1) && data.get("hv_type").and_then(Value::as_str) == Some("vz") {
            data.insert("hv_type".into(), Value::String("parallels".into()));
        }
        Ok(())
    }
}

impl HVSpec {
    /// A spec from its three values.
    pub fn new(arch: &str, hv_type: &str, vm_mode: &str) -> HVSpec {
        HVSpec {
            arch: arch.to_string().into(),
            hv_type: hv_type.to_string().into(),
            vm_mode: vm_mode.to_string().into(),
        }
    }
}
