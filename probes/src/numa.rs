//! NUMA probe: nodes, their CPUs, memory, distances and hugepages.
//!
//! In: `sys/devices/system/node/{online,node<N>/{cpulist,cpumap,meminfo,distance,hugepages/*}}`.
//! Out: [`NumaNode`]s sorted by id and a CPU-to-node map for the CPU probe.
//!
//! Node ids can be sparse (0, 8, 250-255 on POWER9 with GPUs) and node0 can be absent. CPU-less
//! nodes (HBM, PMem, CXL) and memory-less nodes exist. Broken firmware can make several nodes
//! claim the same CPUs: that is a warning and each CPU goes to the lowest node claiming it.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::cpulist::CpuSet;
use crate::read::{list_dir, parse_int, read_optional, Warnings};
use crate::HostRoot;

/// One NUMA node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct NumaNode {
    /// Node id (`node<id>`).
    pub id: u32,
    /// CPUs of the node (cpulist); empty for CPU-less nodes.
    pub cpus: CpuSet,
    /// `MemTotal` of the node in MiB; null when the node has no readable `meminfo`.
    pub memory_mb: Option<u64>,
    /// `MemTotal` of the node in KiB, as the kernel writes it (page pools are counted from it:
    /// MiB would lose up to 1023 KiB per node).
    #[serde(default)]
    pub memory_kb: Option<u64>,
    /// `MemFree` of the node in MiB.
    pub free_mb: Option<u64>,
    /// Distance to every node, by node id (from `distance`, in `node/online` order).
    pub distances: BTreeMap<u32, u32>,
    /// Hugepage pools of the node, by page size.
    pub hugepages: Vec<HugePages>,
    /// The node has CPUs.
    pub has_cpu: bool,
    /// The node has memory.
    pub has_memory: bool,
}

/// A hugepage pool of one page size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct HugePages {
    /// Page size in KiB (2048, 1048576...).
    pub size_kb: u64,
    /// Pages reserved (`nr_hugepages`).
    pub total: u64,
    /// Pages free (`free_hugepages`).
    pub free: u64,
    /// Surplus pages (`surplus_hugepages`), when the file exists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub surplus: Option<u64>,
}

/// Nodes plus the CPU-to-node map the other probes use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NumaTopology {
    /// Nodes sorted by id.
    pub nodes: Vec<NumaNode>,
    /// Which node each CPU belongs to.
    pub cpu_nodes: BTreeMap<u32, u32>,
}

impl NumaTopology {
    /// The single node whose CPUs contain every CPU of `cpus`, if exactly one does.
    pub fn node_holding(&self, cpus: &CpuSet) -> Option<u32> {
        if cpus.is_empty() {
            return None;
        }
        let mut found = None;
        for node in &self.nodes {
            if cpus.is_subset(&node.cpus) {
                if found.is_some() {
                    return None;
                }
                found = Some(node.id);
            }
        }
        found
    }
}

/// Reads the NUMA nodes. A node's CPUs are those of its mask that are online (`online`): the
/// kernel's mask can include possible-but-absent CPUs (POWER), and offline CPUs cannot run
/// guests. A host without `sys/devices/system/node` gets no nodes and a warning.
pub fn probe_numa_nodes(root: &HostRoot, online: &CpuSet, w: &mut Warnings) -> NumaTopology {
    let node_dir = root.sys_path("devices/system/node");
    let Some(entries) = list_dir(&node_dir, w) else {
        w.push(&node_dir, "directory is missing: NUMA topology unknown");
        return NumaTopology::default();
    };
    let mut ids: Vec<u32> = entries
        .iter()
        .filter_map(|n| n.strip_prefix("node").and_then(|d| d.parse().ok()))
        .collect();
    ids.sort_unstable();

    // `distance` lists one number per online node, in id order; some captures carry one per
    // possible node instead, so both orders are kept to match the count against.
    let node_list = |name: &str, w: &mut Warnings| -> Option<Vec<u32>> {
        let path = node_dir.join(name);
        let raw = read_optional(&path, w)?;
        match CpuSet::parse_list(&raw) {
            Ok(s) => Some(s.iter().collect()),
            Err(e) => {
                w.push(&path, format!("not a node list: {e}"));
                None
            }
        }
    };
    let orders = DistanceOrders {
        online: node_list("online", w).unwrap_or_else(|| ids.clone()),
        possible: node_list("possible", w),
    };

    let mut nodes = Vec::with_capacity(ids.len());
    for id in ids {
        let mut node = probe_node(&node_dir.join(format!("node{id}")), id, &orders, w);
        if !online.is_empty() {
            node.cpus = node.cpus.intersection(online);
            node.has_cpu = !node.cpus.is_empty();
        }
        nodes.push(node);
    }

    let mut cpu_nodes = BTreeMap::new();
    let mut overlaps: BTreeMap<u32, BTreeMap<u32, CpuSet>> = BTreeMap::new();
    for node in &nodes {
        for cpu in node.cpus.iter() {
            match cpu_nodes.get(&cpu) {
                Some(&owner) => overlaps
                    .entry(node.id)
                    .or_default()
                    .entry(owner)
                    .or_default()
                    .insert(cpu),
                None => {
                    cpu_nodes.insert(cpu, node.id);
                }
            }
        }
    }
    for (node, owners) in overlaps {
        for (owner, cpus) in owners {
            w.push(
                &node_dir.join(format!("node{node}")),
                format!(
                    "node {node} claims CPUs {cpus} already in node {owner} (broken firmware NUMA \
                     table?): they are counted in node {owner} only"
                ),
            );
        }
    }
    NumaTopology { nodes, cpu_nodes }
}

