use super::*;
use crate::probes::CpuSet;
use crate::tracker::numa::host::PagePool;
use crate::tracker::numa::{EmulatorPolicy, GuestNetworks, ThreadPolicy};

fn cpus(s: &str) -> CpuSet {
    CpuSet::parse_list(s).unwrap()
}

/// A cell of `cores` cores x `threads` threads starting at CPU `first` (siblings `c, c+cores`
/// for two threads), every CPU shared and dedicated, `mem` MiB, with 2M and 1G pools.
fn cell(
    id: u32,
    first: u32,
    cores: u32,
    threads: u32,
    mem: i64,
    huge_2m: i64,
    huge_1g: i64,
) -> HostCell {
    let all: Vec<u32> = (first..first + cores * threads).collect();
    let set = CpuSet::from_ids(all.iter().copied());
    HostCell {
        id,
        socket: Some(i64::from(id)),
        cpuset: set.clone(),
        pcpuset: set,
        siblings: (0..cores)
            .map(|c| CpuSet::from_ids((0..threads).map(|t| first + c + t * cores)))
            .collect(),
        memory_mb: mem,
        pages: vec![
            PagePool {
                size_kb: 4,
                total: (mem * 1024 - huge_2m * 2048 - huge_1g * 1_048_576) / 4,
                reserved: 0,
                kernel_free: None,
            },
            PagePool {
                size_kb: 2048,
                total: huge_2m,
                reserved: 0,
                kernel_free: None,
            },
            PagePool {
                size_kb: 1_048_576,
                total: huge_1g,
                reserved: 0,
                kernel_free: None,
            },
        ],
        physnets: Default::default(),
        tunneled: false,
        facts: Default::default(),
    }
}

fn host(cells: Vec<HostCell>) -> HostTopology {
    HostTopology {
        cells,
        legacy_cpus: true,
        base_page_kb: 4,
    }
}

fn guest(cells: &[(&str, &str, i64)], policy: Option<CpuPolicy>) -> GuestTopology {
    GuestTopology {
        cells: cells
            .iter()
            .enumerate()
            .map(|(i, (shared, pinned, mem))| GuestCell {
                id: i as u32,
                cpuset: cpus(shared),
                pcpuset: cpus(pinned),
                memory_mb: *mem,
            })
            .collect(),
        cpu_policy: policy,
        thread_policy: None,
        emulator_threads: None,
        pagesize: None,
        networks: Default::default(),
        core_types: None,
    }
}

fn fit(
    h: &HostTopology,
    u: &NumaUsage,
    g: &GuestTopology,
    pack: bool,
) -> Result<FittedTopology, NumaRefusal> {
    let none = BTreeMap::new();
    let input = FitInput {
        host: h,
        usage: u,
        guest: g,
        cpu_ratio: 4.0,
        ram_ratio: 1.0,
        pack,
        pci_free_per_cell: &none,
        wants_pci: false,
        policy: &TopologyPolicy::default(),
    };
    fit_instance(&input, |_| Ok::<(), ()>(()))
        .map(|(t, ())| t)
        .map_err(|(r, _)| r)
}

#[test]
fn spread_puts_a_guest_on_the_emptiest_cell_and_pack_on_the_busiest() {
    let h = host(vec![
        cell(0, 0, 4, 2, 8192, 0, 0),
        cell(1, 8, 4, 2, 8192, 0, 0),
    ]);
    let mut u = NumaUsage::default();
    u.add(
        &h,
        &fit(&h, &u, &guest(&[("0", "", 1024)], None), false).unwrap(),
    );
    assert_eq!(u.cell(0).memory_usage_mb, 1024);
    let g = guest(&[("0", "", 512)], None);
    assert_eq!(fit(&h, &u, &g, false).unwrap().host_cells(), [1]);
    assert_eq!(fit(&h, &u, &g, true).unwrap().host_cells(), [0]);
}

