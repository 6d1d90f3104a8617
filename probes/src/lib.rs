//! rtrack-probes: reads a host's hardware from sysfs and procfs under a configurable root.
//!
//! In: a [`HostRoot`] and [`ProbeOptions`] (the instances path to measure, whether to list virtual
//! block devices). Out: a [`HostInventory`] (host identity, CPUs, NUMA nodes, CPU caches and core
//! types, memory, disks, PCI functions, vDPA devices, mediated devices, memory encryption,
//! persistent memory namespaces, uptime, and the [`Warning`]s in probe order), or a [`ProbeError`] only when neither root is a
//! readable directory.
//!
//! Every probe is a function of a [`HostRoot`] (separate sysfs and procfs roots, so that tests
//! run on captured trees and containers can point at a bind-mounted host `/sys`) that returns
//! plain data and pushes [`Warning`]s for anything missing or malformed. A probe never panics on
//! file contents and never aborts the whole inventory because one file is bad.
//!
//! One module per probe: [`cpu`] (with [`cpuinfo`]), [`cpu_power`], [`numa`], [`cache`],
//! [`core_type`], [`memory`],
//! [`disk`], [`pci`] (with [`vpd`]), [`vdpa`], [`mdev`], [`mem_encryption`], [`pmem`], [`host`],
//! [`uptime`];
//! [`probe_host`] runs them all in the order their inputs need.

pub mod cache;
mod cache_index;
pub mod confine;
pub mod core_type;
pub mod cpu;
pub mod cpu_power;
mod cpu_topology;
pub mod cpuinfo;
pub mod cpulist;
pub mod disk;
pub mod host;
pub mod mdev;
pub mod mem_encryption;
pub mod memory;
pub mod numa;
pub mod pci;
pub mod pci_names;
pub mod pci_uevent;
pub mod pmem;
pub mod read;
mod root;
pub mod uptime;
pub mod vdpa;
pub mod vpd;

use std::path::PathBuf;

use serde::Serialize;

pub use cpulist::CpuSet;
pub use read::{Warning, Warnings};
pub use root::HostRoot;

/// The only probe error: the roots cannot be read at all. Everything else is a warning.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// Neither the sysfs nor the procfs root is a readable directory.
    #[error("cannot probe: neither {sys} nor {proc} is a readable directory ({reason})")]
    UnusableRoot {
        /// The sysfs root tried.
        sys: PathBuf,
        /// The procfs root tried.
        proc: PathBuf,
        /// What was wrong with each.
        reason: String,
    },
}

/// Everything the probes found.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct HostInventory {
    /// Hostname, architecture, kernel.
    pub host: host::HostIdentity,
    /// Seconds up and load averages (for the ComputeNode's `stats["uptime"]`).
    #[serde(default)]
    pub uptime: uptime::HostUptime,
    /// Logical CPUs, their topology (packages, cores, threads) and online/offline lists.
    pub cpu: cpu::CpuInfo,
    /// NUMA nodes, sorted by id.
    pub numa_nodes: Vec<numa::NumaNode>,
    /// CPU caches of level 2 and above, one per instance, with the online CPUs sharing each.
    #[serde(default)]
    pub caches: Vec<cache::CacheInstance>,
    /// Kinds of core on hybrid processors; empty on a host with one kind.
    #[serde(default)]
    pub core_types: Vec<core_type::CoreType>,
    /// Host memory.
    pub memory: memory::MemoryInfo,
    /// Instance filesystem and block devices.
    pub disks: disk::DiskInfo,
    /// PCI functions, sorted by address.
    pub pci_devices: Vec<pci::PciDevice>,
    /// Devices on the vDPA bus, sorted by name (the VFs they sit on are `vdpa` devices).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vdpa_devices: Vec<vdpa::VdpaDevice>,
    /// Mediated device parents, their types, and the mediated devices that exist.
    #[serde(default)]
    pub mediated_devices: mdev::MediatedDevices,
    /// AMD SEV and Intel TDX state and encrypted guest capacity.
    #[serde(default)]
    pub memory_encryption: mem_encryption::MemoryEncryption,
    /// Persistent memory namespaces (vPMEM), sorted by region and number.
    #[serde(default)]
    pub pmem_namespaces: Vec<pmem::PmemNamespace>,
    /// What could not be read or understood, in probe order.
    pub warnings: Vec<Warning>,
}

/// Options for [`probe_host`].
#[derive(Debug, Clone, Default)]
pub struct ProbeOptions {
    /// Disk probe options (instances path, virtual devices).
    pub disk: disk::DiskOptions,
    /// Read each PF's VPD for its card serial number ([`vpd`]): needed for remote-managed
    /// devices only, and a VPD read goes to the device, so it is off unless asked for.
    pub pci_vpd: bool,
    /// CPUs whose cpufreq governor to read ([`cpu_power`]): the dedicated CPUs when their power
    /// is managed; none by default.
    pub cpu_governors: CpuSet,
}

/// Runs every probe. Fails only when the roots are unusable.
pub fn probe_host(root: &HostRoot, opts: &ProbeOptions) -> Result<HostInventory, ProbeError> {
    root.check()?;
    let _confined = confine::Confined::enter(root);
    let mut w = Warnings::new();
    let cpu_lists = cpu::read_cpu_lists(root, &mut w);
    let numa = numa::probe_numa_nodes(root, &cpu_lists.online, &mut w);
    let mut cpu_nodes = cpu_power::offline_cpu_nodes(root, &cpu_lists.offline, &mut w);
    cpu_nodes.extend(&numa.cpu_nodes);
    let mut cpu = cpu::probe_cpu(root, cpu_lists, &cpu_nodes, &mut w);
    cpu.governors = cpu_power::probe_governors(root, &opts.cpu_governors, &mut w);
    let siblings = cpu
        .cpus
        .iter()
        .map(|c| (c.id, c.thread_siblings.clone()))
        .collect();
    let numbering = cache::IndexNumbering::for_arch(cpu.arch.as_deref());
    let caches = cache::probe_caches(root, &cpu.online, &siblings, numbering, &mut w);
    let core_types = core_type::probe_core_types(root, &cpu.present, &mut w);
    let memory = memory::probe_memory(root, &mut w);
    let disks = disk::probe_disks(root, &opts.disk, &mut w);
    let mut pci_devices = pci::probe_pci(root, &numa, opts.pci_vpd, &mut w);
    let vdpa_devices = vdpa::probe_vdpa(root, &mut w);
    vdpa::mark_vdpa_functions(root, &mut pci_devices, &vdpa_devices, &mut w);
    let mediated_devices = mdev::probe_mdevs(root, &mut w);
    let memory_encryption = mem_encryption::probe_mem_encryption(root, &cpu.flags, &mut w);
    let pmem_namespaces = pmem::probe_pmem(root, &mut w);
    let host = host::probe_host_identity(root, cpu.arch.clone(), &mut w);
    let uptime = uptime::probe_uptime(root, &mut w);
    Ok(HostInventory {
        host,
        uptime,
        cpu,
        numa_nodes: numa.nodes,
        caches,
        core_types,
        memory,
        disks,
        pci_devices,
        vdpa_devices,
        mediated_devices,
        memory_encryption,
        pmem_namespaces,
        warnings: w.into_vec(),
    })
}
