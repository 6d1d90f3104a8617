//! The dedicated CPUs in the report (`dedicated_cpus`): every CPU of `cpu_dedicated_set` with
//! its NUMA node, whether it is online, its cpufreq governor and whether it counts as PCPU, and
//! the CPU power management that explains the offline ones.
//!
//! In: the probe and `[resources]`. Out: [`DedicatedCpus`], or none when no dedicated set is
//! configured.

use serde::{Deserialize, Serialize};

use crate::config::{CpuPowerManagement, Resources};
use crate::inventory::resources::cpu_sets;
use crate::probes::HostInventory;

/// `cpu_dedicated_set` on this host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DedicatedCpus {
    /// `cpu_power_management` (strategy and governors); null when off.
    pub power_management: Option<CpuPowerManagement>,
    /// Every CPU of the set, in order.
    pub cpus: Vec<DedicatedCpu>,
}

/// One dedicated CPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DedicatedCpu {
    /// Kernel CPU number.
    pub cpu: u32,
    /// Its NUMA node (an offline CPU's from its node link); null when unknown.
    pub numa_node: Option<u32>,
    /// `online`, `offline` (present, not online) or `absent` (not present).
    pub state: String,
    /// Its cpufreq governor, read under power management; null otherwise or while offline.
    pub governor: Option<String>,
    /// It counts as PCPU: online, or existing under power management.
    pub counted: bool,
}

/// The dedicated CPUs of `inv` under `res`.
pub fn dedicated_cpus(inv: &HostInventory, res: &Resources) -> Option<DedicatedCpus> {
    let set = res.cpu_dedicated_set.as_ref()?;
    let (_, counted) = cpu_sets(inv, res);
    let cpus = set
        .iter()
        .map(|cpu| {
            let online = inv.cpu.cpus.iter().find(|c| c.id == cpu);
            let offline = inv.cpu.offline_cpus.iter().find(|c| c.id == cpu);
            let state = if inv.cpu.online.contains(cpu) {
                "online"
            } else if inv.cpu.present.contains(cpu) {
                "offline"
            } else {
                "absent"
            };
            DedicatedCpu {
                cpu,
                numa_node: online
                    .and_then(|c| c.numa_node)
                    .or(offline.and_then(|c| c.numa_node)),
                state: state.to_string(),
                governor: inv
                    .cpu
                    .governors
                    .iter()
                    .find(|g| g.cpu == cpu)
                    .and_then(|g| g.governor.clone()),
                counted: counted.contains(cpu),
            }
        })
        .collect();
    Some(DedicatedCpus {
        power_management: res.cpu_power_management.clone(),
        cpus,
    })
}
