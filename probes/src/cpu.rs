//! CPU probe: which logical CPUs exist and are online, how they group into threads, cores,
//! clusters, dies and packages, and what the processor is (architecture, vendor, model, flags).
//!
//! In: `sys/devices/system/cpu/{online,offline,present,possible}`,
//! `sys/devices/system/cpu/cpu<N>/topology/*`, `sys/devices/system/cpu/smt/active`,
//! `proc/cpuinfo`, `proc/sys/kernel/arch`. Out: [`CpuInfo`].
//!
//! Counts come from sysfs topology, never from `/proc/cpuinfo`, whose format differs by
//! architecture (x86, ARM64, POWER, s390x, RISC-V) and which is used only for names and flags
//! ([`crate::cpuinfo`]). Offline CPUs have no `topology/` directory; that is normal and not a
//! warning: each present offline CPU is listed with the NUMA node its `node<M>/cpu<N>` link
//! names ([`crate::cpu_power::offline_cpu_nodes`] finds it), as a core of its own.
//!
//! A core's `topology` files are read once for its threads, a package's and a die's id once
//! for its CPUs (`cpu_topology.rs`).

use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

use crate::cpu_power::CpuGovernor;
use crate::cpu_topology::{read_core, Core, SharedIds};
pub use crate::cpuinfo::{parse_cpuinfo, CpuinfoSummary};
use crate::cpulist::CpuSet;
use crate::read::{list_dir, read_optional, read_text, ReadFailure, SysDir, Warnings, PROCFS_CAP};
use crate::HostRoot;

/// What the host's processors are and how they are arranged.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct CpuInfo {
    /// Machine architecture as the kernel names it (`x86_64`, `aarch64`, `ppc64le`, `s390x`).
    pub arch: Option<String>,
    /// Vendor (`GenuineIntel`, `AuthenticAMD`, `HiSilicon`, `IBM`...).
    pub vendor: Option<String>,
    /// Model name; on ARM64, built from the implementer and part numbers.
    pub model: Option<String>,
    /// ARM64 only: `CPU implementer` and `CPU part` as written in `/proc/cpuinfo` (`0x48`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub implementer: Option<String>,
    /// ARM64 only: the `CPU part` number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub part: Option<String>,
    /// Feature flags from `/proc/cpuinfo` (`flags` on x86, `Features` on ARM64, `features` on
    /// s390x), sorted and unique.
    pub flags: Vec<String>,
    /// x86: physical address bits (`address sizes` in `/proc/cpuinfo`, as libvirt reads them
    /// for Nova's `cpu_info.maxphysaddr`); null elsewhere or when the line is missing.
    pub maxphysaddr_bits: Option<u32>,
    /// Distinct packages (sockets) among online CPUs.
    pub sockets: u32,
    /// Physical cores among online CPUs, all sockets together.
    pub cores: u32,
    /// Online logical CPUs.
    pub threads: u32,
    /// `cores / sockets` when every socket has the same number, else null.
    pub cores_per_socket: Option<u32>,
    /// `threads / cores` when every core has the same number, else null.
    pub threads_per_core: Option<u32>,
    /// Simultaneous multithreading active.
    pub smt: bool,
    /// Online CPUs (cpulist).
    pub online: CpuSet,
    /// Offline CPUs that are present (cpulist).
    pub offline: CpuSet,
    /// Present CPUs (cpulist).
    pub present: CpuSet,
    /// Possible CPUs (cpulist); often far more than present.
    pub possible: CpuSet,
    /// One entry per online CPU.
    pub cpus: Vec<LogicalCpu>,
    /// One entry per present CPU that is offline (none on most hosts; with Nova's CPU power
    /// management, the dedicated CPUs no guest runs on).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub offline_cpus: Vec<OfflineCpu>,
    /// The cpufreq governors of the CPUs [`crate::ProbeOptions::cpu_governors`] names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub governors: Vec<CpuGovernor>,
}

/// One present CPU that is offline. The kernel removes an offline CPU's `topology/` (package,
/// core, siblings) but keeps its node links, so only its node is known from the probe; the
/// daemon keeps what it saw while the CPU was online (`topology_cached`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct OfflineCpu {
    /// Kernel CPU number.
    pub id: u32,
    /// NUMA node (its `node<M>/cpu<N>` link); null when no node links it.
    pub numa_node: Option<u32>,
    /// `physical_package_id` when last seen online; null from a probe alone.
    pub package: Option<i64>,
    /// `core_id` when last seen online; null from a probe alone.
    pub core: Option<i64>,
    /// Its core's CPUs when last seen online; from a probe alone, itself only (libvirt's
    /// answer for a CPU without `thread_siblings_list`).
    pub thread_siblings: CpuSet,
    /// `package`, `core` and `thread_siblings` come from an earlier probe in which the CPU
    /// was online, not from this one.
    #[serde(default)]
    pub topology_cached: bool,
}

