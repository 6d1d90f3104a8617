//! Choosing host CPUs for a guest cell's pinned CPUs (Nova's `_pack_instance_onto_cores`), with
//! the thread policies and the emulator threads' reserved CPUs.
//!
//! In: a host cell, what is pinned on it already, the guest cell's pinned CPUs, the thread
//! policy, and how many CPUs to reserve for emulator threads. Out: guest CPU -> host CPU, and the
//! reserved host CPUs; or why no pinning fits.
//!
//! Nova's rules, in a fixed order: cores are taken in the order of their lowest CPU and threads
//! within a core in ascending order (Nova's order follows Python's set order, which is neither
//! and changes with unrelated history). `prefer` (and no policy) packs guest CPUs onto sibling
//! threads, trying the widest free cores first, and falls back to any free CPUs; `require` only
//! packs onto siblings; `isolate` takes one thread of each whole free core and keeps the core's
//! other threads from every other guest. Reserved emulator CPUs are taken from the free CPUs the
//! pinning left; with `isolate` only from whole free cores, since their siblings are kept too
//! (Nova takes any free CPU and then fails to pin its busy sibling, bug rtrack does not copy).

use std::collections::BTreeMap;

use super::host::HostCell;
use super::ThreadPolicy;
use crate::probes::CpuSet;

/// A pinning: guest CPU -> host CPU, and the host CPUs reserved for emulator threads.
pub type Pinning = (BTreeMap<u32, u32>, Option<CpuSet>);

/// A pinning tried: (guest, host) pairs and the reserved CPUs found with it.
type Tried = (Vec<(u32, u32)>, Option<CpuSet>);

/// Nova's `_get_pinning`: the first `threads` free threads of each core, in order, given to the
/// guest CPUs in ascending order; none when the cores cannot hold them all.
fn pinning(threads: usize, cores: &[Vec<u32>], guest: &CpuSet) -> Option<Vec<(u32, u32)>> {
    if threads * cores.len() < guest.len() {
        return None;
    }
    let usable = cores.iter().flat_map(|c| c.iter().take(threads).copied());
    Some(guest.iter().zip(usable).collect())
}

/// Nova's `_get_reserved`: `count` CPUs from `cores` once the pinned CPUs are taken out (with
/// `whole_cores`, once the cores holding them are); none when fewer are left.
fn reserved(
    cores: &[Vec<u32>],
    pins: &[(u32, u32)],
    count: usize,
    whole_cores: bool,
) -> Option<CpuSet> {
    if count == 0 || pins.is_empty() {
        return None;
    }
    let pinned: Vec<u32> = pins.iter().map(|(_, h)| *h).collect();
    let left: Vec<u32> = cores
        .iter()
        .filter(|c| !(whole_cores && c.iter().any(|x| pinned.contains(x))))
        .flat_map(|c| c.iter().copied().filter(|x| !pinned.contains(x)))
        .take(count)
        .collect();
    (left.len() == count).then(|| CpuSet::from_ids(left))
}

