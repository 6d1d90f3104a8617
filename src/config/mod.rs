//! rtrack's configuration file (TOML), loaded in two steps: [`Config::parse`] checks the syntax
//! and rejects unknown keys (a typo must not be silently ignored), then [`Config::validate`]
//! checks values and builds the typed pieces the rest of rtrack uses ([`ValidConfig`]).
//! Every error names the file, the key, the bad value and what is accepted.
//!
//! In: a TOML file (its path or its text). Out: the file as written ([`Config`]), then the
//! [`ValidConfig`] every part runs with (probe roots, resources, PCI device specs and aliases,
//! audit, API, metrics, logging, `[placement]` and `[upstream.http]` settings), or a
//! [`ConfigError`].
//!
//! The commented default is `packaging/rtrack.toml`; the README lists every key.

pub mod cpu_power;
pub mod devices;
pub mod diff;
mod error;
mod file;
mod host;
pub mod neutron;
mod numa;
mod pci;
mod placement;
pub mod placement_sources;
pub mod pmem;
pub mod provider_yaml;
pub mod topology;
pub mod upstream;
mod valid;
pub mod yaml;

use std::path::{Path, PathBuf};

use crate::probes::CpuSet;

pub use cpu_power::{CpuPowerManagement, PowerStrategy};
pub use error::{is_secret_key, syntax_error, ConfigError};
pub use file::{
    ApiConfig, AuditConfig, Config, HostConfig, LogConfig, MetricsConfig, PciConfig,
    PlacementConfig, ResourcesConfig, UpstreamConfig, UpstreamHttpConfig,
};
pub use numa::{ReservedPages, ReservedPagesConfig};
pub use pci::{AliasConfig, DeviceSpecConfig};
pub use topology::{PinAlignment, TopologyPolicy};
pub use valid::{DiskSource, LogFormat, Resources, ValidConfig};

