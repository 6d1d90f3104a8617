//! `pin_alignment = "l3"`: a dedicated guest cell's pins fill L3 cache domains. A guest cell
//! that one domain of its host cell can hold is pinned inside one domain (the one with the
//! fewest free CPUs that can, so whole domains stay free for larger guests); a larger one takes
//! the domains with the most free CPUs first (whole free ones before partly used ones), then the
//! domain that best holds what is left, so it spans the fewest domains. Within the domains
//! chosen, Nova's rules pin as without the policy ([`pack_onto_cores`]: thread policies,
//! emulator threads).
//!
//! In: a host cell (its [`super::domains::CellFacts::l3_domains`]), what is pinned on it, the
//! guest cell's pinned CPUs, the thread policy and the emulator threads' count. Out: the
//! pinning, or `None` when the cell has fewer than two domains or no choice of domains holds
//! the guest cell; the caller then keeps Nova's pinning, which it has already found to fit. So
//! the policy changes which CPUs a guest cell gets, never whether it fits.

use super::host::HostCell;
use super::pinning::{pack_onto_cores, Pinning};
use super::ThreadPolicy;
use crate::probes::CpuSet;

/// One L3 domain of a cell as the choice sees it.
struct Domain {
    cpus: CpuSet,
    free: usize,
    whole: bool,
}

/// Nova's pinning restricted to the CPUs of `domains`, with the cores taken domain by domain
/// in the order given (Nova's order within each), so the domains chosen first are filled first.
fn pack_within(
    cell: &HostCell,
    pinned: &CpuSet,
    domains: &[&Domain],
    guest: &CpuSet,
    policy: Option<ThreadPolicy>,
    reserve: usize,
) -> Option<Pinning> {
    let inside = CpuSet::from_ids(domains.iter().flat_map(|d| d.cpus.iter()));
    let outside = cell.pcpuset.difference(&inside);
    let taken = CpuSet::from_ids(pinned.iter().chain(outside.iter()));
    let rank = |core: &CpuSet| {
        domains
            .iter()
            .position(|d| d.cpus.intersects(core))
            .unwrap_or(domains.len())
    };
    let mut ordered = cell.clone();
    // A stable sort: Nova's order of cores within a domain.
    ordered.siblings.sort_by_key(|c| rank(c));
    pack_onto_cores(&ordered, &taken, guest, policy, reserve).ok()
}

/// The pinning of `guest` on `cell` that fills L3 domains; see the module comment.
pub fn aligned_pinning(
    cell: &HostCell,
    pinned: &CpuSet,
    guest: &CpuSet,
    policy: Option<ThreadPolicy>,
    reserve: usize,
) -> Option<Pinning> {
    let domains: Vec<Domain> = cell
        .facts
        .l3_domains
        .iter()
        .map(|d| {
            let dedicated = d.intersection(&cell.pcpuset);
            let free = dedicated.difference(pinned).len();
            Domain {
                whole: free > 0 && free == dedicated.len(),
                free,
                cpus: dedicated,
            }
        })
        .filter(|d| d.free > 0)
        .collect();
    if cell.facts.l3_domains.len() < 2 || domains.is_empty() {
        return None;
    }
    let need = guest.len() + reserve;
    let mut chosen: Vec<&Domain> = Vec::new();
    let mut open: Vec<&Domain> = domains.iter().collect();
    while !open.is_empty() {
        let have: usize = chosen.iter().map(|d| d.free).sum();
        let left = need.saturating_sub(have);
        // The domains that could complete the choice, the tightest first (partly used ones
        // before whole ones at the same count).
        let mut completing: Vec<usize> =
            (0..open.len()).filter(|i| open[*i].free >= left).collect();
        completing.sort_by_key(|i| (open[*i].free, open[*i].whole));
        for i in completing {
            let mut with = chosen.clone();
            with.push(open[i]);
            if let Some(p) = pack_within(cell, pinned, &with, guest, policy, reserve) {
                return Some(p);
            }
        }
        // None completes: take the domain with the most free CPUs (a whole one at a tie).
        let (i, _) = open
            .iter()
            .enumerate()
            .max_by_key(|(i, d)| (d.free, d.whole, std::cmp::Reverse(*i)))?;
        chosen.push(open.remove(i));
    }
    None
}

/// Whether one L3 domain of `cell` alone can hold `guest` (the benchmark's and the tests'
/// measure of a guest cell spread when it need not be).
pub fn one_domain_holds(
    cell: &HostCell,
    pinned: &CpuSet,
    guest: &CpuSet,
    policy: Option<ThreadPolicy>,
    reserve: usize,
) -> bool {
    cell.facts.l3_domains.iter().any(|d| {
        let dom = Domain {
            cpus: d.intersection(&cell.pcpuset),
            free: 0,
            whole: false,
        };
        pack_within(cell, pinned, &[&dom], guest, policy, reserve).is_some()
    })
}

