//! The answers of the PCI routes: the tracked devices, a device released, a port's devices
//! attached or detached.
//!
//! In: the tracker's devices and [`AttachOutcome`]. Out: the answers' types.

use serde::Serialize;
use utoipa::ToSchema;

use super::claims::DeviceGiven;
use crate::tracker::ops::attach::AttachOutcome;
use crate::tracker::pci::devices::TrackedDevice;

/// `GET /v1/pci-devices`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PciDevices {
    /// Every tracked device.
    pub pci_devices: Vec<PciDeviceView>,
}

/// A tracked PCI device: its state, holder and Placement provider.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = PciDevice)]
pub struct PciDeviceView {
    /// PCI address.
    pub address: String,
    /// Vendor id (hex).
    pub vendor_id: String,
    /// Product id (hex).
    pub product_id: String,
    /// Nova's device type.
    pub dev_type: DevType,
    /// NUMA node.
    #[schema(required)]
    pub numa_node: Option<u32>,
    /// A VF's PF (a vDPA device's VF).
    #[schema(required)]
    pub parent_addr: Option<String>,
    /// Nova's device status.
    pub status: DeviceState,
    /// The instance (or migration) holding it; null while it is free.
    #[schema(required)]
    pub instance_uuid: Option<String>,
    /// The InstancePCIRequest it satisfies, while held.
    #[schema(required)]
    pub request_id: Option<String>,
    /// Reserved after use until released (`[[pci.device_spec]] one_time_use`).
    pub one_time_use: bool,
    /// With [pci] report_in_placement: the provider holding it.
    #[schema(required)]
    pub resource_provider_uuid: Option<uuid::Uuid>,
}

/// Nova's PCI device types (`PciDevType::as_str`).
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub enum DevType {
    /// A device without SR-IOV.
    #[serde(rename = "type-PCI")]
    Pci,
    /// An SR-IOV physical function.
    #[serde(rename = "type-PF")]
    Pf,
    /// An SR-IOV virtual function.
    #[serde(rename = "type-VF")]
    Vf,
    /// A vDPA device.
    #[serde(rename = "vdpa")]
    Vdpa,
}

/// Nova's PCI device states (`DeviceStatus::as_str`).
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum DeviceState {
    /// Free.
    Available,
    /// Held by a claim not yet running.
    Claimed,
    /// Held by an instance.
    Allocated,
    /// Its PF or VFs are held.
    Unclaimable,
    /// Its parent or child is held (Nova's `unavailable`).
    Unavailable,
    /// A one-time-use device after use, until released.
    Reserved,
}

impl PciDeviceView {
    /// The device as listed, with its provider's uuid (when it has one).
    pub fn new(d: &TrackedDevice, provider: Option<uuid::Uuid>) -> PciDeviceView {
        use crate::probes::pci::PciDevType as T;
        use crate::tracker::pci::devices::DeviceStatus as S;
        PciDeviceView {
            address: d.address.to_string(),
            vendor_id: d.vendor_id.clone(),
            product_id: d.product_id.clone(),
            dev_type: match d.dev_type {
                T::Pci => DevType::Pci,
                T::Pf => DevType::Pf,
                T::Vf => DevType::Vf,
                T::Vdpa => DevType::Vdpa,
            },
            numa_node: d.numa_node,
            parent_addr: d.parent_addr.map(|a| a.to_string()),
            status: match d.status {
                S::Available => DeviceState::Available,
                S::Claimed => DeviceState::Claimed,
                S::Allocated => DeviceState::Allocated,
                S::Unclaimable => DeviceState::Unclaimable,
                S::Unavailable => DeviceState::Unavailable,
                S::Reserved => DeviceState::Reserved,
            },
            instance_uuid: d.owner.as_ref().map(|o| o.instance_uuid.clone()),
            request_id: d.owner.as_ref().and_then(|o| o.request_id.clone()),
            one_time_use: d.one_time_use(),
            resource_provider_uuid: provider,
        }
    }
}

/// `POST /v1/pci-devices/{address}/release`: the device is available again.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Released {
    /// The device's PCI address.
    pub address: String,
    /// Always `available`.
    pub status: String,
}

/// A port's devices attached to a running instance.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Attached {
    /// The instance.
    #[schema(format = "uuid")]
    pub instance_uuid: String,
    /// The devices given to the attached requests (all of them when `existing`).
    pub pci_devices: Vec<DeviceGiven>,
    /// The same requests were attached already: nothing changed.
    pub existing: bool,
}

impl From<&AttachOutcome> for Attached {
    fn from(o: &AttachOutcome) -> Attached {
        Attached {
            instance_uuid: o.instance_uuid.clone(),
            pci_devices: o
                .assignments
                .iter()
                .map(|a| DeviceGiven {
                    address: a.address.to_string(),
                    request_id: a.request_id.clone(),
                })
                .collect(),
            existing: o.existing,
        }
    }
}

/// A port's devices freed and its request removed.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Detached {
    /// The instance.
    #[schema(format = "uuid")]
    pub instance_uuid: String,
    /// The port's InstancePCIRequest request_id.
    pub request_id: String,
    /// Always true.
    pub detached: bool,
}
