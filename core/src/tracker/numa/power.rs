//! CPU power management (Nova's `[libvirt] cpu_power_management`): what the CPU sets require
//! of the host, the topology of offline CPUs, and the pinned CPUs that are offline.
//!
//! In: the probe ([`HostInventory`]), `[resources]`, the placements that count with their
//! instances' states. Out: configuration problems ([`cpu_set_problems`]), an inventory whose
//! offline CPUs keep the topology an earlier probe saw ([`carry_offline_topology`]), each
//! CPU's power state ([`CpuPower`]) and the [`OfflinePin`]s.
//!
//! - Option off: every CPU of `cpu_dedicated_set` and `cpu_shared_set` must be online (as
//!   today). On: dedicated CPUs must exist (`_get_pcpu_available`: ids below libvirt's CPU
//!   count), online or not; shared ones must still be online; and the strategy must be able
//!   to manage them (`validate_all_dedicated_cpus`: with `cpu_state` the online dedicated CPUs
//!   but CPU 0 share one governor, with `governor` all of them are online, and all but CPU 0
//!   have cpufreq, which Nova writes to).
//! - The kernel removes an offline CPU's topology. Nova reads it once at start after powering
//!   every dedicated CPU up; rtrack powers nothing, so an offline CPU is a core of its own
//!   unless an earlier probe of this process saw it online, whose topology is kept from audit
//!   to audit (docs/differences.md).
//! - Nova powers down the pinned CPUs of a guest it stops and up those of one it starts: a
//!   pinned CPU offline is a problem only while its guest runs (with the option off, always).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::config::{PowerStrategy, Resources};
use crate::inventory::resources::available_cpus;
use crate::probes::cpu::OfflineCpu;
use crate::probes::{CpuSet, HostInventory};

/// What the CPU sets and the power settings require that the host does not give, one
/// `(key, why)` per problem.
pub fn cpu_set_problems(inv: &HostInventory, res: &Resources) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let online = &inv.cpu.online;
    if let Some(set) = &res.vcpu_pin_set {
        let missing = set.difference(online);
        if !missing.is_empty() {
            out.push((
                "resources.vcpu_pin_set".to_string(),
                format!("names CPUs {missing} that are not online on this host (online: {online})"),
            ));
        }
    }
    if let Some(set) = &res.cpu_shared_set {
        let missing = set.difference(online);
        if !missing.is_empty() {
            out.push((
                "resources.cpu_shared_set".to_string(),
                format!(
                    "names CPUs {missing} that are not online on this host (online: {online}); use the two sets with online CPUs only"
                ),
            ));
        }
    }
    let Some(dedicated) = &res.cpu_dedicated_set else {
        return out;
    };
    let key = "resources.cpu_dedicated_set".to_string();
    let Some(pm) = &res.cpu_power_management else {
        let missing = dedicated.difference(online);
        if !missing.is_empty() {
            out.push((key, format!(
                "names CPUs {missing} that are not online on this host (online: {online}); use the two sets with online CPUs only, or set cpu_power_management = true if Nova powers them down"
            )));
        }
        return out;
    };
    let available = available_cpus(inv);
    let missing = dedicated.difference(&available);
    if !missing.is_empty() {
        out.push((key, format!(
            "names CPUs {missing} that do not exist on this host (CPUs {available}; with cpu_power_management offline ones count)"
        )));
    }
    let managed = CpuSet::from_ids(dedicated.iter().filter(|c| *c != 0));
    let key = "resources.cpu_power_management_strategy".to_string();
    match pm.strategy {
        PowerStrategy::CpuState => {
            // The governors of the online managed CPUs (those the probe was asked for).
            let mut by_governor: BTreeMap<Option<&str>, BTreeSet<u32>> = BTreeMap::new();
            for g in &inv.cpu.governors {
                if managed.contains(g.cpu) && online.contains(g.cpu) {
                    by_governor
                        .entry(g.governor.as_deref())
                        .or_default()
                        .insert(g.cpu);
                }
            }
            if by_governor.len() > 1 {
                let runs: Vec<String> = by_governor
                    .iter()
                    .map(|(g, cpus)| {
                        format!(
                            "{} on CPUs {}",
                            g.unwrap_or("no governor"),
                            CpuSet::from_ids(cpus.iter().copied())
                        )
                    })
                    .collect();
                out.push((key, format!(
                    "cpu_state: all the cores need to have the same governor strategy before modifying the CPU states (Nova's check), and the online dedicated CPUs run {}; give them one governor or reboot the host",
                    runs.join(", ")
                )));
            }
        }
        PowerStrategy::Governor => {
            let offline = dedicated.difference(online);
            if !offline.is_empty() {
                out.push((key.clone(), format!(
                    "governor: all the cores need to be online before modifying the governor strategy (Nova's check), and dedicated CPUs {offline} are offline"
                )));
            }
            let without: Vec<u32> = inv
                .cpu
                .governors
                .iter()
                .filter(|g| managed.contains(g.cpu) && online.contains(g.cpu) && !g.cpufreq)
                .map(|g| g.cpu)
                .collect();
            if !without.is_empty() {
                out.push((key, format!(
                    "governor: dedicated CPUs {} have no cpufreq (cpu<N>/cpufreq/scaling_governor), so their governor cannot be set (Nova fails to start, FileNotFound); use cpu_state",
                    CpuSet::from_ids(without)
                )));
            }
        }
    }
    out
}