/// Node orders a `distance` file can follow.
struct DistanceOrders {
    online: Vec<u32>,
    possible: Option<Vec<u32>>,
}

fn probe_node(dir: &Path, id: u32, orders: &DistanceOrders, w: &mut Warnings) -> NumaNode {
    let cpus = read_node_cpus(dir, w);

    let (memory_kb, free_kb) = match read_optional(&dir.join("meminfo"), w) {
        Some(text) => parse_node_meminfo(&text, id, &dir.join("meminfo"), w),
        None => {
            w.push(&dir.join("meminfo"), "file is missing: node memory unknown");
            (None, None)
        }
    };

    let mut distances = BTreeMap::new();
    if let Some(raw) = read_optional(&dir.join("distance"), w) {
        let path = dir.join("distance");
        let values: Vec<Option<u32>> = raw
            .split_whitespace()
            .map(|v| parse_int(v, &path, "a distance (integer)", w))
            .collect();
        let order = if values.len() == orders.online.len() {
            Some(&orders.online)
        } else {
            orders.possible.as_ref().filter(|p| p.len() == values.len())
        };
        match order {
            Some(order) => {
                for (other, d) in order.iter().zip(values) {
                    if let Some(d) = d {
                        distances.insert(*other, d);
                    }
                }
            }
            None => w.push(
                &path,
                format!(
                    "{} distances for {} online nodes: distances ignored",
                    values.len(),
                    orders.online.len()
                ),
            ),
        }
    }

    let hugepages = probe_hugepage_pools(&dir.join("hugepages"), w);
    let has_memory = memory_kb.is_some_and(|kb| kb > 0);
    NumaNode {
        id,
        has_cpu: !cpus.is_empty(),
        cpus,
        memory_mb: memory_kb.map(|kb| kb / 1024),
        memory_kb,
        free_mb: free_kb.map(|kb| kb / 1024),
        distances,
        hugepages,
        has_memory,
    }
}

/// `cpulist`, else `cpumap` (CPU-less nodes on some kernels carry only the map).
fn read_node_cpus(dir: &Path, w: &mut Warnings) -> CpuSet {
    let list_path = dir.join("cpulist");
    if let Some(raw) = read_optional(&list_path, w) {
        match CpuSet::parse_list(&raw) {
            Ok(s) => return s,
            Err(e) => w.push(&list_path, format!("not a cpulist: {e}; trying cpumap")),
        }
    }
    let map_path = dir.join("cpumap");
    match read_optional(&map_path, w) {
        Some(raw) => match CpuSet::parse_map(&raw) {
            Ok(s) => s,
            Err(e) => {
                w.push(&map_path, format!("not a cpumap: {e}"));
                CpuSet::new()
            }
        },
        None => {
            w.push(
                dir,
                "node has neither cpulist nor cpumap: its CPUs are unknown",
            );
            CpuSet::new()
        }
    }
}

/// Parses a node `meminfo` (`Node 0 MemTotal:  47925628 kB`), returning MemTotal and MemFree in KiB.
pub fn parse_node_meminfo(
    text: &str,
    id: u32,
    path: &Path,
    w: &mut Warnings,
) -> (Option<u64>, Option<u64>) {
    let mut total = None;
    let mut free = None;
    let prefix = format!("Node {id} ");
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(&prefix) else {
            continue;
        };
        let Some((key, value)) = rest.split_once(':') else {
            continue;
        };
        let slot = match key.trim() {
            "MemTotal" => &mut total,
            "MemFree" => &mut free,
            _ => continue,
        };
        let number = value.trim().trim_end_matches("kB").trim();
        *slot = parse_int(number, path, &format!("a size in kB for {}", key.trim()), w);
    }
    if total.is_none() {
        w.push(
            path,
            format!("no \"Node {id} MemTotal\" line: node memory unknown"),
        );
    }
    (total, free)
}

