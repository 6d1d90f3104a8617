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
pub use valid::{
    ApiSettings, AuditSettings, DiskSource, HostSettings, LogFormat, LogSettings, MetricsSettings,
    PciSettings, Resources, ValidConfig,
};

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
        let pci = pci::validate(&self.pci, file)?;
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
        let host = host::validate(&self.host, file)?;
        let audit = sections::audit(&self.audit, file)?;
        let api = sections::api(&self.api, file)?;
        let log = sections::log(&self.log, file)?;
        let metrics = sections::metrics(&self.metrics, file)?;
        Ok(ValidConfig {
            host,
            resources,
            pci,
            mdev,
            network_affinity,
            provider_config_location: self
                .resources
                .provider_config_location
                .clone()
                .unwrap_or_else(|| PathBuf::from(provider_yaml::DEFAULT_LOCATION)),
            provider_configs: provider_yaml::ProviderConfigs::default(),
            audit,
            api,
            metrics,
            log,
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
