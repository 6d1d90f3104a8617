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
pub mod sections;
pub mod topology;
pub mod upstream;
mod valid;
pub mod yaml;

use std::path::{Path, PathBuf};

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

    /// [`Config::validate`] with a given environment (tests): each section in turn
    /// ([`sections`]), then the values that span sections.
    pub fn validate_in(
        &self,
        file: &Path,
        env: &placement_sources::Environment,
    ) -> Result<ValidConfig, ConfigError> {
        let resources = sections::resources(&self.resources, file)?;
        let (device_specs, aliases) = self.pci_section(file)?;
        let mdev = devices::validate(&self.devices, &self.mdev, file)?;
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
        let h = &self.host;
        let checked_host = host::validate(h, file)?;
        let (audit_interval_s, audit_jitter_s) = sections::audit(&self.audit, file)?;
        let api = sections::api(&self.api, file)?;
        let (log_format, log_level) = sections::log(&self.log, file)?;
        let metrics_listen = sections::metrics_listen(&self.metrics, file)?;
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
            provider_config_location: self
                .resources
                .provider_config_location
                .clone()
                .unwrap_or_else(|| PathBuf::from(provider_yaml::DEFAULT_LOCATION)),
            provider_configs: provider_yaml::ProviderConfigs::default(),
            audit_interval_s,
            audit_jitter_s,
            socket: self.api.socket.clone(),
            socket_mode: api.socket_mode,
            socket_group: self
                .api
                .socket_group
                .clone()
                .unwrap_or_else(|| "rtrack".to_string()),
            max_body_bytes: self.api.max_body_bytes.unwrap_or(1 << 20),
            request_timeout_s: self.api.request_timeout_s.unwrap_or(30),
            max_connections: api.max_connections,
            header_timeout_s: api.header_timeout_s,
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

    /// `[pci]`: the device specs and the alias table, with the rules between them and
    /// `report_in_placement`.
    fn pci_section(
        &self,
        file: &Path,
    ) -> Result<
        (
            Vec<crate::pci_policy::DeviceSpec>,
            crate::pci_policy::AliasTable,
        ),
        ConfigError,
    > {
        let in_placement = self.pci.report_in_placement.unwrap_or(false);
        let device_specs = pci::validate_device_specs(&self.pci.device_spec, file)?;
        // Nova's rule: a used device is kept from the scheduler only by its provider's
        // reserved inventory.
        let one_time_use = device_specs
            .iter()
            .position(|s| s.tags.get("one_time_use").map(String::as_str) == Some("true"));
        if let (false, Some(i)) = (in_placement, one_time_use) {
            return Err(ConfigError::Value {
                file: file.to_path_buf(),
                key: format!("pci.device_spec[{i}].one_time_use"),
                value: "true".into(),
                expected: "requires [pci] report_in_placement = true".into(),
            });
        }
        let aliases = pci::validate_aliases(&self.pci.alias, file)?;
        if let Some((name, why)) = crate::pci_policy::alias::table_problems(&aliases, in_placement)
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
        Ok((device_specs, aliases))
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
