//! The PCI probe on small hand-made trees: addresses, uevent, SR-IOV links, missing files,
//! the NUMA fallback, values sysfs never writes, vDPA devices.

use super::*;
use std::fs;
use std::os::unix::fs::symlink;

#[test]
fn addresses_parse_and_print() {
    let a = PciAddress::parse("0000:3b:00.1").unwrap();
    assert_eq!((a.domain, a.bus, a.device, a.function), (0, 0x3b, 0, 1));
    assert_eq!(a.to_string(), "0000:3b:00.1");
    let vmd = PciAddress::parse("10000:00:04.0").unwrap();
    assert_eq!(vmd.to_string(), "10000:00:04.0");
    assert!(vmd > a);
    for bad in [
        "",
        "0000:3b:00",
        "000:3b:00.0",
        "0000:3b:20.0",
        "0000:3b:00.8",
        "zzzz:00:00.0",
        "0000:3b:00.0x",
    ] {
        assert!(PciAddress::parse(bad).is_none(), "{bad}");
    }
}

#[test]
fn uevent_gives_ids_class_and_subsystem() {
    let mut w = Warnings::new();
    let ue = parse_uevent(
        "DRIVER=i40e\nPCI_CLASS=20000\nPCI_ID=8086:37D2\nPCI_SUBSYS_ID=15D9:37D2\nPCI_SLOT_NAME=0000:60:00.0\n",
        Path::new("/u"),
        &mut w,
    );
    assert_eq!(ue.vendor, Some(0x8086));
    assert_eq!(ue.device, Some(0x37d2));
    assert_eq!(ue.class, Some(0x020000));
    assert_eq!(ue.subsystem_vendor, Some(0x15d9));
    assert_eq!(ue.driver.as_deref(), Some("i40e"));
    assert!(w.is_empty());
    let ue = parse_uevent("PCI_ID=zz:1\nPCI_CLASS=1000000\n", Path::new("/u"), &mut w);
    assert_eq!(ue.vendor, None);
    assert_eq!(ue.class, None);
    assert_eq!(w.len(), 2);
}

fn mkdev(sys: &Path, addr: &str, files: &[(&str, &str)]) -> std::path::PathBuf {
    let real = sys.join("devices/pci0000:00").join(addr);
    fs::create_dir_all(&real).unwrap();
    for (name, content) in files {
        fs::write(real.join(name), content).unwrap();
    }
    let link_dir = sys.join("bus/pci/devices");
    fs::create_dir_all(&link_dir).unwrap();
    symlink(
        format!("../../../devices/pci0000:00/{addr}"),
        link_dir.join(addr),
    )
    .unwrap();
    real
}

#[test]
fn sriov_pf_and_vf_are_linked() {
    let dir = tempfile::tempdir().unwrap();
    let sys = dir.path().join("sys");
    let ids = |d: &'static str| {
        vec![
            ("vendor", "0x8086\n"),
            ("device", d),
            ("class", "0x020000\n"),
            ("numa_node", "-1\n"),
        ]
    };
    let mut pf_files = ids("0x159b\n");
    pf_files.extend([("sriov_totalvfs", "128\n"), ("sriov_numvfs", "1\n")]);
    let pf = mkdev(&sys, "0000:a2:00.0", &pf_files);
    let vf = mkdev(&sys, "0000:a2:01.0", &ids("0x1889\n"));
    symlink("../0000:a2:00.0", vf.join("physfn")).unwrap();
    symlink("../0000:a2:01.0", pf.join("virtfn0")).unwrap();
    symlink("../../../bus/pci/drivers/vfio-pci", vf.join("driver")).unwrap();
    fs::create_dir_all(pf.join("net/ens1f0")).unwrap();
    fs::write(pf.join("vpd"), crate::vpd::tests::image("MT2034X00001")).unwrap();
    let mut w = Warnings::new();
    let devs = probe_pci(
        &HostRoot::under(dir.path()),
        &NumaTopology::default(),
        true,
        &mut w,
    );
    assert!(w.is_empty(), "{w:?}");
    assert_eq!(devs.len(), 2);
    // The PF's card serial number, the VF's too (libvirt's rule); not read unless asked.
    assert!(devs
        .iter()
        .all(|d| d.card_serial_number.as_deref() == Some("MT2034X00001")));
    let unasked = probe_pci(
        &HostRoot::under(dir.path()),
        &NumaTopology::default(),
        false,
        &mut w,
    );
    assert!(unasked.iter().all(|d| d.card_serial_number.is_none()));
    assert_eq!(devs[0].dev_type, PciDevType::Pf);
    assert_eq!(
        devs[0].virtfns,
        vec![PciAddress::parse("0000:a2:01.0").unwrap()]
    );
    assert_eq!(devs[0].net_interfaces, vec!["ens1f0"]);
    assert_eq!(devs[0].sriov_numvfs, Some(1));
    assert_eq!(devs[1].dev_type, PciDevType::Vf);
    assert_eq!(devs[1].parent_addr, Some(devs[0].address));
    assert_eq!(devs[1].driver.as_deref(), Some("vfio-pci"));
    assert_eq!(devs[1].numa_node, None);
}

