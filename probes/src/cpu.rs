//! CPU probe: which logical CPUs exist and are online, how they group into threads, cores,
//! clusters, dies and packages, and what the processor is (architecture, vendor, model, flags).
//!
//! In: `sys/devices/system/cpu/{online,offline,present,possible}`,
//! `sys/devices/system/cpu/cpu<N>/topology/*`, `sys/devices/system/cpu/smt/active`,
//! `proc/cpuinfo`, `proc/sys/kernel/arch`. Out: [`CpuInfo`].
//!
//! Counts come from sysfs topology, never from `/proc/cpuinfo`, whose format differs by
//! architecture (x86, ARM64, POWER, s390x, RISC-V) and which is used only for names and flags.
//! Offline CPUs have no `topology/` directory; that is normal and not a warning.

use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

use crate::cpulist::CpuSet;
use crate::read::{
    list_dir, parse_int, read_optional, read_text, ReadFailure, SysDir, Warnings, PROCFS_CAP,
};
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

/// Reads the CPU topology of the online CPUs in `lists`. `cpu_nodes` maps CPU ids to NUMA nodes
/// (from [`crate::numa::probe_numa_nodes`]); pass an empty map when unknown.
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

    let mut cpus: Vec<LogicalCpu> = Vec::with_capacity(online.len());
    // Threads of a core share its package, die, cluster and core ids: read them once per core.
    let mut core_of: BTreeMap<u32, usize> = BTreeMap::new();
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
        let topo_path = cpu_dir.join(format!("cpu{id}/topology"));
        let Some(topo) = SysDir::open_unlisted(&topo_path, w) else {
            w.push(&topo_path, "online CPU has no topology directory");
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
        let int = |name: &str, w: &mut Warnings| -> Option<i64> {
            let raw = topo.read_optional(name, w)?;
            parse_int(&raw, &topo.join(name), "an integer id", w)
        };
        let package = int("physical_package_id", w);
        let die = int("die_id", w);
        let cluster = int("cluster_id", w);
        let core = int("core_id", w);
        let thread_siblings = read_siblings(&topo, id, w);
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

    let counts = count_topology(&cpus, &online);
    let smt = match read_optional(&cpu_dir.join("smt/active"), w).as_deref() {
        Some("1") => true,
        Some("0") => false,
        _ => counts.max_threads_per_core > 1,
    };

    let cpuinfo_path = root.proc_path("cpuinfo");
    let summary = match read_text(&cpuinfo_path, PROCFS_CAP) {
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
    };
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
    }
}

/// The CPUs sharing a core with `id`: `core_cpus_list` (kernels since 5.7), else
/// `thread_siblings_list`, else the mask forms of either (some captures carry only masks).
fn read_siblings(topo: &SysDir, id: u32, w: &mut Warnings) -> CpuSet {
    type Parser = fn(&str) -> Result<CpuSet, String>;
    let sources: [(&str, Parser); 4] = [
        ("core_cpus_list", CpuSet::parse_list),
        ("thread_siblings_list", CpuSet::parse_list),
        ("core_cpus", CpuSet::parse_map),
        ("thread_siblings", CpuSet::parse_map),
    ];
    for (name, parse) in sources {
        let path = topo.join(name);
        let Some(raw) = topo.read_optional(name, w) else {
            continue;
        };
        match parse(&raw) {
            Ok(mut s) => {
                if !s.contains(id) {
                    w.push(
                        &path,
                        format!("siblings {s} do not include CPU {id} itself"),
                    );
                    s.insert(id);
                }
                return s;
            }
            Err(e) => w.push(&path, format!("not a CPU set: {e}")),
        }
    }
    CpuSet::from_ids([id])
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

/// The parts of `/proc/cpuinfo` rtrack uses.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CpuinfoSummary {
    /// Architecture guessed from the format, used when `proc/sys/kernel/arch` is absent.
    pub arch_hint: Option<String>,
    /// Vendor name.
    pub vendor: Option<String>,
    /// Model name.
    pub model: Option<String>,
    /// ARM64 implementer number.
    pub implementer: Option<String>,
    /// ARM64 part number.
    pub part: Option<String>,
    /// Feature flags, sorted and unique.
    pub flags: Vec<String>,
    /// x86: the physical address bits of the first `address sizes` line.
    pub maxphysaddr_bits: Option<u32>,
}

/// The physical address bits of an `address sizes` value (`46 bits physical, 57 bits
/// virtual`): the leading decimal number, as libvirt reads it.
fn address_bits(value: &str) -> Option<u32> {
    let digits: String = value
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok().filter(|b| (1..=64).contains(b))
}

