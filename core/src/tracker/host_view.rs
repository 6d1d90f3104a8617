//! What the tracker derives from one probe and the settings, once per audit and outside the
//! tracker lock: the inventory per class, the PCI functions the device specs select, the NUMA
//! cells (with their sockets), and the host's part of the ComputeNode.
//!
//! In: a [`HostInventory`] and the [`TrackerSettings`]. Out: a [`HostView`], shared (`Arc`)
//! by the working and committed trackers, and read by the report, `/v1/inventory`,
//! `/v1/compute-node` and `--once`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::nested::operator::{operator_providers, TreeNames};
use super::nested::{class_inventory, nested_offer, NestedProvider};
use super::node_template::{NodeIdentity, NodeTemplate};
use super::numa::HostTopology;
use super::pci::claim::CellSockets;
use super::pci::devices::select_tracked;
use super::pci::providers::{provider_groups, ProviderGroup};
use crate::inventory::offered::{IntelTdxOffer, Offered, VpmemNamespace};
use crate::inventory::resources::{
    compute_inventory, InventoryOptions, ResourceClass, ResourceInventory,
};
use crate::probes::pci::PciAddress;
use crate::probes::HostInventory;
use crate::tracker::pci::devices::TrackedDevices;
use crate::tracker::TrackerSettings;

/// One probe as the tracker uses it (see the module comment).
#[derive(Debug)]
pub struct HostView {
    /// The probe.
    pub host: Arc<HostInventory>,
    /// The compute node's own inventory per class with a total above zero.
    pub node_inventory: BTreeMap<ResourceClass, ResourceInventory>,
    /// Providers below the compute node (vGPU parents, encryption models), the vPMEM classes
    /// and provider.yaml's classes.
    pub nested: Vec<NestedProvider>,
    /// Parents, models or namespaces left out, and why.
    pub nested_warnings: Vec<String>,
    /// The nested providers a report leaves as they are (see [`super::nested::NestedOffer`]).
    pub nested_left_alone: Vec<super::nested::NestedKey>,
    /// Intel TDX under the configuration.
    pub intel_tdx: IntelTdxOffer,
    /// The vPMEM namespaces offered, in configuration order.
    pub pmem: Vec<VpmemNamespace>,
    /// Everything claims are checked against first: the compute node's inventory with the
    /// nested providers' units added per class.
    pub inventory: BTreeMap<ResourceClass, ResourceInventory>,
    /// The PCI functions a device spec selects, all available, by address.
    pub tracked: TrackedDevices,
    /// With `[pci] report_in_placement`: the PCI child providers, by the address they are
    /// named after; empty otherwise.
    pub pci_providers: BTreeMap<PciAddress, ProviderGroup>,
    /// Tracked functions left out of the providers, and why.
    pub pci_provider_warnings: Vec<String>,
    /// The host's NUMA cells as Nova's libvirt driver reports them.
    pub numa: HostTopology,
    /// The socket of each NUMA cell, when all its CPUs share one.
    pub sockets: CellSockets,
    /// The ComputeNode's host facts.
    pub node: NodeTemplate,
    /// Which settings it was built for: the tracker's settings generation at the time (a
    /// reload while an audit probes makes the audit derive the view again, under the lock).
    pub generation: u64,
    /// The host's `uptime` text at the probe (the ComputeNode's `stats["uptime"]`), when the
    /// probe read it; set by the audit, which knows the time.
    pub uptime: Option<String>,
}

impl HostView {
    /// Sets the `uptime` text for a probe taken at `now`.
    pub fn with_uptime_at(mut self, now: time::OffsetDateTime) -> HostView {
        let u = &self.host.uptime;
        self.uptime = u
            .seconds
            .zip(u.load_average)
            .map(|(up, load)| super::node_template::uptime_text(now, up, load));
        self
    }