#[test]
fn dedicated_guests_pin_siblings_first_and_count_them() {
    let h = host(vec![cell(0, 0, 4, 2, 8192, 0, 0)]);
    let t = fit(
        &h,
        &NumaUsage::default(),
        &guest(&[("", "0-2", 1024)], Some(CpuPolicy::Dedicated)),
        false,
    )
    .unwrap();
    assert_eq!(
        t.cells[0].cpu_pinning.values().copied().collect::<Vec<_>>(),
        [0, 4, 1]
    );
    let u = NumaUsage::of(&h, [&t]);
    assert_eq!(u.cell(0).pinned.to_string(), "0-1,4");
    assert_eq!(u.cell(0).pages(4), 1024 * 256);
    assert!(u.overcommit(&h).is_empty());
}

#[test]
fn asymmetric_guests_that_nova_refuses_through_its_fit_cache_fit() {
    // Scenario 03's shape: the big guest cell fits only host cell 1, the small one anywhere.
    let h = host(vec![
        cell(0, 0, 2, 2, 4096, 0, 0),
        cell(1, 4, 8, 2, 65536, 0, 0),
        cell(2, 20, 4, 1, 16384, 0, 0),
    ]);
    let g = guest(&[("0", "", 1024), ("1-5", "", 40960)], None);
    let t = fit(&h, &NumaUsage::default(), &g, false).unwrap();
    assert_eq!(t.host_cells()[1], 1);
}

#[test]
fn a_refusal_says_per_host_cell_why_each_guest_cell_does_not_fit() {
    let h = host(vec![
        cell(0, 0, 2, 2, 4096, 0, 0),
        cell(1, 4, 2, 2, 4096, 0, 0),
    ]);
    let mut g = guest(&[("", "0-5", 1024)], Some(CpuPolicy::Dedicated));
    let r = fit(&h, &NumaUsage::default(), &g, false).unwrap_err();
    assert_eq!(r.reason, "guest cell 0 fits no host cell");
    assert_eq!(r.cells.len(), 2);
    assert_eq!(
        r.cells[0].verdicts[0].reason,
        "dedicated CPUs in the cell: have 4, need 6"
    );
    g = guest(&[("", "0-1", 8192)], Some(CpuPolicy::Dedicated));
    let r = fit(&h, &NumaUsage::default(), &g, false).unwrap_err();
    assert!(r.cells[1].verdicts[0].reason.contains("memory for pinned guests (no overcommit): 4 KiB pages free: have 1048576, need 2097152"), "{r:?}");
    let g = guest(&[("0", "", 1024), ("1", "", 1024), ("2", "", 1024)], None);
    let r = fit(&h, &NumaUsage::default(), &g, false).unwrap_err();
    assert_eq!(r.reason, "the guest has 3 NUMA cells and the host 2");
}

#[test]
fn isolated_emulator_threads_take_one_more_cpu_on_guest_cell_0s_host_cell() {
    let h = host(vec![
        cell(0, 0, 4, 1, 8192, 0, 0),
        cell(1, 4, 4, 1, 8192, 0, 0),
    ]);
    let mut g = guest(
        &[("", "0-1", 1024), ("", "2-3", 1024)],
        Some(CpuPolicy::Dedicated),
    );
    g.emulator_threads = Some(EmulatorPolicy::Isolate);
    let t = fit(&h, &NumaUsage::default(), &g, false).unwrap();
    assert_eq!(
        t.cells[0].cpuset_reserved.as_ref().map(ToString::to_string),
        Some("2".into())
    );
    assert_eq!(t.cells[1].cpuset_reserved, None);
    let u = NumaUsage::of(&h, [&t]);
    assert_eq!(u.cell(0).pinned.len(), 3);
    // Guest cell 0 needs 4 + 1 and no cell has 5 dedicated CPUs.
    let mut g = guest(&[("", "0-3", 1024)], Some(CpuPolicy::Dedicated));
    g.emulator_threads = Some(EmulatorPolicy::Isolate);
    assert!(fit(&h, &NumaUsage::default(), &g, false).is_err());
}

