//! The configuration rtrack runs with ([`ValidConfig`]) and its typed parts: what
//! [`Config::validate`](super::Config::validate) builds, every value checked and every default
//! applied.

use std::path::PathBuf;

use super::*;
use crate::probes::CpuSet;

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Reserved amounts and ratios, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Resources {
    /// VCPUs kept for the host.
    pub reserved_host_cpus: i64,
    /// MiB kept for the host.
    pub reserved_host_memory_mb: i64,
    /// Disk MiB kept for the host.
    pub reserved_host_disk_mb: i64,
    /// Configured VCPU ratio, if any.
    pub cpu_allocation_ratio: Option<f64>,
    /// Configured memory ratio, if any.
    pub ram_allocation_ratio: Option<f64>,
    /// Configured disk ratio, if any.
    pub disk_allocation_ratio: Option<f64>,
    /// Ratio for a new node when none is configured.
    pub initial_cpu_allocation_ratio: f64,
    /// Ratio for a new node when none is configured.
    pub initial_ram_allocation_ratio: f64,
    /// Ratio for a new node when none is configured.
    pub initial_disk_allocation_ratio: f64,
    /// CPUs for pinned instances.
    pub cpu_dedicated_set: Option<CpuSet>,
    /// CPUs for floating instances.
    pub cpu_shared_set: Option<CpuSet>,
    /// Nova's legacy `vcpu_pin_set`: the CPUs of every guest, floating and pinned, counted as
    /// VCPU (with `cpu_shared_set` too, this one still decides VCPU, as in Nova).
    pub vcpu_pin_set: Option<CpuSet>,
    /// `cpu_power_management`: Nova powers the dedicated CPUs no guest runs on down, and
    /// they count while offline; `None` when off.
    pub cpu_power_management: Option<CpuPowerManagement>,
    /// `pin_alignment`, `prefer_closest_cells`, `dedicated_core_types`: rtrack's placement
    /// policies beyond Nova's, off by default.
    pub topology: TopologyPolicy,
    /// Sharing provider holding DISK_GB.
    pub shared_storage_provider: Option<uuid::Uuid>,
    /// Pages kept from guests, per node and size (`reserved_huge_pages`).
    pub reserved_huge_pages: Vec<ReservedPages>,
    /// Fill the busiest NUMA cells first (Nova's packing strategy) instead of spreading.
    pub packing_host_numa_cells_allocation_strategy: bool,
    /// The base page size in KiB, when configured.
    pub base_page_size_kb: Option<u64>,
}

impl Resources {
    /// Nova's legacy CPU mode: pinned guests pin from the floating guests' CPUs and count as
    /// VCPU, when no dedicated set is configured and either no shared set or `vcpu_pin_set`.
    pub fn legacy_cpus(&self) -> bool {
        self.cpu_dedicated_set.is_none()
            && (self.cpu_shared_set.is_none() || self.vcpu_pin_set.is_some())
    }
}

impl Default for Resources {
    fn default() -> Resources {
        // The defaults of an empty file; validate() of an empty Config gives the same.
        Resources {
            reserved_host_cpus: super::sections::DEFAULT_RESERVED_HOST_CPUS,
            reserved_host_memory_mb: super::sections::DEFAULT_RESERVED_HOST_MEMORY_MB,
            reserved_host_disk_mb: super::sections::DEFAULT_RESERVED_HOST_DISK_MB,
            cpu_allocation_ratio: None,
            ram_allocation_ratio: None,
            disk_allocation_ratio: None,
            initial_cpu_allocation_ratio: super::sections::DEFAULT_INITIAL_CPU_ALLOCATION_RATIO,
            initial_ram_allocation_ratio:
                super::sections::DEFAULT_INITIAL_RAM_DISK_ALLOCATION_RATIO,
            initial_disk_allocation_ratio:
                super::sections::DEFAULT_INITIAL_RAM_DISK_ALLOCATION_RATIO,
            cpu_dedicated_set: None,
            cpu_shared_set: None,
            vcpu_pin_set: None,
            cpu_power_management: None,
            topology: TopologyPolicy::default(),
            shared_storage_provider: None,
            reserved_huge_pages: Vec::new(),
            packing_host_numa_cells_allocation_strategy: false,
            base_page_size_kb: None,
        }
    }
}

/// Where DISK_GB comes from (`[host] disk_source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DiskSource {
    /// The filesystem of the instances path (`statvfs`), as Nova's libvirt driver measures it
    /// for a local image backend.
    #[default]
    Statvfs,
    /// The totals the caller gives in `POST /v1/refresh` (kept in the state directory): an
    /// image backend that is not a local filesystem (rbd, LVM), or nova-compute on rtrack.
    Caller,
}