/// Gives the offline CPUs of `host` the topology `previous` (an earlier probe, as the tracker
/// holds it) knew for them: their online entry then, or what it had carried itself, when the
/// CPU is still in the same node. The kernel removes a CPU's topology while it is offline;
/// what it was while online is still what Nova reports (it reads the topology with every
/// dedicated CPU online).
pub fn carry_offline_topology(previous: &HostInventory, host: &mut HostInventory) {
    if host.cpu.offline_cpus.is_empty() {
        return;
    }
    for cpu in host.cpu.offline_cpus.iter_mut() {
        let seen = previous
            .cpu
            .cpus
            .iter()
            .find(|c| c.id == cpu.id)
            .map(|c| OfflineCpu {
                id: c.id,
                numa_node: c.numa_node,
                package: c.package,
                core: c.core,
                thread_siblings: c.thread_siblings.clone(),
                topology_cached: true,
            })
            .or_else(|| {
                previous
                    .cpu
                    .offline_cpus
                    .iter()
                    .find(|c| c.id == cpu.id && c.topology_cached)
                    .cloned()
            });
        if let Some(seen) = seen.filter(|s| s.numa_node == cpu.numa_node) {
            *cpu = seen;
        }
    }
}

/// One CPU's power state, for the reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CpuPower {
    /// The CPU is online.
    pub online: bool,
    /// Its cpufreq governor, when read (dedicated CPUs under power management).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub governor: Option<String>,
}

/// The power state of `cpu` in `host`.
pub fn cpu_power(host: &HostInventory, cpu: u32) -> CpuPower {
    CpuPower {
        online: host.cpu.online.contains(cpu),
        governor: host
            .cpu
            .governors
            .iter()
            .find(|g| g.cpu == cpu)
            .and_then(|g| g.governor.clone()),
    }
}

/// A host CPU pinned by a counted placement (a guest CPU or its emulator threads) that is not
/// online.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct OfflinePin {
    /// The host CPU.
    pub cpu: u32,
    /// The instance whose placement pins it.
    pub instance: String,
    /// The instance is known to be running (its guest needs the CPU now).
    pub running: bool,
    /// Offline on purpose: CPU power management is on and the guest is not running (Nova
    /// powers down the CPUs of guests it stops). The others are warned about and counted in
    /// `rtrack_pinned_cpus_offline`.
    pub powered_down: bool,
}

/// Task states in which a running guest keeps running (a snapshot, a password, a pause in
/// progress); any other task is a transition during which Nova powers CPUs up or down.
const RUNNING_TASKS: &[&str] = &[
    "image_snapshot",
    "image_snapshot_pending",
    "image_pending_upload",
    "image_uploading",
    "image_backup",
    "updating_password",
    "pausing",
    "unpausing",
];

/// The guest of an instance in these states runs (Nova started it, with its CPUs powered up):
/// `active`, `paused` or `rescued`, and no task moving it.
pub fn guest_running(vm_state: &str, task_state: Option<&str>) -> bool {
    matches!(vm_state, "active" | "paused" | "rescued")
        && task_state.is_none_or(|t| RUNNING_TASKS.contains(&t))
}

#[cfg(test)]
mod tests;
