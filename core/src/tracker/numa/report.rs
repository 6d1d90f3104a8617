//! What operators and tools read about the NUMA cells: per cell the shared and dedicated CPUs,
//! their usage, memory and pages (`GET /v1/usage`), and per CPU what holds it, with the PCI
//! devices local to the cell, its caches, L3 domains and core types (`GET /v1/numa`,
//! `rtrackctl numa`).
//!
//! In: the [`HostTopology`], its [`NumaUsage`], the placements that count with their owners,
//! and the tracked PCI devices. Out: [`CellReport`]s and [`CellDetail`]s, serializable, cpulists
//! as strings.

use std::collections::BTreeMap;

use serde::Serialize;

use super::host::HostTopology;
use super::power::{cpu_power, CpuPower};
use super::usage::{with_siblings, NumaUsage};
use super::{FittedTopology, ThreadPolicy};
use crate::probes::cache::CacheInstance;
use crate::probes::core_type::CoreType;
use crate::probes::{CpuSet, HostInventory};

/// One page pool of a cell, with its use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PageReport {
    /// Page size, KiB.
    pub size_kb: i64,
    /// Pages in the cell.
    pub total: i64,
    /// Pages the claims hold.
    pub used: i64,
    /// Pages kept from guests (`reserved_huge_pages`).
    pub reserved: i64,
    /// Pages the kernel reports free (hugepages only, else null; pages a claim holds for a
    /// guest not started yet are still free to the kernel).
    pub kernel_free: Option<i64>,
}

/// One cell in `GET /v1/usage`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CellReport {
    /// Node id.
    pub id: u32,
    /// The cell's shared CPUs (Nova's `cpuset`), a cpulist.
    pub cpus: String,
    /// The cell's dedicated CPUs (Nova's `pcpuset`), a cpulist.
    pub pcpus: String,
    /// Floating guest CPUs placed on the cell.
    pub cpu_usage: i64,
    /// Host CPUs pinned, a cpulist.
    pub pinned_cpus: String,
    /// Memory of the cell, MiB.
    pub memory_mb: i64,
    /// Memory of the guest cells placed on it, MiB.
    pub memory_usage_mb: i64,
    /// Page pools, smallest first.
    pub mempages: Vec<PageReport>,
}

/// What holds one CPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CpuState {
    /// The CPU.
    pub cpu: u32,
    /// `free` (dedicated, not pinned), `shared` (floating guests only), `pinned` (a guest CPU),
    /// `emulator` (an `isolate` guest's emulator threads), `isolated` (a sibling an `isolate`
    /// guest keeps idle), `unused` (in neither CPU set).
    pub state: &'static str,
    /// The instance that holds it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// Online or not (a dedicated CPU whose power Nova manages is offline while no guest runs
    /// on it), and its governor when read.
    #[serde(flatten)]
    pub power: CpuPower,
}

/// One cell in `GET /v1/numa`: the report, the socket, every core's CPUs and the local PCI
/// devices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CellDetail {
    /// The usage report.
    #[serde(flatten)]
    pub report: CellReport,
    /// The socket its CPUs are on, if one.
    pub socket: Option<i64>,
    /// Cores (thread sibling sets), each CPU with what holds it.
    pub cores: Vec<Vec<CpuState>>,
    /// Tracked PCI devices on this node, with their status.
    pub pci_devices: Vec<(String, String)>,
    /// Cache instances of level 2 and above with CPUs in the cell (each whole, as in
    /// `--once`'s `caches`).
    pub caches: Vec<CacheInstance>,
    /// The cell's CPUs by L3 domain (cpulists), by lowest CPU; empty without L3 facts.
    pub l3_domains: Vec<CpuSet>,
    /// The core types of its CPUs (hybrid hosts; empty with one kind of core).
    pub core_types: Vec<CoreType>,
}

/// The usage report of every cell.
pub fn cell_reports(host: &HostTopology, usage: &NumaUsage) -> Vec<CellReport> {
    host.cells
        .iter()
        .map(|c| {
            let u = usage.cell(c.id);
            CellReport {
                id: c.id,
                cpus: c.cpuset.to_string(),
                pcpus: c.pcpuset.to_string(),
                cpu_usage: u.cpu_usage,
                pinned_cpus: u.pinned.to_string(),
                memory_mb: c.memory_mb,
                memory_usage_mb: u.memory_usage_mb,
                mempages: c
                    .pages
                    .iter()
                    .map(|p| PageReport {
                        size_kb: p.size_kb,
                        total: p.total,
                        used: u.pages(p.size_kb),
                        reserved: p.reserved,
                        kernel_free: p.kernel_free,
                    })
                    .collect(),
            }
        })
        .collect()
}

/// Every cell with what holds each CPU. `inv` is the probe (each CPU's power state);
/// `placements` are the counted topologies with the instance that holds each; `devices` the
/// tracked PCI devices (address, NUMA node, status).
pub fn cell_details<'a>(
    host: &HostTopology,
    inv: &HostInventory,
    usage: &NumaUsage,
    placements: impl IntoIterator<Item = (&'a str, &'a FittedTopology)>,
    devices: &[(String, Option<u32>, String)],
) -> Vec<CellDetail> {
    let mut holder: BTreeMap<u32, (&'static str, String)> = BTreeMap::new();
    for (instance, t) in placements {
        for fc in &t.cells {
            let pinned = CpuSet::from_ids(fc.cpu_pinning.values().copied());
            for c in pinned.iter() {
                holder.insert(c, ("pinned", instance.to_string()));
            }
            let reserved = fc.cpuset_reserved.clone().unwrap_or_default();
            for c in reserved.iter() {
                holder.insert(c, ("emulator", instance.to_string()));
            }
            if fc.thread_policy == Some(ThreadPolicy::Isolate) {
                if let Some(hc) = host.cell(fc.host_cell) {
                    let all = CpuSet::from_ids(pinned.iter().chain(reserved.iter()));
                    for c in with_siblings(hc, &all).difference(&all).iter() {
                        holder
                            .entry(c)
                            .or_insert(("isolated", instance.to_string()));
                    }
                }
            }
        }
    }
    let reports = cell_reports(host, usage);
    host.cells
        .iter()
        .zip(reports)
        .map(|(c, report)| {
            let cores = c
                .siblings
                .iter()
                .map(|core| {
                    core.iter()
                        .map(|cpu| match holder.get(&cpu) {
                            Some((state, inst)) => CpuState {
                                cpu,
                                state,
                                instance: Some(inst.clone()),
                                power: cpu_power(inv, cpu),
                            },
                            None => CpuState {
                                cpu,
                                state: if c.pcpuset.contains(cpu) {
                                    "free"
                                } else if c.cpuset.contains(cpu) {
                                    "shared"
                                } else {
                                    "unused"
                                },
                                instance: None,
                                power: cpu_power(inv, cpu),
                            },
                        })
                        .collect()
                })
                .collect();
            CellDetail {
                report,
                socket: c.socket,
                cores,
                pci_devices: devices
                    .iter()
                    .filter(|(_, node, _)| *node == Some(c.id))
                    .map(|(a, _, s)| (a.clone(), s.clone()))
                    .collect(),
                caches: c.facts.caches.clone(),
                l3_domains: c.facts.l3_domains.clone(),
                core_types: c.facts.core_types.clone(),
            }
        })
        .collect()
}
