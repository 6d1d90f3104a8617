//! SR-IOV on generated hosts (no public snapshot has `physfn`/`virtfn*` links): PF/VF linking,
//! a PF with no VFs enabled, VFs bound to vfio-pci, VFs crossing a bus boundary, and the large
//! host.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test or bench: a panic is its failure

use std::collections::BTreeMap;

use rtrack_fixtures::real::scratch_dir;
use rtrack_fixtures::synthetic::SyntheticHost;
use rtrack_probes::pci::{PciAddress, PciDevType, PciDevice};
use rtrack_probes::{probe_host, HostInventory, HostRoot, ProbeOptions};

fn probe(host: &SyntheticHost) -> HostInventory {
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

#[test]
fn small_host_pf_vf_relations() {
    let inv = probe(&SyntheticHost::small());
    assert!(inv.warnings.is_empty(), "{:?}", inv.warnings);
    let devs = by_address(&inv);
    let pf = devs["0000:3b:00.0"];
    assert_eq!(pf.dev_type, PciDevType::Pf);
    assert_eq!((pf.sriov_numvfs, pf.sriov_totalvfs), (Some(8), Some(256)));
    assert_eq!(pf.virtfns.len(), 8);
    for (i, vf_addr) in pf.virtfns.iter().enumerate() {
        let vf = devs[&vf_addr.to_string()];
        assert_eq!(vf.dev_type, PciDevType::Vf);
        assert_eq!(vf.parent_addr, Some(pf.address));
        assert_eq!(vf.product_id, "1889");
        assert_eq!(vf.driver.as_deref(), Some("iavf"));
        assert_eq!(vf.net_interfaces, vec![format!("ens1f0v{i}")]);
        assert_eq!(vf.numa_node, Some(0));
    }
    // A PF with SR-IOV capability but no VFs enabled is still type-PF (as libvirt reports it).
    let idle = devs["0000:3b:00.1"];
    assert_eq!(idle.dev_type, PciDevType::Pf);
    assert_eq!(
        (idle.sriov_numvfs, idle.sriov_totalvfs),
        (Some(0), Some(64))
    );
    assert!(idle.virtfns.is_empty());
    // VFs bound to vfio-pci have no netdev.
    let vfio_pf = devs["0000:5e:00.0"];
    for vf_addr in &vfio_pf.virtfns {
        let vf = devs[&vf_addr.to_string()];
        assert_eq!(vf.driver.as_deref(), Some("vfio-pci"));
        assert!(vf.net_interfaces.is_empty());
        assert!(vf.iommu_group.is_some());
    }
    assert_eq!(devs["0000:01:00.0"].dev_type, PciDevType::Pci);
    assert_eq!(inv.pci_devices.len(), 1 + 3 + 8 + 4);
}

#[test]
fn vfs_crossing_a_bus_boundary_keep_their_parent() {
    let inv = probe(&SyntheticHost::bus_crossing());
    assert!(inv.warnings.is_empty(), "{:?}", inv.warnings);
    let devs = by_address(&inv);
    let pf = devs["0000:af:00.0"];
    assert_eq!(pf.virtfns.len(), 200);
    assert_eq!(pf.virtfns[127], PciAddress::parse("0000:af:1f.7").unwrap());
    assert_eq!(pf.virtfns[128], PciAddress::parse("0000:b0:00.0").unwrap());
    let crossed = devs["0000:b0:08.7"];
    assert_eq!(crossed.dev_type, PciDevType::Vf);
    assert_eq!(crossed.parent_addr, Some(pf.address));
    assert_eq!(crossed.numa_node, Some(1));
}

#[test]
fn large_host_is_probed_whole() {
    let inv = probe(&SyntheticHost::large());
    assert!(inv.warnings.is_empty(), "{:?}", inv.warnings);
    assert_eq!(inv.cpu.threads, 256);
    assert_eq!((inv.cpu.sockets, inv.cpu.cores), (2, 128));
    assert_eq!(inv.numa_nodes.len(), 8);
    assert!(inv.numa_nodes.iter().all(|n| n.cpus.len() == 32));
    let vfs = inv
        .pci_devices
        .iter()
        .filter(|d| d.dev_type == PciDevType::Vf)
        .count();
    assert_eq!(vfs, 1024);
    assert_eq!(inv.pci_devices.len(), 1024 + 4 + 1);
    // Every VF's parent lists it.
    let devs = by_address(&inv);
    for d in inv
        .pci_devices
        .iter()
        .filter(|d| d.dev_type == PciDevType::Vf)
    {
        let pf = devs[&d.parent_addr.unwrap().to_string()];
        assert!(pf.virtfns.contains(&d.address));
        assert_eq!(pf.numa_node, d.numa_node);
    }
}