/// One online logical CPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct LogicalCpu {
    /// Kernel CPU number.
    pub id: u32,
    /// `physical_package_id` (socket); ids need not be small or dense.
    pub package: Option<i64>,
    /// `die_id`; `-1` on platforms without dies is kept as written.
    pub die: Option<i64>,
    /// `cluster_id` (ARM clusters, x86 L2 clusters).
    pub cluster: Option<i64>,
    /// `core_id`, unique only within a package (or cluster on some ARM systems).
    pub core: Option<i64>,
    /// CPUs sharing this CPU's core (`core_cpus_list`, else `thread_siblings_list`).
    pub thread_siblings: CpuSet,
    /// NUMA node holding this CPU, from the NUMA probe.
    pub numa_node: Option<u32>,
}

/// The kernel's CPU lists (`sys/devices/system/cpu/{online,offline,present,possible}`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuLists {
    /// Online CPUs.
    pub online: CpuSet,
    /// Offline CPUs.
    pub offline: CpuSet,
    /// Present CPUs.
    pub present: CpuSet,
    /// Possible CPUs.
    pub possible: CpuSet,
}

/// Reads the CPU lists. Missing lists are derived: online from the CPUs that have a topology
/// directory (offline CPUs have none), present and possible from the `cpu<N>` directories,
/// offline as present minus online. Offline is always limited to present CPUs.
pub fn read_cpu_lists(root: &HostRoot, w: &mut Warnings) -> CpuLists {
    let cpu_dir = root.sys_path("devices/system/cpu");
    let entries = list_dir(&cpu_dir, w).unwrap_or_default();
    let cpu_dirs: BTreeSet<u32> = entries
        .iter()
        .filter_map(|n| n.strip_prefix("cpu").and_then(|d| d.parse().ok()))
        .collect();
    if entries.is_empty() {
        w.push(&cpu_dir, "no CPU directory: CPU topology unknown");
    }
    let read_set = |name: &str, w: &mut Warnings| -> Option<CpuSet> {
        let path = cpu_dir.join(name);
        let raw = read_optional(&path, w)?;
        match CpuSet::parse_list(&raw) {
            Ok(s) => Some(s),
            Err(e) => {
                w.push(&path, format!("not a cpulist: {e}"));
                None
            }
        }
    };
    let possible = read_set("possible", w).unwrap_or_else(|| CpuSet::from_ids(cpu_dirs.clone()));
    let present = read_set("present", w).unwrap_or_else(|| CpuSet::from_ids(cpu_dirs.clone()));
    let online = match read_set("online", w) {
        Some(s) => s,
        None => {
            if !entries.is_empty() {
                w.push(
                    &cpu_dir.join("online"),
                    "online cpulist missing: taking CPUs that have a topology directory",
                );
            }
            CpuSet::from_ids(
                cpu_dirs
                    .iter()
                    .copied()
                    .filter(|n| cpu_dir.join(format!("cpu{n}/topology")).is_dir()),
            )
        }
    };
    // The kernel's `offline` is possible minus online; like lscpu, report only present CPUs
    // (a possible-but-absent CPU cannot be brought online).
    let offline = match read_set("offline", w) {
        Some(s) => s.intersection(&present),
        None => present.difference(&online),
    };
    CpuLists {
        online,
        offline,
        present,
        possible,
    }
}

