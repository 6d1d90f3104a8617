//! Fitting a guest's cells onto host cells (Nova's `numa_fit_instance_to_host` and
//! `_numa_fit_instance_cell`): each guest cell on a host cell of its own, with its memory in
//! pages of the right size, its pinned CPUs on free dedicated CPUs, its floating CPUs and memory
//! within the allocation ratios, and the PCI requests' NUMA affinity met by the cells chosen.
//!
//! In: a [`FitInput`] (host topology, per-cell usage, the guest's constraints, ratios, the
//! packing strategy, free PCI devices per cell) and a PCI check for a set of host cells. Out:
//! the [`FittedTopology`] and what the PCI check gave, or a [`NumaRefusal`] that says for every
//! host cell why each guest cell does or does not fit there.
//!
//! Host cells are tried in Nova's order (when the host has more cells than the guest: free
//! memory, then free dedicated CPUs or CPU usage, then PCI devices, spread or packed), and the
//! first assignment in that order wins, as in Nova. Unlike Nova, each (guest cell, host cell)
//! pair is judged once on its own (Nova's cache mixes up guest cells once their ids are
//! overwritten, and a page size chosen for one host cell sticks to the guest cell for the next),
//! and the search over assignments is a matching with pruning, not every permutation (Nova bug
//! #1978372: an 8-cell guest on a 16-cell host took minutes).

mod closest;
mod search;

use crate::tracker::refusals::{CellVerdicts, NumaRefusal, Verdict};
use std::collections::{BTreeMap, HashMap, HashSet};

pub use search::SEARCH_LIMIT;
use search::{matchable, Search};

use super::align::aligned_pinning;
use super::host::{HostCell, HostTopology};
use super::networks::network_reason;
use super::pinning::pack_onto_cores;
use super::usage::{CellUsage, NumaUsage};
use super::{CpuPolicy, FittedCell, FittedTopology, GuestCell, GuestTopology, PageSize};
use crate::config::{PinAlignment, TopologyPolicy};
use crate::probes::CpuSet;

/// What a fit needs besides the PCI check.
pub struct FitInput<'a> {
    /// The host's cells.
    pub host: &'a HostTopology,
    /// What the claims use of each cell now.
    pub usage: &'a NumaUsage,
    /// The guest's constraints.
    pub guest: &'a GuestTopology,
    /// `cpu_allocation_ratio` (floating CPUs per host CPU).
    pub cpu_ratio: f64,
    /// `ram_allocation_ratio` (memory of floating, small-page guests).
    pub ram_ratio: f64,
    /// `packing_host_numa_cells_allocation_strategy`.
    pub pack: bool,
    /// Free PCI devices per NUMA node (Nova orders cells by them).
    pub pci_free_per_cell: &'a BTreeMap<u32, i64>,
    /// The guest asks for PCI devices.
    pub wants_pci: bool,
    /// rtrack's placement policies beyond Nova's (all off: Nova's placement exactly).
    pub policy: &'a TopologyPolicy,
}

fn mem_kb(cell: &GuestCell) -> i64 {
    cell.memory_mb.saturating_mul(1024)
}

/// Nova's `can_fit_pagesize`: `Ok(())`, or the shortfall. `use_free`: against free pages (no
/// overcommit), else against the pool's total.
fn pages_fit(
    host: &HostCell,
    usage: &CellUsage,
    size_kb: i64,
    need_kb: i64,
    use_free: bool,
) -> Result<(), String> {
    let Some(pool) = host.pool(size_kb) else {
        return Err(format!("no {size_kb} KiB pages in this cell"));
    };
    if need_kb % size_kb != 0 {
        return Err(format!(
            "{} MiB is not a whole number of {size_kb} KiB pages",
            need_kb / 1024
        ));
    }
    let need = need_kb / size_kb;
    let (have, what) = if use_free {
        (pool.total - usage.pages(size_kb) - pool.reserved, "free")
    } else {
        (pool.total, "in all")
    };
    if need > have {
        return Err(format!(
            "{size_kb} KiB pages {what}: have {}, need {need}",
            have.max(0)
        ));
    }
    Ok(())
}