#[test]
fn page_sizes_are_chosen_largest_first_and_1g_pages_need_whole_gib() {
    let h = host(vec![cell(0, 0, 4, 1, 16384, 1024, 4)]);
    let mut g = guest(&[("0", "", 1536)], None);
    g.pagesize = Some(PageSize::Large);
    // 1.5 GiB is not whole 1G pages: 2M pages.
    assert_eq!(
        fit(&h, &NumaUsage::default(), &g, false).unwrap().cells[0].pagesize_kb,
        Some(2048)
    );
    g.cells[0].memory_mb = 2048;
    let t = fit(&h, &NumaUsage::default(), &g, false).unwrap();
    assert_eq!(t.cells[0].pagesize_kb, Some(1_048_576));
    let u = NumaUsage::of(&h, [&t]);
    assert_eq!(u.cell(0).pages(1_048_576), 2);
    g.pagesize = Some(PageSize::Kb(3072));
    let r = fit(&h, &u, &g, false).unwrap_err();
    assert!(
        r.cells[0].verdicts[0].reason.contains("no 3072 KiB pages"),
        "{r:?}"
    );
    // Hugepage memory never overcommits, whatever the ratio.
    g.pagesize = Some(PageSize::Kb(1_048_576));
    g.cells[0].memory_mb = 3072;
    let r = fit(&h, &u, &g, false).unwrap_err();
    assert!(
        r.cells[0].verdicts[0]
            .reason
            .contains("1048576 KiB pages free: have 2, need 3"),
        "{r:?}"
    );
}

#[test]
fn isolate_on_an_smt_host_with_cpu_sets_never_fits_as_in_nova() {
    let mut c = cell(0, 0, 4, 2, 8192, 0, 0);
    c.cpuset = cpus("0");
    c.pcpuset = cpus("1-7");
    let h = host(vec![c]);
    let mut g = guest(&[("", "0", 512)], Some(CpuPolicy::Dedicated));
    g.thread_policy = Some(ThreadPolicy::Isolate);
    let r = fit(&h, &NumaUsage::default(), &g, false).unwrap_err();
    assert!(
        r.cells[0].verdicts[0].reason.contains("bug #1889633"),
        "{r:?}"
    );
}

#[test]
fn pci_affinity_moves_the_guest_to_cells_that_meet_it() {
    let h = host(vec![
        cell(0, 0, 4, 1, 8192, 0, 0),
        cell(1, 4, 4, 1, 8192, 0, 0),
        cell(2, 8, 4, 1, 8192, 0, 0),
    ]);
    let u = NumaUsage::default();
    let g = guest(&[("0", "", 512)], None);
    let free: BTreeMap<u32, i64> = [(2, 1)].into();
    let input = FitInput {
        host: &h,
        usage: &u,
        guest: &g,
        cpu_ratio: 4.0,
        ram_ratio: 1.0,
        pack: false,
        pci_free_per_cell: &free,
        wants_pci: true,
        policy: &TopologyPolicy::default(),
    };
    let mut asked = Vec::new();
    let (t, got) = fit_instance(&input, |cells| {
        asked.push(cells.to_vec());
        if cells.contains(&2) {
            Ok(cells.to_vec())
        } else {
            Err("no device")
        }
    })
    .unwrap();
    assert_eq!(t.host_cells(), [2]);
    assert_eq!(got, [2]);
    // Cells with free devices are tried first, so the first real try is the one that works.
    assert_eq!(asked, [vec![0, 1, 2], vec![2]]);
    let r = fit_instance(&input, |_| Err::<(), _>("never")).unwrap_err();
    assert_eq!(r.1, Some("never"));
    assert!(r.0.reason.contains("PCI"), "{:?}", r.0);
}

