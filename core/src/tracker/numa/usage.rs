//! Per-cell usage, summed over the fitted topologies the records hold, with Nova's rules
//! (`numa_usage_from_instance_numa`): every guest cell adds its memory to its host cell and its
//! floating CPUs to `cpu_usage`; pinned guests pin their host CPUs (and the reserved emulator
//! CPUs; with `isolate`, whole cores); pages of the guest's page size, or of the cell's smallest
//! size when it asked for none, are used.
//!
//! In: the [`HostTopology`] and the fitted topologies that count (which ones count is
//! [`crate::tracker::usage`]'s business). Out: a [`NumaUsage`]: one [`CellUsage`] per host cell,
//! and any CPU that two topologies pin (which accounting never grants; reported, not hidden).

use std::collections::BTreeMap;

use serde::Serialize;

use super::host::{HostCell, HostTopology};
use super::{FittedTopology, ThreadPolicy};
use crate::probes::CpuSet;

/// What the guests use of one host cell.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CellUsage {
    /// Floating guest CPUs placed on the cell (Nova's `cpu_usage`).
    pub cpu_usage: i64,
    /// Memory of the guest cells placed on it, MiB (Nova's `memory_usage`).
    pub memory_usage_mb: i64,
    /// Host CPUs pinned (Nova's `pinned_cpus`).
    pub pinned: CpuSet,
    /// Pages used, by size in KiB.
    pub pages_used: BTreeMap<i64, i64>,
}

impl CellUsage {
    /// Pages of `size_kb` used.
    pub fn pages(&self, size_kb: i64) -> i64 {
        *self.pages_used.get(&size_kb).unwrap_or(&0)
    }
}

/// Usage of every host cell.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NumaUsage {
    /// By host cell id.
    pub cells: BTreeMap<u32, CellUsage>,
    /// Host CPUs pinned by more than one guest, by cell (never granted by rtrack; a record
    /// changed outside it could do this, and the audit says so).
    pub double_pinned: BTreeMap<u32, CpuSet>,
}

impl NumaUsage {
    /// The usage of the host cell `id` (empty when nothing uses it).
    pub fn cell(&self, id: u32) -> CellUsage {
        self.cells.get(&id).cloned().unwrap_or_default()
    }

    /// Sums `topologies` over `host`.
    pub fn of<'a>(
        host: &HostTopology,
        topologies: impl IntoIterator<Item = &'a FittedTopology>,
    ) -> NumaUsage {
        let mut u = NumaUsage::default();
        for t in topologies {
            u.add(host, t);
        }
        u
    }

    /// Adds one fitted topology. Guest cells on a host cell the host no longer has (a node that
    /// vanished) count on that id all the same, so nothing they hold is forgotten.
    pub fn add(&mut self, host: &HostTopology, t: &FittedTopology) {
        for cell in &t.cells {
            let host_cell = host.cell(cell.host_cell);
            let usage = self.cells.entry(cell.host_cell).or_default();
            usage.memory_usage_mb += cell.memory_mb;
            usage.cpu_usage += cell.cpuset.len() as i64;
            let size = cell
                .pagesize_kb
                .or_else(|| host_cell.and_then(HostCell::smallest_page_kb))
                .unwrap_or(host.base_page_kb);
            if size > 0 {
                *usage.pages_used.entry(size).or_default() += cell.memory_mb * 1024 / size;
            }
            if !cell.cpu_policy.is_some_and(super::CpuPolicy::pins) {
                continue;
            }
            let mut pins = cell.pinned_host_cpus();
            if cell.thread_policy == Some(ThreadPolicy::Isolate) {
                if let Some(hc) = host_cell {
                    pins = with_siblings(hc, &pins);
                }
            }
            let again = usage.pinned.intersection(&pins);
            if !again.is_empty() {
                let d = self.double_pinned.entry(cell.host_cell).or_default();
                for c in again.iter() {
                    d.insert(c);
                }
            }
            for c in pins.iter() {
                usage.pinned.insert(c);
            }
        }
    }
}

impl NumaUsage {
    /// What is over capacity, one line per cell and resource: CPUs pinned twice or outside the
    /// cell's dedicated CPUs, hugepage pools with more pages used than total minus reserved.
    /// Empty when nothing is.
    pub fn overcommit(&self, host: &HostTopology) -> Vec<String> {
        let mut out = Vec::new();
        for (id, cpus) in &self.double_pinned {
            out.push(format!("cell {id}: CPUs {cpus} pinned twice"));
        }
        for (id, u) in &self.cells {
            let Some(cell) = host.cell(*id) else {
                continue;
            };
            let outside = u.pinned.difference(&cell.pcpuset);
            if !outside.is_empty() {
                out.push(format!(
                    "cell {id}: pinned CPUs {outside} are not dedicated CPUs of the cell"
                ));
            }
            for pool in cell.pages.iter().skip(1) {
                let used = u.pages(pool.size_kb);
                if used > pool.total - pool.reserved {
                    out.push(format!(
                        "cell {id}: {} KiB pages used {used} of {} ({} reserved)",
                        pool.size_kb, pool.total, pool.reserved
                    ));
                }
            }
        }
        out
    }
}

/// `cpus` widened to the whole cores they are on (Nova's `pin_cpus_with_siblings`).
pub fn with_siblings(cell: &HostCell, cpus: &CpuSet) -> CpuSet {
    let mut out = cpus.clone();
    for sib in &cell.siblings {
        if sib.intersects(cpus) {
            for c in sib.iter() {
                out.insert(c);
            }
        }
    }
    out
}