/// Nova's `_numa_fit_instance_cell`: `guest` on `host`, with `reserve` more dedicated CPUs for
/// emulator threads. `Err` says what is short.
fn fit_cell(
    input: &FitInput<'_>,
    host: &HostCell,
    guest: &GuestCell,
    reserve: usize,
) -> Result<FittedCell, String> {
    let t = input.guest;
    let usage = input.usage.cell(host.id);
    let policy = t.cpu_policy;
    let pins = policy.is_some_and(CpuPolicy::pins);
    let floats = !matches!(policy, Some(CpuPolicy::Dedicated));
    let pagesize_kb = choose_pagesize(t.pagesize, host, &usage, mem_kb(guest), pins)?;
    if pins {
        let need = guest.pcpuset.len() + reserve;
        if need > host.pcpuset.len() {
            return Err(format!(
                "dedicated CPUs in the cell: have {}, need {need}",
                host.pcpuset.len()
            ));
        }
    }
    if floats && guest.cpuset.len() > host.cpuset.len() {
        return Err(format!(
            "shared CPUs in the cell: have {}, need {}",
            host.cpuset.len(),
            guest.cpuset.len()
        ));
    }
    let (cpu_pinning, cpuset_reserved) = if pins {
        pin_cpus(input, host, &usage, guest, reserve)?
    } else {
        (BTreeMap::new(), None)
    };
    if floats {
        check_floating_limits(input, host, &usage, guest)?;
    }
    Ok(FittedCell {
        guest_cell: guest.id,
        host_cell: host.id,
        cpuset: guest.cpuset.clone(),
        pcpuset: guest.pcpuset.clone(),
        memory_mb: guest.memory_mb,
        pagesize_kb,
        cpu_pinning,
        cpuset_reserved,
        cpu_policy: policy,
        thread_policy: t.thread_policy,
    })
}

/// The page size the guest cell's memory takes: with `hw:mem_page_size`, the first requested
/// size (largest first) whose free pages hold it; without, none, once the smallest pages hold
/// it (pinned guests never overcommit memory; floating ones do within the ratio, checked later).
fn choose_pagesize(
    requested: Option<PageSize>,
    host: &HostCell,
    usage: &CellUsage,
    need_kb: i64,
    pins: bool,
) -> Result<Option<i64>, String> {
    let Some(req) = requested else {
        let smallest = host
            .smallest_page_kb()
            .ok_or_else(|| "no memory pages in this cell".to_string())?;
        pages_fit(host, usage, smallest, need_kb, pins).map_err(|e| {
            if pins {
                format!("memory for pinned guests (no overcommit): {e}")
            } else {
                format!("memory: {e}")
            }
        })?;
        return Ok(None);
    };
    let mut sizes: Vec<i64> = host.pages.iter().map(|p| p.size_kb).collect();
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    let candidates: Vec<i64> = match req {
        PageSize::Small => sizes.last().copied().into_iter().collect(),
        PageSize::Large => sizes[..sizes.len().saturating_sub(1)].to_vec(),
        PageSize::Any => sizes,
        PageSize::Kb(kb) => vec![kb],
    };
    let mut why = Vec::new();
    for size in candidates {
        match pages_fit(host, usage, size, need_kb, true) {
            Ok(()) => return Ok(Some(size)),
            Err(e) => why.push(e),
        }
    }
    if why.is_empty() {
        Err("no hugepage sizes in this cell".into())
    } else {
        Err(why.join("; "))
    }
}

/// The guest cell's dedicated CPUs pinned on free host CPUs (of the allowed core types), by
/// Nova's rules; with `pin_alignment = l3` the aligned pinning when there is one (the policy
/// only chooses among pinnings once Nova's rules found one: never whether).
fn pin_cpus(
    input: &FitInput<'_>,
    host: &HostCell,
    usage: &CellUsage,
    guest: &GuestCell,
    reserve: usize,
) -> Result<(BTreeMap<u32, u32>, Option<CpuSet>), String> {
    let thread_policy = input.guest.thread_policy;
    let (taken, note) = match core_type_limit(input, host) {
        Some((others, names)) => (
            CpuSet::from_ids(usage.pinned.iter().chain(others.iter())),
            format!(
                " (core types {}: the {} CPUs of other types are left out)",
                names.join(", "),
                others.len()
            ),
        ),
        None => (usage.pinned.clone(), String::new()),
    };
    let free = host.pcpuset.difference(&taken).len();
    let need = guest.pcpuset.len() + reserve;
    if need > free {
        return Err(format!(
            "free dedicated CPUs: have {free}, need {need}{note}"
        ));
    }
    let nova = pack_onto_cores(host, &taken, &guest.pcpuset, thread_policy, reserve)
        .map_err(|e| format!("{e}{note}"))?;
    Ok(match input.policy.pin_alignment {
        PinAlignment::L3 => {
            aligned_pinning(host, &taken, &guest.pcpuset, thread_policy, reserve).unwrap_or(nova)
        }
        PinAlignment::None => nova,
    })
}

