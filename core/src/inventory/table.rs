//! Human summary of an inventory (`rtrackd --once --format table`): like lscpu plus lspci, with
//! PCI functions grouped by vendor, product and device type.
//!
//! In: an [`InventoryReport`] (from `--once`, or rebuilt by `rtrackctl inventory` from
//! `/v1/inventory`). Out: text: host, CPUs, memory and hugepages, NUMA nodes, the dedicated
//! CPUs (online or not, power management), the instances filesystem and block devices, PCI
//! function groups, vDPA devices, mediated devices, memory encryption (Intel TDX with what the
//! configuration makes of it), persistent memory namespaces and the labels offering them, and
//! the probe's warnings.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::inventory::InventoryReport;
use crate::probes::numa::HugePages;

/// Renders the report as text.
pub fn render(report: &InventoryReport) -> String {
    let inv = &report.inventory;
    let mut out = String::new();
    host_cpus_memory(&mut out, report);
    numa_nodes(&mut out, report);
    if let Some(d) = &report.dedicated_cpus {
        dedicated_cpus(&mut out, d);
    }
    disks(&mut out, report);
    pci_groups(&mut out, report);
    vdpa_devices(&mut out, inv);
    mediated_devices(&mut out, &inv.mediated_devices);
    let enc = &inv.memory_encryption;
    let _ = writeln!(
        out,
        "\nMemory encryption: SEV {}, SEV-ES {}, SEV-SNP {}; firmware {}; contexts SEV {}, SEV-ES {}",
        flag(enc.sev),
        flag(enc.sev_es),
        flag(enc.sev_snp),
        flag(enc.sev_firmware),
        enc.sev_guests.map_or("-".to_string(), |n| n.to_string()),
        enc.sev_es_guests.map_or("-".to_string(), |n| n.to_string()),
    );
    intel_tdx(&mut out, report);
    pmem_namespaces(&mut out, report);

    let _ = writeln!(out, "\nWarnings:      {}", inv.warnings.len());
    for w in &inv.warnings {
        let _ = writeln!(out, "  {}: {}", w.path, w.message);
    }
    out
}

fn or_unknown(v: &Option<String>) -> String {
    v.clone().unwrap_or_else(|| "unknown".to_string())
}

/// Host, CPUs and memory: the lscpu part.
fn host_cpus_memory(out: &mut String, report: &InventoryReport) {
    let inv = &report.inventory;
    let _ = writeln!(
        out,
        "Host:          {} ({}, kernel {})",
        or_unknown(&inv.host.hostname),
        or_unknown(&inv.host.arch),
        or_unknown(&inv.host.kernel)
    );
    let _ = writeln!(
        out,
        "Probed at:     {} by rtrack {}",
        report.probed_at, report.rtrack_version
    );

    let cpu = &inv.cpu;
    let _ = writeln!(
        out,
        "CPU model:     {} ({})",
        or_unknown(&cpu.model),
        or_unknown(&cpu.vendor)
    );
    let _ = writeln!(
        out,
        "CPUs:          {} socket(s), {} core(s), {} thread(s) online; SMT {}",
        cpu.sockets,
        cpu.cores,
        cpu.threads,
        if cpu.smt { "on" } else { "off" }
    );
    let _ = writeln!(
        out,
        "               online {}, offline {}, present {}, possible {}",
        dash_if_empty(&cpu.online.to_string()),
        dash_if_empty(&cpu.offline.to_string()),
        dash_if_empty(&cpu.present.to_string()),
        dash_if_empty(&cpu.possible.to_string())
    );
    let _ = writeln!(out, "CPU flags:     {} flag(s)", cpu.flags.len());

    let mem = &inv.memory;
    let _ = writeln!(
        out,
        "Memory:        {} MiB total, {} MiB available{}",
        mem.total_mb,
        mem.available_mb
            .map_or("unknown".to_string(), |v| v.to_string()),
        hugepage_summary(&mem.hugepages)
            .map(|s| format!("; hugepages {s}"))
            .unwrap_or_default()
    );
}

/// The NUMA nodes' table: CPUs, the shared and dedicated sets, memory and hugepages.
fn numa_nodes(out: &mut String, report: &InventoryReport) {
    let inv = &report.inventory;
    let _ = writeln!(out, "\nNUMA nodes:    {}", inv.numa_nodes.len());
    if !inv.numa_nodes.is_empty() {
        let sets = cell_cpu_sets(report);
        let mut rows = vec![vec![
            "NODE".to_string(),
            "CPUS".to_string(),
            "SHARED (VCPU)".to_string(),
            "DEDICATED (PCPU)".to_string(),
            "MEMORY_MB".to_string(),
            "FREE_MB".to_string(),
            "HUGEPAGES (size: free/total)".to_string(),
        ]];
        for n in &inv.numa_nodes {
            let (shared, dedicated) = sets.get(&n.id).cloned().unwrap_or_default();
            rows.push(vec![
                n.id.to_string(),
                dash_if_empty(&n.cpus.to_string()),
                dash_if_empty(&shared),
                dash_if_empty(&dedicated),
                n.memory_mb.map_or("-".to_string(), |v| v.to_string()),
                n.free_mb.map_or("-".to_string(), |v| v.to_string()),
                hugepage_summary(&n.hugepages).unwrap_or_else(|| "-".to_string()),
            ]);
        }
        push_table(out, &rows);
    }
}