/// Reads the CPU topology of the online CPUs in `lists`, and lists its offline ones.
/// `cpu_nodes` maps CPU ids to NUMA nodes (from [`crate::numa::probe_numa_nodes`] for online
/// CPUs, [`crate::cpu_power::offline_cpu_nodes`] for offline ones); pass an empty map when
/// unknown.
pub fn probe_cpu(
    root: &HostRoot,
    lists: CpuLists,
    cpu_nodes: &BTreeMap<u32, u32>,
    w: &mut Warnings,
) -> CpuInfo {
    let cpu_dir = root.sys_path("devices/system/cpu");
    let CpuLists {
        online,
        offline,
        present,
        possible,
    } = lists;

    // Opened once: each core's `cpu<N>/topology/<file>` is opened relative to it, without
    // opening the `topology` directory (when it cannot be opened, each `topology` is).
    let cpus_fd = SysDir::open_unlisted(&cpu_dir, &mut Warnings::new());
    let mut cpus: Vec<LogicalCpu> = Vec::with_capacity(online.len());
    // Threads of a core share its package, die, cluster and core ids: read them once per core.
    let mut core_of: BTreeMap<u32, usize> = BTreeMap::new();
    let mut shared = SharedIds::new(&online);
    for id in online.iter() {
        let numa_node = cpu_nodes.get(&id).copied();
        if let Some(&first) = core_of.get(&id) {
            let sibling = &cpus[first];
            let cpu = LogicalCpu {
                id,
                numa_node,
                ..sibling.clone()
            };
            cpus.push(cpu);
            continue;
        }
        let Some(Core {
            package,
            die,
            cluster,
            core,
            thread_siblings,
        }) = read_core(cpus_fd.as_ref(), &cpu_dir, id, &mut shared, w)
        else {
            cpus.push(LogicalCpu {
                id,
                package: None,
                die: None,
                cluster: None,
                core: None,
                thread_siblings: CpuSet::from_ids([id]),
                numa_node,
            });
            continue;
        };
        for sibling in thread_siblings
            .iter()
            .filter(|s| *s != id && online.contains(*s))
        {
            core_of.insert(sibling, cpus.len());
        }
        cpus.push(LogicalCpu {
            id,
            package,
            die,
            cluster,
            core,
            thread_siblings,
            numa_node,
        });
    }

    let offline_cpus = offline_cpus(&offline, cpu_nodes);
    let counts = count_topology(&cpus, &online);
    let smt = match read_optional(&cpu_dir.join("smt/active"), w).as_deref() {
        Some("1") => true,
        Some("0") => false,
        _ => counts.max_threads_per_core > 1,
    };

    let summary = read_cpuinfo(root, w);
    let arch = read_optional(&root.proc_path("sys/kernel/arch"), w)
        .filter(|a| !a.is_empty())
        .or_else(|| summary.arch_hint.clone());

    CpuInfo {
        arch,
        vendor: summary.vendor,
        model: summary.model,
        implementer: summary.implementer,
        part: summary.part,
        flags: summary.flags,
        maxphysaddr_bits: summary.maxphysaddr_bits,
        sockets: counts.sockets,
        cores: counts.cores,
        threads: online.len() as u32,
        cores_per_socket: counts.cores_per_socket,
        threads_per_core: counts.threads_per_core,
        smt,
        online,
        offline,
        present,
        possible,
        cpus,
        offline_cpus,
        governors: Vec::new(),
    }
}

/// `proc/cpuinfo`, parsed; an empty summary, with a warning, when it cannot be read.
fn read_cpuinfo(root: &HostRoot, w: &mut Warnings) -> CpuinfoSummary {
    let cpuinfo_path = root.proc_path("cpuinfo");
    match read_text(&cpuinfo_path, PROCFS_CAP) {
        Ok(text) => parse_cpuinfo(&text),
        Err(ReadFailure::Missing) => {
            w.push(
                &cpuinfo_path,
                "file is missing: CPU model and flags unknown",
            );
            CpuinfoSummary::default()
        }
        Err(e) => {
            w.push(
                &cpuinfo_path,
                format!("file is {e}: CPU model and flags unknown"),
            );
            CpuinfoSummary::default()
        }
    }
}

/// The offline CPUs as a probe knows them: their node, and each a core of its own (the kernel
/// removed their topology).
fn offline_cpus(offline: &CpuSet, cpu_nodes: &BTreeMap<u32, u32>) -> Vec<OfflineCpu> {
    offline
        .iter()
        .map(|id| OfflineCpu {
            id,
            numa_node: cpu_nodes.get(&id).copied(),
            package: None,
            core: None,
            thread_siblings: CpuSet::from_ids([id]),
            topology_cached: false,
        })
        .collect()
}

struct TopologyCounts {
    sockets: u32,
    cores: u32,
    cores_per_socket: Option<u32>,
    threads_per_core: Option<u32>,
    max_threads_per_core: usize,
}