/// The number of L3 domains of `cell` the host CPUs `cpus` touch (1 for a cell without
/// domains).
pub fn domains_touched(cell: &HostCell, cpus: &CpuSet) -> usize {
    if cell.facts.l3_domains.is_empty() {
        return usize::from(!cpus.is_empty());
    }
    cell.facts
        .l3_domains
        .iter()
        .filter(|d| d.intersects(cpus))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracker::numa::domains::CellFacts;

    /// 4 cores x 2 threads in 2 L3 domains: cores (0,4) (1,5) | (2,6) (3,7).
    fn cell() -> HostCell {
        let all = CpuSet::parse_list("0-7").unwrap();
        HostCell {
            id: 0,
            socket: Some(0),
            cpuset: all.clone(),
            pcpuset: all,
            siblings: (0..4).map(|c| CpuSet::from_ids([c, c + 4])).collect(),
            memory_mb: 1024,
            pages: Vec::new(),
            physnets: Default::default(),
            tunneled: false,
            facts: CellFacts {
                l3_domains: vec![cpus("0-1,4-5"), cpus("2-3,6-7")],
                ..Default::default()
            },
        }
    }

    fn cpus(s: &str) -> CpuSet {
        CpuSet::parse_list(s).unwrap()
    }

    fn hosts(p: &Pinning) -> CpuSet {
        CpuSet::from_ids(p.0.values().copied())
    }

    #[test]
    fn a_guest_one_domain_holds_stays_in_the_tightest_domain() {
        // CPU 1 is pinned: domain 0 has 3 free CPUs, domain 1 has 4. A 3-CPU guest goes to
        // domain 0, the tightest that holds it.
        let c = cell();
        let p = aligned_pinning(&c, &cpus("1"), &cpus("0-2"), None, 0).unwrap();
        assert_eq!(hosts(&p), cpus("0,4-5"));
        // A 2-CPU guest with domain 0 partly used goes there too, not into the whole domain.
        let p = aligned_pinning(&c, &cpus("1"), &cpus("0-1"), None, 0).unwrap();
        assert_eq!(domains_touched(&c, &hosts(&p)), 1);
        assert!(hosts(&p).is_subset(&cpus("0-1,4-5")));
        // Nova's choice spreads that 3-CPU guest over both domains.
        let nova = pack_onto_cores(&c, &cpus("0"), &cpus("0-2"), None, 0).unwrap();
        assert_eq!(domains_touched(&c, &hosts(&nova)), 2);
        let p = aligned_pinning(&c, &cpus("0"), &cpus("0-2"), None, 0).unwrap();
        assert_eq!(domains_touched(&c, &hosts(&p)), 1);
    }

    #[test]
    fn a_larger_guest_takes_a_whole_domain_then_the_fewest_others() {
        let c = cell();
        // 5 CPUs: domain 1 whole (4), then 1 from domain 0.
        let p = aligned_pinning(&c, &cpus("0"), &cpus("0-4"), None, 0).unwrap();
        let h = hosts(&p);
        assert_eq!(h.len(), 5);
        assert!(cpus("2-3,6-7").is_subset(&h));
        assert!(!h.contains(0));
    }

    #[test]
    fn thread_policies_and_emulator_threads_hold_within_the_domains() {
        let c = cell();
        // isolate: 2 whole cores; domain 1 is whole, domain 0 has one whole core.
        let p =
            aligned_pinning(&c, &cpus("0"), &cpus("0-1"), Some(ThreadPolicy::Isolate), 0).unwrap();
        assert_eq!(hosts(&p), cpus("2-3"));
        // require: siblings; an emulator CPU comes from the same domain.
        let p =
            aligned_pinning(&c, &cpus(""), &cpus("0-1"), Some(ThreadPolicy::Require), 1).unwrap();
        let all = CpuSet::from_ids(hosts(&p).iter().chain(p.1.clone().unwrap().iter()));
        assert_eq!(domains_touched(&c, &all), 1);
    }

    #[test]
    fn no_domains_or_no_room_leaves_novas_pinning() {
        let mut c = cell();
        assert!(aligned_pinning(&c, &cpus("0-6"), &cpus("0-1"), None, 0).is_none());
        c.facts.l3_domains.clear();
        assert!(aligned_pinning(&c, &cpus(""), &cpus("0-1"), None, 0).is_none());
        assert_eq!(domains_touched(&c, &cpus("0-1")), 1);
    }

    #[test]
    fn one_domain_holds_says_whether_a_single_domain_suffices() {
        let c = cell();
        assert!(one_domain_holds(&c, &cpus("0"), &cpus("0-2"), None, 0));
        assert!(!one_domain_holds(&c, &cpus("0,2"), &cpus("0-3"), None, 0));
    }
}
