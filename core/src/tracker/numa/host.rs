//! The host's NUMA cells as Nova's libvirt driver reports them (`_get_host_numa_topology`): one
//! cell per NUMA node the kernel shows, with its shared CPUs (`cpuset`), dedicated CPUs
//! (`pcpuset`), thread siblings, socket, memory and page pools.
//!
//! In: the probe ([`HostInventory`]) and `[resources]` (CPU sets, `reserved_huge_pages`, the base
//! page size). Out: a [`HostTopology`]; [`config_problems`] says which configured CPUs, nodes or
//! page sizes the host does not have.
//!
//! - Shared CPUs are `cpu_shared_set` (none when only `cpu_dedicated_set` is set), dedicated
//!   ones `cpu_dedicated_set`; with neither set every online CPU is both (Nova's legacy
//!   fallback, where pinned and floating guests share CPUs). Online CPUs outside every node are
//!   in no cell: NUMA guests never use them.
//! - Sibling sets are the CPUs' `thread_siblings`, restricted to the usable CPUs, ordered by
//!   their lowest CPU (Nova's order comes from a Python set; rtrack's is stable).
//! - Page pools: the base page (total = node memory minus its hugepages), then every hugepage
//!   size the node lists, smallest first; `reserved` from `reserved_huge_pages`.
//! - A cell's socket is its CPUs' package when they share one, else none; a CPU-less cell has
//!   none.
//! - Each cell also carries its caches, L3 domains, core types and distances
//!   ([`super::domains`]), which only rtrack's own placement policies read.

use std::collections::BTreeSet;

use serde::Serialize;

use super::domains::CellFacts;
use crate::config::{PinAlignment, ReservedPages, Resources, TopologyPolicy};
use crate::inventory::resources::cpu_sets;
use crate::probes::cpu::OfflineCpu;
use crate::probes::numa::NumaNode;
use crate::probes::{CpuSet, HostInventory};

/// The base page size an architecture usually runs with, KiB, when the probe cannot tell.
pub fn arch_base_page_kb(arch: Option<&str>) -> i64 {
    match arch {
        Some(a) if a.starts_with("ppc64") => 64,
        _ => 4,
    }
}

/// One page-size pool of a cell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PagePool {
    /// Page size, KiB.
    pub size_kb: i64,
    /// Pages of this size in the cell.
    pub total: i64,
    /// Pages kept from guests (`reserved_huge_pages`).
    pub reserved: i64,
    /// Pages the kernel reports free (hugepage pools only), for operators; accounting uses
    /// `total`, `reserved` and what the claims hold, as Nova does.
    pub kernel_free: Option<i64>,
}

impl PagePool {
    /// Memory in the pool, KiB.
    pub fn total_kb(&self) -> i64 {
        self.total.saturating_mul(self.size_kb)
    }
}

/// One host NUMA cell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostCell {
    /// Node id.
    pub id: u32,
    /// Package shared by all its CPUs; none for a CPU-less cell or one spanning packages.
    pub socket: Option<i64>,
    /// CPUs for floating guests.
    pub cpuset: CpuSet,
    /// CPUs for pinned guests.
    pub pcpuset: CpuSet,
    /// Thread sibling sets of the usable CPUs, by lowest CPU.
    pub siblings: Vec<CpuSet>,
    /// Memory, MiB (the node's `MemTotal` rounded down).
    pub memory_mb: i64,
    /// Page pools, smallest first (the base page first).
    pub pages: Vec<PagePool>,
    /// The physical networks whose vSwitch is on this node (`[neutron_physnet.<name>]
    /// numa_nodes`).
    #[serde(default)]
    pub physnets: std::collections::BTreeSet<String>,
    /// Tunneled networks' vSwitch is on this node (`[neutron_tunnel] numa_nodes`).
    #[serde(default)]
    pub tunneled: bool,
    /// Its caches, L3 domains, core types and distances (what rtrack's own placement
    /// policies read; Nova's rules never do).
    pub facts: CellFacts,
}

impl HostTopology {
    /// Puts the networks' NUMA affinity on the cells it names.
    pub fn set_network_affinity(&mut self, a: &crate::config::neutron::NetworkAffinity) {
        for c in &mut self.cells {
            c.physnets = a.physnets_on(c.id);
            c.tunneled = a.tunnel.contains(&c.id);
        }
    }
}

impl HostCell {
    /// Most threads in one core of this cell (1 without SMT).
    pub fn threads_per_core(&self) -> usize {
        self.siblings
            .iter()
            .map(CpuSet::len)
            .max()
            .unwrap_or(0)
            .max(1)
    }

