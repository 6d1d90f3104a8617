//! The configuration file as written: one struct per TOML section, every key optional, unknown
//! keys refused. [`super::Config::validate`] turns it into a [`super::ValidConfig`].
//!
//! In: the file's TOML text, through serde ([`Config::parse`]). Out: a [`Config`] with one optional
//! struct per section, or the parser's error naming the unknown key or the wrong type.

use std::path::PathBuf;

use serde::Deserialize;

use std::collections::BTreeMap;

/// The whole file as written. Every section and key is optional; defaults are Nova's where
/// Nova has one.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where to probe and where to keep state.
    #[serde(default)]
    pub host: HostConfig,
    /// Reserved amounts and allocation ratios.
    #[serde(default)]
    pub resources: ResourcesConfig,
    /// PCI passthrough: which devices are tracked, and aliases for flavors.
    #[serde(default)]
    pub pci: PciConfig,
    /// The periodic audit.
    #[serde(default)]
    pub audit: AuditConfig,
    /// The local claim API.
    #[serde(default)]
    pub api: ApiConfig,
    /// Prometheus metrics.
    #[serde(default)]
    pub metrics: MetricsConfig,
    /// Log format and level (`[log]`).
    #[serde(default)]
    pub log: LogConfig,
    /// OpenStack Placement reporting.
    #[serde(default)]
    pub placement: PlacementConfig,
    /// Other upstream reporters.
    #[serde(default)]
    pub upstream: UpstreamConfig,
    /// Mediated device types offered as vGPUs; memory encryption.
    #[serde(default)]
    pub devices: super::devices::DevicesConfig,
    /// Per mediated device type: its parents, class and cap (`[mdev.nvidia-35]`).
    #[serde(default)]
    pub mdev: BTreeMap<String, super::devices::MdevTypeConfig>,
    /// The physical networks with a NUMA affinity (Nova's `[neutron] physnets`).
    #[serde(default)]
    pub neutron: super::neutron::NeutronConfig,
    /// Per physical network, the NUMA nodes of its vSwitch (`[neutron_physnet.physnet0]`).
    #[serde(default)]
    pub neutron_physnet: BTreeMap<String, super::neutron::NumaNodesConfig>,
    /// The NUMA nodes of the tunneled networks' vSwitch (`[neutron_tunnel]`).
    #[serde(default)]
    pub neutron_tunnel: Option<super::neutron::NumaNodesConfig>,
}

/// `[host]`
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    /// Probe a tree: sysfs = root/sys, procfs = root/proc.
    pub root: Option<PathBuf>,
    /// sysfs mount point (overrides `root`).
    pub sysfs: Option<PathBuf>,
    /// procfs mount point (overrides `root`).
    pub procfs: Option<PathBuf>,
    /// State directory (database, compute node uuid). Default `$STATE_DIRECTORY`, else
    /// `/var/lib/rtrack`.
    pub state_dir: Option<PathBuf>,
    /// Where instance disks live (measured for DISK_GB). Default `/var/lib/nova/instances`.
    pub instances_path: Option<PathBuf>,
    /// Where DISK_GB comes from: `"statvfs"` (the instances path's filesystem, the default) or
    /// `"caller"` (the totals `POST /v1/refresh` last gave: image backends that are not a local
    /// filesystem, and nova-compute on rtrack, whose driver measures them).
    pub disk_source: Option<String>,
    /// The compute node's name (Nova's `hypervisor_hostname`). Default: the kernel hostname.
    pub hypervisor_hostname: Option<String>,
    /// The service host name (Nova's `host`). Default: the kernel hostname.
    pub host: Option<String>,
    /// ComputeNode `hypervisor_type`. Default `rtrack`.
    pub hypervisor_type: Option<String>,
    /// ComputeNode `host_ip` (Nova's `my_ip`).
    pub host_ip: Option<String>,
    /// ComputeNode `service_id`: the database id of this host's nova-compute Service, when
    /// known (nova-compute on rtrack sets it itself).
    pub service_id: Option<i64>,
    /// The compute node's uuid, when it must be this one (a host taken over from nova-compute:
    /// the uuid in Nova's `compute_id` file). Default: the state directory's, chosen at the
    /// first start.
    pub compute_node_uuid: Option<String>,
}