/// Parses `/proc/cpuinfo` in any of the kernel's formats. Only the first processor's values are
/// used: hosts with mixed processors (big.LITTLE) report the first.
pub fn parse_cpuinfo(text: &str) -> CpuinfoSummary {
    let mut first: BTreeMap<String, String> = BTreeMap::new();
    let mut s390_machine: Option<String> = None;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let key = key.trim();
        let value = value.trim();
        // s390x: "processor 0: version = FF,  identification = 0133E8,  machine = 3906"
        if key.starts_with("processor ") {
            if s390_machine.is_none() {
                s390_machine = value
                    .split(',')
                    .filter_map(|kv| kv.split_once('='))
                    .find(|(k, _)| k.trim() == "machine")
                    .map(|(_, v)| v.trim().to_string());
            }
            continue;
        }
        first
            .entry(key.to_string())
            .or_insert_with(|| value.to_string());
    }
    let get = |k: &str| first.get(k).filter(|v| !v.is_empty()).cloned();
    let split_flags = |v: Option<String>| -> Vec<String> {
        let set: BTreeSet<String> = v
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_string)
            .collect();
        set.into_iter().collect()
    };

    let mut out = CpuinfoSummary::default();
    if let Some(implementer) = get("CPU implementer") {
        // ARM (64- or 32-bit).
        let part = get("CPU part");
        let arch_level = get("CPU architecture");
        out.arch_hint = Some(match arch_level.as_deref() {
            Some("8") | Some("AArch64") | None => "aarch64".to_string(),
            Some(_) => "armv7l".to_string(),
        });
        let (vendor, model) = arm_names(&implementer, part.as_deref());
        out.vendor = Some(vendor);
        out.model = get("model name").or(model);
        out.flags = split_flags(get("Features"));
        out.implementer = Some(implementer);
        out.part = part;
    } else if get("vendor_id").as_deref() == Some("IBM/S390") {
        out.arch_hint = Some("s390x".to_string());
        out.vendor = Some("IBM".to_string());
        out.model = Some(match s390_machine {
            Some(m) => format!("IBM/S390 machine {m}"),
            None => "IBM/S390".to_string(),
        });
        out.flags = split_flags(get("features"));
    } else if let Some(cpu) = get("cpu").filter(|_| first.contains_key("timebase")) {
        // POWER: "cpu : POWER9, altivec supported"; no flags line.
        out.arch_hint = Some("ppc64le".to_string());
        out.vendor = Some("IBM".to_string());
        out.model = Some(cpu);
    } else if let Some(isa) = get("isa") {
        out.arch_hint = Some(
            if isa.starts_with("rv32") {
                "riscv32"
            } else {
                "riscv64"
            }
            .to_string(),
        );
        out.vendor = get("mvendorid");
        out.model = get("uarch").or(Some(isa));
    } else {
        // x86 and anything else that follows its layout.
        out.flags = split_flags(get("flags"));
        if first.contains_key("flags") || first.contains_key("vendor_id") {
            let long_mode = out.flags.iter().any(|f| f == "lm");
            out.arch_hint = Some(if long_mode { "x86_64" } else { "i686" }.to_string());
        }
        out.vendor = get("vendor_id");
        out.model = get("model name");
        out.maxphysaddr_bits = first.get("address sizes").and_then(|v| address_bits(v));
    }
    out
}

/// Names for ARM implementer/part numbers. The vendor list is the architected one; the part table
/// covers server cores and is extended when a machine shows an unknown one (the raw numbers are
/// always reported too).
fn arm_names(implementer: &str, part: Option<&str>) -> (String, Option<String>) {
    let imp = parse_arm_number(implementer);
    let vendor = match imp {
        Some(0x41) => "ARM",
        Some(0x42) => "Broadcom",
        Some(0x43) => "Cavium",
        Some(0x46) => "Fujitsu",
        Some(0x48) => "HiSilicon",
        Some(0x4e) => "NVIDIA",
        Some(0x50) => "APM",
        Some(0x51) => "Qualcomm",
        Some(0x53) => "Samsung",
        Some(0x61) => "Apple",
        Some(0x6d) => "Microsoft",
        Some(0xc0) => "Ampere",
        _ => "",
    };
    let vendor = if vendor.is_empty() {
        format!("implementer {implementer}")
    } else {
        vendor.to_string()
    };
    let part_num = part.and_then(parse_arm_number);
    let model = match (imp, part_num) {
        (Some(0x41), Some(0xd03)) => Some("Cortex-A53"),
        (Some(0x41), Some(0xd07)) => Some("Cortex-A57"),
        (Some(0x41), Some(0xd08)) => Some("Cortex-A72"),
        (Some(0x41), Some(0xd0b)) => Some("Cortex-A76"),
        (Some(0x41), Some(0xd0c)) => Some("Neoverse-N1"),
        (Some(0x41), Some(0xd40)) => Some("Neoverse-V1"),
        (Some(0x41), Some(0xd49)) => Some("Neoverse-N2"),
        (Some(0x41), Some(0xd4f)) => Some("Neoverse-V2"),
        (Some(0x41), Some(0xd8e)) => Some("Neoverse-N3"),
        (Some(0x43), Some(0x0af)) => Some("ThunderX2 99xx"),
        (Some(0x46), Some(0x001)) => Some("A64FX"),
        (Some(0x48), Some(0xd01)) => Some("Kunpeng-920"),
        (Some(0x50), Some(0x000)) => Some("X-Gene"),
        (Some(0xc0), Some(0xac3)) => Some("Ampere-1"),
        (Some(0xc0), Some(0xac4)) => Some("Ampere-1a"),
        _ => None,
    };
    let model = match (model, part) {
        (Some(m), _) => Some(m.to_string()),
        (None, Some(p)) => Some(format!("{vendor} part {p}")),
        (None, None) => None,
    };
    (vendor, model)
}

