//! Builds the ComputeNode object from the probed host, the tracker policy, the tracked usage and
//! the PCI pools: what nova-compute's resource tracker would report for the same host.
//!
//! In: once per audit, the probe ([`HostInventory`]), the [`TrackerPolicy`] and the node's
//! [`NodeIdentity`]; at each read, the [`NodeUsage`], the PCI [`Pool`]s and the time. Out: a
//! [`NodeTemplate`] (the host's part), then the [`ComputeNode`] with that usage, as a `Versioned`
//! object.
//!
//! Pure: the caller passes the node's identity and the time.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::inventory::resources::cpu_sets;
use crate::objects::compute_node::ComputeNode;
use crate::objects::hv_spec::HVSpec;
use crate::objects::numa::NUMATopology;
use crate::objects::{Field, NField, Versioned};
use crate::probes::HostInventory;
use crate::tracker::TrackerPolicy;

use super::pci::Pool;

/// Who the node is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeIdentity {
    /// Stable uuid (the `compute_id` file).
    pub uuid: String,
    /// Node name (`hypervisor_hostname`).
    pub hypervisor_hostname: String,
    /// Service host name (`host`).
    pub host: String,
    /// When the node was first seen.
    pub created_at: time::OffsetDateTime,
}

/// Usage beyond the reserved amounts, and instance counters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeUsage {
    /// VCPUs used by instances.
    pub vcpus: i64,
    /// MiB used by instances.
    pub memory_mb: i64,
    /// GiB used by instances.
    pub disk_gb: i64,
    /// Instances counted.
    pub running_vms: i64,
    /// Instances with a task in progress.
    pub current_workload: i64,
    /// Nova's stats counters (values as strings).
    pub stats: BTreeMap<String, String>,
}

impl NodeUsage {
    /// The stats of a host without instances: `failed_builds` only (Nova keeps it across resets).
    pub fn empty() -> NodeUsage {
        NodeUsage {
            stats: [("failed_builds".to_string(), "0".to_string())].into(),
            ..NodeUsage::default()
        }
    }
}

/// The `cpu_info` JSON text, in the layout of Nova's libvirt driver (`_get_cpu_info`). The model
/// is the kernel's model name, not a libvirt CPU model; the vendor is shortened as libvirt does.
pub fn cpu_info_json(inv: &HostInventory) -> String {
    #[derive(Serialize)]
    struct Topology {
        cells: usize,
        sockets: u32,
        cores: u32,
        threads: u32,
    }
    /// libvirt's `<maxphysaddr mode='emulate' bits='N'/>` of the host CPU.
    #[derive(Serialize)]
    struct MaxPhysAddr {
        mode: &'static str,
        bits: u32,
    }
    #[derive(Serialize)]
    struct CpuInfo<'a> {
        arch: Option<&'a str>,
        model: Option<&'a str>,
        vendor: Option<String>,
        topology: Topology,
        #[serde(skip_serializing_if = "Option::is_none")]
        maxphysaddr: Option<MaxPhysAddr>,
        features: &'a [String],
    }
    let cpu = &inv.cpu;
    let sockets = cpu.sockets.max(1);
    let info = CpuInfo {
        arch: cpu.arch.as_deref(),
        model: cpu.model.as_deref(),
        vendor: cpu.vendor.as_deref().map(|v| {
            match v {
                "GenuineIntel" => "Intel",
                "AuthenticAMD" => "AMD",
                other => other,
            }
            .to_string()
        }),
        topology: Topology {
            cells: inv.numa_nodes.len().max(1),
            sockets: cpu.sockets,
            cores: cpu.cores_per_socket.unwrap_or(cpu.cores / sockets),
            threads: cpu.threads_per_core.unwrap_or(1),
        },
        maxphysaddr: cpu.maxphysaddr_bits.map(|bits| MaxPhysAddr {
            mode: "emulate",
            bits,
        }),
        features: &cpu.flags,
    };
    // Serializing plain strings and numbers cannot fail.
    serde_json::to_string(&info).unwrap_or_else(|_| "{}".to_string())
}