    /// The pool of `size_kb`, if the cell has one.
    pub fn pool(&self, size_kb: i64) -> Option<&PagePool> {
        self.pages.iter().find(|p| p.size_kb == size_kb)
    }

    /// The smallest page size of the cell (its base page).
    pub fn smallest_page_kb(&self) -> Option<i64> {
        self.pages.first().map(|p| p.size_kb)
    }

    /// True when some core of the cell has more than one thread.
    pub fn has_threads(&self) -> bool {
        self.siblings.iter().any(|s| s.len() > 1)
    }
}

/// The host's cells, in node order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HostTopology {
    /// One cell per NUMA node the kernel shows.
    pub cells: Vec<HostCell>,
    /// Neither `cpu_dedicated_set` nor `cpu_shared_set` is configured: every CPU is both shared
    /// and dedicated, and pinned guests consume VCPU (Nova's legacy fallback).
    pub legacy_cpus: bool,
    /// The base page size, KiB.
    pub base_page_kb: i64,
}

impl HostTopology {
    /// The host topology of `inv` under `res`.
    pub fn build(inv: &HostInventory, res: &Resources) -> HostTopology {
        let legacy_cpus = res.legacy_cpus();
        let (shared, mut dedicated) = cpu_sets(inv, res);
        if legacy_cpus {
            dedicated = shared.clone();
        }
        let usable = CpuSet::from_ids(shared.iter().chain(dedicated.iter()));
        let base_page_kb = res
            .base_page_size_kb
            .map(|kb| kb as i64)
            .or(inv.memory.base_page_kb.map(|kb| kb as i64))
            .unwrap_or_else(|| arch_base_page_kb(inv.cpu.arch.as_deref()));
        let cells = inv
            .numa_nodes
            .iter()
            .map(|node| {
                // Offline CPUs are in a cell only as dedicated CPUs whose power is managed.
                let offline: Vec<&OfflineCpu> = inv
                    .cpu
                    .offline_cpus
                    .iter()
                    .filter(|c| c.numa_node == Some(node.id) && dedicated.contains(c.id))
                    .collect();
                let (socket, siblings) = cell_cores(inv, node.cpus.clone(), &offline, &usable);
                let cpus = CpuSet::from_ids(node.cpus.iter().chain(offline.iter().map(|c| c.id)));
                let memory_kb = node
                    .memory_kb
                    .or(node.memory_mb.map(|mb| mb * 1024))
                    .unwrap_or(0) as i64;
                HostCell {
                    id: node.id,
                    socket,
                    cpuset: cpus.intersection(&shared),
                    pcpuset: cpus.intersection(&dedicated),
                    siblings,
                    memory_mb: memory_kb / 1024,
                    pages: page_pools(node, memory_kb, base_page_kb, &res.reserved_huge_pages),
                    physnets: Default::default(),
                    tunneled: false,
                    facts: CellFacts::of(inv, node.id, &cpus),
                }
            })
            .collect();
        HostTopology {
            cells,
            legacy_cpus,
            base_page_kb,
        }
    }

    /// The cell with node id `id`.
    pub fn cell(&self, id: u32) -> Option<&HostCell> {
        self.cells.iter().find(|c| c.id == id)
    }

    /// True when some cell has SMT threads.
    pub fn has_threads(&self) -> bool {
        self.cells.iter().any(HostCell::has_threads)
    }
}

/// A cell's socket and thread sibling sets. `online` are the node's online CPUs; `offline`
/// its offline dedicated CPUs (power-managed), each a core of its own unless its topology was
/// seen while it was online, in which case it joins the sibling sets it shares CPUs with. An
/// offline CPU whose package is unknown does not make the cell's socket unknown.
fn cell_cores(
    inv: &HostInventory,
    online: CpuSet,
    offline: &[&OfflineCpu],
    usable: &CpuSet,
) -> (Option<i64>, Vec<CpuSet>) {
    let in_node: Vec<_> = inv
        .cpu
        .cpus
        .iter()
        .filter(|c| online.contains(c.id))
        .collect();
    let packages: BTreeSet<Option<i64>> = in_node
        .iter()
        .map(|c| c.package)
        .chain(offline.iter().filter_map(|c| c.package.map(Some)))
        .collect();
    let socket = match packages.len() {
        1 => packages.into_iter().next().flatten(),
        _ => None,
    };
    let mut siblings: Vec<CpuSet> = Vec::new();
    for cpu in &in_node {
        let mut set = cpu.thread_siblings.intersection(usable);
        if set.is_empty() && usable.contains(cpu.id) {
            // A CPU whose siblings file was unreadable is a core of its own.
            set = CpuSet::from_ids([cpu.id]);
        }
        if !set.is_empty() && !siblings.contains(&set) {
            siblings.push(set);
        }
    }
    for cpu in offline {
        let mut set = cpu.thread_siblings.intersection(usable);
        set.insert(cpu.id);
        // The online threads of its core list themselves alone while it is offline: the
        // remembered core takes them back in.
        let mut merged = set;
        siblings.retain(|s| {
            if s.intersects(&merged) {
                merged = CpuSet::from_ids(merged.iter().chain(s.iter()));
                false
            } else {
                true
            }
        });
        siblings.push(merged);
    }
    siblings.sort_by_key(|s| s.iter().next());
    (socket, siblings)
}

