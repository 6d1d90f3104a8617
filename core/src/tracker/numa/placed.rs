//! A guest that is already placed: counting it where the hypervisor runs it instead of fitting
//! it again. A host taken over from Nova's own tracker runs guests whose pins, host cells and
//! page sizes are in their libvirt domains; a fresh fit could pick other CPUs, and the record
//! would then say those are busy while the ones really in use looked free.
//!
//! In: the host's cells, their usage by everything else, what the guest asks (flavor and
//! image), and where it is (the instance's `numa_topology`). Out: `Ok` when that placement
//! matches the request and adds no overcommit (no CPU pinned twice, pins in the cell's
//! dedicated set, page pools not exceeded); else the reason.

use super::host::HostTopology;
use super::usage::NumaUsage;
use super::{FittedTopology, GuestTopology, PageSize};

/// Checks `placed` against `guest` and the host's free capacity (see the module).
pub fn check_placed(
    host: &HostTopology,
    usage: &NumaUsage,
    guest: &GuestTopology,
    placed: &FittedTopology,
) -> Result<(), String> {
    if placed.cells.len() != guest.cells.len() {
        return Err(format!(
            "instance.numa_topology has {} cell(s), the flavor and image ask for {}",
            placed.cells.len(),
            guest.cells.len()
        ));
    }
    for (i, (p, g)) in placed.cells.iter().zip(&guest.cells).enumerate() {
        let cpus = |a: usize, b: usize| a + b;
        if host.cell(p.host_cell).is_none() {
            return Err(format!(
                "instance.numa_topology cell {i} is on host cell {}, which this host does not have",
                p.host_cell
            ));
        }
        if p.memory_mb != g.memory_mb
            || cpus(p.cpuset.len(), p.pcpuset.len()) != cpus(g.cpuset.len(), g.pcpuset.len())
        {
            return Err(format!(
                "instance.numa_topology cell {i} has {} CPU(s) and {} MiB, the request {} and {} MiB",
                cpus(p.cpuset.len(), p.pcpuset.len()),
                p.memory_mb,
                cpus(g.cpuset.len(), g.pcpuset.len()),
                g.memory_mb
            ));
        }
        let unpinned = p
            .pcpuset
            .iter()
            .filter(|c| !p.cpu_pinning.contains_key(c))
            .count();
        if p.pcpuset.len() != g.pcpuset.len() || unpinned > 0 {
            return Err(format!(
                "instance.numa_topology cell {i} pins {} of {} dedicated guest CPU(s)",
                p.pcpuset.len() - unpinned,
                g.pcpuset.len()
            ));
        }
        let wants_pages = !matches!(guest.pagesize, None | Some(PageSize::Small));
        if wants_pages && p.pagesize_kb.is_none() {
            return Err(format!(
                "instance.numa_topology cell {i} has no page size, the request asks for one"
            ));
        }
    }
    let before = usage.overcommit(host);
    let mut with = usage.clone();
    with.add(host, placed);
    let added: Vec<String> = with
        .overcommit(host)
        .into_iter()
        .filter(|p| !before.contains(p))
        .collect();
    if added.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "placed as instance.numa_topology says, it would overcommit: {}",
            added.join("; ")
        ))
    }
}