/// Pins `guest` (the guest cell's pinned CPUs) onto `cell`, whose CPUs in `pinned` are taken.
/// `reserve` host CPUs more are kept for emulator threads. `Err` says why nothing fits.
pub fn pack_onto_cores(
    cell: &HostCell,
    pinned: &CpuSet,
    guest: &CpuSet,
    policy: Option<ThreadPolicy>,
    reserve: usize,
) -> Result<Pinning, String> {
    let free = cell.pcpuset.difference(pinned);
    let threads_per_core = cell.threads_per_core();
    // Free threads of each core, in core order; cores with none free are left out.
    let free_cores: Vec<Vec<u32>> = cell
        .siblings
        .iter()
        .map(|s| s.intersection(&free).iter().collect::<Vec<u32>>())
        .filter(|c| !c.is_empty())
        .collect();
    let with_at_least = |k: usize| -> Vec<Vec<u32>> {
        free_cores
            .iter()
            .filter(|c| c.len() >= k)
            .cloned()
            .collect()
    };
    let need = guest.len();
    let emulator = if reserve > 0 {
        format!(" and {reserve} for emulator threads")
    } else {
        String::new()
    };

    if policy == Some(ThreadPolicy::Isolate) {
        let whole = with_at_least(threads_per_core);
        if threads_per_core > 1 && cell.pcpuset != cell.cpuset {
            // Nova's guard for bug #1889633: with CPU sets configured, an SMT host cannot give
            // `isolate` guests whole cores (the scheduler keeps them away).
            return Err("thread policy isolate on an SMT host with cpu_dedicated_set configured: Nova never places such guests there (bug #1889633)".into());
        }
        let pins = pinning(1, &whole, guest)
            .filter(|p| !p.is_empty() && !whole.is_empty())
            .ok_or_else(|| {
                format!(
                    "isolate needs {need} whole free cores{emulator}; {} are free",
                    whole.len()
                )
            })?;
        // Emulator threads of an isolated guest get whole free cores too.
        let reserved = reserved(&whole, &pins, reserve, true);
        if reserve > 0 && reserved.is_none() {
            return Err(format!(
                "isolate needs {need} whole free cores{emulator}; {} are free",
                whole.len()
            ));
        }
        return Ok((pins.into_iter().collect(), reserved));
    }

    if policy == Some(ThreadPolicy::Require) && threads_per_core <= 1 {
        return Err(
            "thread policy require needs SMT siblings; this cell has one thread per core".into(),
        );
    }
    let widest = free_cores.iter().map(Vec::len).max().unwrap_or(0);
    let mut last: Option<Tried> = None;
    let mut threads_no = 1;
    for k in (1..=widest).rev() {
        threads_no = k;
        if policy == Some(ThreadPolicy::Require) && k <= 1 {
            continue;
        }
        let cores = with_at_least(k);
        let pins = pinning(k, &cores, guest);
        let res = pins
            .as_ref()
            .and_then(|p| reserved(&free_cores, p, reserve, false));
        let ok = pins.is_some() && (reserve == 0 || res.is_some());
        last = pins.map(|p| (p, res));
        if ok {
            break;
        }
    }
    if policy != Some(ThreadPolicy::Require) && last.as_ref().is_none_or(|(p, _)| p.is_empty()) {
        // Any free CPUs, each as a core of its own.
        let singles: Vec<Vec<u32>> = free_cores.iter().flatten().map(|c| vec![*c]).collect();
        let pins = pinning(threads_no, &singles, guest);
        let res = pins
            .as_ref()
            .and_then(|p| reserved(&singles, p, reserve, false));
        last = pins.map(|p| (p, res));
    }
    match last {
        Some((pins, res)) if reserve == 0 || res.is_some() => Ok((pins.into_iter().collect(), res)),
        _ => Err(match policy {
            Some(ThreadPolicy::Require) => format!(
                "require needs {need} sibling threads{emulator}; free cores with 2 or more free threads: {}",
                with_at_least(2).len()
            ),
            _ => format!("free dedicated CPUs: have {}, need {need}{emulator}", free.len()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 4 cores x 2 threads: (0,4) (1,5) (2,6) (3,7), all dedicated (and shared: legacy).
    fn cell() -> HostCell {
        let all = CpuSet::parse_list("0-7").unwrap();
        HostCell {
            id: 0,
            socket: Some(0),
            cpuset: all.clone(),
            pcpuset: all,
            siblings: (0..4).map(|c| CpuSet::from_ids([c, c + 4])).collect(),
            memory_mb: 4096,
            pages: Vec::new(),
            physnets: Default::default(),
            tunneled: false,
            facts: Default::default(),
        }
    }

    fn cpus(s: &str) -> CpuSet {
        CpuSet::parse_list(s).unwrap()
    }

    fn hosts(p: &Pinning) -> Vec<u32> {
        p.0.values().copied().collect()
    }

    #[test]
    fn prefer_packs_siblings_widest_cores_first() {
        let p = pack_onto_cores(&cell(), &cpus(""), &cpus("0-2"), None, 0).unwrap();
        assert_eq!(hosts(&p), [0, 4, 1]);
        // Core 0 half used: whole cores first, then the half-free one.
        let p = pack_onto_cores(&cell(), &cpus("0"), &cpus("0-2"), None, 0).unwrap();
        assert_eq!(hosts(&p), [1, 5, 2]);
        // Only half-free cores left: one thread each.
        let p = pack_onto_cores(&cell(), &cpus("0-3"), &cpus("0-2"), None, 0).unwrap();
        assert_eq!(hosts(&p), [4, 5, 6]);
    }

    #[test]
    fn prefer_falls_back_to_any_free_cpus() {
        // Free: 4, 1, 5: one whole core (1,5) and one thread (4). Three guest CPUs need both.
        let p = pack_onto_cores(&cell(), &cpus("0,2-3,6-7"), &cpus("0-2"), None, 0).unwrap();
        assert_eq!(hosts(&p).len(), 3);
        assert!(
            pack_onto_cores(&cell(), &cpus("0,2-3,6-7"), &cpus("0-3"), None, 0)
                .unwrap_err()
                .contains("have 3, need 4")
        );
    }

    #[test]
    fn isolate_takes_one_thread_of_whole_cores_and_reserves_whole_cores() {
        let p = pack_onto_cores(
            &cell(),
            &cpus("0"),
            &cpus("0-1"),
            Some(ThreadPolicy::Isolate),
            1,
        )
        .unwrap();
        assert_eq!(hosts(&p), [1, 2]);
        assert_eq!(p.1.unwrap().to_string(), "3");
        // Nova would reserve CPU 4 (its sibling 0 is busy) and fail to pin; rtrack refuses.
        let e = pack_onto_cores(
            &cell(),
            &cpus("0,3"),
            &cpus("0-1"),
            Some(ThreadPolicy::Isolate),
            1,
        )
        .unwrap_err();
        assert!(
            e.contains("isolate needs 2 whole free cores and 1 for emulator threads; 2 are free"),
            "{e}"
        );
    }

    #[test]
    fn require_needs_siblings() {
        let p = pack_onto_cores(
            &cell(),
            &cpus(""),
            &cpus("0-1"),
            Some(ThreadPolicy::Require),
            0,
        )
        .unwrap();
        assert_eq!(hosts(&p), [0, 4]);
        let e = pack_onto_cores(
            &cell(),
            &cpus("0-3"),
            &cpus("0"),
            Some(ThreadPolicy::Require),
            0,
        )
        .unwrap_err();
        assert!(e.contains("require needs 1 sibling threads"), "{e}");
        let mut flat = cell();
        flat.siblings = (0..8).map(|c| CpuSet::from_ids([c])).collect();
        assert!(
            pack_onto_cores(&flat, &cpus(""), &cpus("0"), Some(ThreadPolicy::Require), 0)
                .unwrap_err()
                .contains("one thread per core")
        );
    }

    #[test]
    fn reserved_cpus_come_after_the_pinned_ones() {
        let p = pack_onto_cores(&cell(), &cpus(""), &cpus("0-1"), None, 1).unwrap();
        assert_eq!(hosts(&p), [0, 4]);
        assert_eq!(p.1.unwrap().to_string(), "1");
    }
}
