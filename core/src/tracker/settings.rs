//! What the tracker takes from the configuration ([`TrackerPolicy`]) and the node's names and
//! identity ([`TrackerSettings`]).

use super::model::HostNames;
use super::usage::CountingRules;
use crate::config::{Resources, ValidConfig};
use crate::pci_policy::DeviceSpec;

/// What the tracker takes from the configuration, and nothing else: the resource rules, the PCI
/// device specs, and the ComputeNode's configured fields. Aliases stay with the API, which
/// turns them into requests.
#[derive(Debug, Clone)]
pub struct TrackerPolicy {
    /// `[resources]`: reserved amounts, allocation ratios, CPU sets, shared storage.
    pub resources: Resources,
    /// `[pci] device_spec`, in file order (the first that matches a device decides).
    pub device_specs: Vec<DeviceSpec>,
    /// The ComputeNode's `hypervisor_type`.
    pub hypervisor_type: String,
    /// The ComputeNode's `host_ip`.
    pub host_ip: Option<std::net::IpAddr>,
    /// The ComputeNode's `service_id`.
    pub service_id: Option<i64>,
    /// `[pci] report_in_placement`: tracked devices are Placement providers, and claims follow
    /// the providers Placement allocated from.
    pub report_pci_in_placement: bool,
    /// `[devices]` and `[mdev.*]`: which mdev types are vGPUs, where, as which class; SEV guests.
    pub mdev: crate::config::devices::MdevPolicy,
    /// Operators' own inventories and traits (provider.yaml).
    pub provider_configs: crate::config::provider_yaml::ProviderConfigs,
    /// The networks' NUMA affinity (NUMA-aware vSwitches).
    pub network_affinity: crate::config::neutron::NetworkAffinity,
}

impl From<&ValidConfig> for TrackerPolicy {
    fn from(c: &ValidConfig) -> TrackerPolicy {
        TrackerPolicy {
            resources: c.resources.clone(),
            device_specs: c.pci.device_specs.clone(),
            hypervisor_type: c.host.hypervisor_type.clone(),
            host_ip: c.host.host_ip,
            service_id: c.host.service_id,
            report_pci_in_placement: c.pci.report_in_placement,
            mdev: c.mdev.clone(),
            provider_configs: c.provider_configs.clone(),
            network_affinity: c.network_affinity.clone(),
        }
    }
}

impl From<ValidConfig> for TrackerPolicy {
    fn from(c: ValidConfig) -> TrackerPolicy {
        TrackerPolicy {
            resources: c.resources,
            device_specs: c.pci.device_specs,
            hypervisor_type: c.host.hypervisor_type,
            host_ip: c.host.host_ip,
            service_id: c.host.service_id,
            report_pci_in_placement: c.pci.report_in_placement,
            mdev: c.mdev,
            provider_configs: c.provider_configs,
            network_affinity: c.network_affinity,
        }
    }
}

/// Settings the tracker needs: its policy, and the node's names and identity.
#[derive(Debug, Clone)]
pub struct TrackerSettings {
    /// What the tracker takes from the configuration.
    pub policy: TrackerPolicy,
    /// This host's names.
    pub names: HostNames,
    /// The node's uuid.
    pub node_uuid: String,
    /// When the node was created.
    pub node_created_at: time::OffsetDateTime,
}

impl TrackerSettings {
    pub(super) fn shared_disk(&self) -> bool {
        self.policy.resources.shared_storage_provider.is_some()
    }

    /// Nova's legacy CPU mode (pinned guests consume VCPU): see [`Resources::legacy_cpus`].
    pub fn legacy_cpus(&self) -> bool {
        self.policy.resources.legacy_cpus()
    }

    /// How usage is counted on this host.
    pub fn counting_rules(&self) -> CountingRules {
        CountingRules {
            shared_disk: self.shared_disk(),
            legacy_cpus: self.legacy_cpus(),
        }
    }
}