/// `[resources]`
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ResourcesConfig {
    /// VCPUs kept for the host. Default 0.
    pub reserved_host_cpus: Option<i64>,
    /// Memory kept for the host, MiB. Default 512.
    pub reserved_host_memory_mb: Option<i64>,
    /// Disk kept for the host, MiB. Default 0.
    pub reserved_host_disk_mb: Option<i64>,
    /// VCPU overcommit. Default: `initial_cpu_allocation_ratio`.
    pub cpu_allocation_ratio: Option<f64>,
    /// Memory overcommit. Default: `initial_ram_allocation_ratio`.
    pub ram_allocation_ratio: Option<f64>,
    /// Disk overcommit. Default: `initial_disk_allocation_ratio`.
    pub disk_allocation_ratio: Option<f64>,
    /// Ratio used when none is configured and the node is new. Default 4.0.
    pub initial_cpu_allocation_ratio: Option<f64>,
    /// Default 1.0.
    pub initial_ram_allocation_ratio: Option<f64>,
    /// Default 1.0.
    pub initial_disk_allocation_ratio: Option<f64>,
    /// Host CPUs for pinned instances (PCPU), a cpulist such as "4-15".
    pub cpu_dedicated_set: Option<String>,
    /// Host CPUs for floating instances (VCPU), a cpulist. Default: all online CPUs not
    /// dedicated (none when `cpu_dedicated_set` is set and this is not, as Nova does).
    pub cpu_shared_set: Option<String>,
    /// Nova's deprecated `vcpu_pin_set`: the CPUs of floating and pinned guests alike (VCPU),
    /// as on hosts configured before Train. Not with `cpu_dedicated_set`.
    pub vcpu_pin_set: Option<String>,
    /// Nova powers down the dedicated CPUs no guest runs on (Nova's `[libvirt]
    /// cpu_power_management`): they count while offline. Default false.
    pub cpu_power_management: Option<bool>,
    /// How: `cpu_state` (offline CPUs, the default) or `governor` (cpufreq governors).
    pub cpu_power_management_strategy: Option<String>,
    /// Governor of a powered-down CPU with the `governor` strategy. Default `powersave`.
    pub cpu_power_governor_low: Option<String>,
    /// Governor of a CPU a guest runs on with the `governor` strategy. Default `performance`.
    pub cpu_power_governor_high: Option<String>,
    /// UUID of a sharing resource provider that holds DISK_GB (shared instance storage).
    pub shared_storage_provider: Option<String>,
    /// Hugepages (or base pages) kept from guests per NUMA node: Nova's
    /// `"node:0,size:1GB,count:2"` strings or `{node, size, count}` tables.
    pub reserved_huge_pages: Option<Vec<super::numa::ReservedPagesConfig>>,
    /// Fill the busiest NUMA cells first instead of spreading guests (Nova's
    /// `[compute] packing_host_numa_cells_allocation_strategy`). Default false.
    pub packing_host_numa_cells_allocation_strategy: Option<bool>,
    /// Align dedicated guests' pins to cache domains: `"none"` (Nova's choice, the default) or
    /// `"l3"` (a guest cell one free L3 domain can hold is not spread over two).
    pub pin_alignment: Option<String>,
    /// Multi-cell guests take the fitting host cells closest together (NUMA distance), Nova's
    /// cell order breaking ties. Default false.
    pub prefer_closest_cells: Option<bool>,
    /// Core types dedicated guests pin on hybrid hosts (`IntelCore`, `IntelAtom`...); default
    /// every type. A flavor's `rtrack:cpu_core_type` overrides it.
    pub dedicated_core_types: Option<Vec<String>>,
    /// The base page size in KiB, when the probe cannot read it (default: the kernel's, else
    /// 4 on x86_64, aarch64 and s390x, 64 on ppc64le).
    pub base_page_size_kb: Option<u64>,
    /// Nova's provider config files (`*.yaml`): operators' own inventories and traits (Nova's
    /// `[compute] provider_config_location`). Default `/etc/nova/provider_config`.
    pub provider_config_location: Option<PathBuf>,
}

