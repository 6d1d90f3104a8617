//! What a guest asks of the host's NUMA cells: the CPU, thread and emulator policies, page
//! sizes, and the guest cells with their CPUs, memory and networks.

use serde::{Deserialize, Serialize};

use crate::probes::CpuSet;

/// `hw:cpu_policy`: how guest CPUs map to host CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CpuPolicy {
    /// Guest CPUs float over the host's shared CPUs.
    Shared,
    /// Every guest CPU is pinned to its own host CPU.
    Dedicated,
    /// Some guest CPUs pinned (`hw:cpu_dedicated_mask` or the realtime mask), the rest floating.
    Mixed,
}

impl CpuPolicy {
    /// Nova's value.
    pub fn as_str(self) -> &'static str {
        match self {
            CpuPolicy::Shared => "shared",
            CpuPolicy::Dedicated => "dedicated",
            CpuPolicy::Mixed => "mixed",
        }
    }

    /// True when some guest CPUs are pinned.
    pub fn pins(self) -> bool {
        matches!(self, CpuPolicy::Dedicated | CpuPolicy::Mixed)
    }
}

/// `hw:cpu_thread_policy`: how pinned guest CPUs use host SMT threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThreadPolicy {
    /// Siblings when there are some, else any free CPUs.
    Prefer,
    /// One thread per core; the core's other threads are kept from every other guest.
    Isolate,
    /// Sibling threads only.
    Require,
}

impl ThreadPolicy {
    /// Nova's value.
    pub fn as_str(self) -> &'static str {
        match self {
            ThreadPolicy::Prefer => "prefer",
            ThreadPolicy::Isolate => "isolate",
            ThreadPolicy::Require => "require",
        }
    }
}

/// `hw:emulator_threads_policy`: where the guest's emulator threads run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EmulatorPolicy {
    /// On `cpu_shared_set` (or over the guest's own pinned CPUs without one): nothing more is
    /// claimed.
    Share,
    /// On one more dedicated CPU, in the host cell of guest cell 0.
    Isolate,
}

impl EmulatorPolicy {
    /// Nova's value.
    pub fn as_str(self) -> &'static str {
        match self {
            EmulatorPolicy::Share => "share",
            EmulatorPolicy::Isolate => "isolate",
        }
    }
}

/// Nova's requested page size: `small`, `large`, `any` or a size in KiB. Serialized as Nova
/// stores it: -1, -2, -3 or the size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "i64", into = "i64")]
pub enum PageSize {
    /// The host's base pages.
    Small,
    /// Any hugepage size, largest first.
    Large,
    /// Any size, largest first.
    Any,
    /// Exactly this size, KiB.
    Kb(i64),
}

impl From<i64> for PageSize {
    fn from(v: i64) -> PageSize {
        match v {
            -1 => PageSize::Small,
            -2 => PageSize::Large,
            -3 => PageSize::Any,
            kb => PageSize::Kb(kb),
        }
    }
}

impl From<PageSize> for i64 {
    fn from(p: PageSize) -> i64 {
        match p {
            PageSize::Small => -1,
            PageSize::Large => -2,
            PageSize::Any => -3,
            PageSize::Kb(kb) => kb,
        }
    }
}

/// One guest NUMA cell as the constraints describe it: which guest CPUs, how much memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestCell {
    /// Guest cell id (0..n).
    pub id: u32,
    /// Guest CPUs that float (Nova's `cpuset`).
    pub cpuset: CpuSet,
    /// Guest CPUs that are pinned (Nova's `pcpuset`).
    pub pcpuset: CpuSet,
    /// Memory, MiB.
    pub memory_mb: i64,
}

/// A guest's NUMA constraints (Nova's InstanceNUMATopology before fitting).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestTopology {
    /// The guest cells, in guest order.
    pub cells: Vec<GuestCell>,
    /// `hw:cpu_policy` (none: shared, as Nova leaves it).
    pub cpu_policy: Option<CpuPolicy>,
    /// `hw:cpu_thread_policy`.
    pub thread_policy: Option<ThreadPolicy>,
    /// `hw:emulator_threads_policy`.
    pub emulator_threads: Option<EmulatorPolicy>,
    /// `hw:mem_page_size`.
    pub pagesize: Option<PageSize>,
    /// The physical and tunneled networks its ports are on (Nova's `network_metadata`): only
    /// host cells the networks' NUMA affinity allows may hold it.
    #[serde(default, skip_serializing_if = "GuestNetworks::is_empty")]
    pub networks: GuestNetworks,
    /// `rtrack:cpu_core_type`: the core types its pins should use (hwloc's names), over
    /// `[resources] dedicated_core_types`; pinned guests only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core_types: Option<Vec<String>>,
}

/// The networks a guest's ports are on (the RequestSpec's `network_metadata`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestNetworks {
    /// Physical networks (Neutron's `provider:physical_network`).
    pub physnets: std::collections::BTreeSet<String>,
    /// Some port is on a tunneled (vxlan, gre, geneve) network.
    pub tunneled: bool,
}

impl GuestNetworks {
    /// Asks for nothing.
    pub fn is_empty(&self) -> bool {
        self.physnets.is_empty() && !self.tunneled
    }
}

impl GuestTopology {
    /// True when some guest CPUs are pinned.
    pub fn pins(&self) -> bool {
        self.cpu_policy.is_some_and(CpuPolicy::pins)
    }

    /// Emulator threads on a CPU of their own.
    pub fn emulator_isolated(&self) -> bool {
        self.emulator_threads == Some(EmulatorPolicy::Isolate)
    }

    /// Pinned guest CPUs in all cells.
    pub fn pinned_vcpus(&self) -> usize {
        self.cells.iter().map(|c| c.pcpuset.len()).sum()
    }

    /// Floating guest CPUs in all cells.
    pub fn floating_vcpus(&self) -> usize {
        self.cells.iter().map(|c| c.cpuset.len()).sum()
    }
}