fn parse_arm_number(s: &str) -> Option<u32> {
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x86_address_sizes() {
        let s = parse_cpuinfo(
            "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu lm\naddress sizes\t: 46 bits physical, 57 bits virtual\n\nprocessor\t: 1\naddress sizes\t: 39 bits physical, 48 bits virtual\n",
        );
        assert_eq!(
            s.maxphysaddr_bits,
            Some(46),
            "the first processor's, as libvirt"
        );
        let s = parse_cpuinfo("processor\t: 0\nflags\t\t: lm\naddress sizes\t: lots\n");
        assert_eq!(s.maxphysaddr_bits, None);
        let s = parse_cpuinfo(
            "CPU implementer\t: 0x41\nCPU part\t: 0xd0c\naddress sizes\t: 48 bits physical\n",
        );
        assert_eq!(s.maxphysaddr_bits, None, "x86 only, as libvirt");
    }

    #[test]
    fn x86_cpuinfo() {
        let s = parse_cpuinfo(
            "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R)\nflags\t\t: fpu lm avx2 fpu\n\nprocessor\t: 1\nvendor_id\t: Other\n",
        );
        assert_eq!(s.arch_hint.as_deref(), Some("x86_64"));
        assert_eq!(s.vendor.as_deref(), Some("GenuineIntel"));
        assert_eq!(s.model.as_deref(), Some("Intel(R) Xeon(R)"));
        assert_eq!(s.flags, vec!["avx2", "fpu", "lm"]);
    }

    #[test]
    fn arm64_cpuinfo_has_no_model_name() {
        let s = parse_cpuinfo(
            "processor\t: 0\nFeatures\t: fp asimd\nCPU implementer\t: 0x48\nCPU architecture: 8\nCPU variant\t: 0x1\nCPU part\t: 0xd01\n",
        );
        assert_eq!(s.arch_hint.as_deref(), Some("aarch64"));
        assert_eq!(s.vendor.as_deref(), Some("HiSilicon"));
        assert_eq!(s.model.as_deref(), Some("Kunpeng-920"));
        assert_eq!(s.implementer.as_deref(), Some("0x48"));
        assert_eq!(s.flags, vec!["asimd", "fp"]);
    }

    #[test]
    fn arm64_unknown_part_keeps_the_numbers() {
        let s = parse_cpuinfo("CPU implementer\t: 0x99\nCPU architecture: 8\nCPU part\t: 0x123\n");
        assert_eq!(s.vendor.as_deref(), Some("implementer 0x99"));
        assert_eq!(s.model.as_deref(), Some("implementer 0x99 part 0x123"));
    }

    #[test]
    fn power_cpuinfo() {
        let s = parse_cpuinfo(
            "processor\t: 0\ncpu\t\t: POWER9, altivec supported\nclock\t\t: 3450.000000MHz\n\ntimebase\t: 512000000\nplatform\t: PowerNV\n",
        );
        assert_eq!(s.arch_hint.as_deref(), Some("ppc64le"));
        assert_eq!(s.model.as_deref(), Some("POWER9, altivec supported"));
        assert_eq!(s.vendor.as_deref(), Some("IBM"));
        assert!(s.flags.is_empty());
    }

    #[test]
    fn s390x_cpuinfo() {
        let s = parse_cpuinfo(
            "vendor_id       : IBM/S390\n# processors    : 2\nbogomips per cpu: 3033.00\nfeatures\t: esan3 zarch stfle msa\nprocessor 0: version = FF,  identification = 0133E8,  machine = 3906\nprocessor 1: version = FF,  identification = 0133E8,  machine = 3906\n",
        );
        assert_eq!(s.arch_hint.as_deref(), Some("s390x"));
        assert_eq!(s.model.as_deref(), Some("IBM/S390 machine 3906"));
        assert_eq!(s.flags, vec!["esan3", "msa", "stfle", "zarch"]);
    }

    #[test]
    fn riscv_cpuinfo() {
        let s = parse_cpuinfo("processor\t: 0\nhart\t\t: 1\nisa\t\t: rv64imafdc\nmmu\t\t: sv39\nuarch\t\t: sifive,u74-mc\n");
        assert_eq!(s.arch_hint.as_deref(), Some("riscv64"));
        assert_eq!(s.model.as_deref(), Some("sifive,u74-mc"));
    }

    #[test]
    fn garbage_cpuinfo_gives_nothing_and_no_panic() {
        let s = parse_cpuinfo("\0\0\0:::\n:\nflags");
        assert_eq!(s.model, None);
    }

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