/// The instances filesystem and the block devices.
fn disks(out: &mut String, report: &InventoryReport) {
    let inv = &report.inventory;
    let _ = writeln!(out);
    match &inv.disks.instances {
        Some(fs) => {
            let _ = writeln!(
                out,
                "Instances:     {} (measured at {}): {} GiB total, {} GiB free",
                fs.path, fs.measured_path, fs.total_gb, fs.free_gb
            );
        }
        None => {
            let _ = writeln!(out, "Instances:     not measured");
        }
    }
    let _ = writeln!(out, "Block devices: {}", inv.disks.block_devices.len());
    if !inv.disks.block_devices.is_empty() {
        let mut rows = vec![vec![
            "NAME".to_string(),
            "SIZE_GIB".to_string(),
            "ROTA".to_string(),
            "RM".to_string(),
            "PCI".to_string(),
            "MODEL".to_string(),
        ]];
        for b in &inv.disks.block_devices {
            rows.push(vec![
                b.name.clone(),
                format!("{:.1}", b.size_bytes as f64 / (1u64 << 30) as f64),
                flag(b.rotational),
                flag(b.removable),
                b.pci_address.clone().unwrap_or_else(|| "-".to_string()),
                b.model.clone().unwrap_or_else(|| "-".to_string()),
            ]);
        }
        push_table(out, &rows);
    }
}

/// PCI functions grouped by what a pool keys on first: ids and device type.
fn pci_groups(out: &mut String, report: &InventoryReport) {
    let inv = &report.inventory;
    let _ = writeln!(out, "\nPCI functions: {}", inv.pci_devices.len());
    if !inv.pci_devices.is_empty() {
        // Group by what a pool would key on first: ids and device type.
        struct Group {
            count: usize,
            numa: std::collections::BTreeSet<String>,
            drivers: std::collections::BTreeSet<String>,
            class: String,
            name: String,
        }
        let mut groups: BTreeMap<(String, String, &'static str), Group> = BTreeMap::new();
        for d in &inv.pci_devices {
            let g = groups
                .entry((
                    d.vendor_id.clone(),
                    d.product_id.clone(),
                    d.dev_type.as_str(),
                ))
                .or_insert_with(|| Group {
                    count: 0,
                    numa: Default::default(),
                    drivers: Default::default(),
                    class: d.class_name.clone().unwrap_or_else(|| d.class.clone()),
                    name: format!(
                        "{} {}",
                        d.vendor_name.as_deref().unwrap_or("unknown vendor"),
                        d.product_name.as_deref().unwrap_or("unknown device")
                    ),
                });
            g.count += 1;
            g.numa
                .insert(d.numa_node.map_or("-".to_string(), |n| n.to_string()));
            g.drivers
                .insert(d.driver.clone().unwrap_or_else(|| "-".to_string()));
        }
        let mut rows = vec![vec![
            "COUNT".to_string(),
            "ID".to_string(),
            "DEV_TYPE".to_string(),
            "NUMA".to_string(),
            "DRIVER".to_string(),
            "CLASS".to_string(),
            "NAME".to_string(),
        ]];
        for ((vendor, product, dev_type), g) in groups {
            rows.push(vec![
                g.count.to_string(),
                format!("{vendor}:{product}"),
                dev_type.to_string(),
                g.numa.into_iter().collect::<Vec<_>>().join(","),
                g.drivers.into_iter().collect::<Vec<_>>().join(","),
                g.class,
                g.name,
            ]);
        }
        push_table(out, &rows);
    }
}

/// Intel TDX: what the kernel says, and what is offered under the configuration.
fn intel_tdx(out: &mut String, report: &InventoryReport) {
    let enc = &report.inventory.memory_encryption;
    let count = |v: Option<u64>| v.map_or("-".to_string(), |n| n.to_string());
    let offered = match report.offered.as_ref().map(|o| &o.intel_tdx) {
        None => String::new(),
        Some(t) if t.supported => format!("; offered {} guest(s)", t.slots),
        Some(t) => format!(
            "; not offered: {}",
            t.why_not.as_deref().unwrap_or("unsupported")
        ),
    };
    let configured = report
        .offered
        .as_ref()
        .map(|o| format!(", configured {}", count(o.intel_tdx.configured)))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "Intel TDX:         KVM {}, platform flag {}; guests misc cgroup {}{configured}{offered}",
        flag(enc.tdx),
        flag(enc.tdx_host_platform),
        count(enc.tdx_guests),
    );
}