/// `[host]`, validated: what to probe, where state and instances live, the compute node's
/// names, addresses and identity.
#[derive(Debug, Clone)]
pub struct HostSettings {
    /// Roots to probe.
    pub probe_root: crate::probes::HostRoot,
    /// State directory as configured (resolved against `$STATE_DIRECTORY` by the daemon).
    pub state_dir: Option<PathBuf>,
    /// Instances path.
    pub instances_path: PathBuf,
    /// `[host] disk_source`.
    pub disk_source: DiskSource,
    /// Configured node name.
    pub hypervisor_hostname: Option<String>,
    /// Configured service host name.
    pub host: Option<String>,
    /// ComputeNode hypervisor_type.
    pub hypervisor_type: String,
    /// ComputeNode host_ip.
    pub host_ip: Option<std::net::IpAddr>,
    /// ComputeNode service_id.
    pub service_id: Option<i64>,
    /// `[host] compute_node_uuid`: the identity the state directory must have (lower-case,
    /// hyphenated).
    pub compute_node_uuid: Option<String>,
}

/// `[pci]`, validated: which devices are tracked, the flavors' aliases, and whether devices are
/// reported to Placement.
#[derive(Debug, Clone)]
pub struct PciSettings {
    /// PCI device specs, in file order (first match wins).
    pub device_specs: Vec<crate::pci_policy::DeviceSpec>,
    /// PCI aliases by name (same-name entries ORed, as Nova does).
    pub aliases: crate::pci_policy::AliasTable,
    /// `[pci] report_in_placement`.
    pub report_in_placement: bool,
}

/// `[audit]`, validated: how often the periodic audit runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditSettings {
    /// Seconds between audits.
    pub interval_s: u64,
    /// Seconds each interval may move either way.
    pub jitter_s: u64,
}

/// `[api]`, validated: the local claim API's socket and limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiSettings {
    /// API socket path as configured (resolved against `$RUNTIME_DIRECTORY` by the daemon).
    pub socket: Option<PathBuf>,
    /// API socket mode.
    pub socket_mode: u32,
    /// API socket group.
    pub socket_group: String,
    /// Request body limit, bytes.
    pub max_body_bytes: u64,
    /// Request timeout, seconds.
    pub request_timeout_s: u64,
    /// Connections served at once.
    pub max_connections: u64,
    /// Header (and idle) timeout of a connection, seconds.
    pub header_timeout_s: u64,
}

/// `[metrics]`, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricsSettings {
    /// Metrics TCP listener; `None` when off.
    pub listen: Option<std::net::SocketAddr>,
}

/// `[log]`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSettings {
    /// Log format.
    pub format: LogFormat,
    /// Log level (`error`, `warn`, `info`, `debug` or `trace`).
    pub level: String,
}

/// The configuration rtrack runs with: every value checked, defaults applied; one field per
/// section of the file.
#[derive(Debug, Clone)]
pub struct ValidConfig {
    /// `[host]`.
    pub host: HostSettings,
    /// `[resources]`: reserved amounts and ratios.
    pub resources: Resources,
    /// `[pci]`.
    pub pci: PciSettings,
    /// `[devices]` and `[mdev.*]`: vGPU types, their parents and classes; SEV guests.
    pub mdev: devices::MdevPolicy,
    /// `[neutron]`, `[neutron_physnet.*]`, `[neutron_tunnel]`: the networks' NUMA affinity.
    pub network_affinity: neutron::NetworkAffinity,
    /// Where Nova's provider config files are read from (`[resources]
    /// provider_config_location`).
    pub provider_config_location: PathBuf,
    /// What they say (read by the loader, with the file; empty until then).
    pub provider_configs: provider_yaml::ProviderConfigs,
    /// `[audit]`.
    pub audit: AuditSettings,
    /// `[api]`.
    pub api: ApiSettings,
    /// `[metrics]`.
    pub metrics: MetricsSettings,
    /// `[log]`.
    pub log: LogSettings,
    /// `[placement]`, validated: `None` when no endpoint is set (reporting off).
    pub placement_settings: Option<upstream::PlacementSettings>,
    /// `[upstream.http]`, validated.
    pub http_push: Option<upstream::HttpPushSettings>,
    /// `[placement]` as written.
    pub placement: PlacementConfig,
    /// `[upstream.http]` as written.
    pub upstream_http: Option<UpstreamHttpConfig>,
}

impl ValidConfig {
    /// The configuration of an empty file.
    pub fn defaults() -> ValidConfig {
        // An empty Config always validates; the error arm cannot happen but is not unwrapped.
        match Config::default().validate(Path::new("(defaults)")) {
            Ok(v) => v,
            Err(e) => unreachable!("defaults must validate: {e}"),
        }
    }
}