/// The text of `uptime` (procps-ng) at `now` for a host up `up` seconds with these load
/// averages, which Nova's libvirt driver puts in `stats["uptime"]`: `" 10:21:33 up 3 days,
/// 2:03,  load average: 0.00, 0.01, 0.05\n"`. The clock is UTC (rtrackd does not read the
/// host's time zone), and the user count is left out (it is not in sysfs or procfs).
pub fn uptime_text(now: time::OffsetDateTime, up: u64, load: [f64; 3]) -> String {
    let days = up / 86_400;
    let hours = (up % 86_400) / 3_600;
    let minutes = (up % 3_600) / 60;
    let mut out = format!(
        " {:02}:{:02}:{:02} up ",
        now.hour(),
        now.minute(),
        now.second()
    );
    if days > 0 {
        out.push_str(&format!(
            "{days} {}, ",
            if days > 1 { "days" } else { "day" }
        ));
    }
    if hours > 0 {
        out.push_str(&format!("{hours:2}:{minutes:02}, "));
    } else {
        out.push_str(&format!("{minutes} min, "));
    }
    out.push_str(&format!(
        " load average: {:.2}, {:.2}, {:.2}\n",
        load[0], load[1], load[2]
    ));
    out
}

/// rtrack's version as Nova encodes hypervisor versions: major*1e6 + minor*1e3 + micro.
pub fn hypervisor_version() -> i64 {
    let mut parts = env!("CARGO_PKG_VERSION")
        .split('.')
        .map(|p| p.parse::<i64>().unwrap_or(0));
    let (a, b, c) = (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    );
    a * 1_000_000 + b * 1_000 + c
}

/// The host's part of the ComputeNode: everything that follows from the probe, the
/// configuration and the node's identity, built once per audit (outside the tracker lock) and
/// completed with the usage at each read by [`NodeTemplate::with_usage`].
#[derive(Debug, Clone)]
pub struct NodeTemplate {
    node: ComputeNode,
    reserved_cpus: i64,
    reserved_memory_mb: i64,
    reserved_disk_gb: i64,
}

impl NodeTemplate {
    /// The host facts of the ComputeNode, with no usage.
    pub fn new(inv: &HostInventory, cfg: &TrackerPolicy, id: &NodeIdentity) -> NodeTemplate {
        let res = &cfg.resources;
        let (shared, _) = cpu_sets(inv, res);
        let local_gb = inv
            .disks
            .instances
            .as_ref()
            .map_or(0, |f| f.total_gb as i64);
        let free_gb = inv.disks.instances.as_ref().map_or(0, |f| f.free_gb as i64);
        let arch = inv.cpu.arch.clone().unwrap_or_default();
        let hv_specs = if crate::objects::enums::is_nova_architecture(&arch) {
            vec![
                Versioned::new(HVSpec::new(&arch, "kvm", "hvm")),
                Versioned::new(HVSpec::new(&arch, "qemu", "hvm")),
            ]
        } else {
            Vec::new()
        };
        let node = ComputeNode {
            id: Field::Unset,
            uuid: Field::Set(id.uuid.clone()),
            service_id: cfg.service_id.map_or(NField::Null, NField::Set),
            host: NField::Set(id.host.clone()),
            vcpus: Field::Set(shared.len() as i64),
            memory_mb: Field::Set(inv.memory.total_mb as i64),
            local_gb: Field::Set(local_gb),
            hypervisor_type: Field::Set(cfg.hypervisor_type.clone()),
            hypervisor_version: Field::Set(hypervisor_version()),
            hypervisor_hostname: NField::Set(id.hypervisor_hostname.clone()),
            cpu_info: NField::Set(cpu_info_json(inv)),
            // libvirt's free space minus what sparse images may still grow by; rtrack measures
            // the filesystem's available space.
            disk_available_least: NField::Set(free_gb),
            metrics: NField::Set("[]".to_string()),
            host_ip: NField::from_option(cfg.host_ip),
            supported_hv_specs: Field::Set(hv_specs),
            cpu_allocation_ratio: Field::Set(
                res.cpu_allocation_ratio
                    .unwrap_or(res.initial_cpu_allocation_ratio),
            ),
            ram_allocation_ratio: Field::Set(
                res.ram_allocation_ratio
                    .unwrap_or(res.initial_ram_allocation_ratio),
            ),
            disk_allocation_ratio: Field::Set(
                res.disk_allocation_ratio
                    .unwrap_or(res.initial_disk_allocation_ratio),
            ),
            mapped: Field::Set(0),
            created_at: NField::Set(id.created_at),
            deleted_at: NField::Null,
            deleted: Field::Set(false),
            ..ComputeNode::default()
        };
        NodeTemplate {
            node,
            reserved_cpus: res.reserved_host_cpus,
            reserved_memory_mb: res.reserved_host_memory_mb,
            // Nova's disk is MB/1024 truncated.
            reserved_disk_gb: res.reserved_host_disk_mb / 1024,
        }
    }

