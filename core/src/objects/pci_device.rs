//! PciDevice 1.7 (nova/objects/pci_device.py): one tracked PCI device, its state and owner.
//!
//! In: a PciDevice primitive (1.0 to 1.7). Out: a [`PciDevice`]; backported, `parent_addr` moves
//! into `extra_info` before 1.4, and a status or device type the target does not know is an error.

use serde_json::{Map, Value};

use super::base::{Manifest, NovaObject, ObjVersion, ObjectError, Reader, Writer};
use super::enums::{PciDeviceStatus, PciDeviceType};
use super::fields::{older, Bool, DateTime, DictStr, Enum, Int, Str, Uuid};

crate::nova_object_fields! {
    /// Nova's PciDevice object: one PCI device of a compute node, its state and its owner.
    pub struct PciDevice {
        /// Database id.
        id: req Int,
        /// Uuid (1.6).
        uuid: req Uuid,
        /// Owning compute node id.
        compute_node_id: opt Int,
        /// PCI address.
        address: req Str,
        /// Vendor id.
        vendor_id: req Str,
        /// Product id.
        product_id: req Str,
        /// type-PCI, type-PF, type-VF, vdpa (1.7).
        dev_type: req Enum<PciDeviceType>,
        /// available, claimed, allocated, removed, deleted, unclaimable, unavailable (1.5).
        status: req Enum<PciDeviceStatus>,
        /// `pci_<address>` in Nova.
        dev_id: opt Str,
        /// Nova's `label`: names the device's kind (libvirt writes `label_<vendor>_<product>`).
        label: opt Str,
        /// Owning instance.
        instance_uuid: opt Str,
        /// InstancePCIRequest id (1.2).
        request_id: opt Str,
        /// Extra details (parent_ifname, capabilities...).
        extra_info: req DictStr,
        /// NUMA node (1.3).
        numa_node: opt Int,
        /// A VF's PF address (1.4).
        parent_addr: opt Str,
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

fn refuse_new_value(
    data: &Map<String, Value>,
    field: &str,
    new: &[&str],
    target: ObjVersion,
) -> Result<(), ObjectError> {
    if let Some(v) = data.get(field).and_then(Value::as_str) {
        if new.contains(&v) {
            return Err(ObjectError::new(
                format!("PciDevice.data.{field}"),
                format!("{v:?} cannot be represented in PciDevice {target}"),
            ));
        }
    }
    Ok(())
}

impl NovaObject for PciDevice {
    const NAME: &'static str = "PciDevice";
    const VERSION: ObjVersion = ObjVersion::new(1, 7);
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
            data.remove("request_id");
        }
        if older(target, 1, 4) {
            if let Some(parent) = data.remove("parent_addr") {
                // Nova moves it into extra_info only when extra_info is in the primitive.
                if !parent.is_null() {
                    if let Some(Value::Object(extra)) = data.get_mut("extra_info") {
                        extra.insert("phys_function".into(), parent);
                    }
                }
            }
        }
        // Nova checks the statuses added in 1.5 only while parent_addr is still present.
        if older(target, 1, 5) && data.contains_key("parent_addr") {
            refuse_new_value(data, "status", &["unclaimable", "unavailable"], target)?;
        }
        if older(target, 1, 6) {
            data.remove("uuid");
        }
        if older(target, 1, 7) {
            refuse_new_value(data, "dev_type", &["vdpa"], target)?;
        }
        Ok(())
    }
}
