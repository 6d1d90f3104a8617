//! Broken trees: truncated files, garbage numbers, empty files, NUL bytes, missing directories,
//! symlink loops, files where directories belong. Every case must give a report with warnings
//! that name the path, and never a panic.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test or bench: a panic is its failure

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

use rtrack_fixtures::real::scratch_dir;
use rtrack_fixtures::synthetic::SyntheticHost;
use rtrack_probes::{probe_host, HostInventory, HostRoot, ProbeOptions};

/// A small synthetic host, damaged by `damage`, then probed.
fn probe_damaged(damage: impl FnOnce(&Path)) -> HostInventory {
    let dir = scratch_dir();
    SyntheticHost::small().write(dir.path());
    damage(dir.path());
    probe_host(&HostRoot::under(dir.path()), &ProbeOptions::default()).expect("report")
}

fn has_warning(inv: &HostInventory, path_end: &str, needle: &str) -> bool {
    inv.warnings
        .iter()
        .any(|w| w.path.ends_with(path_end) && w.message.contains(needle))
}

const VF: &str = "sys/devices/pci0000:3b/0000:3b:01.0";
const PF: &str = "sys/devices/pci0000:3b/0000:3b:00.0";

#[test]
fn garbage_vendor_skips_only_that_device() {
    // Without uevent the ids come from the attribute files.
    let inv = probe_damaged(|r| {
        fs::remove_file(r.join(VF).join("uevent")).unwrap();
        fs::write(r.join(VF).join("vendor"), "0xGARBAGE\n").unwrap();
    });
    assert_eq!(inv.pci_devices.len(), 15);
    assert!(
        has_warning(&inv, "0000:3b:01.0/vendor", "\"0xGARBAGE\""),
        "{:?}",
        inv.warnings
    );
    assert!(has_warning(
        &inv,
        "0000:3b:01.0",
        "mandatory attribute(s) vendor"
    ));
}

#[test]
fn garbage_uevent_falls_back_to_the_attribute_files() {
    let inv = probe_damaged(|r| {
        fs::write(
            r.join(VF).join("uevent"),
            "PCI_ID=nonsense\nPCI_CLASS=zz\n\0\0",
        )
        .unwrap()
    });
    assert_eq!(inv.pci_devices.len(), 16);
    let vf = inv
        .pci_devices
        .iter()
        .find(|d| d.address.to_string() == "0000:3b:01.0")
        .unwrap();
    assert_eq!(
        (
            vf.vendor_id.as_str(),
            vf.product_id.as_str(),
            vf.class.as_str()
        ),
        ("8086", "1889", "020000")
    );
    assert!(
        has_warning(&inv, "0000:3b:01.0/uevent", "PCI_ID=\"nonsense\""),
        "{:?}",
        inv.warnings
    );
    assert!(has_warning(&inv, "0000:3b:01.0/uevent", "PCI_CLASS=\"zz\""));
    // uevent said nothing of the driver, so the device is unbound as far as rtrack knows.
    assert_eq!(vf.driver, None);
}

#[test]
fn empty_and_truncated_files() {
    let inv = probe_damaged(|r| {
        fs::remove_file(r.join(VF).join("uevent")).unwrap();
        fs::write(r.join(VF).join("device"), "").unwrap();
        fs::write(r.join(PF).join("sriov_totalvfs"), "2").unwrap(); // fine, no newline
        fs::write(r.join(PF).join("sriov_numvfs"), "").unwrap();
        fs::write(r.join("proc/meminfo"), "MemTotal:  ").unwrap();
    });
    assert!(
        has_warning(&inv, "0000:3b:01.0/device", "\"\""),
        "{:?}",
        inv.warnings
    );
    let pf = inv
        .pci_devices
        .iter()
        .find(|d| d.address.to_string() == "0000:3b:00.0")
        .unwrap();
    assert_eq!(pf.sriov_totalvfs, Some(2));
    assert_eq!(pf.sriov_numvfs, None);
    assert_eq!(inv.memory.total_mb, 0);
    assert!(has_warning(&inv, "proc/meminfo", "MemTotal"));
}

#[test]
fn nul_bytes_and_binary_garbage() {
    let inv = probe_damaged(|r| {
        fs::write(r.join(VF).join("numa_node"), b"\0\0\0").unwrap();
        fs::write(
            r.join("sys/devices/system/node/node0/cpulist"),
            b"\xff\xfe\x00",
        )
        .unwrap();
        fs::write(r.join("proc/cpuinfo"), b"\0\0\0\xff").unwrap();
    });
    assert!(
        has_warning(&inv, "node0/cpulist", "UTF-8"),
        "{:?}",
        inv.warnings
    );
    assert!(has_warning(&inv, "proc/cpuinfo", "UTF-8"));
    // The node falls back to cpumap, which the generator does not write: CPUs unknown.
    assert!(inv.numa_nodes[0].cpus.is_empty());
    assert!(has_warning(&inv, "node0", "neither cpulist nor cpumap"));
    // numa_node of NULs is no number; local_cpulist cannot place it in a node without CPUs.
    assert!(has_warning(
        &inv,
        "0000:3b:01.0/numa_node",
        "NUMA node number"
    ));
    let vf = inv
        .pci_devices
        .iter()
        .find(|d| d.address.to_string() == "0000:3b:01.0")
        .unwrap();
    assert_eq!(vf.numa_node, None);
}