/// Persistent memory namespaces, with the vPMEM label and class offering each.
fn pmem_namespaces(out: &mut String, report: &InventoryReport) {
    let all = &report.inventory.pmem_namespaces;
    let _ = writeln!(out, "\nPMEM namespaces:   {}", all.len());
    if all.is_empty() {
        return;
    }
    let offered: &[crate::inventory::offered::VpmemNamespace] = report
        .offered
        .as_ref()
        .map_or(&[], |o| o.pmem_namespaces.as_slice());
    let opt = |v: Option<u64>| v.map_or("-".to_string(), |n| n.to_string());
    let mut rows = vec![[
        "NAMESPACE",
        "NAME",
        "MODE",
        "SIZE",
        "ALIGN",
        "DEVPATH",
        "NUMA",
        "LABEL",
        "RESOURCE_CLASS",
    ]
    .map(str::to_string)
    .to_vec()];
    for n in all {
        let given = offered
            .iter()
            .find(|o| Some(o.name.as_str()) == n.name.as_deref());
        rows.push(vec![
            n.dev.clone(),
            n.name.clone().unwrap_or_else(|| "-".to_string()),
            format!(
                "{}{}",
                n.mode.as_deref().unwrap_or("-"),
                if n.enabled { "" } else { " (disabled)" }
            ),
            opt(n.size),
            opt(n.align),
            n.devpath.clone().unwrap_or_else(|| "-".to_string()),
            n.numa_node.map_or("-".to_string(), |v| v.to_string()),
            given.map_or("-".to_string(), |g| g.label.clone()),
            given.map_or("-".to_string(), |g| g.resource_class.clone()),
        ]);
    }
    push_table(out, &rows);
}

/// The dedicated CPUs grouped by node, state, governor and whether they count, and the power
/// management that takes them offline.
fn dedicated_cpus(out: &mut String, d: &crate::inventory::dedicated::DedicatedCpus) {
    use crate::probes::CpuSet;
    let all = CpuSet::from_ids(d.cpus.iter().map(|c| c.cpu));
    let offline = d.cpus.iter().filter(|c| c.state != "online").count();
    let counted = d.cpus.iter().filter(|c| c.counted).count();
    let power = match &d.power_management {
        None => "power management off (offline ones do not count)".to_string(),
        Some(pm) if pm.strategy == crate::config::PowerStrategy::Governor => format!(
            "power management: governor ({} when idle, {} when pinned)",
            pm.governor_low, pm.governor_high
        ),
        Some(_) => "power management: cpu_state (offline when no guest runs on them)".to_string(),
    };
    let _ = writeln!(
        out,
        "\nDedicated CPUs: {} ({counted} count as PCPU, {offline} not online); {power}",
        dash_if_empty(&all.to_string())
    );
    /// Node, state, governor, counted.
    type Group<'a> = (Option<u32>, &'a str, Option<&'a str>, bool);
    let mut groups: BTreeMap<Group, Vec<u32>> = BTreeMap::new();
    for c in &d.cpus {
        groups
            .entry((
                c.numa_node,
                c.state.as_str(),
                c.governor.as_deref(),
                c.counted,
            ))
            .or_default()
            .push(c.cpu);
    }
    let mut rows = vec![vec![
        "NODE".to_string(),
        "CPUS".to_string(),
        "STATE".to_string(),
        "GOVERNOR".to_string(),
        "PCPU".to_string(),
    ]];
    for ((node, state, governor, counted), cpus) in groups {
        rows.push(vec![
            node.map_or("-".to_string(), |n| n.to_string()),
            CpuSet::from_ids(cpus).to_string(),
            state.to_string(),
            governor.unwrap_or("-").to_string(),
            if counted { "yes" } else { "no" }.to_string(),
        ]);
    }
    push_table(out, &rows);
}

/// One row per vDPA device: the PCI function it sits on and what that function is.
fn vdpa_devices(out: &mut String, inv: &crate::probes::HostInventory) {
    if inv.vdpa_devices.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nvDPA devices:  {}", inv.vdpa_devices.len());
    let mut rows = vec![vec![
        "NAME".to_string(),
        "PCI".to_string(),
        "DEV_TYPE".to_string(),
        "PF".to_string(),
        "DRIVER".to_string(),
        "CHARDEV".to_string(),
    ]];
    for v in &inv.vdpa_devices {
        let function = v
            .pci_parent
            .and_then(|a| inv.pci_devices.iter().find(|d| d.address == a));
        rows.push(vec![
            v.name.clone(),
            v.pci_parent.map_or("-".to_string(), |a| a.to_string()),
            function.map_or("-", |d| d.dev_type.as_str()).to_string(),
            function
                .and_then(|d| d.parent_addr)
                .map_or("-".to_string(), |a| a.to_string()),
            v.driver.clone().unwrap_or_else(|| "-".to_string()),
            v.chardev.clone().unwrap_or_else(|| "-".to_string()),
        ]);
    }
    push_table(out, &rows);
}