/// Floating guest CPUs and memory within the cell's limits (CPUs and memory times their
/// allocation ratios).
fn check_floating_limits(
    input: &FitInput<'_>,
    host: &HostCell,
    usage: &CellUsage,
    guest: &GuestCell,
) -> Result<(), String> {
    let cpu_limit = host.cpuset.len() as f64 * input.cpu_ratio;
    let cpus = usage.cpu_usage + guest.cpuset.len() as i64;
    if cpus as f64 > cpu_limit {
        return Err(format!(
            "shared CPU usage: {} in use + {} > limit {} ({} CPUs x ratio {})",
            usage.cpu_usage,
            guest.cpuset.len(),
            cpu_limit.floor(),
            host.cpuset.len(),
            input.cpu_ratio
        ));
    }
    let ram_limit = host.memory_mb as f64 * input.ram_ratio;
    if (usage.memory_usage_mb + guest.memory_mb) as f64 > ram_limit {
        return Err(format!(
            "memory: {} MiB in use + {} MiB > limit {} MiB ({} MiB x ratio {})",
            usage.memory_usage_mb,
            guest.memory_mb,
            ram_limit.floor(),
            host.memory_mb,
            input.ram_ratio
        ));
    }
    Ok(())
}

/// `rtrack:cpu_core_type`, else `dedicated_core_types`, on a cell with core types: the dedicated
/// CPUs of the other types, and the names allowed.
fn core_type_limit(input: &FitInput<'_>, host: &HostCell) -> Option<(CpuSet, Vec<String>)> {
    if host.facts.core_types.is_empty() {
        return None;
    }
    let names = input
        .guest
        .core_types
        .as_ref()
        .or(input.policy.dedicated_core_types.as_ref())?;
    let allowed = host.facts.cpus_of_types(names);
    Some((host.pcpuset.difference(&allowed), names.clone()))
}

/// `prefer_closest_cells`: replaces Nova's assignment `chosen` by the one of the closest set
/// of host positions that fits and passes the networks' and PCI checks (`check`), if closer.
/// With the PCI requests, the check's result kept is the one for the cells finally chosen.
fn prefer_closest<R, E>(
    input: &FitInput<'_>,
    search: &mut Search<'_, R, E>,
    chosen: &mut Vec<usize>,
    pci: &mut dyn FnMut(&[u32]) -> Result<R, E>,
    checks: bool,
) {
    if !input.policy.prefer_closest_cells || chosen.len() < 2 {
        return;
    }
    let Some(dist) = closest::position_distances(input.host, &search.ids) else {
        return;
    };
    let fits = search.fits;
    let better = closest::closest_assignment(fits, &dist, chosen, &mut |set| {
        !checks || search.pci_ok(set, pci, false)
    });
    let Some(better) = better else {
        return;
    };
    if input.wants_pci {
        let nova = search.found.take();
        if !search.pci_ok(&better, pci, true) {
            search.found = nova;
            return;
        }
    }
    *chosen = better;
}

/// Host cells in the order Nova tries them.
fn cell_order<'a>(input: &FitInput<'a>) -> Vec<&'a HostCell> {
    let mut cells: Vec<&HostCell> = input.host.cells.iter().collect();
    if cells.len() <= input.guest.cells.len() {
        return cells;
    }
    let pack = input.pack;
    let u = |c: &HostCell| input.usage.cell(c.id);
    // Stable sorts, in Nova's sequence; a descending sort keeps ties in order as Python's does.
    let by = |cells: &mut Vec<&HostCell>, desc: bool, key: &dyn Fn(&HostCell) -> i64| {
        cells.sort_by(|a, b| {
            let (ka, kb) = (key(a), key(b));
            if desc {
                kb.cmp(&ka)
            } else {
                ka.cmp(&kb)
            }
        });
    };
    by(&mut cells, !pack, &|c| c.memory_mb - u(c).memory_usage_mb);
    if input.guest.cpu_policy.is_some_and(CpuPolicy::pins) {
        by(&mut cells, !pack, &|c| {
            c.pcpuset.difference(&u(c).pinned).len() as i64
        });
    } else {
        by(&mut cells, pack, &|c| u(c).cpu_usage);
    }
    let pci = |c: &HostCell| *input.pci_free_per_cell.get(&c.id).unwrap_or(&0);
    by(&mut cells, input.wants_pci, &pci);
    cells
}

/// Every host cell, by id, with a verdict per guest cell (`pairs[guest][position in order]`).
fn cell_verdicts(
    host: &HostTopology,
    order: &[&HostCell],
    guest: &[GuestCell],
    pairs: &[Vec<Result<FittedCell, String>>],
) -> Vec<CellVerdicts> {
    let mut by_id: Vec<CellVerdicts> = host
        .cells
        .iter()
        .map(|hc| {
            let pos = order.iter().position(|o| o.id == hc.id);
            CellVerdicts {
                id: hc.id,
                verdicts: guest
                    .iter()
                    .enumerate()
                    .map(|(g, gc)| Verdict {
                        guest_cell: gc.id,
                        reason: match pos.map(|p| &pairs[g][p]) {
                            Some(Ok(_)) => "fits".into(),
                            Some(Err(e)) => e.clone(),
                            None => "not tried".into(),
                        },
                    })
                    .collect(),
            }
        })
        .collect();
    by_id.sort_by_key(|c| c.id);
    by_id
}

