//! The probes' own footprint (issue 25): the files opened on the large synthetic host, counted
//! through `confine` (where every probe opens its files), held to the goal for the whole
//! probe and to each probe's present figures per device, so that a change that reads one more
//! file per PCI function, per core or per CPU fails here rather than in a timing.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test or bench: a panic is its failure

use rtrack_fixtures::real::scratch_dir;
use rtrack_fixtures::synthetic::SyntheticHost;
use rtrack_probes::confine::{opens_attempted, Confined};
use rtrack_probes::pci::PciDevType;
use rtrack_probes::{cache, cpu, numa, pci, probe_host, HostRoot, ProbeOptions, Warnings};

/// `f`'s result and the opens it made on this thread.
fn opens_of<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let before = opens_attempted();
    let out = f();
    (out, opens_attempted() - before)
}

#[test]
fn large_host_opens_few_files_per_function_and_per_cpu() {
    let dir = scratch_dir();
    SyntheticHost::large().write(dir.path());
    let root = HostRoot::under(dir.path());

    // The whole probe: at most 6 opens per PCI function or CPU (issue 25's goal).
    let (inv, all) = opens_of(|| probe_host(&root, &ProbeOptions::default()).unwrap());
    assert!(inv.warnings.is_empty(), "{:?}", inv.warnings);
    let functions = inv.pci_devices.len() as u64;
    let cpus = inv.cpu.cpus.len() as u64;
    let cores = u64::from(inv.cpu.cores);
    let pfs = inv
        .pci_devices
        .iter()
        .filter(|d| d.dev_type == PciDevType::Pf)
        .count() as u64;
    let instances = inv.caches.len() as u64;
    assert_eq!(
        (functions, cpus, cores, pfs, instances),
        (1029, 256, 128, 4, 130)
    );
    assert!(
        all <= 6 * (functions + cpus),
        "{all} opens for {functions} functions and {cpus} CPUs: more than 6 each"
    );

    // Each probe's part, at its present figure.
    let _confined = Confined::enter(&root);
    let mut w = Warnings::new();
    let lists = cpu::read_cpu_lists(&root, &mut w);
    let topo = numa::probe_numa_nodes(&root, &lists.online, &mut w);
    let (cpu, topology) = opens_of(|| cpu::probe_cpu(&root, lists, &topo.cpu_nodes, &mut w));
    // Per core (its threads share it): core_id, core_cpus_list and cluster_id, relative to the
    // `cpu` directory; per package (one die each): physical_package_id, package_cpus_list,
    // die_id and die_cpus_list, and the package and die ids of each list's last CPU (the
    // lists' check); once: that directory, smt/active, cpuinfo, kernel/arch.
    let sockets = u64::from(inv.cpu.sockets);
    assert_eq!(topology, 3 * cores + 6 * sockets + 4, "CPU topology");
    let siblings = cpu
        .cpus
        .iter()
        .map(|c| (c.id, c.thread_siblings.clone()))
        .collect();
    let numbering = cache::IndexNumbering::for_arch(cpu.arch.as_deref());
    assert_eq!(
        numbering,
        cache::IndexNumbering::SameOnEveryCpu,
        "an x86 host"
    );
    let (_, caches) =
        opens_of(|| cache::probe_caches(&root, &cpu.online, &siblings, numbering, &mut w));
    // Per core, once for its threads (they share every cache): its `cache` listing and the
    // level of its two L1 indexes; per cache instance, read from its first CPU only: level,
    // type, shared_cpu_list, id and size. The other CPUs of an L3 do not read its index.
    assert_eq!(caches, 3 * cores + 5 * instances, "CPU caches");
    let (devices, pci) = opens_of(|| pci::probe_pci(&root, &topo, false, &mut w));
    assert_eq!(devices.len() as u64, functions);
    // Per function: its directory, uevent, revision and numa_node; per PF: sriov_totalvfs,
    // sriov_numvfs and a listing for its virtfn links; the plain function (NVMe) tries the
    // two sriov files; once: the bus/pci/devices and class/net listings.
    assert_eq!(pci, 4 * functions + 3 * pfs + 2 + 2, "PCI functions");
    assert!(w.is_empty(), "{w:?}");
}
