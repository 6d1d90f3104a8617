//! Hosts with power-managed CPUs for the NUMA differential test: a generated sysfs tree
//! (`rtrack_fixtures::power`) probed as rtrack sees it now (dedicated CPUs offline) and, for
//! Nova, as libvirt reported it when nova-compute started (every dedicated CPU powered up);
//! and explicit-cell hosts with some dedicated CPUs taken offline.

use rtrack::probes::cpu::OfflineCpu;
use rtrack::probes::{probe_host, CpuSet, HostInventory, HostRoot, ProbeOptions};
use rtrack_fixtures::power::PowerHost;

use super::{Case, Cell, Host};

/// The cells of a probed host as libvirt's capabilities show them (online CPUs of each node,
/// their siblings within the node, the node's single socket).
pub fn cells_of(inv: &HostInventory) -> Vec<Cell> {
    inv.numa_nodes
        .iter()
        .map(|n| {
            let in_node: Vec<_> = inv
                .cpu
                .cpus
                .iter()
                .filter(|c| n.cpus.contains(c.id))
                .collect();
            let mut siblings: Vec<Vec<u32>> = Vec::new();
            for c in &in_node {
                let s: Vec<u32> = c.thread_siblings.intersection(&n.cpus).iter().collect();
                if !s.is_empty() && !siblings.contains(&s) {
                    siblings.push(s);
                }
            }
            let sockets: std::collections::BTreeSet<Option<i64>> =
                in_node.iter().map(|c| c.package).collect();
            Cell {
                id: n.id,
                cpus: n.cpus.iter().collect(),
                siblings,
                socket: if sockets.len() == 1 {
                    sockets.into_iter().next().flatten()
                } else {
                    None
                },
                memory_kb: n.memory_kb.unwrap_or(0),
                hugepages: n.hugepages.iter().map(|p| (p.size_kb, p.total)).collect(),
            }
        })
        .collect()
}

fn preset(name: &str) -> PowerHost {
    match name {
        "pm-cpu-state" => PowerHost::cpu_state(),
        "pm-two-node-smt" => PowerHost::two_node_smt(),
        other => panic!("unknown power host {other}"),
    }
}

/// The case's generated host: rtrack's probe of it now, and the probe with every CPU online
/// (what an earlier audit saw) when the case says rtrack saw it so. Nova's cells are those of
/// the all-online probe (libvirt's capabilities at nova-compute's start, after it powered the
/// dedicated CPUs up); `offline` and the CPU count are the host's now.
pub fn power_host(case: &mut Case) -> (HostInventory, Option<HostInventory>) {
    let name = case.power_host.clone().unwrap_or_default();
    let host = preset(&name);
    let all_online = PowerHost {
        offline: Vec::new(),
        ..host.clone()
    };
    let probe = |h: &PowerHost| {
        let dir = rtrack_fixtures::real::scratch_dir();
        h.write(dir.path());
        let opts = ProbeOptions {
            cpu_governors: CpuSet::from_ids(0..h.base.cpus()),
            ..ProbeOptions::default()
        };
        probe_host(&HostRoot::under(dir.path()), &opts).expect("a probe")
    };
    let now = probe(&host);
    let earlier = probe(&all_online);
    case.host = Host {
        arch: "x86_64".into(),
        base_page_kb: now.memory.base_page_kb.unwrap_or(4),
        online: earlier.cpu.online.iter().collect(),
        cells: cells_of(&earlier),
        offline: now.cpu.offline.iter().collect(),
        cpu_count: now.cpu.present.iter().last().map(|m| m + 1),
    };
    (now, case.seen_online.then_some(earlier))
}

/// Takes `host.offline` out of an inventory built from explicit cells: out of the online CPUs
/// and their nodes, into `offline_cpus` with the topology of their cell (as the daemon keeps
/// it for CPUs it saw online).
pub fn take_offline(inv: &mut HostInventory, host: &Host) {
    if host.offline.is_empty() {
        return;
    }
    let offline = CpuSet::from_ids(host.offline.iter().copied());
    inv.cpu.online = inv.cpu.online.difference(&offline);
    inv.cpu.offline = offline.clone();
    inv.cpu.cpus.retain(|c| !offline.contains(c.id));
    for n in &mut inv.numa_nodes {
        n.cpus = n.cpus.difference(&offline);
    }
    for cell in &host.cells {
        for &id in cell.cpus.iter().filter(|c| offline.contains(**c)) {
            let sib = cell
                .siblings
                .iter()
                .find(|s| s.contains(&id))
                .cloned()
                .unwrap_or_else(|| vec![id]);
            inv.cpu.offline_cpus.push(OfflineCpu {
                id,
                numa_node: Some(cell.id),
                package: cell.socket,
                core: Some(i64::from(id)),
                thread_siblings: CpuSet::from_ids(sib),
                topology_cached: true,
            });
        }
    }
    inv.cpu.offline_cpus.sort_by_key(|c| c.id);
}
