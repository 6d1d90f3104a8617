//! Intel TDX and persistent memory namespaces on the generated hosts of `fixtures/kit`
//! (`facts.rs`): the whole memory encryption state of the TDX host, and every namespace of the
//! PMEM host as `ndctl list` would show it to Nova.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test or bench: a panic is its failure

use rtrack_fixtures::facts::FactsHost;
use rtrack_fixtures::real::scratch_dir;
use rtrack_probes::mem_encryption::MemoryEncryption;
use rtrack_probes::pmem::PmemNamespace;
use rtrack_probes::{probe_host, HostInventory, HostRoot, ProbeOptions};

fn probe(host: &FactsHost) -> HostInventory {
    let dir = scratch_dir();
    host.write(dir.path());
    probe_host(&HostRoot::under(dir.path()), &ProbeOptions::default()).unwrap()
}

#[test]
fn the_tdx_host_shows_kvm_tdx_its_keyids_and_the_platform_flag() {
    let inv = probe(&FactsHost::tdx_host());
    assert!(inv.warnings.is_empty(), "{:?}", inv.warnings);
    assert_eq!(
        inv.memory_encryption,
        MemoryEncryption {
            sev: Some(false),
            sev_es: Some(false),
            sev_snp: Some(false),
            sev_firmware: None,
            sev_guests: None,
            sev_es_guests: None,
            tdx: Some(true),
            tdx_guests: Some(63),
            tdx_host_platform: Some(true),
        }
    );
    assert!(inv.pmem_namespaces.is_empty());
}

#[test]
fn a_tdx_host_whose_kernel_turned_tdx_off_says_so() {
    let mut host = FactsHost::tdx_host();
    if let Some(t) = &mut host.tdx {
        t.param = Some("N".into());
        t.misc_capacity = None;
    }
    let inv = probe(&host);
    let enc = &inv.memory_encryption;
    assert_eq!((enc.tdx, enc.tdx_guests), (Some(false), None));
}

#[test]
fn the_pmem_host_shows_each_namespace_as_ndctl_would() {
    let inv = probe(&FactsHost::pmem_host());
    assert!(inv.warnings.is_empty(), "{:?}", inv.warnings);
    let devdax = |i: u32| PmemNamespace {
        dev: format!("namespace0.{i}"),
        name: Some(format!("ns_{i}")),
        mode: Some("devdax".into()),
        enabled: true,
        size: Some(4292870144),
        align: Some(2097152),
        devpath: Some(format!("/dev/dax0.{i}")),
        dax_driver: Some("device_dax".into()),
        numa_node: Some(0),
        uuid: Some(format!("24ffd5e4-2b39-4f28-88b3-d6dc1ec4000{i}")),
    };
    assert_eq!(
        inv.pmem_namespaces,
        vec![
            devdax(0),
            devdax(1),
            devdax(2),
            // fsdax: listed with its raw size, never a dax device. The region's idle seed
            // (namespace1.1, size 0) is left out, as ndctl leaves it out.
            PmemNamespace {
                dev: "namespace1.0".into(),
                name: Some("fs_0".into()),
                mode: Some("fsdax".into()),
                enabled: true,
                size: Some(8589934592),
                align: None,
                devpath: None,
                dax_driver: None,
                numa_node: Some(1),
                uuid: Some("24ffd5e4-2b39-4f28-88b3-d6dc1ec40100".into()),
            },
        ]
    );
}
