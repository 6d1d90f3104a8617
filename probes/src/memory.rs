//! Memory probe: host memory from `/proc/meminfo` and hugepage pools from
//! `sys/kernel/mm/hugepages`.
//!
//! In: a [`HostRoot`] (`meminfo` under procfs, `kernel/mm/hugepages` under sysfs) and the
//! [`Warnings`] collector. Out: [`MemoryInfo`] in MiB with every hugepage pool (the default size's
//! `/proc/meminfo` counts when sysfs lists none), and a warning for each missing or malformed
//! value.
//!
//! Per-node totals (NUMA probe) need not add up to `MemTotal`: ballooning and memory hot-plug in
//! guests make them differ, and both are reported as read.

use std::path::Path;

use serde::Serialize;

use crate::numa::{probe_hugepage_pools, HugePages};
use crate::read::{parse_int, read_text, ReadFailure, Warnings, PROCFS_CAP};
use crate::HostRoot;

/// Host memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct MemoryInfo {
    /// `MemTotal` in MiB (0 when unknown, with a warning).
    pub total_mb: u64,
    /// `MemFree` in MiB.
    pub free_mb: Option<u64>,
    /// `MemAvailable` in MiB (kernels since 3.14).
    pub available_mb: Option<u64>,
    /// `Hugepagesize`: the default hugepage size in KiB.
    pub default_hugepage_size_kb: Option<u64>,
    /// Hugepage pools of every supported size (host-wide).
    pub hugepages: Vec<HugePages>,
    /// The kernel's base (small) page size in KiB, from the first `KernelPageSize` of
    /// `/proc/self/smaps`; null when the root does not show it (a captured tree).
    #[serde(default)]
    pub base_page_kb: Option<u64>,
}

/// The `/proc/meminfo` values rtrack uses, in KiB (counts for HugePages_*).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Meminfo {
    /// `MemTotal`: usable RAM (physical less what the kernel reserves), KiB.
    pub mem_total_kb: Option<u64>,
    /// `MemFree`: RAM not used for anything, KiB.
    pub mem_free_kb: Option<u64>,
    /// `MemAvailable`: the kernel's estimate of RAM free for new work without swapping, KiB.
    pub mem_available_kb: Option<u64>,
    /// `Hugepagesize`: the default hugepage size, KiB.
    pub hugepagesize_kb: Option<u64>,
    /// HugePages_Total (pages of the default size).
    pub hugepages_total: Option<u64>,
    /// `HugePages_Free`: pages of the default size not yet allocated (a count).
    pub hugepages_free: Option<u64>,
}

/// Reads host memory.
pub fn probe_memory(root: &HostRoot, w: &mut Warnings) -> MemoryInfo {
    let path = root.proc_path("meminfo");
    let info = match read_text(&path, PROCFS_CAP) {
        Ok(text) => parse_meminfo(&text, &path, w),
        Err(ReadFailure::Missing) => {
            w.push(&path, "file is missing: host memory unknown");
            Meminfo::default()
        }
        Err(e) => {
            w.push(&path, format!("file is {e}: host memory unknown"));
            Meminfo::default()
        }
    };
    if info.mem_total_kb.is_none() && path.exists() {
        w.push(&path, "no MemTotal line: host memory unknown");
    }
    let mut hugepages = probe_hugepage_pools(&root.sys_path("kernel/mm/hugepages"), w);
    // No sysfs pools (old kernels, partial captures): fall back to the default size's counts.
    if hugepages.is_empty() {
        if let (Some(size_kb), Some(total), Some(free)) = (
            info.hugepagesize_kb,
            info.hugepages_total,
            info.hugepages_free,
        ) {
            hugepages.push(HugePages {
                size_kb,
                total,
                free,
                surplus: None,
            });
        }
    }
    MemoryInfo {
        total_mb: info.mem_total_kb.map_or(0, |kb| kb / 1024),
        free_mb: info.mem_free_kb.map(|kb| kb / 1024),
        available_mb: info.mem_available_kb.map(|kb| kb / 1024),
        default_hugepage_size_kb: info.hugepagesize_kb,
        hugepages,
        base_page_kb: probe_base_page_kb(root, w),
    }
}

/// The base page size: the `KernelPageSize` of the first mapping in `/proc/self/smaps` (the
/// reading process's, which runs on the probed kernel when the root is live). Absent in captured
/// trees, which is not worth a warning; a malformed value is.
fn probe_base_page_kb(root: &HostRoot, w: &mut Warnings) -> Option<u64> {
    let path = root.proc_path("self/smaps");
    let text = read_text(&path, PROCFS_CAP).ok()?;
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("KernelPageSize:"))?;
    let number = line.trim().trim_end_matches("kB").trim();
    parse_int::<u64>(number, &path, "a page size in kB for KernelPageSize", w).filter(|kb| {
        let ok = kb.is_power_of_two();
        if !ok {
            w.push(
                &path,
                format!("KernelPageSize {kb} kB is not a power of two: ignored"),
            );
        }
        ok
    })
}

/// Parses `/proc/meminfo`. Unknown keys are ignored; a known key with a bad value is a warning.
pub fn parse_meminfo(text: &str, path: &Path, w: &mut Warnings) -> Meminfo {
    let mut m = Meminfo::default();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let slot = match key.trim() {
            "MemTotal" => &mut m.mem_total_kb,
            "MemFree" => &mut m.mem_free_kb,
            "MemAvailable" => &mut m.mem_available_kb,
            "Hugepagesize" => &mut m.hugepagesize_kb,
            "HugePages_Total" => &mut m.hugepages_total,
            "HugePages_Free" => &mut m.hugepages_free,
            _ => continue,
        };
        if slot.is_some() {
            continue; // first occurrence wins
        }
        let number = value.trim().trim_end_matches("kB").trim();
        *slot = parse_int(number, path, &format!("a number for {}", key.trim()), w);
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_meminfo() {
        let mut w = Warnings::new();
        let m = parse_meminfo(
            "MemTotal:       24684084 kB\nMemFree:  100 kB\nMemAvailable:   20000000 kB\nHugePages_Total:       4\nHugePages_Free:        2\nHugepagesize:       2048 kB\n",
            Path::new("/proc/meminfo"),
            &mut w,
        );
        assert_eq!(m.mem_total_kb, Some(24684084));
        assert_eq!(m.mem_available_kb, Some(20000000));
        assert_eq!(m.hugepages_total, Some(4));
        assert_eq!(m.hugepagesize_kb, Some(2048));
        assert!(w.is_empty());
    }

    #[test]
    fn bad_value_names_the_key() {
        let mut w = Warnings::new();
        let m = parse_meminfo("MemTotal: -5 kB\n", Path::new("/proc/meminfo"), &mut w);
        assert_eq!(m.mem_total_kb, None);
        assert!(w.as_slice()[0].message.contains("MemTotal"));
    }
}