impl Config {
    /// Reads and parses a file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            file: path.to_path_buf(),
            source,
        })?;
        Config::parse(&text, path)
    }

    /// Parses TOML text; `file` is used in messages.
    pub fn parse(text: &str, file: &Path) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|e| syntax_error(text, file, &e))
    }

    /// Checks every value and builds the typed configuration; `[placement]` takes values from
    /// this process's `OS_*` variables and clouds.yaml too.
    pub fn validate(&self, file: &Path) -> Result<ValidConfig, ConfigError> {
        self.validate_in(file, &placement_sources::Environment::process())
    }

    /// [`Config::validate`] with a given environment (tests).
    pub fn validate_in(
        &self,
        file: &Path,
        env: &placement_sources::Environment,
    ) -> Result<ValidConfig, ConfigError> {
        let err = |key: &str, value: String, expected: &str| ConfigError::Value {
            file: file.to_path_buf(),
            key: key.to_string(),
            value,
            expected: expected.to_string(),
        };
        let r = &self.resources;
        let non_negative = |key: &str, v: Option<i64>, default: i64| -> Result<i64, ConfigError> {
            match v {
                None => Ok(default),
                Some(v) if v >= 0 => Ok(v),
                Some(v) => Err(err(key, v.to_string(), "must be 0 or more")),
            }
        };
        let ratio = |key: &str, v: Option<f64>| -> Result<Option<f64>, ConfigError> {
            match v {
                None => Ok(None),
                Some(v) if v.is_finite() && v > 0.0 => Ok(Some(v)),
                Some(v) => Err(err(
                    key,
                    v.to_string(),
                    "must be a number greater than 0, e.g. 4.0",
                )),
            }
        };
        let cpuset = |key: &str, v: &Option<String>| -> Result<Option<CpuSet>, ConfigError> {
            match v {
                None => Ok(None),
                Some(s) => crate::nova_syntax::parse_cpu_spec(s).map(Some).map_err(|e| {
                    err(
                        key,
                        crate::echo::quoted(s),
                        &format!("must be a cpulist like \"4-7,12\", where \"^N\" excludes a CPU as in Nova ({e})"),
                    )
                }),
            }
        };
        let resources = Resources {
            reserved_host_cpus: non_negative(
                "resources.reserved_host_cpus",
                r.reserved_host_cpus,
                0,
            )?,
            reserved_host_memory_mb: non_negative(
                "resources.reserved_host_memory_mb",
                r.reserved_host_memory_mb,
                512,
            )?,
            reserved_host_disk_mb: non_negative(
                "resources.reserved_host_disk_mb",
                r.reserved_host_disk_mb,
                0,
            )?,
            cpu_allocation_ratio: ratio("resources.cpu_allocation_ratio", r.cpu_allocation_ratio)?,
            ram_allocation_ratio: ratio("resources.ram_allocation_ratio", r.ram_allocation_ratio)?,
            disk_allocation_ratio: ratio(
                "resources.disk_allocation_ratio",
                r.disk_allocation_ratio,
            )?,
            initial_cpu_allocation_ratio: ratio(
                "resources.initial_cpu_allocation_ratio",
                r.initial_cpu_allocation_ratio,
            )?
            .unwrap_or(4.0),
            initial_ram_allocation_ratio: ratio(
                "resources.initial_ram_allocation_ratio",
                r.initial_ram_allocation_ratio,
            )?
            .unwrap_or(1.0),
            initial_disk_allocation_ratio: ratio(
                "resources.initial_disk_allocation_ratio",
                r.initial_disk_allocation_ratio,
            )?
            .unwrap_or(1.0),
            cpu_dedicated_set: cpuset("resources.cpu_dedicated_set", &r.cpu_dedicated_set)?,
            cpu_shared_set: cpuset("resources.cpu_shared_set", &r.cpu_shared_set)?,
            vcpu_pin_set: cpuset("resources.vcpu_pin_set", &r.vcpu_pin_set)?,
            cpu_power_management: cpu_power::validate(r, file)?,
            topology: topology::validate(r, file)?,
            reserved_huge_pages: numa::reserved_huge_pages(
                r.reserved_huge_pages.as_deref().unwrap_or_default(),
                file,
            )?,
            packing_host_numa_cells_allocation_strategy: r
                .packing_host_numa_cells_allocation_strategy
                .unwrap_or(false),
            base_page_size_kb: match r.base_page_size_kb {
                None => None,
                Some(kb) if kb.is_power_of_two() && (4..=65536).contains(&kb) => Some(kb),
                Some(kb) => {
                    return Err(err(
                        "resources.base_page_size_kb",
                        kb.to_string(),
                        "must be a power of two from 4 to 65536 (KiB)",
                    ))
                }
            },
            shared_storage_provider: match &r.shared_storage_provider {
                None => None,
                Some(s) => Some(uuid::Uuid::parse_str(s).map_err(|_| {
                    err(
                        "resources.shared_storage_provider",
                        format!("{s:?}"),
                        "must be a UUID",
                    )
                })?),
            },
        };
        if let (Some(_), Some(p)) = (&resources.cpu_dedicated_set, &resources.vcpu_pin_set) {
            return Err(err(
                "resources.vcpu_pin_set",
                format!("\"{p}\""),
                "The 'vcpu_pin_set' config option has been deprecated and cannot be defined alongside cpu_dedicated_set; unset vcpu_pin_set (Nova's rule)",
            ));
        }
        if let (Some(d), Some(s)) = (&resources.cpu_dedicated_set, &resources.cpu_shared_set) {
            if d.intersects(s) {
                return Err(err(
                    "resources.cpu_shared_set",
                    format!("\"{s}\""),
                    &format!(
                        "must not overlap cpu_dedicated_set \"{d}\" (CPUs in both: {})",
                        d.intersection(s)
                    ),
                ));
            }
        }

        let device_specs = pci::validate_device_specs(&self.pci.device_spec, file)?;
        let mdev = devices::validate(&self.devices, &self.mdev, file)?;
        if !self.pci.report_in_placement.unwrap_or(false) {
            // Nova's rule: a used device is kept from the scheduler only by its provider's
            // reserved inventory.
            if let Some(i) = device_specs
                .iter()
                .position(|s| s.tags.get("one_time_use").map(String::as_str) == Some("true"))
            {
                return Err(ConfigError::Value {
                    file: file.to_path_buf(),
                    key: format!("pci.device_spec[{i}].one_time_use"),
                    value: "true".into(),
                    expected: "requires [pci] report_in_placement = true".into(),
                });
            }
        }
        let aliases = pci::validate_aliases(&self.pci.alias, file)?;
        let network_affinity = neutron::validate(
            &self.neutron,
            &self.neutron_physnet,
            self.neutron_tunnel.as_ref(),
        )
        .map_err(|(key, value, expected)| ConfigError::Value {
            file: file.to_path_buf(),
            key,
            value,
            expected,
        })?;
        if let Some((name, why)) = crate::pci_policy::alias::table_problems(
            &aliases,
            self.pci.report_in_placement.unwrap_or(false),
        )
        .into_iter()
        .next()
        {
            let index = self
                .pci
                .alias
                .iter()
                .position(|a| a.get("name").and_then(|n| n.as_str()).map(str::trim) == Some(&name))
                .unwrap_or(0);
            return Err(ConfigError::Value {
                file: file.to_path_buf(),
                key: format!("pci.alias[{index}]"),
                value: format!("name = {name:?}"),
                expected: why,
            });
        }

        let h = &self.host;
        let checked_host = host::validate(h, file)?;

        let audit_interval = match self.audit.interval_s {
            None => 60,
            Some(0) => {
                return Err(err(
                    "audit.interval_s",
                    "0".into(),
                    "must be at least 1 (seconds)",
                ))
            }
            Some(v) => v,
        };
        let audit_jitter = match self.audit.jitter_s {
            None => audit_interval / 10,
            Some(j) if j < audit_interval => j,
            Some(j) => {
                return Err(err(
                    "audit.jitter_s",
                    j.to_string(),
                    &format!("must be less than audit.interval_s ({audit_interval})"),
                ))
            }
        };

        let max_connections = match self.api.max_connections {
            None => 256,
            Some(n @ 1..=100_000) => n,
            Some(n) => {
                return Err(err(
                    "api.max_connections",
                    n.to_string(),
                    "must be from 1 to 100000",
                ))
            }
        };
        let header_timeout_s = match self.api.header_timeout_s {
            None => 10,
            Some(n @ 1..=3_600) => n,
            Some(n) => {
                return Err(err(
                    "api.header_timeout_s",
                    n.to_string(),
                    "must be from 1 to 3600 (seconds)",
                ))
            }
        };
        let socket_mode = match &self.api.socket_mode {
            None => 0o660,
            Some(s) => u32::from_str_radix(s.trim_start_matches("0o"), 8)
                .ok()
                .filter(|m| *m <= 0o777)
                .ok_or_else(|| {
                    err(
                        "api.socket_mode",
                        format!("{s:?}"),
                        "must be an octal mode like \"0660\"",
                    )
                })?,
        };
        let log_format = match self.log.format.as_deref() {
            None | Some("text") => LogFormat::Text,
            Some("json") => LogFormat::Json,
            Some(other) => {
                return Err(err(
                    "log.format",
                    format!("{other:?}"),
                    "must be \"text\" or \"json\"",
                ))
            }
        };
        let log_level = match self.log.level.as_deref() {
            None => "info".to_string(),
            Some(l @ ("error" | "warn" | "info" | "debug" | "trace")) => l.to_string(),
            Some(other) => {
                return Err(err(
                    "log.level",
                    format!("{other:?}"),
                    "must be one of error, warn, info, debug, trace",
                ))
            }
        };
        let metrics_listen = match &self.metrics.listen {
            None => None,
            Some(s) => Some(s.parse::<std::net::SocketAddr>().map_err(|_| {
                err(
                    "metrics.listen",
                    format!("{s:?}"),
                    "must be an address:port like \"127.0.0.1:9466\"",
                )
            })?),
        };

        Ok(ValidConfig {
            probe_root: checked_host.probe_root,
            state_dir: h.state_dir.clone(),
            instances_path: h
                .instances_path
                .clone()
                .unwrap_or_else(|| PathBuf::from("/var/lib/nova/instances")),
            disk_source: checked_host.disk_source,
            hypervisor_hostname: h.hypervisor_hostname.clone(),
            host: h.host.clone(),
            hypervisor_type: h
                .hypervisor_type
                .clone()
                .unwrap_or_else(|| "rtrack".to_string()),
            host_ip: checked_host.host_ip,
            service_id: h.service_id,
            compute_node_uuid: checked_host.compute_node_uuid,
            resources,
            device_specs,
            aliases,
            report_pci_in_placement: self.pci.report_in_placement.unwrap_or(false),
            mdev,
            network_affinity,
            provider_config_location: r
                .provider_config_location
                .clone()
                .unwrap_or_else(|| PathBuf::from(provider_yaml::DEFAULT_LOCATION)),
            provider_configs: provider_yaml::ProviderConfigs::default(),
            audit_interval_s: audit_interval,
            audit_jitter_s: audit_jitter,
            socket: self.api.socket.clone(),
            socket_mode,
            socket_group: self
                .api
                .socket_group
                .clone()
                .unwrap_or_else(|| "rtrack".to_string()),
            max_body_bytes: self.api.max_body_bytes.unwrap_or(1 << 20),
            request_timeout_s: self.api.request_timeout_s.unwrap_or(30),
            max_connections,
            header_timeout_s,
            metrics_listen,
            log_format,
            log_level,
            placement_settings: upstream::validate_placement(&self.placement, env)
                .map_err(|e| key_error(file, e))?,
            http_push: upstream::validate_http_push(self.upstream.http.as_ref())
                .map_err(|e| key_error(file, e))?,
            placement: self.placement.clone(),
            upstream_http: self.upstream.http.clone(),
        })
    }
}

fn key_error(file: &Path, e: upstream::KeyError) -> ConfigError {
    ConfigError::Value {
        file: e.file.unwrap_or_else(|| file.to_path_buf()),
        key: e.key,
        value: e.value,
        expected: e.expected,
    }
}

#[cfg(test)]
mod tests;