#[test]
fn an_eight_cell_guest_on_sixteen_cells_is_answered_quickly_even_when_pci_never_fits() {
    let cells = (0..16)
        .map(|i| cell(i, i * 32, 16, 2, 65536, 0, 0))
        .collect();
    let h = host(cells);
    let pinned: Vec<String> = (0..8).map(|i| format!("{}-{}", 2 * i, 2 * i + 1)).collect();
    let shape: Vec<(&str, &str, i64)> = pinned.iter().map(|p| ("", p.as_str(), 1024)).collect();
    let g = guest(&shape, Some(CpuPolicy::Dedicated));
    let u = NumaUsage::default();
    let free = BTreeMap::new();
    let input = FitInput {
        host: &h,
        usage: &u,
        guest: &g,
        cpu_ratio: 4.0,
        ram_ratio: 1.0,
        pack: false,
        pci_free_per_cell: &free,
        wants_pci: true,
        policy: &TopologyPolicy::default(),
    };
    let start = std::time::Instant::now();
    // Only sets that include both cell 3 and cell 12 meet the PCI requests.
    let r = fit_instance(&input, |cells| {
        if cells.contains(&3) && cells.contains(&12) {
            Ok(())
        } else {
            Err(())
        }
    });
    assert!(r.is_ok());
    let t = r.unwrap().0;
    assert!(t.host_cells().contains(&3) && t.host_cells().contains(&12));
    // Never satisfiable by 8 cells (needs cells 0-8 all): refused, not searched for minutes.
    let r = fit_instance(&input, |cells| {
        if cells.len() > 8 || (0..9).all(|c| cells.contains(&c)) {
            Ok(())
        } else {
            Err(())
        }
    });
    assert!(r.is_err());
    assert!(
        start.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
}

/// Nova's rule on the test_numa_servers configuration: physnet foo on cell 1, bar on cell 0,
/// tunneled networks on both.
#[test]
fn networks_numa_affinity_chooses_the_cells_as_nova_does() {
    let mut h = host(vec![
        cell(0, 0, 4, 2, 8192, 0, 0),
        cell(1, 8, 4, 2, 8192, 0, 0),
    ]);
    h.set_network_affinity(&crate::config::neutron::NetworkAffinity {
        physnets: [
            ("foo".to_string(), [1].into()),
            ("bar".to_string(), [0].into()),
        ]
        .into(),
        tunnel: [0, 1].into(),
    });
    let on = |g: GuestTopology, physnets: &[&str], tunneled: bool| GuestTopology {
        networks: GuestNetworks {
            physnets: physnets.iter().map(|p| p.to_string()).collect(),
            tunneled,
        },
        ..g
    };
    let u = NumaUsage::default();
    let one = guest(&[("0-1", "", 1024)], None);
    let two = guest(&[("0", "", 512), ("1", "", 512)], None);
    // Spread would pick cell 0 (equally empty, first); foo's vSwitch is on cell 1.
    assert_eq!(fit(&h, &u, &one, false).unwrap().host_cells(), [0]);
    assert_eq!(
        fit(&h, &u, &on(one.clone(), &["foo"], false), false)
            .unwrap()
            .host_cells(),
        [1]
    );
    // foo and bar on one cell: none has both.
    let e = fit(&h, &u, &on(one.clone(), &["foo", "bar"], false), false).unwrap_err();
    assert!(
        e.reason.contains("physnet bar on host cells [0]")
            && e.reason.contains("physnet foo on host cells [1]"),
        "{}",
        e.reason
    );
    // Two cells: one has each.
    let mut cells = fit(&h, &u, &on(two, &["foo", "bar"], false), false)
        .unwrap()
        .host_cells();
    cells.sort_unstable();
    assert_eq!(cells, [0, 1]);
    // foo and a tunnel: cell 1 has both. A physnet no cell names binds nothing.
    assert_eq!(
        fit(&h, &u, &on(one.clone(), &["foo", "other"], true), false)
            .unwrap()
            .host_cells(),
        [1]
    );
    // A tunnel on no cell of a host whose tunnel is configured elsewhere.
    h.set_network_affinity(&crate::config::neutron::NetworkAffinity {
        physnets: Default::default(),
        tunnel: [1].into(),
    });
    assert_eq!(
        fit(&h, &u, &on(one, &[], true), false)
            .unwrap()
            .host_cells(),
        [1]
    );
}

mod policy;