/// Counts sockets and cores among online CPUs. A core is a distinct set of online thread
/// siblings: `core_id` alone repeats across clusters and dies on some machines.
fn count_topology(cpus: &[LogicalCpu], online: &CpuSet) -> TopologyCounts {
    let mut cores: BTreeMap<CpuSet, Option<i64>> = BTreeMap::new();
    let mut packages: BTreeSet<Option<i64>> = BTreeSet::new();
    for cpu in cpus {
        packages.insert(cpu.package);
        cores
            .entry(cpu.thread_siblings.intersection(online))
            .or_insert(cpu.package);
    }
    let sockets = packages.len() as u32;
    let mut per_socket: BTreeMap<Option<i64>, u32> = BTreeMap::new();
    for pkg in cores.values() {
        *per_socket.entry(*pkg).or_default() += 1;
    }
    let uniform = |mut it: Box<dyn Iterator<Item = u32> + '_>| -> Option<u32> {
        let first = it.next()?;
        it.all(|v| v == first).then_some(first)
    };
    let cores_per_socket = uniform(Box::new(per_socket.values().copied()));
    let threads_per_core = uniform(Box::new(cores.keys().map(|s| s.len() as u32)));
    let max_threads_per_core = cores.keys().map(|s| s.len()).max().unwrap_or(0);
    TopologyCounts {
        sockets,
        cores: cores.len() as u32,
        cores_per_socket,
        threads_per_core,
        max_threads_per_core,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(id: u32, package: i64, siblings: &str) -> LogicalCpu {
        LogicalCpu {
            id,
            package: Some(package),
            die: None,
            cluster: None,
            core: Some(0),
            thread_siblings: CpuSet::parse_list(siblings).unwrap(),
            numa_node: None,
        }
    }

    #[test]
    fn topology_files_are_read_through_the_cpu_directory_and_an_odd_topology_warns_once() {
        let dir = tempfile::tempdir().unwrap();
        let cpus = dir.path().join("sys/devices/system/cpu");
        std::fs::create_dir_all(cpus.join("cpu0/topology")).unwrap();
        std::fs::write(cpus.join("cpu0/topology/core_id"), "7\n").unwrap();
        std::fs::write(cpus.join("cpu0/topology/core_cpus_list"), "0\n").unwrap();
        std::fs::create_dir_all(cpus.join("cpu1")).unwrap();
        std::fs::write(cpus.join("cpu1/topology"), "x").unwrap();
        let lists = CpuLists {
            online: CpuSet::parse_list("0-2").unwrap(),
            ..CpuLists::default()
        };
        let mut w = Warnings::new();
        let root = HostRoot::under(dir.path());
        let info = probe_cpu(&root, lists, &BTreeMap::new(), &mut w);
        assert_eq!(info.cpus[0].core, Some(7));
        assert_eq!(info.cpus[1].core, None);
        // cpu1's topology is a file, cpu2 has none: the directory is named, not its files.
        let topo: Vec<(String, String)> = w
            .as_slice()
            .iter()
            .filter(|w| w.path.contains("/topology"))
            .map(|w| {
                (
                    w.path.rsplit("cpu/").next().unwrap().to_string(),
                    w.message.clone(),
                )
            })
            .collect();
        let expect = [
            ("cpu1/topology", "expected a directory, found a file"),
            ("cpu1/topology", "online CPU has no topology directory"),
            ("cpu2/topology", "online CPU has no topology directory"),
        ];
        let expect: Vec<(String, String)> = expect
            .iter()
            .map(|(p, m)| (p.to_string(), m.to_string()))
            .collect();
        assert_eq!(topo, expect);
    }

    /// Two packages (7 and 8) of two single-thread cores, CPUs 0-1 and 2-3 (CPU 4 offline):
    /// every CPU has its core, package and die ids; CPUs 0 and 2 have the lists, `lists(cpu)`.
    fn two_packages(dir: &std::path::Path, lists: impl Fn(u32) -> Option<&'static str>) {
        let cpus = dir.join("sys/devices/system/cpu");
        for cpu in 0..4u32 {
            let topo = cpus.join(format!("cpu{cpu}/topology"));
            std::fs::create_dir_all(&topo).unwrap();
            std::fs::write(topo.join("core_id"), format!("{cpu}\n")).unwrap();
            std::fs::write(topo.join("core_cpus_list"), format!("{cpu}\n")).unwrap();
            std::fs::write(
                topo.join("physical_package_id"),
                format!("{}\n", cpu / 2 + 7),
            )
            .unwrap();
            std::fs::write(topo.join("die_id"), "0\n").unwrap();
            if let Some(list) = lists(cpu) {
                std::fs::write(topo.join("package_cpus_list"), list).unwrap();
                std::fs::write(topo.join("die_cpus_list"), list).unwrap();
            }
        }
    }

    /// A CPU's (package, die, cluster) ids.
    type Ids = (Option<i64>, Option<i64>, Option<i64>);

    /// (package, die, cluster) per CPU, the number of sockets, and the files opened.
    fn ids_and_opens(dir: &std::path::Path) -> (Vec<Ids>, u32, u64) {
        let lists = CpuLists {
            online: CpuSet::parse_list("0-3").unwrap(),
            ..CpuLists::default()
        };
        let mut w = Warnings::new();
        let root = HostRoot::under(dir);
        let before = crate::confine::opens_attempted();
        let info = probe_cpu(&root, lists, &BTreeMap::new(), &mut w);
        let opens = crate::confine::opens_attempted() - before;
        let ids = info.cpus.iter().map(|c| (c.package, c.die, c.cluster));
        (ids.collect(), info.sockets, opens)
    }

    #[test]
    fn package_and_die_ids_are_read_once_per_group_and_an_absent_cluster_id_twice() {
        let dir = tempfile::tempdir().unwrap();
        two_packages(dir.path(), |cpu| {
            [Some("0-1,4\n"), None, Some("2-3\n"), None][cpu as usize]
        });
        let (ids, sockets, opens) = ids_and_opens(dir.path());
        let (p7, p8) = ((Some(7), Some(0), None), (Some(8), Some(0), None));
        assert_eq!(ids, [p7, p7, p8, p8]);
        assert_eq!(sockets, 2);
        // Per CPU core_id and core_cpus_list; on CPUs 0 and 2 the package's and the die's id,
        // list, and the id of the list's last CPU (1 and 3) to check the list; cluster_id
        // tried on CPUs 0 and 1; once: the cpu directory, smt/active (missing), cpuinfo and
        // kernel/arch (missing).
        assert_eq!(opens, 4 * 2 + 2 * 6 + 2 + 4);
    }

    #[test]
    fn a_package_list_naming_another_package_is_not_taken_and_ids_are_read_per_core() {
        // POWER: package_cpus_list is the NUMA node's CPUs, here both packages.
        let dir = tempfile::tempdir().unwrap();
        two_packages(dir.path(), |_| Some("0-3\n"));
        let (ids, sockets, _) = ids_and_opens(dir.path());
        let (p7, p8) = ((Some(7), Some(0), None), (Some(8), Some(0), None));
        assert_eq!(ids, [p7, p7, p8, p8]);
        assert_eq!(sockets, 2);
    }

    #[test]
    fn a_die_id_missing_on_one_cpu_only_or_unreadable_is_still_read_on_the_others() {
        let dir = tempfile::tempdir().unwrap();
        two_packages(dir.path(), |_| None);
        let cpus = dir.path().join("sys/devices/system/cpu");
        std::fs::remove_file(cpus.join("cpu0/topology/die_id")).unwrap();
        let (ids, _, _) = ids_and_opens(dir.path());
        let dies: Vec<Option<i64>> = ids.iter().map(|i| i.1).collect();
        assert_eq!(dies, [None, Some(0), Some(0), Some(0)]);
        // Unreadable (a directory) is not absent either.
        std::fs::create_dir(cpus.join("cpu0/topology/die_id")).unwrap();
        std::fs::remove_file(cpus.join("cpu1/topology/die_id")).unwrap();
        let (ids, _, _) = ids_and_opens(dir.path());
        let dies: Vec<Option<i64>> = ids.iter().map(|i| i.1).collect();
        assert_eq!(dies, [None, None, Some(0), Some(0)]);
    }

    #[test]
    fn cores_are_distinct_online_sibling_sets() {
        // Two sockets, two cores each, SMT2; core_id repeats (all 0) which must not matter.
        let cpus = vec![
            cpu(0, 0, "0,4"),
            cpu(4, 0, "0,4"),
            cpu(1, 0, "1,5"),
            cpu(5, 0, "1,5"),
            cpu(2, 1, "2,6"),
            cpu(6, 1, "2,6"),
            cpu(3, 1, "3"),
        ];
        let online = CpuSet::parse_list("0-6").unwrap();
        let c = count_topology(&cpus, &online);
        assert_eq!(c.sockets, 2);
        assert_eq!(c.cores, 4);
        assert_eq!(c.cores_per_socket, Some(2));
        assert_eq!(c.threads_per_core, None); // core 3 lost a sibling
        assert_eq!(c.max_threads_per_core, 2);
    }
}
