//! The placement policies beyond Nova's: L3 alignment, core types and the closest cells, each
//! alone and together; and the property that with `pin_alignment` and `prefer_closest_cells`
//! on, a guest fits exactly when it fits with every policy off (only which CPUs and cells
//! differ), its pins stay on free dedicated CPUs, and no CPU is pinned twice; with core types,
//! pins stay on the types allowed and a guest fits only where it would without them.

use proptest::prelude::*;

use super::*;
use crate::probes::core_type::CoreType;
use crate::tracker::numa::align::{domains_touched, one_domain_holds};
use crate::tracker::numa::domains::CellFacts;

/// Cell `id` of 8 cores x 2 threads (CPUs 16id..16id+15), two L3 domains of 4 cores, the
/// distances `dist[id]`; with `hybrid`, its first 4 cores `IntelCore` and the others `IntelAtom`.
fn topo_cell(id: u32, dist: &[u32], hybrid: bool) -> HostCell {
    let first = id * 16;
    let mut c = cell(id, first, 8, 2, 65536, 0, 0);
    let half =
        |h: u32| CpuSet::from_ids((0..4).flat_map(|k| [first + 4 * h + k, first + 8 + 4 * h + k]));
    c.facts = CellFacts {
        l3_domains: vec![half(0), half(1)],
        distances: dist
            .iter()
            .enumerate()
            .map(|(i, d)| (i as u32, *d))
            .collect(),
        core_types: if hybrid {
            vec![
                CoreType {
                    name: "IntelCore".into(),
                    cpus: half(0),
                },
                CoreType {
                    name: "IntelAtom".into(),
                    cpus: half(1),
                },
            ]
        } else {
            Vec::new()
        },
        ..Default::default()
    };
    c
}

/// Cells 0-1 and 2-3 close (12), across 32.
fn four_cells(hybrid: bool) -> HostTopology {
    let d = |a: u32| -> Vec<u32> {
        (0..4u32)
            .map(|b| {
                if a == b {
                    10
                } else if a / 2 == b / 2 {
                    12
                } else {
                    32
                }
            })
            .collect()
    };
    host((0..4).map(|i| topo_cell(i, &d(i), hybrid)).collect())
}

fn fit_with(
    h: &HostTopology,
    u: &NumaUsage,
    g: &GuestTopology,
    policy: &TopologyPolicy,
) -> Result<FittedTopology, NumaRefusal> {
    let none = BTreeMap::new();
    let input = FitInput {
        host: h,
        usage: u,
        guest: g,
        cpu_ratio: 4.0,
        ram_ratio: 1.0,
        pack: false,
        pci_free_per_cell: &none,
        wants_pci: false,
        policy,
    };
    fit_instance(&input, |_| Ok::<(), ()>(()))
        .map(|(t, ())| t)
        .map_err(|(r, _)| r)
}

fn usage(pinned: &[(u32, &str)]) -> NumaUsage {
    let mut u = NumaUsage::default();
    for (c, p) in pinned {
        u.cells.entry(*c).or_default().pinned = cpus(p);
    }
    u
}

fn l3() -> TopologyPolicy {
    TopologyPolicy {
        pin_alignment: PinAlignment::L3,
        ..Default::default()
    }
}

fn closest() -> TopologyPolicy {
    TopologyPolicy {
        prefer_closest_cells: true,
        ..Default::default()
    }
}

#[test]
fn l3_alignment_keeps_a_guest_in_one_domain_where_nova_spreads_it() {
    let h = four_cells(false);
    // Cell 0 has CPUs 0-1 pinned; every other cell more, so the guest lands on cell 0, where
    // Nova takes the whole cores (2,10), (3,11) and (4,12), across both domains.
    let u = usage(&[(0, "0-1"), (1, "16-19"), (2, "32-35"), (3, "48-51")]);
    let g = guest(&[("", "0-5", 1024)], Some(CpuPolicy::Dedicated));
    let nova = fit_with(&h, &u, &g, &TopologyPolicy::default()).unwrap();
    let ours = fit_with(&h, &u, &g, &l3()).unwrap();
    assert_eq!(nova.host_cells(), ours.host_cells());
    let c = &h.cells[0];
    assert_eq!(domains_touched(c, &nova.cells[0].pinned_host_cpus()), 2);
    let pins = ours.cells[0].pinned_host_cpus();
    assert_eq!(domains_touched(c, &pins), 1);
    // The tightest domain that holds it: domain 0's six free CPUs.
    assert!(pins.is_subset(&cpus("2-3,8-11")), "{pins}");
}