/// A cell's page pools: the base page (the node's memory less its hugepages), then every
/// hugepage size the node lists, smallest first, with what `reserved_huge_pages` keeps.
fn page_pools(
    node: &NumaNode,
    memory_kb: i64,
    base_page_kb: i64,
    reserved: &[ReservedPages],
) -> Vec<PagePool> {
    let huge_kb: i64 = node
        .hugepages
        .iter()
        .map(|p| (p.size_kb as i64).saturating_mul(p.total as i64))
        .sum();
    let mut pages = vec![PagePool {
        size_kb: base_page_kb,
        total: (memory_kb - huge_kb).max(0) / base_page_kb,
        reserved: reserved_pages(reserved, node.id, base_page_kb),
        kernel_free: None,
    }];
    let mut huge: Vec<_> = node.hugepages.iter().collect();
    huge.sort_by_key(|p| p.size_kb);
    for p in huge {
        let size_kb = p.size_kb as i64;
        if size_kb == base_page_kb {
            continue;
        }
        pages.push(PagePool {
            size_kb,
            total: p.total as i64,
            reserved: reserved_pages(reserved, node.id, size_kb),
            kernel_free: Some(p.free as i64),
        });
    }
    pages
}

/// Pages of `size_kb` reserved on node `node` (the last entry naming both wins, as in Nova).
fn reserved_pages(list: &[ReservedPages], node: u32, size_kb: i64) -> i64 {
    list.iter()
        .rev()
        .find(|r| r.node == node && r.size_kb == size_kb)
        .map_or(0, |r| r.count)
}

/// What the configuration names that this host does not have: CPUs of `cpu_dedicated_set` or
/// `cpu_shared_set` that are not online, or with `cpu_power_management` dedicated CPUs that do
/// not exist or that its strategy cannot manage (Nova refuses to start on them:
/// [`super::power::cpu_set_problems`]), and
/// `reserved_huge_pages` entries for a node or page size the host lacks, or reserving more pages
/// than the pool has. Each problem names the key and what the host has.
pub fn config_problems(inv: &HostInventory, res: &Resources) -> Vec<(String, String)> {
    let mut out = super::power::cpu_set_problems(inv, res);
    out.extend(super::domains::policy_problems(inv, &res.topology));
    if res.reserved_huge_pages.is_empty() {
        return out;
    }
    let topo = HostTopology::build(inv, res);
    for (i, r) in res.reserved_huge_pages.iter().enumerate() {
        let key = format!("resources.reserved_huge_pages[{i}]");
        let Some(cell) = topo.cell(r.node) else {
            let nodes: Vec<String> = topo.cells.iter().map(|c| c.id.to_string()).collect();
            out.push((
                key,
                format!(
                    "node {} is not a NUMA node of this host (nodes: {})",
                    r.node,
                    if nodes.is_empty() {
                        "none".into()
                    } else {
                        nodes.join(", ")
                    }
                ),
            ));
            continue;
        };
        match cell.pool(r.size_kb) {
            None => {
                let sizes: Vec<String> = cell
                    .pages
                    .iter()
                    .map(|p| format!("{} KiB", p.size_kb))
                    .collect();
                out.push((
                    key,
                    format!(
                        "node {} has no {} KiB pages (sizes: {})",
                        r.node,
                        r.size_kb,
                        sizes.join(", ")
                    ),
                ));
            }
            Some(p) if r.count > p.total => out.push((
                key,
                format!(
                    "reserves {} pages of {} KiB on node {}, which has {}",
                    r.count, r.size_kb, r.node, p.total
                ),
            )),
            Some(_) => {}
        }
    }
    out
}

