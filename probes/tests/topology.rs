//! CPU caches and core types on the generated topology hosts (`rtrack_fixtures::topology`):
//! the EPYC-like host's L3 domains (an L3 per 8 cores, both threads), the Intel-hybrid-like
//! host's core types from the per-kind PMUs and its E-core clusters sharing an L2; and the
//! Xeon-like caches every other generated host has.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test or bench: a panic is its failure

use rtrack_fixtures::real::scratch_dir;
use rtrack_fixtures::synthetic::SyntheticHost;
use rtrack_fixtures::topology::TopologyHost;
use rtrack_probes::{probe_host, HostInventory, HostRoot, ProbeOptions};

fn probe(write: impl Fn(&std::path::Path)) -> HostInventory {
    let dir = scratch_dir();
    write(dir.path());
    probe_host(&HostRoot::under(dir.path()), &ProbeOptions::default()).unwrap()
}

fn caches(inv: &HostInventory, level: u32) -> Vec<(String, Option<u64>)> {
    inv.caches
        .iter()
        .filter(|c| c.level == level)
        .map(|c| (c.cpus.to_string(), c.size_kb))
        .collect()
}

#[test]
fn the_epyc_like_host_has_an_l3_per_eight_cores() {
    let inv = probe(|p| TopologyHost::epyc().write(p));
    assert!(inv.warnings.is_empty(), "{:?}", inv.warnings);
    let l3 = caches(&inv, 3);
    assert_eq!(l3.len(), 16);
    assert_eq!(l3[0], ("0-7,128-135".to_string(), Some(32768)));
    assert_eq!(l3[15], ("120-127,248-255".to_string(), Some(32768)));
    let l2 = caches(&inv, 2);
    assert_eq!(l2.len(), 128);
    assert_eq!(l2[1], ("1,129".to_string(), Some(1024)));
    assert!(inv.core_types.is_empty());
    assert_eq!(inv.cpu.model.as_deref(), Some("AMD EPYC-like (synthetic)"));
    assert_eq!(inv.numa_nodes[1].distances.get(&2), Some(&12));
    assert_eq!(inv.numa_nodes[1].distances.get(&5), Some(&32));
}

#[test]
fn the_hybrid_like_host_names_its_core_types() {
    let inv = probe(|p| TopologyHost::hybrid().write(p));
    assert!(inv.warnings.is_empty(), "{:?}", inv.warnings);
    let types: Vec<(&str, String)> = inv
        .core_types
        .iter()
        .map(|t| (t.name.as_str(), t.cpus.to_string()))
        .collect();
    assert_eq!(
        types,
        [
            ("IntelCore", "0-15,32-47".to_string()),
            ("IntelAtom", "16-31,48-63".to_string())
        ]
    );
    assert_eq!(inv.cpu.cores, 48);
    assert_eq!(inv.cpu.threads, 64);
    let l2 = caches(&inv, 2);
    assert_eq!(l2.len(), 24);
    assert!(l2.contains(&("16-19".to_string(), Some(4096))), "{l2:?}");
    assert!(l2.contains(&("0-1".to_string(), Some(2048))), "{l2:?}");
    assert_eq!(
        caches(&inv, 3),
        [
            ("0-31".to_string(), Some(36864)),
            ("32-63".to_string(), Some(36864))
        ]
    );
}

#[test]
fn every_generated_host_has_xeon_like_caches() {
    let inv = probe(|p| SyntheticHost::small().write(p));
    assert!(inv.warnings.is_empty(), "{:?}", inv.warnings);
    assert!(inv.core_types.is_empty());
    let l3 = caches(&inv, 3);
    assert_eq!(l3.len() as u32, inv.cpu.sockets);
    assert_eq!(caches(&inv, 2).len() as u32, inv.cpu.cores);
}