#[test]
fn core_types_limit_dedicated_pins_and_the_flavor_overrides_them() {
    let h = four_cells(true);
    let p_only = TopologyPolicy {
        dedicated_core_types: Some(vec!["IntelCore".into()]),
        ..Default::default()
    };
    let u = NumaUsage::default();
    let g = guest(&[("", "0-3", 1024)], Some(CpuPolicy::Dedicated));
    let t = fit_with(&h, &u, &g, &p_only).unwrap();
    assert!(t.cells[0].pinned_host_cpus().is_subset(&cpus("0-3,8-11")));
    // Ten CPUs: more than the P-cores of any cell.
    let big = guest(&[("", "0-9", 1024)], Some(CpuPolicy::Dedicated));
    let r = fit_with(&h, &u, &big, &p_only).unwrap_err();
    let why = &r.cells[0].verdicts[0].reason;
    assert!(why.contains("core types IntelCore"), "{why}");
    assert!(fit_with(&h, &u, &big, &TopologyPolicy::default()).is_ok());
    // The flavor's rtrack:cpu_core_type wins over the configuration.
    let mut atom = g.clone();
    atom.core_types = Some(vec!["IntelAtom".into()]);
    let t = fit_with(&h, &u, &atom, &p_only).unwrap();
    assert!(t.cells[0].pinned_host_cpus().is_subset(&cpus("4-7,12-15")));
    // A host with one kind of core: no effect.
    let plain = four_cells(false);
    assert!(fit_with(&plain, &u, &big, &p_only).is_ok());
}

#[test]
fn closest_cells_replace_novas_pair_across_sockets() {
    let h = four_cells(false);
    // Cells 1 and 3 have pinned CPUs: Nova's spread order is 0, 2, 1, 3 and takes 0 and 2.
    let u = usage(&[(1, "16"), (3, "48")]);
    let g = guest(
        &[("", "0-1", 1024), ("", "2-3", 1024)],
        Some(CpuPolicy::Dedicated),
    );
    let nova = fit_with(&h, &u, &g, &TopologyPolicy::default()).unwrap();
    assert_eq!(nova.host_cells(), [0, 2]);
    // 0-1 and 2-3 are both at 12: Nova's order breaks the tie (0 first).
    let ours = fit_with(&h, &u, &g, &closest()).unwrap();
    assert_eq!(ours.host_cells(), [0, 1]);
    // When no close pair fits, Nova's pair stays: distance never refuses.
    let full = usage(&[(1, "16-31"), (3, "48-63")]);
    let t = fit_with(&h, &full, &g, &closest()).unwrap();
    assert_eq!(t.host_cells(), [0, 2]);
}

/// A host of `n` cells with random distances (symmetric, 10 on the diagonal).
fn random_host(n: usize, dist: &[u32]) -> HostTopology {
    let d = |a: usize, b: usize| -> u32 {
        if a == b {
            10
        } else {
            dist[(a.min(b) * 7 + a.max(b)) % dist.len()]
        }
    };
    host(
        (0..n)
            .map(|a| {
                let row: Vec<u32> = (0..n).map(|b| d(a, b)).collect();
                topo_cell(a as u32, &row, false)
            })
            .collect(),
    )
}

fn thread_policy(k: u8) -> Option<ThreadPolicy> {
    match k % 4 {
        0 => None,
        1 => Some(ThreadPolicy::Prefer),
        2 => Some(ThreadPolicy::Require),
        _ => Some(ThreadPolicy::Isolate),
    }
}