#[test]
fn garbage_numbers_in_topology_and_hugepages() {
    let inv = probe_damaged(|r| {
        let cpu = r.join("sys/devices/system/cpu");
        fs::write(cpu.join("cpu0/topology/physical_package_id"), "minus one\n").unwrap();
        fs::write(cpu.join("cpu1/topology/core_cpus_list"), "1-\n").unwrap();
        fs::write(cpu.join("online"), "0-99999999\n").unwrap();
        let hp = r.join("sys/devices/system/node/node0/hugepages/hugepages-2048kB");
        fs::write(hp.join("nr_hugepages"), "-4\n").unwrap();
    });
    assert!(
        has_warning(&inv, "cpu0/topology/physical_package_id", "\"minus one\""),
        "{:?}",
        inv.warnings
    );
    assert!(has_warning(
        &inv,
        "cpu1/topology/core_cpus_list",
        "not a CPU set"
    ));
    assert!(has_warning(&inv, "cpu/online", "above"));
    assert!(has_warning(&inv, "hugepages-2048kB/nr_hugepages", "\"-4\""));
    // online fell back to the CPUs with topology directories.
    assert_eq!(inv.cpu.threads, 8);
}

#[test]
fn missing_directories() {
    let inv = probe_damaged(|r| {
        fs::remove_dir_all(r.join("sys/devices/system/node")).unwrap();
        fs::remove_dir_all(r.join("sys/kernel")).unwrap();
        fs::remove_dir_all(r.join(PF).join("net")).unwrap();
    });
    assert!(inv.numa_nodes.is_empty());
    assert!(has_warning(
        &inv,
        "sys/devices/system/node",
        "NUMA topology unknown"
    ));
    assert_eq!(inv.pci_devices.len(), 16);
    // Without NUMA nodes, devices keep the node their numa_node file gives.
    assert!(inv.pci_devices.iter().all(|d| d.numa_node == Some(0)));
}

#[test]
fn symlink_loops_and_dangling_links() {
    let inv = probe_damaged(|r| {
        let devs = r.join("sys/bus/pci/devices");
        symlink("loop-b", devs.join("0000:ff:00.0")).unwrap();
        symlink("0000:ff:00.0", devs.join("loop-b")).unwrap();
        fs::remove_file(r.join(VF).join("physfn")).unwrap();
        symlink("physfn", r.join(VF).join("physfn")).unwrap(); // loops onto itself
        fs::remove_dir_all(r.join("sys/bus/pci/drivers/iavf")).unwrap(); // driver links dangle
    });
    assert!(
        has_warning(&inv, "0000:ff:00.0", "Too many symbolic links"),
        "{:?}",
        inv.warnings
    );
    assert!(has_warning(&inv, "loop-b", "not a PCI address"));
    let vf = inv
        .pci_devices
        .iter()
        .find(|d| d.address.to_string() == "0000:3b:01.0")
        .unwrap();
    // physfn exists (as a loop): still a VF, parent unreadable, said so.
    assert_eq!(vf.parent_addr, None);
    assert!(has_warning(
        &inv,
        "0000:3b:01.0/physfn",
        "not a PCI address"
    ));
    // Dangling driver links are normal: the driver name still comes from the link.
    let vf1 = inv
        .pci_devices
        .iter()
        .find(|d| d.address.to_string() == "0000:3b:01.1")
        .unwrap();
    assert_eq!(vf1.driver.as_deref(), Some("iavf"));
}

#[test]
fn a_file_where_a_directory_belongs_and_the_reverse() {
    let inv = probe_damaged(|r| {
        fs::remove_dir_all(r.join("sys/devices/system/cpu/cpu3/topology")).unwrap();
        fs::write(r.join("sys/devices/system/cpu/cpu3/topology"), "x").unwrap();
        fs::remove_file(r.join(PF).join("uevent")).unwrap();
        fs::remove_file(r.join(PF).join("vendor")).unwrap();
        fs::create_dir(r.join(PF).join("vendor")).unwrap();
        fs::remove_dir_all(r.join("sys/block")).ok();
        fs::write(r.join("sys/block"), "not a dir").unwrap();
    });
    assert!(
        has_warning(&inv, "cpu3/topology", "no topology directory"),
        "{:?}",
        inv.warnings
    );
    assert!(has_warning(&inv, "0000:3b:00.0/vendor", "unreadable"));
    assert!(has_warning(&inv, "sys/block", "expected a directory"));
    assert!(inv
        .pci_devices
        .iter()
        .all(|d| d.address.to_string() != "0000:3b:00.0"));
}

#[test]
fn oversized_files_are_refused_not_read_whole() {
    let inv = probe_damaged(|r| {
        fs::remove_file(r.join(VF).join("uevent")).unwrap();
        fs::write(r.join(VF).join("class"), vec![b'0'; 1 << 20]).unwrap();
        fs::write(r.join(PF).join("uevent"), vec![b'A'; 1 << 20]).unwrap();
    });
    assert!(
        has_warning(&inv, "0000:3b:00.0/uevent", "cap"),
        "{:?}",
        inv.warnings
    );
    assert!(
        has_warning(&inv, "0000:3b:01.0/class", "cap"),
        "{:?}",
        inv.warnings
    );
}

#[test]
fn empty_root_directories_give_an_empty_report() {
    let dir = scratch_dir();
    fs::create_dir(dir.path().join("sys")).unwrap();
    fs::create_dir(dir.path().join("proc")).unwrap();
    let inv = probe_host(&HostRoot::under(dir.path()), &ProbeOptions::default()).unwrap();
    assert_eq!(inv.cpu.threads, 0);
    assert!(inv.pci_devices.is_empty());
    assert!(!inv.warnings.is_empty());
}