/// `[pci]`
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PciConfig {
    /// Which devices are tracked, Nova's `[pci] device_spec` as an array of tables.
    #[serde(default)]
    pub device_spec: Vec<BTreeMap<String, toml::Value>>,
    /// Flavor aliases, Nova's `[pci] alias` as an array of tables.
    #[serde(default)]
    pub alias: Vec<BTreeMap<String, toml::Value>>,
    /// Report PCI devices to Placement as child resource providers.
    pub report_in_placement: Option<bool>,
}

/// `[audit]`
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AuditConfig {
    /// Seconds between audits (Nova's `update_resources_interval`). Default 60.
    pub interval_s: Option<u64>,
    /// Each interval is moved by a random amount up to this many seconds either way, so that
    /// hosts started together do not audit in step. Default 10% of interval_s.
    pub jitter_s: Option<u64>,
}

/// `[api]`
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ApiConfig {
    /// Unix socket path. Default `$RUNTIME_DIRECTORY/rtrack.sock`, else `/run/rtrack/rtrack.sock`.
    pub socket: Option<PathBuf>,
    /// Socket permissions, octal string. Default "0660".
    pub socket_mode: Option<String>,
    /// Group allowed to use the socket (besides root). Default "rtrack".
    pub socket_group: Option<String>,
    /// Largest request body, bytes. Default 1 MiB.
    pub max_body_bytes: Option<u64>,
    /// Request timeout, seconds. Default 30.
    pub request_timeout_s: Option<u64>,
    /// Connections served at once; more are closed at once. Default 256.
    pub max_connections: Option<u64>,
    /// Seconds a connection may take to send a request header, new or idle between
    /// requests. Default 10.
    pub header_timeout_s: Option<u64>,
}

/// `[metrics]`
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// Optional TCP listener for `/metrics`, e.g. "127.0.0.1:9466". Off unless set.
    pub listen: Option<String>,
}

/// `[log]`
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// "text" (default) or "json".
    pub format: Option<String>,
    /// "error", "warn", "info" (default), "debug", "trace".
    pub level: Option<String>,
}