impl HostTopology {
    /// The distance from cell `a` to cell `b`, when the host says.
    pub fn distance(&self, a: u32, b: u32) -> Option<u32> {
        self.cell(a)?.facts.distances.get(&b).copied()
    }

    /// Whether every pair of cells has a known distance.
    pub fn distances_known(&self) -> bool {
        self.cells.iter().all(|a| {
            self.cells
                .iter()
                .all(|b| a.facts.distances.contains_key(&b.id))
        })
    }
}

/// One line per policy that is on, saying what it does on this host (`--check-config`).
pub fn policy_summary(
    host: &HostTopology,
    inv: &HostInventory,
    policy: &TopologyPolicy,
) -> Vec<String> {
    let mut out = Vec::new();
    if policy.pin_alignment == PinAlignment::L3 {
        let domains: usize = host
            .cells
            .iter()
            .map(|c| c.facts.l3_domains.len().max(1))
            .sum();
        out.push(format!(
            "pin_alignment = l3: {domains} L3 domain(s) in {} cell(s){}",
            host.cells.len(),
            if inv.caches.iter().any(|c| c.level == 3) {
                ""
            } else {
                " (no L3 facts on this host: no effect)"
            }
        ));
    }
    if policy.prefer_closest_cells {
        out.push(format!(
            "prefer_closest_cells: {}",
            if host.distances_known() {
                "NUMA distances known for every pair of cells"
            } else {
                "some NUMA distances unknown: no effect (Nova's cell order)"
            }
        ));
    }
    if let Some(names) = &policy.dedicated_core_types {
        let types: Vec<String> = inv
            .core_types
            .iter()
            .map(|t| format!("{} ({})", t.name, t.cpus))
            .collect();
        out.push(format!(
            "dedicated_core_types = {}: {}",
            names.join(", "),
            if types.is_empty() {
                "this host has one kind of core: no effect".to_string()
            } else {
                format!("this host's types: {}", types.join(", "))
            }
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probes::cpu::LogicalCpu;
    use crate::probes::numa::{HugePages, NumaNode};

    /// Two nodes, 2 cores x 2 threads each: node 0 CPUs 0,1,4,5 (siblings (0,4),(1,5)), node 1
    /// CPUs 2,3,6,7; 4 GiB each, node 0 with 512 2M pages and 1 1G page.
    pub(crate) fn two_node_host() -> HostInventory {
        let mut inv: HostInventory = serde_json::from_value(serde_json::json!({
            "host": {"hostname": "h", "arch": "x86_64", "kernel": null, "os_release": null},
            "cpu": {"arch": "x86_64", "vendor": null, "model": null, "flags": [], "sockets": 2,
                    "cores": 4, "threads": 8, "cores_per_socket": 2, "threads_per_core": 2,
                    "smt": true, "online": "0-7", "offline": "", "present": "0-7",
                    "possible": "0-7", "cpus": []},
            "numa_nodes": [],
            "memory": {"total_mb": 8192, "free_mb": null, "available_mb": null,
                       "default_hugepage_size_kb": 2048, "hugepages": []},
            "disks": {"instances": null, "block_devices": []},
            "pci_devices": [],
            "warnings": []
        }))
        .expect("test inventory");
        inv.cpu.cpus = (0..8)
            .map(|id| LogicalCpu {
                id,
                package: Some(i64::from((id / 2) % 2)),
                die: None,
                cluster: None,
                core: Some(i64::from(id % 4)),
                thread_siblings: CpuSet::from_ids([id % 4, id % 4 + 4]),
                numa_node: Some((id / 2) % 2),
            })
            .collect();
        inv.numa_nodes = (0..2)
            .map(|n| NumaNode {
                id: n,
                cpus: CpuSet::from_ids([2 * n, 2 * n + 1, 2 * n + 4, 2 * n + 5]),
                memory_mb: Some(4096),
                memory_kb: Some(4096 * 1024),
                free_mb: None,
                distances: Default::default(),
                hugepages: if n == 0 {
                    vec![
                        HugePages {
                            size_kb: 2048,
                            total: 512,
                            free: 500,
                            surplus: None,
                        },
                        HugePages {
                            size_kb: 1_048_576,
                            total: 1,
                            free: 1,
                            surplus: None,
                        },
                    ]
                } else {
                    vec![HugePages {
                        size_kb: 2048,
                        total: 0,
                        free: 0,
                        surplus: None,
                    }]
                },
                has_cpu: true,
                has_memory: true,
            })
            .collect();
        inv
    }

    #[test]
    fn legacy_hosts_report_every_cpu_as_both_shared_and_dedicated() {
        let t = HostTopology::build(&two_node_host(), &Resources::default());
        assert!(t.legacy_cpus);
        let c0 = &t.cells[0];
        assert_eq!(c0.cpuset.to_string(), "0-1,4-5");
        assert_eq!(c0.pcpuset, c0.cpuset);
        assert_eq!(
            c0.siblings
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>(),
            ["0,4", "1,5"]
        );
        assert_eq!(c0.socket, Some(0));
        assert_eq!(t.cells[1].socket, Some(1));
        // 4 GiB less 1 GiB of 2M pages and one 1G page, in 4 KiB pages.
        assert_eq!(
            c0.pages[0],
            PagePool {
                size_kb: 4,
                total: 524_288,
                reserved: 0,
                kernel_free: None
            }
        );
        assert_eq!(c0.pages[1].total, 512);
        assert_eq!(c0.pages[2].size_kb, 1_048_576);
        assert_eq!(t.cells[1].pages.len(), 2);
    }

    #[test]
    fn configured_sets_split_cells_and_narrow_siblings() {
        let res = Resources {
            cpu_dedicated_set: Some(CpuSet::parse_list("1,5,3,7").unwrap()),
            cpu_shared_set: Some(CpuSet::parse_list("0,2").unwrap()),
            reserved_huge_pages: vec![ReservedPages {
                node: 0,
                size_kb: 2048,
                count: 12,
            }],
            ..Resources::default()
        };
        let t = HostTopology::build(&two_node_host(), &res);
        assert!(!t.legacy_cpus);
        let c0 = &t.cells[0];
        assert_eq!(c0.cpuset.to_string(), "0");
        assert_eq!(c0.pcpuset.to_string(), "1,5");
        // CPU 4 is in neither set: (0,4) becomes (0).
        assert_eq!(
            c0.siblings
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>(),
            ["0", "1,5"]
        );
        assert_eq!(c0.pages[1].reserved, 12);
        let only_dedicated = Resources {
            cpu_dedicated_set: Some(CpuSet::parse_list("0-7").unwrap()),
            ..Resources::default()
        };
        let t = HostTopology::build(&two_node_host(), &only_dedicated);
        assert!(t.cells[0].cpuset.is_empty());
        assert_eq!(t.cells[0].pcpuset.len(), 4);
    }

    #[test]
    fn config_naming_what_the_host_lacks_is_reported() {
        let res = Resources {
            cpu_dedicated_set: Some(CpuSet::parse_list("4-9").unwrap()),
            reserved_huge_pages: vec![
                ReservedPages {
                    node: 3,
                    size_kb: 2048,
                    count: 1,
                },
                ReservedPages {
                    node: 1,
                    size_kb: 1_048_576,
                    count: 1,
                },
                ReservedPages {
                    node: 0,
                    size_kb: 2048,
                    count: 513,
                },
            ],
            ..Resources::default()
        };
        let p = config_problems(&two_node_host(), &res);
        assert_eq!(p.len(), 4, "{p:?}");
        assert!(p[0].1.contains("CPUs 8-9 that are not online"), "{p:?}");
        assert!(p[1]
            .1
            .contains("node 3 is not a NUMA node of this host (nodes: 0, 1)"));
        assert!(p[2]
            .1
            .contains("node 1 has no 1048576 KiB pages (sizes: 4 KiB, 2048 KiB)"));
        assert!(p[3]
            .1
            .contains("reserves 513 pages of 2048 KiB on node 0, which has 512"));
    }

    #[test]
    fn base_page_size_comes_from_config_then_probe_then_arch() {
        let mut inv = two_node_host();
        assert_eq!(
            HostTopology::build(&inv, &Resources::default()).base_page_kb,
            4
        );
        inv.cpu.arch = Some("ppc64le".into());
        let t = HostTopology::build(&inv, &Resources::default());
        assert_eq!(t.base_page_kb, 64);
        assert_eq!(t.cells[1].pages[0].total, 4096 * 1024 / 64);
        inv.memory.base_page_kb = Some(16);
        assert_eq!(
            HostTopology::build(&inv, &Resources::default()).base_page_kb,
            16
        );
        let res = Resources {
            base_page_size_kb: Some(4),
            ..Resources::default()
        };
        assert_eq!(HostTopology::build(&inv, &res).base_page_kb, 4);
    }
}
