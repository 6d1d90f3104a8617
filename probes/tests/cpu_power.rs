//! CPUs taken offline and cpufreq governors on generated hosts (`rtrack_fixtures::power`):
//! offline CPUs keep their node from the `node<M>/cpu<N>` links, lose their topology, and
//! leave their online siblings alone; governors are read only for the CPUs asked for.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test or bench: a panic is its failure

use rtrack_fixtures::power::PowerHost;
use rtrack_fixtures::real::scratch_dir;
use rtrack_probes::cpu::OfflineCpu;
use rtrack_probes::cpu_power::CpuGovernor;
use rtrack_probes::{probe_host, CpuSet, HostInventory, HostRoot, ProbeOptions};

fn probe(host: &PowerHost, governors: &str) -> HostInventory {
    let dir = scratch_dir();
    host.write(dir.path());
    let opts = ProbeOptions {
        cpu_governors: CpuSet::parse_list(governors).unwrap(),
        ..ProbeOptions::default()
    };
    probe_host(&HostRoot::under(dir.path()), &opts).unwrap()
}

fn governor(cpu: u32, g: Option<&str>, cpufreq: bool) -> CpuGovernor {
    CpuGovernor {
        cpu,
        governor: g.map(str::to_string),
        cpufreq,
    }
}

#[test]
fn offline_dedicated_cpus_keep_their_node() {
    let inv = probe(&PowerHost::cpu_state(), "1-7");
    assert!(inv.warnings.is_empty(), "{:?}", inv.warnings);
    assert_eq!(inv.cpu.online.to_string(), "0,4,8-9");
    assert_eq!(inv.cpu.offline.to_string(), "1-3,5-7");
    assert_eq!(inv.cpu.present.to_string(), "0-9");
    assert_eq!(inv.cpu.threads, 4);
    assert_eq!(inv.numa_nodes[0].cpus.to_string(), "0,4,8-9");
    let offline: Vec<OfflineCpu> = [1, 2, 3, 5, 6, 7]
        .into_iter()
        .map(|id| OfflineCpu {
            id,
            numa_node: Some(0),
            package: None,
            core: None,
            thread_siblings: CpuSet::from_ids([id]),
            topology_cached: false,
        })
        .collect();
    assert_eq!(inv.cpu.offline_cpus, offline);
    // Online CPUs have a governor; offline ones none now (their policy is inactive).
    let expected: Vec<CpuGovernor> = (1..=7)
        .map(|c| {
            if c == 4 {
                governor(c, Some("powersave"), true)
            } else {
                governor(c, None, true)
            }
        })
        .collect();
    assert_eq!(inv.cpu.governors, expected);
}

#[test]
fn an_offline_sibling_leaves_its_core_mate_alone() {
    let inv = probe(&PowerHost::two_node_smt(), "");
    assert!(inv.warnings.is_empty(), "{:?}", inv.warnings);
    assert!(inv.cpu.governors.is_empty(), "not asked for");
    let nodes: Vec<(u32, Option<u32>)> = inv
        .cpu
        .offline_cpus
        .iter()
        .map(|c| (c.id, c.numa_node))
        .collect();
    assert_eq!(
        nodes,
        [
            (2, Some(0)),
            (3, Some(0)),
            (6, Some(1)),
            (7, Some(1)),
            (10, Some(0)),
            (11, Some(0)),
            (15, Some(1))
        ]
    );
    let cpu14 = inv.cpu.cpus.iter().find(|c| c.id == 14).unwrap();
    assert_eq!(cpu14.thread_siblings.to_string(), "14");
    assert_eq!(cpu14.numa_node, Some(1));
    assert_eq!(inv.numa_nodes[1].cpus.to_string(), "4-5,12-14");
}

#[test]
fn governors_without_cpufreq_and_mixed() {
    let inv = probe(&PowerHost::no_cpufreq(), "1-2");
    assert_eq!(
        inv.cpu.governors,
        [governor(1, None, false), governor(2, None, false)]
    );
    assert!(inv.cpu.offline_cpus.is_empty());
    let inv = probe(&PowerHost::mixed_governors(), "1-3");
    assert_eq!(
        inv.cpu.governors,
        [
            governor(1, Some("powersave"), true),
            governor(2, Some("performance"), true),
            governor(3, Some("performance"), true)
        ]
    );
}