/// Fits `input.guest` onto the host. `pci` checks the PCI requests for a set of host cells
/// (their ids, ascending) and is called only for assignments where every cell fits; its
/// success value comes back with the topology. A refusal carries the last PCI error seen.
pub fn fit_instance<R, E>(
    input: &FitInput<'_>,
    mut pci: impl FnMut(&[u32]) -> Result<R, E>,
) -> Result<(FittedTopology, R), (NumaRefusal, Option<E>)> {
    let guest = &input.guest.cells;
    let order = cell_order(input);
    let (n, m) = (guest.len(), order.len());
    let reserve_first = usize::from(input.guest.emulator_isolated());
    // Every pair judged once.
    let pairs: Vec<Vec<Result<FittedCell, String>>> = guest
        .iter()
        .enumerate()
        .map(|(g, gc)| {
            let reserve = if g == 0 { reserve_first } else { 0 };
            order
                .iter()
                .map(|hc| fit_cell(input, hc, gc, reserve))
                .collect()
        })
        .collect();
    let verdicts = || cell_verdicts(input.host, &order, guest, &pairs);
    let refuse = |reason: String, e: Option<E>| {
        Err((
            NumaRefusal {
                reason,
                cells: verdicts(),
            },
            e,
        ))
    };
    if n == 0 {
        return refuse("the guest has no NUMA cells".into(), None);
    }
    if m < n {
        return refuse(
            format!("the guest has {n} NUMA cells and the host {m}"),
            None,
        );
    }
    let fits: Vec<Vec<bool>> = pairs
        .iter()
        .map(|r| r.iter().map(Result::is_ok).collect())
        .collect();
    if let Some(g) = fits.iter().position(|r| !r.iter().any(|f| *f)) {
        return refuse(
            format!("guest cell {} fits no host cell", guest[g].id),
            None,
        );
    }
    if !matchable(&fits, 0, &vec![false; m]) {
        return refuse(
            format!("the guest's {n} cells fit host cells, but not each on a host cell of its own"),
            None,
        );
    }

    let nets = &input.guest.networks;
    let mut search: Search<'_, R, E> = Search {
        fits: &fits,
        ids: order.iter().map(|c| c.id).collect(),
        host: input.host,
        nets,
        wants_pci: input.wants_pci,
        network_refused: false,
        checked: HashMap::new(),
        dead: HashSet::new(),
        found: None,
        last_error: None,
        steps: 0,
    };
    let mut used = vec![false; m];
    let mut chosen = Vec::with_capacity(n);
    // Sets of cells are checked when the guest asks for PCI devices or is on networks with a
    // NUMA affinity: both only allow more as cells are added, so a set refused prunes.
    let checks = input.wants_pci || !nets.is_empty();
    let mut call = |cells: &[u32]| pci(cells);
    let found = search.dfs(0, &mut used, &mut chosen, &mut call, checks);
    if !found {
        let reason = if search.steps > SEARCH_LIMIT {
            format!("no fit found within {SEARCH_LIMIT} tries of host cell combinations")
        } else if search.network_refused && search.last_error.is_none() {
            network_reason(input.host, nets)
        } else {
            "no combination of host cells that fits every guest cell also meets the PCI requests' NUMA affinity".into()
        };
        return refuse(reason, search.last_error.take());
    }
    prefer_closest(input, &mut search, &mut chosen, &mut call, checks);
    let r = match search.found.take() {
        Some(r) => r,
        // No PCI wanted: the check is still asked once, for the cells chosen, so R is made.
        None => {
            let mut cells: Vec<u32> = chosen.iter().map(|p| order[*p].id).collect();
            cells.sort_unstable();
            match call(&cells) {
                Ok(r) => r,
                Err(e) => return refuse("PCI".into(), Some(e)),
            }
        }
    };
    let cells: Option<Vec<FittedCell>> = chosen
        .iter()
        .enumerate()
        .map(|(g, p)| pairs[g][*p].as_ref().ok().cloned())
        .collect();
    let Some(cells) = cells else {
        // The search only chooses pairs that fit.
        return refuse("internal error: a chosen pair did not fit".into(), None);
    };
    Ok((
        FittedTopology {
            cells,
            emulator_threads: input.guest.emulator_threads,
        },
        r,
    ))
}

#[cfg(test)]
mod tests;