#[test]
fn missing_mandatory_file_skips_only_that_device() {
    let dir = tempfile::tempdir().unwrap();
    let sys = dir.path().join("sys");
    mkdev(&sys, "0000:00:1f.2", &[("class", "0x058000\n")]);
    mkdev(
        &sys,
        "0000:00:00.0",
        &[
            ("vendor", "0x8086\n"),
            ("device", "0x2020\n"),
            ("class", "0x060000\n"),
        ],
    );
    let mut w = Warnings::new();
    let devs = probe_pci(
        &HostRoot::under(dir.path()),
        &NumaTopology::default(),
        false,
        &mut w,
    );
    assert_eq!(devs.len(), 1);
    assert!(devs[0].is_bridge());
    assert_eq!(w.len(), 1);
    assert!(w.as_slice()[0].message.contains("vendor, device"), "{w:?}");
}

#[test]
fn numa_falls_back_to_local_cpulist() {
    let dir = tempfile::tempdir().unwrap();
    let sys = dir.path().join("sys");
    mkdev(
        &sys,
        "0000:81:00.0",
        &[
            ("vendor", "0x15b3\n"),
            ("device", "0x1013\n"),
            ("class", "0x020700\n"),
            ("numa_node", "-1\n"),
            ("local_cpulist", "8-15\n"),
        ],
    );
    let node_dir = sys.join("devices/system/node");
    for (id, cpus) in [(0, "0-7"), (1, "8-15")] {
        fs::create_dir_all(node_dir.join(format!("node{id}"))).unwrap();
        fs::write(node_dir.join(format!("node{id}/cpulist")), cpus).unwrap();
        fs::write(
            node_dir.join(format!("node{id}/meminfo")),
            format!("Node {id} MemTotal: 1024 kB\n"),
        )
        .unwrap();
    }
    let mut w = Warnings::new();
    let root = HostRoot::under(dir.path());
    let numa = crate::numa::probe_numa_nodes(&root, &CpuSet::new(), &mut w);
    let devs = probe_pci(&root, &numa, false, &mut w);
    assert_eq!(devs[0].numa_node, Some(1));
    assert_eq!(devs[0].numa_node_source, Some(NumaSource::LocalCpulist));
}

#[test]
fn class_and_id_values_that_sysfs_never_writes_are_refused_with_a_warning() {
    let path = Path::new("/t/uevent");
    for bad in ["+1", "65536x", "1000000", "-20000", ""] {
        let mut w = Warnings::new();
        let ue = parse_uevent(&format!("PCI_CLASS={bad}\n"), path, &mut w);
        assert_eq!(ue.class, None, "{bad}");
        assert_eq!(w.len(), 1, "{bad}: {w:?}");
    }
    let mut w = Warnings::new();
    let ue = parse_uevent("PCI_CLASS=20000\nPCI_ID=+808:1889\n", path, &mut w);
    assert_eq!(ue.class, Some(0x20000));
    assert_eq!(ue.vendor, None);
    assert_eq!(w.len(), 1, "{w:?}");
}
