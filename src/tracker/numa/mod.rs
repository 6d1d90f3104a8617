//! NUMA accounting with Nova's semantics: the host's cells as the libvirt driver reports them,
//! a guest's NUMA constraints from its flavor and image, the fit of guest cells onto host cells
//! (CPU pinning, thread and emulator-thread policies, page sizes, PCI affinity), and the usage of
//! every cell derived from what the claims hold.
//!
//! In: the probe and `[resources]` ([`host`]), a flavor's extra specs and the image properties
//! ([`constraints`]), the current per-cell usage ([`usage`]). Out: a [`FittedTopology`] per guest
//! (which host cell each guest cell is on, which host CPU each guest CPU is pinned to, the page
//! size), or a [`NumaRefusal`](crate::tracker::refusals::NumaRefusal) that says, per host cell, why each guest cell does not fit.
//!
//! - [`host`] — the host topology (`_get_host_numa_topology`);
//! - [`constraints`] — `numa_get_constraints`, with [`image`] the image's properties;
//! - [`fit`] — `numa_fit_instance_to_host` and `_numa_fit_instance_cell`;
//! - [`pinning`] — `_pack_instance_onto_cores`;
//! - [`power`] — CPU power management: offline dedicated CPUs, pinned CPUs offline;
//! - [`usage`] — `numa_usage_from_instance_numa`, summed over the records;
//! - [`report`] — what `GET /v1/usage`, `GET /v1/numa` and `rtrackctl numa` show;
//! - [`nova`] — the Nova objects (NUMATopology with usage, InstanceNUMATopology).
//!
//! Where rtrack differs from Nova (deterministic pinning order, no fit cache, page sizes that do
//! not stick between attempts, emulator threads of `isolate` guests on whole free cores, a
//! bounded search) is written in `docs/differences.md`.

pub mod align;
pub mod constraints;
pub mod domains;
pub mod fit;
pub mod host;
pub mod image;
pub mod networks;
pub mod nova;
pub mod pinning;
pub mod placed;
pub mod power;
pub mod report;
pub mod usage;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::probes::CpuSet;

pub use constraints::{numa_constraints, ImageProps};
pub use fit::{fit_instance, FitInput};
pub use host::{HostCell, HostTopology, PagePool};
pub use usage::{CellUsage, NumaUsage};

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