/// Reads `hugepages-<size>kB/{nr,free,surplus}_hugepages` under `dir` (a node's `hugepages`
/// directory or `sys/kernel/mm/hugepages`). Missing directory: no pools.
pub fn probe_hugepage_pools(dir: &Path, w: &mut Warnings) -> Vec<HugePages> {
    let Some(entries) = list_dir(dir, w) else {
        return Vec::new();
    };
    let mut pools = Vec::new();
    for name in entries {
        let Some(size) = name
            .strip_prefix("hugepages-")
            .and_then(|s| s.strip_suffix("kB"))
        else {
            continue;
        };
        let pool_dir = dir.join(&name);
        let Some(size_kb) = parse_int::<u64>(size, &pool_dir, "a page size in kB", w) else {
            continue;
        };
        let count = |file: &str, w: &mut Warnings| -> Option<u64> {
            let path = pool_dir.join(file);
            let raw = read_optional(&path, w)?;
            parse_int(&raw, &path, "a page count", w)
        };
        let total = count("nr_hugepages", w);
        let free = count("free_hugepages", w);
        let surplus = count("surplus_hugepages", w);
        match (total, free) {
            (Some(total), Some(free)) => pools.push(HugePages {
                size_kb,
                total,
                free,
                surplus,
            }),
            _ => w.push(
                &pool_dir,
                "nr_hugepages or free_hugepages unreadable: pool skipped",
            ),
        }
    }
    pools.sort_by_key(|p| p.size_kb);
    pools
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn write(dir: &Path, rel: &str, content: &str) {
        let p = dir.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
    }

    #[test]
    fn node_meminfo_is_parsed_in_kib() {
        let mut w = Warnings::new();
        let (t, f) = parse_node_meminfo(
            "Node 1 MemTotal:       47925628 kB\nNode 1 MemFree:        24465948 kB\n",
            1,
            Path::new("/x"),
            &mut w,
        );
        assert_eq!((t, f), (Some(47925628), Some(24465948)));
        assert!(w.is_empty());
        let (t, _) = parse_node_meminfo("Node 1 MemTotal: lots kB\n", 1, Path::new("/x"), &mut w);
        assert_eq!(t, None);
        assert!(w.as_slice()[0].message.contains("\"lots\""));
    }

    #[test]
    fn sparse_nodes_cpumap_fallback_and_overlap_warning() {
        let dir = tempfile::tempdir().unwrap();
        let n = dir.path().join("sys/devices/system/node");
        write(&n, "online", "0,8\n");
        write(&n, "node0/cpulist", "0-3\n");
        write(
            &n,
            "node0/meminfo",
            "Node 0 MemTotal: 2048 kB\nNode 0 MemFree: 1024 kB\n",
        );
        write(&n, "node0/distance", "10 40\n");
        write(&n, "node8/cpumap", "00000000,0000001c\n"); // CPUs 2-4: overlaps node0 on 2-3
        write(&n, "node8/meminfo", "Node 8 MemTotal: 0 kB\n");
        write(&n, "node8/distance", "40 10\n");
        write(&n, "node8/hugepages/hugepages-2048kB/nr_hugepages", "4\n");
        write(&n, "node8/hugepages/hugepages-2048kB/free_hugepages", "3\n");
        let mut w = Warnings::new();
        let topo = probe_numa_nodes(
            &HostRoot::under(dir.path()),
            &CpuSet::parse_list("0-4").unwrap(),
            &mut w,
        );
        assert_eq!(topo.nodes.len(), 2);
        let n8 = &topo.nodes[1];
        assert_eq!(n8.id, 8);
        assert_eq!(n8.cpus.to_string(), "2-4");
        assert_eq!(n8.distances, BTreeMap::from([(0, 40), (8, 10)]));
        assert!(!n8.has_memory);
        assert_eq!(n8.hugepages[0].total, 4);
        assert_eq!(topo.cpu_nodes.get(&3), Some(&0));
        assert_eq!(topo.cpu_nodes.get(&4), Some(&8));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w.as_slice()[0]
            .message
            .contains("CPUs 2-3 already in node 0"));
        assert_eq!(
            topo.node_holding(&CpuSet::parse_list("0-1").unwrap()),
            Some(0)
        );
        assert_eq!(topo.node_holding(&CpuSet::parse_list("2-3").unwrap()), None);
    }

    #[test]
    fn missing_node_directory_is_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = Warnings::new();
        let topo = probe_numa_nodes(&HostRoot::under(dir.path()), &CpuSet::new(), &mut w);
        assert!(topo.nodes.is_empty());
        assert_eq!(w.len(), 1);
    }
}
