//! The answer of a fit: each guest cell placed on a host cell, with its pins and pages.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::guest::{CpuPolicy, EmulatorPolicy, ThreadPolicy};
use crate::probes::CpuSet;

/// One guest cell placed on a host cell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FittedCell {
    /// Guest cell id.
    pub guest_cell: u32,
    /// Host cell it is on (Nova's InstanceNUMACell `id` after fitting).
    pub host_cell: u32,
    /// Floating guest CPUs.
    pub cpuset: CpuSet,
    /// Pinned guest CPUs.
    pub pcpuset: CpuSet,
    /// Memory, MiB.
    pub memory_mb: i64,
    /// The page size chosen, KiB; none when the guest asked for none (its memory then comes
    /// from the host cell's smallest pages).
    pub pagesize_kb: Option<i64>,
    /// Guest CPU -> host CPU, for the pinned guest CPUs.
    pub cpu_pinning: BTreeMap<u32, u32>,
    /// Host CPUs kept for the emulator threads (`isolate`), on guest cell 0's host cell.
    pub cpuset_reserved: Option<CpuSet>,
    /// The guest's CPU policy.
    pub cpu_policy: Option<CpuPolicy>,
    /// The guest's thread policy.
    pub thread_policy: Option<ThreadPolicy>,
}

impl FittedCell {
    /// Host CPUs this cell pins (its pinning and its reserved CPUs), before `isolate` widens
    /// them to whole cores.
    pub fn pinned_host_cpus(&self) -> CpuSet {
        let mut s = CpuSet::from_ids(self.cpu_pinning.values().copied());
        if let Some(r) = &self.cpuset_reserved {
            for c in r.iter() {
                s.insert(c);
            }
        }
        s
    }
}

/// A guest placed on the host (Nova's InstanceNUMATopology after fitting).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FittedTopology {
    /// One per guest cell, in guest order.
    pub cells: Vec<FittedCell>,
    /// `hw:emulator_threads_policy`.
    pub emulator_threads: Option<EmulatorPolicy>,
}

impl FittedTopology {
    /// The host cells the guest is on, in guest order.
    pub fn host_cells(&self) -> Vec<u32> {
        self.cells.iter().map(|c| c.host_cell).collect()
    }
}
