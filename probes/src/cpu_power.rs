//! CPU power probe: the cpufreq governor of the CPUs asked for (the dedicated CPUs whose power
//! Nova's `[libvirt] cpu_power_management` manages), and where offline CPUs are.
//!
//! In: `sys/devices/system/cpu/cpu<N>/cpufreq/scaling_governor` for the CPUs asked for, and the
//! `node<M>/cpu<N>` links of `sys/devices/system/node` for offline CPUs. Out: a
//! [`CpuGovernor`] per CPU asked for, and each offline CPU's node.
//!
//! A CPU without cpufreq (a guest, a kernel without a cpufreq driver) has no governor, and
//! that is not a warning: Nova reads it as `None` too. Reading the governor of a policy whose
//! CPUs are all offline fails with EBUSY in the kernel (cpufreq's `show()` on an inactive
//! policy): that CPU has no governor now ("offline cores can't have a governor", as Nova's
//! power management puts it), not a broken file. Only the CPUs asked for are read: a host
//! without power management pays nothing.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::cpulist::CpuSet;
use crate::read::{list_dir, read_sysfs, ReadFailure, SysDir, Warnings, SYSFS_CAP};
use crate::HostRoot;

/// One CPU's cpufreq governor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CpuGovernor {
    /// Kernel CPU number.
    pub cpu: u32,
    /// `scaling_governor` (`powersave`, `performance`...); null without cpufreq or while the
    /// CPU's policy is inactive (all its CPUs offline).
    pub governor: Option<String>,
    /// The CPU has a cpufreq policy (`cpu<N>/cpufreq`).
    pub cpufreq: bool,
}

/// What reading one `scaling_governor` gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GovernorRead {
    /// The governor's name.
    Governor(String),
    /// The file is there but the policy is inactive (EBUSY): no governor now.
    Inactive,
    /// No such file.
    Missing,
    /// Anything else, said as a warning.
    Unreadable(String),
}

/// Classifies the outcome of reading a `scaling_governor` file.
pub fn classify_governor(read: Result<Vec<u8>, ReadFailure>) -> GovernorRead {
    match read {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => {
                let name = text.trim_matches(|c: char| c.is_whitespace() || c == '\0');
                if name.is_empty() {
                    GovernorRead::Unreadable("file is empty".into())
                } else {
                    GovernorRead::Governor(name.to_string())
                }
            }
            Err(_) => GovernorRead::Unreadable(format!("file is {}", ReadFailure::NotText)),
        },
        Err(ReadFailure::Missing) => GovernorRead::Missing,
        Err(ReadFailure::Io(e)) if e.raw_os_error() == Some(nix::libc::EBUSY) => {
            GovernorRead::Inactive
        }
        Err(e) => GovernorRead::Unreadable(format!("file is {e}")),
    }
}

/// The governors of `cpus`, in CPU order.
pub fn probe_governors(root: &HostRoot, cpus: &CpuSet, w: &mut Warnings) -> Vec<CpuGovernor> {
    let cpu_dir = root.sys_path("devices/system/cpu");
    cpus.iter()
        .map(|cpu| {
            let freq = cpu_dir.join(format!("cpu{cpu}/cpufreq"));
            let path = freq.join("scaling_governor");
            let (governor, cpufreq) = match classify_governor(read_sysfs(&path, SYSFS_CAP)) {
                GovernorRead::Governor(g) => (Some(g), true),
                GovernorRead::Inactive => (None, true),
                GovernorRead::Missing => (None, has_dir(&freq)),
                GovernorRead::Unreadable(why) => {
                    w.push(&path, why);
                    (None, true)
                }
            };
            CpuGovernor {
                cpu,
                governor,
                cpufreq,
            }
        })
        .collect()
}

fn has_dir(path: &Path) -> bool {
    // A directory that exists but cannot be opened says so in a warning elsewhere; here it
    // only means "no governor to read".
    SysDir::open_unlisted(path, &mut Warnings::new()).is_some()
}

/// The NUMA node of each CPU of `offline`, from the `node<M>/cpu<N>` links the kernel keeps
/// while a CPU is offline (the node's `cpulist` lists online CPUs only). Nothing is read when
/// no CPU is offline. A CPU linked from two nodes goes to the lowest, with a warning.
pub fn offline_cpu_nodes(
    root: &HostRoot,
    offline: &CpuSet,
    w: &mut Warnings,
) -> BTreeMap<u32, u32> {
    let mut out = BTreeMap::new();
    if offline.is_empty() {
        return out;
    }
    let node_dir = root.sys_path("devices/system/node");
    let Some(entries) = list_dir(&node_dir, w) else {
        return out;
    };
    let mut nodes: Vec<u32> = entries
        .iter()
        .filter_map(|n| n.strip_prefix("node").and_then(|d| d.parse().ok()))
        .collect();
    nodes.sort_unstable();
    for node in nodes {
        let dir = node_dir.join(format!("node{node}"));
        for name in list_dir(&dir, w).unwrap_or_default() {
            let Some(cpu) = name.strip_prefix("cpu").and_then(|d| d.parse::<u32>().ok()) else {
                continue;
            };
            if !offline.contains(cpu) {
                continue;
            }
            match out.get(&cpu) {
                Some(first) => w.push(
                    &dir.join(&name),
                    format!("offline CPU {cpu} is linked from node {first} too: counted in node {first}"),
                ),
                None => {
                    out.insert(cpu, node);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    #[test]
    fn governor_reads_are_classified() {
        assert_eq!(
            classify_governor(Ok(b"powersave\n".to_vec())),
            GovernorRead::Governor("powersave".into())
        );
        assert_eq!(
            classify_governor(Err(ReadFailure::Io(io::Error::from_raw_os_error(
                nix::libc::EBUSY
            )))),
            GovernorRead::Inactive
        );
        assert_eq!(
            classify_governor(Err(ReadFailure::Missing)),
            GovernorRead::Missing
        );
        assert!(matches!(
            classify_governor(Err(ReadFailure::Io(io::Error::from_raw_os_error(
                nix::libc::EACCES
            )))),
            GovernorRead::Unreadable(_)
        ));
        assert!(matches!(
            classify_governor(Ok(b"\n".to_vec())),
            GovernorRead::Unreadable(_)
        ));
        assert!(matches!(
            classify_governor(Ok(vec![0xff, 0xfe])),
            GovernorRead::Unreadable(_)
        ));
    }
}
