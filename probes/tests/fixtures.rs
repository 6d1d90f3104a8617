//! Per-probe checks on real-machine trees, with values read by hand from the captured files
//! (the golden reports in `tests/it/once.rs` cover every field; these pin the ones each probe is
//! about).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test or bench: a panic is its failure

use rtrack_fixtures::real::{unpack, RealFixture};
use rtrack_probes::{probe_host, HostInventory, HostRoot, ProbeOptions};

fn probe(name: &str) -> HostInventory {
    let unpacked = unpack(RealFixture::named(name));
    probe_host(&HostRoot::under(&unpacked.root), &ProbeOptions::default()).unwrap()
}

#[test]
fn memory_node_totals_need_not_sum_to_meminfo() {
    // this-vm: /proc/meminfo MemTotal 24684084 kB, node0 MemTotal 5990604 kB (ballooning).
    let inv = probe("this-vm");
    assert_eq!(inv.memory.total_mb, 24684084 / 1024);
    assert_eq!(inv.numa_nodes[0].memory_mb, Some(5990604 / 1024));
    assert_eq!(inv.memory.default_hugepage_size_kb, Some(2048));
}

#[test]
fn hugepages_per_node_and_host_wide() {
    // 32intel64: 2048 x 2 MiB pages reserved on each of the two nodes, 4096 host-wide.
    let inv = probe("hwloc-32intel64-2p8co2t+8ve");
    for node in &inv.numa_nodes {
        let two_mb = node.hugepages.iter().find(|p| p.size_kb == 2048).unwrap();
        assert_eq!((two_mb.total, two_mb.free), (2048, 2048));
        assert!(node.hugepages.iter().any(|p| p.size_kb == 1048576));
    }
    let host = inv
        .memory
        .hugepages
        .iter()
        .find(|p| p.size_kb == 2048)
        .unwrap();
    assert_eq!(host.total, 4096);
}

#[test]
fn block_devices_skip_loop_and_zram() {
    // this-vm has vda, zram0 and loop0-7.
    let inv = probe("this-vm");
    let names: Vec<&str> = inv
        .disks
        .block_devices
        .iter()
        .map(|b| b.name.as_str())
        .collect();
    assert_eq!(names, vec!["vda"]);
    let vda = &inv.disks.block_devices[0];
    assert_eq!(vda.size_sectors, 536870912);
    assert_eq!(vda.size_bytes, 256 << 30);
    assert_eq!(vda.pci_address.as_deref(), Some("0000:00:02.0"));
    assert_eq!(vda.driver.as_deref(), Some("virtio_blk"));
}

#[test]
fn block_devices_include_device_mapper_and_optical() {
    let inv = probe("ghw-linux-amd64-8581cf3a");
    let names: Vec<&str> = inv
        .disks
        .block_devices
        .iter()
        .map(|b| b.name.as_str())
        .collect();
    assert_eq!(
        names,
        vec!["dm-0", "dm-1", "dm-2", "dm-3", "dm-4", "sda", "sr0"]
    );
}

#[test]
fn sparse_cpu_less_nodes_on_power9() {
    let inv = probe("hwloc-nvidiagpunumanodes");
    let ids: Vec<u32> = inv.numa_nodes.iter().map(|n| n.id).collect();
    assert_eq!(ids, vec![0, 8, 250, 251, 252, 253, 254, 255]);
    let gpu_nodes: Vec<_> = inv.numa_nodes.iter().filter(|n| n.id >= 250).collect();
    assert!(gpu_nodes.iter().all(|n| !n.has_cpu && n.has_memory));
    assert_eq!(inv.cpu.arch.as_deref(), Some("ppc64le"));
    assert_eq!(inv.cpu.threads_per_core, Some(4));
}

#[test]
fn buggy_firmware_numa_is_a_warning() {
    let inv = probe("hwloc-8em64t-2s2ca2c-buggynuma");
    assert_eq!(inv.numa_nodes.len(), 8);
    let overlap = inv
        .warnings
        .iter()
        .filter(|w| w.message.contains("already in node 0"))
        .count();
    assert_eq!(overlap, 7);
    assert!(inv.cpu.cpus.iter().all(|c| c.numa_node == Some(0)));
}

#[test]
fn wide_pci_domain() {
    let inv = probe("hwloc-2pa-pcidomain32bits");
    let vmd: Vec<String> = inv
        .pci_devices
        .iter()
        .filter(|d| d.address.domain == 0x10000)
        .map(|d| d.address.to_string())
        .collect();
    assert!(!vmd.is_empty());
    assert!(vmd.iter().all(|a| a.starts_with("10000:")));
}

#[test]
fn pci_only_capture_without_cpu_data() {
    let inv = probe("nfd-pci-rootfs-1");
    assert_eq!(inv.cpu.threads, 0);
    assert_eq!(inv.pci_devices.len(), 10);
    assert!(inv
        .warnings
        .iter()
        .any(|w| w.path.ends_with("0000:00:1f.2") && w.message.contains("device skipped")));
    let qat = inv
        .pci_devices
        .iter()
        .find(|d| d.address.to_string() == "0000:3b:00.0")
        .unwrap();
    assert_eq!((qat.sriov_numvfs, qat.sriov_totalvfs), (Some(16), Some(16)));
    assert_eq!(qat.dev_type.as_str(), "type-PF");
}