    /// The ComputeNode with `usage`, the NUMA topology with its usage, the PCI `pools` and the
    /// time. The audit starts `*_used` at the reserved amounts, as Nova's does.
    pub fn with_usage(
        &self,
        usage: &NodeUsage,
        numa: &Versioned<NUMATopology>,
        pools: &[Pool],
        now: time::OffsetDateTime,
    ) -> Versioned<ComputeNode> {
        let mut node = self.node.clone();
        let memory_mb = self.node.memory_mb.get().copied().unwrap_or(0);
        let local_gb = self.node.local_gb.get().copied().unwrap_or(0);
        let vcpus_used = self.reserved_cpus + usage.vcpus;
        let memory_mb_used = self.reserved_memory_mb + usage.memory_mb;
        let local_gb_used = self.reserved_disk_gb + usage.disk_gb;
        node.vcpus_used = Field::Set(vcpus_used);
        node.memory_mb_used = Field::Set(memory_mb_used);
        node.local_gb_used = Field::Set(local_gb_used);
        node.free_ram_mb = NField::Set(memory_mb - memory_mb_used);
        node.free_disk_gb = NField::Set(local_gb - local_gb_used);
        node.current_workload = NField::Set(usage.current_workload);
        node.running_vms = NField::Set(usage.running_vms);
        node.stats = NField::Set(
            usage
                .stats
                .iter()
                .map(|(k, v)| (k.clone(), Some(v.clone())))
                .collect(),
        );
        node.numa_topology = NField::Set(numa.to_primitive().to_string());
        node.pci_device_pools = NField::Set(super::pci::pools::pools_object(pools));
        node.updated_at = NField::Set(now);
        Versioned::new(node)
    }
}

/// A ComputeNode primitive without what changes at every audit by itself (`updated_at`, and
/// `stats["uptime"]`), for comparisons: those alone are not a change worth storing or sending
/// upstream.
pub fn without_volatile_fields(primitive: &serde_json::Value) -> serde_json::Value {
    let mut v = primitive.clone();
    if let Some(data) = v
        .get_mut("nova_object.data")
        .and_then(serde_json::Value::as_object_mut)
    {
        data.remove("updated_at");
        if let Some(stats) = data
            .get_mut("stats")
            .and_then(serde_json::Value::as_object_mut)
        {
            stats.remove("uptime");
        }
    }
    if let Some(changes) = v
        .get_mut("nova_object.changes")
        .and_then(serde_json::Value::as_array_mut)
    {
        changes.retain(|c| c != "updated_at");
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uptime_reads_as_procps_prints_it_without_the_users() {
        let now = time::macros::datetime!(2026-11-27 10:21:33 UTC);
        let load = [0.0, 0.01, 0.05];
        assert_eq!(
            uptime_text(now, 3 * 86_400 + 2 * 3_600 + 3 * 60 + 7, load),
            " 10:21:33 up 3 days,  2:03,  load average: 0.00, 0.01, 0.05\n"
        );
        assert_eq!(
            uptime_text(now, 86_400 + 300, [1.5, 12.25, 0.0]),
            " 10:21:33 up 1 day, 5 min,  load average: 1.50, 12.25, 0.00\n"
        );
        assert_eq!(
            uptime_text(now, 11 * 3_600, load),
            " 10:21:33 up 11:00,  load average: 0.00, 0.01, 0.05\n"
        );
    }

    #[test]
    fn the_uptime_alone_is_not_a_change() {
        let a = serde_json::json!({"nova_object.data": {"vcpus": 4, "updated_at": "x",
            "stats": {"uptime": " 10:00:00 up 5 min", "num_instances": "1"}}});
        let mut b = a.clone();
        b["nova_object.data"]["stats"]["uptime"] = " 10:01:00 up 6 min".into();
        b["nova_object.data"]["updated_at"] = "y".into();
        assert_eq!(without_volatile_fields(&a), without_volatile_fields(&b));
        b["nova_object.data"]["stats"]["num_instances"] = "2".into();
        assert_ne!(without_volatile_fields(&a), without_volatile_fields(&b));
    }
}
