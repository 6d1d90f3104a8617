//! vDPA devices on generated hosts (`rtrack_fixtures::vdpa`): a VF with a vDPA device is a
//! `vdpa` device of its PF; a PF with one on a sub-function stays a PF; a device without a
//! PCI function or a character device is handled as Nova and QEMU see it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test or bench: a panic is its failure

use std::collections::BTreeMap;

use rtrack_fixtures::real::scratch_dir;
use rtrack_fixtures::vdpa::VdpaHost;
use rtrack_probes::pci::{PciAddress, PciDevType, PciDevice};
use rtrack_probes::vdpa::VdpaDevice;
use rtrack_probes::{probe_host, HostInventory, HostRoot, ProbeOptions};

fn probe(host: &VdpaHost) -> HostInventory {
    let dir = scratch_dir();
    host.write(dir.path());
    probe_host(&HostRoot::under(dir.path()), &ProbeOptions::default()).unwrap()
}

fn by_address(inv: &HostInventory) -> BTreeMap<String, &PciDevice> {
    inv.pci_devices
        .iter()
        .map(|d| (d.address.to_string(), d))
        .collect()
}

fn addr(s: &str) -> Option<PciAddress> {
    PciAddress::parse(s)
}

#[test]
fn vfs_with_vdpa_devices_are_vdpa_devices_of_their_pf() {
    let inv = probe(&VdpaHost::vdpa());
    assert!(inv.warnings.is_empty(), "{:?}", inv.warnings);
    let devs = by_address(&inv);
    assert_eq!(devs["0000:06:00.0"].dev_type, PciDevType::Pf);
    for (i, vf) in [
        "0000:06:00.1",
        "0000:06:00.2",
        "0000:06:00.3",
        "0000:06:00.4",
    ]
    .iter()
    .enumerate()
    {
        let d = devs[*vf];
        assert_eq!(d.dev_type, PciDevType::Vdpa, "{vf}");
        assert_eq!(d.parent_addr, addr("0000:06:00.0"));
        assert_eq!(
            (d.vendor_id.as_str(), d.product_id.as_str()),
            ("15b3", "101e")
        );
        assert_eq!(
            inv.vdpa_devices[i],
            VdpaDevice {
                name: format!("vdpa{i}"),
                pci_parent: addr(vf),
                driver: Some("vhost_vdpa".into()),
                chardev: Some(format!("/dev/vhost-vdpa-{i}")),
            }
        );
    }
    // The E810's VFs have no vDPA device: plain VFs.
    let plain: Vec<_> = inv
        .pci_devices
        .iter()
        .filter(|d| d.parent_addr == addr("0000:3b:00.0"))
        .collect();
    assert_eq!(plain.len(), 2);
    assert!(plain.iter().all(|d| d.dev_type == PciDevType::Vf));
}

#[test]
fn a_pf_sub_function_a_simulator_and_virtio_vdpa() {
    let inv = probe(&VdpaHost::vdpa_mixed());
    let devs = by_address(&inv);
    assert_eq!(devs["0000:06:00.0"].dev_type, PciDevType::Pf);
    assert_eq!(devs["0000:06:00.1"].dev_type, PciDevType::Vdpa);
    assert_eq!(devs["0000:06:00.2"].dev_type, PciDevType::Vdpa);
    assert_eq!(devs["0000:06:00.3"].dev_type, PciDevType::Vf);
    assert_eq!(devs["0000:06:00.4"].dev_type, PciDevType::Vf);
    let names: Vec<(&str, Option<String>, Option<&str>)> = inv
        .vdpa_devices
        .iter()
        .map(|v| {
            (
                v.name.as_str(),
                v.pci_parent.map(|a| a.to_string()),
                v.chardev.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            (
                "blue",
                Some("0000:06:00.1".into()),
                Some("/dev/vhost-vdpa-3")
            ),
            (
                "vdpa-sf",
                Some("0000:06:00.0".into()),
                Some("/dev/vhost-vdpa-5")
            ),
            ("vdpa-sim", None, Some("/dev/vhost-vdpa-6")),
            ("vdpa1", Some("0000:06:00.2".into()), None),
        ]
    );
    // virtio_vdpa: counted by Nova, unusable by a guest; said once.
    assert_eq!(inv.warnings.len(), 1, "{:?}", inv.warnings);
    assert!(inv.warnings[0].path.ends_with("sys/bus/vdpa/devices/vdpa1"));
    assert!(
        inv.warnings[0].message.contains("virtio_vdpa"),
        "{:?}",
        inv.warnings
    );
}