/// One row per type: on how many parents, how many more can be created, how many exist.
fn mediated_devices(out: &mut String, m: &crate::probes::mdev::MediatedDevices) {
    let _ = writeln!(
        out,
        "\nMediated devices: {} parent(s), {} device(s)",
        m.parents.len(),
        m.devices.len()
    );
    if m.parents.is_empty() {
        return;
    }
    #[derive(Default)]
    struct Row {
        parents: usize,
        available: u64,
        unknown: usize,
        name: String,
        api: String,
    }
    let mut types: BTreeMap<&str, Row> = BTreeMap::new();
    for p in &m.parents {
        for t in &p.types {
            let row = types.entry(&t.type_id).or_default();
            row.parents += 1;
            match t.available_instances {
                Some(n) => row.available += n,
                None => row.unknown += 1,
            }
            row.name = t.name.clone().unwrap_or_else(|| "-".to_string());
            row.api = t.device_api.clone().unwrap_or_else(|| "-".to_string());
        }
    }
    let mut rows = vec![vec![
        "TYPE".to_string(),
        "PARENTS".to_string(),
        "AVAILABLE".to_string(),
        "EXISTING".to_string(),
        "API".to_string(),
        "NAME".to_string(),
    ]];
    for (type_id, row) in types {
        let existing = m
            .devices
            .iter()
            .filter(|d| d.type_id.as_deref() == Some(type_id))
            .count();
        let available = if row.unknown > 0 {
            format!("{}+? ({} unknown)", row.available, row.unknown)
        } else {
            row.available.to_string()
        };
        rows.push(vec![
            type_id.to_string(),
            row.parents.to_string(),
            available,
            existing.to_string(),
            row.api,
            row.name,
        ]);
    }
    push_table(out, &rows);
}

fn dash_if_empty(s: &str) -> String {
    if s.is_empty() {
        "-".to_string()
    } else {
        s.to_string()
    }
}

fn flag(v: Option<bool>) -> String {
    match v {
        Some(true) => "1".to_string(),
        Some(false) => "0".to_string(),
        None => "-".to_string(),
    }
}

fn hugepage_summary(pools: &[HugePages]) -> Option<String> {
    if pools.is_empty() {
        return None;
    }
    Some(
        pools
            .iter()
            .map(|p| format!("{}: {}/{}", size_label(p.size_kb), p.free, p.total))
            .collect::<Vec<_>>()
            .join(", "),
    )
}

fn size_label(kb: u64) -> String {
    if kb >= 1 << 20 && kb % (1 << 20) == 0 {
        format!("{}G", kb >> 20)
    } else if kb >= 1 << 10 && kb % (1 << 10) == 0 {
        format!("{}M", kb >> 10)
    } else {
        format!("{kb}K")
    }
}

/// Left-aligned columns, two spaces apart, indented by two.
fn push_table(out: &mut String, rows: &[Vec<String>]) {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in rows {
        let mut line = String::from(" ");
        for (c, cell) in row.iter().enumerate() {
            line.push(' ');
            if c + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<w$} ", w = widths[c]);
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
}

/// Each NUMA cell's shared (`cpuset`) and dedicated (`pcpuset`) CPUs as the report's ComputeNode
/// has them (the configuration's CPU sets applied to the probe), as cpulists; empty when the
/// report has no ComputeNode.
fn cell_cpu_sets(report: &InventoryReport) -> std::collections::BTreeMap<u32, (String, String)> {
    let topology = report
        .compute_node
        .as_ref()
        .and_then(|n| n["nova_object.data"]["numa_topology"].as_str())
        .and_then(|t| serde_json::from_str::<serde_json::Value>(t).ok());
    let ids = |v: &serde_json::Value| -> String {
        crate::probes::CpuSet::from_ids(
            v.as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|c| c.as_u64())
                        .map(|c| c as u32)
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default(),
        )
        .to_string()
    };
    topology
        .as_ref()
        .and_then(|t| t["nova_object.data"]["cells"].as_array())
        .map(|cells| {
            cells
                .iter()
                .filter_map(|c| {
                    let d = &c["nova_object.data"];
                    let id = u32::try_from(d["id"].as_u64()?).ok()?;
                    Some((id, (ids(&d["cpuset"]), ids(&d["pcpuset"]))))
                })
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_labels() {
        assert_eq!(size_label(2048), "2M");
        assert_eq!(size_label(1048576), "1G");
        assert_eq!(size_label(64), "64K");
    }
}