/// `[placement]`. `Debug` hides `token`, `password` and `application_credential_secret` (a
/// logged config must not leak them). Keystone values may also come from a clouds.yaml entry and
/// `OS_*` variables (`super::placement_sources`); these keys win over both.
#[derive(Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PlacementConfig {
    /// Placement endpoint URL; with Keystone auth, the service catalog's when unset.
    pub endpoint: Option<String>,
    /// "noauth" (default), "token", "password" or "application_credential".
    pub auth: Option<String>,
    /// Static token (auth = "token"), or the noauth user (default "admin").
    pub token: Option<String>,
    /// `X-Roles` sent with noauth.
    pub roles: Option<String>,
    /// Keystone v3 URL.
    pub auth_url: Option<String>,
    /// Keystone user name.
    pub username: Option<String>,
    /// Keystone user id (instead of the name and its domain).
    pub user_id: Option<String>,
    /// Keystone password.
    pub password: Option<String>,
    /// Keystone project.
    pub project_name: Option<String>,
    /// Keystone project id (instead of the name and its domain).
    pub project_id: Option<String>,
    /// Keystone user domain. Default "Default".
    pub user_domain_name: Option<String>,
    /// Keystone user domain id.
    pub user_domain_id: Option<String>,
    /// Keystone project domain. Default "Default".
    pub project_domain_name: Option<String>,
    /// Keystone project domain id.
    pub project_domain_id: Option<String>,
    /// Application credential id.
    pub application_credential_id: Option<String>,
    /// Application credential name (with the user that owns it).
    pub application_credential_name: Option<String>,
    /// Application credential secret.
    pub application_credential_secret: Option<String>,
    /// The catalog's region to take Placement's endpoint from.
    pub region_name: Option<String>,
    /// The catalog interfaces to try, in order ("internal,public" by default, as Nova).
    pub interface: Option<String>,
    /// A clouds.yaml entry to read the Keystone values from.
    pub cloud: Option<String>,
    /// The clouds.yaml file (default: searched where openstacksdk searches).
    pub clouds_yaml: Option<std::path::PathBuf>,
    /// Seconds between reports. Default 60.
    pub report_interval_s: Option<u64>,
    /// Seconds after which the cached provider tree is re-read. Default 300.
    pub refresh_interval_s: Option<u64>,
    /// Mirror local claims as Placement allocations (standalone hosts).
    pub report_allocations: Option<bool>,
    /// Seconds a consumer with no local claim must have been seen before an operator may have
    /// it removed (`rtrackctl reconcile --remove-unclaimed`). Default 600.
    pub unclaimed_grace_s: Option<u64>,
    /// Who sets the compute node's hypervisor traits (CPU features, architecture,
    /// hyperthreading, address space, `COMPUTE_STATUS_DISABLED`): `"rtrack"` (default, from the
    /// kernel) or `"nova-compute"` (its virt driver, when nova-compute runs on rtrack).
    pub hypervisor_traits: Option<String>,
    /// HTTP timeout, seconds. Default 10.
    pub timeout_s: Option<u64>,
}

impl std::fmt::Debug for PlacementConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = |v: &Option<String>| v.as_ref().map(|_| "(hidden)");
        f.debug_struct("PlacementConfig")
            .field("endpoint", &self.endpoint)
            .field("auth", &self.auth)
            .field("token", &hidden(&self.token))
            .field("roles", &self.roles)
            .field("auth_url", &self.auth_url)
            .field("username", &self.username)
            .field("user_id", &self.user_id)
            .field("password", &hidden(&self.password))
            .field("project_name", &self.project_name)
            .field("project_id", &self.project_id)
            .field("user_domain_name", &self.user_domain_name)
            .field("user_domain_id", &self.user_domain_id)
            .field("project_domain_name", &self.project_domain_name)
            .field("project_domain_id", &self.project_domain_id)
            .field("application_credential_id", &self.application_credential_id)
            .field(
                "application_credential_name",
                &self.application_credential_name,
            )
            .field(
                "application_credential_secret",
                &hidden(&self.application_credential_secret),
            )
            .field("region_name", &self.region_name)
            .field("interface", &self.interface)
            .field("cloud", &self.cloud)
            .field("clouds_yaml", &self.clouds_yaml)
            .field("report_interval_s", &self.report_interval_s)
            .field("refresh_interval_s", &self.refresh_interval_s)
            .field("report_allocations", &self.report_allocations)
            .field("unclaimed_grace_s", &self.unclaimed_grace_s)
            .field("hypervisor_traits", &self.hypervisor_traits)
            .field("timeout_s", &self.timeout_s)
            .finish()
    }
}

/// `[upstream]`
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// `[upstream.http]`: POST the ComputeNode primitive when it changes.
    pub http: Option<UpstreamHttpConfig>,
}

/// `[upstream.http]`
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct UpstreamHttpConfig {
    /// URL to POST to.
    pub url: String,
    /// Object version to send (backported). Default: newest.
    pub object_version: Option<String>,
    /// HTTP timeout, seconds. Default 10.
    pub timeout_s: Option<u64>,
}
