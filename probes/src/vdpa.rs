//! vDPA probe: the devices on the vDPA bus and the PCI function each sits on; a VF with one is
//! Nova's `vdpa` device type.
//!
//! In: `sys/bus/vdpa/devices/<name>` (links into the device tree), each device's `driver` link
//! and its `vhost-vdpa-<M>` child. Out: [`VdpaDevice`]s sorted by name, and
//! [`mark_vdpa_functions`] turns the VFs they sit on into [`PciDevType::Vdpa`].
//!
//! A vDPA device's directory sits below the device that created it, often through auxiliary
//! devices (`.../0000:06:00.2/mlx5_core.vnet.2/vdpa0`): its PCI function is the nearest PCI
//! address on its link's path, as libvirt's node device parent is its nearest ancestor libvirt
//! knows. Names are the operator's (`vdpa dev add name X`), so nothing is read from them.
//! Nova marks only VFs (`Host._get_pcidev_info`): a vDPA device on a PF's sub-function leaves
//! the PF a PF, and one of the `vdpa_sim` simulator, with no PCI function, marks nothing.
//! Hosts without a vDPA bus (most) cost one failed directory open.

use serde::Serialize;

use crate::pci::{PciAddress, PciDevType, PciDevice};
use crate::read::{link_basename, list_dir, quoted, SysDir, Warnings};
use crate::HostRoot;

/// One device on the vDPA bus.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct VdpaDevice {
    /// Its name on the bus (`vdpa0`, or whatever the operator chose).
    pub name: String,
    /// The PCI function it sits on; null when its path has none (the simulator).
    pub pci_parent: Option<PciAddress>,
    /// Bound driver: `vhost_vdpa` (a guest can use it), `virtio_vdpa` (the host uses it); null
    /// when unbound.
    pub driver: Option<String>,
    /// `/dev/vhost-vdpa-<M>`, the character device QEMU opens (Nova's
    /// `get_vdpa_device_path`); null when there is none (not bound to `vhost_vdpa`).
    pub chardev: Option<String>,
}

/// Reads the vDPA bus. Missing bus: no devices, no warning.
pub fn probe_vdpa(root: &HostRoot, w: &mut Warnings) -> Vec<VdpaDevice> {
    let bus = root.sys_path("bus/vdpa/devices");
    let Some(mut dir) = SysDir::open(&bus, w) else {
        return Vec::new();
    };
    let mut names = dir.entries(w);
    names.sort();
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let path = bus.join(&name);
        let Some(target) = dir.link_target(&name) else {
            w.push(&path, "not a link to a device: vDPA device skipped");
            continue;
        };
        let pci_parent = pci_parent_of(&target);
        let entries = list_dir(&path, w).unwrap_or_default();
        let chardev = entries
            .iter()
            .find(|e| e.starts_with("vhost-vdpa-"))
            .map(|e| format!("/dev/{e}"));
        let driver = link_basename(&path.join("driver"), w);
        out.push(VdpaDevice {
            name,
            pci_parent,
            driver,
            chardev,
        });
    }
    out
}

/// The nearest PCI address among the components of a vDPA device's link target, above the
/// device's own name.
pub fn pci_parent_of(target: &std::path::Path) -> Option<PciAddress> {
    target
        .iter()
        .rev()
        .skip(1)
        .filter_map(|c| c.to_str())
        .find_map(PciAddress::parse)
}

/// Makes every VF that has a vDPA device a [`PciDevType::Vdpa`] device (Nova's rule; PFs and
/// plain functions stay as they are). A vDPA VF is not given its PF's card serial number:
/// Nova reads a parent's VPD for `type-VF` devices only. `devices` is sorted by address.
pub fn mark_vdpa_functions(
    root: &HostRoot,
    devices: &mut [PciDevice],
    vdpa: &[VdpaDevice],
    w: &mut Warnings,
) {
    let bus = root.sys_path("bus/vdpa/devices");
    for v in vdpa {
        let Some(addr) = v.pci_parent else {
            continue;
        };
        let Ok(i) = devices.binary_search_by(|d| d.address.cmp(&addr)) else {
            w.push(
                &bus.join(&v.name),
                format!(
                    "vDPA device {} sits on PCI function {addr}, which the PCI probe did not report",
                    quoted(&v.name)
                ),
            );
            continue;
        };
        let d = &mut devices[i];
        if d.dev_type != PciDevType::Vf && d.dev_type != PciDevType::Vdpa {
            continue;
        }
        d.dev_type = PciDevType::Vdpa;
        d.card_serial_number = None;
        if v.chardev.is_none() {
            w.push(
                &bus.join(&v.name),
                format!(
                    "vDPA device {} of VF {addr} has no vhost-vdpa character device (driver {}): a guest cannot use it, though Nova counts the VF as a vDPA device",
                    quoted(&v.name),
                    v.driver.as_deref().unwrap_or("none")
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn the_pci_parent_is_the_nearest_address_above_the_device() {
        let p = |s: &str| pci_parent_of(Path::new(s)).map(|a| a.to_string());
        assert_eq!(
            p("../../../devices/pci0000:00/0000:00:02.0/0000:06:00.2/mlx5_core.vnet.2/vdpa0"),
            Some("0000:06:00.2".into())
        );
        assert_eq!(
            p("../../../devices/pci0000:00/0000:06:00.0/mlx5_core.sf.2/mlx5_core.vnet.5/x"),
            Some("0000:06:00.0".into())
        );
        // A device named like an address is not its own parent.
        assert_eq!(p("../../../devices/vdpa_sim/0000:06:00.1"), None);
        assert_eq!(p("../../../devices/vdpa_sim/vdpa-sim"), None);
    }
}