    /// Derives everything the tracker needs from `host` under `settings`.
    pub fn build(
        host: Arc<HostInventory>,
        settings: &TrackerSettings,
        generation: u64,
    ) -> HostView {
        let policy = &settings.policy;
        let node_inventory: BTreeMap<ResourceClass, ResourceInventory> = compute_inventory(
            &host,
            &policy.resources,
            InventoryOptions {
                shared_disk: settings.shared_disk(),
            },
        )
        .into_iter()
        .map(|r| (r.class.clone(), r))
        .collect();
        let mut nested_warnings = Vec::new();
        let offer = nested_offer(&host, &policy.mdev, &mut nested_warnings);
        let mut nested = offer.providers;
        let tracked = select_tracked(&host.pci_devices, &policy.device_specs)
            .into_iter()
            .map(|d| (d.address, Arc::new(d)))
            .collect();
        let mut pci_provider_warnings = Vec::new();
        let pci_providers = if policy.report_pci_in_placement {
            provider_groups(&tracked, &policy.device_specs, &mut pci_provider_warnings)
        } else {
            BTreeMap::new()
        };
        // provider.yaml's additional classes, on the providers of this host they name.
        let node_name = settings.names.node.as_str();
        let mut classes: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        classes.insert(
            node_name.to_string(),
            node_inventory
                .keys()
                .map(|c| c.as_str().to_string())
                .collect(),
        );
        for (address, g) in &pci_providers {
            classes
                .entry(crate::tracker::pci::providers::provider_name(
                    node_name, address,
                ))
                .or_default()
                .insert(g.class.clone());
        }
        for p in &nested {
            classes
                .entry(p.key.provider_name(node_name))
                .or_default()
                .insert(p.class.as_str().to_string());
        }
        let tree = TreeNames {
            root: node_name,
            root_uuid: uuid::Uuid::parse_str(&settings.node_uuid).ok(),
            classes,
        };
        let (operator, problems) = operator_providers(&policy.provider_configs, &tree);
        nested.extend(operator);
        nested_warnings.extend(policy.provider_configs.warnings.iter().cloned());
        nested_warnings.extend(problems.into_iter().map(|(k, why)| format!("{k}: {why}")));
        let inventory = class_inventory(&node_inventory, &nested);
        let identity = NodeIdentity {
            uuid: settings.node_uuid.clone(),
            hypervisor_hostname: settings.names.node.clone(),
            host: settings.names.host.clone(),
            created_at: settings.node_created_at,
        };
        let mut numa = HostTopology::build(&host, &policy.resources);
        numa.set_network_affinity(&policy.network_affinity);
        HostView {
            node_inventory,
            nested,
            nested_warnings,
            nested_left_alone: offer.left_alone,
            intel_tdx: offer.intel_tdx,
            pmem: offer.pmem,
            inventory,
            tracked,
            pci_providers,
            pci_provider_warnings,
            sockets: numa.cells.iter().map(|c| (c.id, c.socket)).collect(),
            numa,
            node: NodeTemplate::new(&host, policy, &identity),
            generation,
            uptime: None,
            host,
        }
    }

    /// What the host offers guests beyond its four classes (the report's `offered`).
    pub fn offered(&self) -> Offered {
        Offered {
            memory_encryption: self
                .nested
                .iter()
                .filter_map(|p| match &p.key {
                    super::nested::NestedKey::MemEncryption(m) => {
                        Some((m.as_str().to_string(), p.total))
                    }
                    _ => None,
                })
                .collect(),
            intel_tdx: self.intel_tdx.clone(),
            pmem_namespaces: self.pmem.clone(),
            warnings: self.nested_warnings.clone(),
        }
    }

    /// The view of `host` under `config` alone, with a placeholder node identity: for callers
    /// that need only the host facts (the Placement tests, tools).
    pub fn of_config(host: HostInventory, config: &crate::config::ValidConfig) -> HostView {
        let settings = TrackerSettings {
            policy: config.into(),
            names: super::model::HostNames {
                host: String::new(),
                node: String::new(),
            },
            node_uuid: String::new(),
            node_created_at: time::OffsetDateTime::UNIX_EPOCH,
        };
        HostView::build(Arc::new(host), &settings, 0)
    }
}