/// Pins on free dedicated CPUs of their cell, none twice, the emulator CPUs apart.
fn check_pins(h: &HostTopology, u: &NumaUsage, t: &FittedTopology) {
    let mut seen = CpuSet::new();
    for c in &t.cells {
        let hc = h.cell(c.host_cell).unwrap();
        let mut all: Vec<u32> = c.cpu_pinning.values().copied().collect();
        all.extend(c.cpuset_reserved.iter().flat_map(CpuSet::iter));
        for cpu in all {
            assert!(
                hc.pcpuset.contains(cpu),
                "CPU {cpu} not dedicated in cell {}",
                hc.id
            );
            assert!(
                !u.cell(hc.id).pinned.contains(cpu),
                "CPU {cpu} was pinned already"
            );
            assert!(!seen.contains(cpu), "CPU {cpu} pinned twice");
            seen.insert(cpu);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn policies_change_which_cpus_and_cells_never_whether(
        n in 2usize..6,
        dist in proptest::collection::vec(11u32..40, 8),
        masks in proptest::collection::vec(any::<u16>(), 6),
        shape in proptest::collection::vec(1u32..9, 1..4),
        tp in any::<u8>(),
        emulator in any::<bool>(),
    ) {
        let h = random_host(n, &dist);
        let mut u = NumaUsage::default();
        for (i, m) in masks.iter().take(n).enumerate() {
            let base = 16 * i as u32;
            let pinned = CpuSet::from_ids((0..16).filter(|b| m & (1 << b) != 0).map(|b| base + b));
            u.cells.entry(i as u32).or_default().pinned = pinned;
        }
        let mut next = 0;
        let cells: Vec<String> = shape
            .iter()
            .map(|k| {
                let s = format!("{}-{}", next, next + k - 1);
                next += k;
                s
            })
            .collect();
        let spec: Vec<(&str, &str, i64)> = cells.iter().map(|c| ("", c.as_str(), 1024)).collect();
        let mut g = guest(&spec, Some(CpuPolicy::Dedicated));
        g.thread_policy = thread_policy(tp);
        g.emulator_threads = emulator.then_some(EmulatorPolicy::Isolate);
        let off = fit_with(&h, &u, &g, &TopologyPolicy::default());
        let both = TopologyPolicy { pin_alignment: PinAlignment::L3, prefer_closest_cells: true, ..Default::default() };
        for policy in [l3(), closest(), both] {
            let on = fit_with(&h, &u, &g, &policy);
            prop_assert_eq!(off.is_ok(), on.is_ok(), "policy {:?}", policy);
            let Ok(t) = on else { continue };
            check_pins(&h, &u, &t);
            if policy.pin_alignment == PinAlignment::L3 {
                for (i, c) in t.cells.iter().enumerate() {
                    let hc = h.cell(c.host_cell).unwrap();
                    let reserve = usize::from(i == 0 && emulator);
                    let mut used = c.pinned_host_cpus();
                    for r in c.cpuset_reserved.iter().flat_map(CpuSet::iter) {
                        used.insert(r);
                    }
                    if one_domain_holds(hc, &u.cell(hc.id).pinned, &c.pcpuset, g.thread_policy, reserve) {
                        prop_assert_eq!(domains_touched(hc, &used), 1, "cell {} pins {}", hc.id, used);
                    }
                }
            }
            if policy.prefer_closest_cells {
                let Ok(nova) = &off else { continue };
                let total = |t: &FittedTopology| -> u32 {
                    let ids = t.host_cells();
                    ids.iter().flat_map(|a| ids.iter().map(move |b| (*a, *b)))
                        .filter(|(a, b)| a != b)
                        .map(|(a, b)| h.distance(a, b).unwrap_or(0))
                        .sum()
                };
                prop_assert!(total(&t) <= total(nova));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn core_types_keep_pins_on_the_types_allowed(
        masks in proptest::collection::vec(any::<u16>(), 4),
        vcpus in 1u32..12,
        tp in any::<u8>(),
        atom in any::<bool>(),
        aligned in any::<bool>(),
    ) {
        let h = four_cells(true);
        let mut u = NumaUsage::default();
        for (i, m) in masks.iter().enumerate() {
            let base = 16 * i as u32;
            let pinned = CpuSet::from_ids((0..16).filter(|b| m & (1 << b) != 0).map(|b| base + b));
            u.cells.entry(i as u32).or_default().pinned = pinned;
        }
        let spec = format!("0-{}", vcpus - 1);
        let mut g = guest(&[("", spec.as_str(), 1024)], Some(CpuPolicy::Dedicated));
        g.thread_policy = thread_policy(tp);
        // The flavor's override, or the configuration's list.
        let allowed = if atom { "IntelAtom" } else { "IntelCore" };
        if atom {
            g.core_types = Some(vec![allowed.into()]);
        }
        let policy = TopologyPolicy {
            dedicated_core_types: Some(vec!["IntelCore".into()]),
            pin_alignment: if aligned { PinAlignment::L3 } else { PinAlignment::None },
            ..Default::default()
        };
        let on = fit_with(&h, &u, &g, &policy);
        if let Ok(t) = &on {
            check_pins(&h, &u, t);
            for c in &t.cells {
                let hc = h.cell(c.host_cell).unwrap();
                prop_assert!(c.pinned_host_cpus().is_subset(&hc.facts.cpus_of_types(&[allowed.to_string()])));
            }
            // Taking CPUs away never makes a guest fit that did not.
            prop_assert!(fit_with(&h, &u, &g, &TopologyPolicy::default()).is_ok());
        }
    }
}
