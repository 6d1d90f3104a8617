//! The PCI Placement providers (`[pci] report_in_placement`) as the tracker keeps them: one uuid
//! per provider address, stored, so a claim can be held to the providers Placement allocated
//! from, and the reporter names the same providers after a restart, a host rename or an upgrade.
//!
//! In: the view's provider groups, the stored records, uuids adopted from Placement, and the
//! providers a claim's PCI requests name. Out: the uuid of each provider and of each device's
//! provider, new records in [`Changes`], or a conflict naming the provider a claim cannot use.

use std::collections::{BTreeMap, HashMap};

use uuid::Uuid;

use crate::probes::pci::PciAddress;
use crate::tracker::error::ClaimError;
use crate::tracker::model::PciRequest;
use crate::tracker::pci::providers::{
    derived_provider_uuid, held_unreported, provider_name, ProviderGroup,
};
use crate::tracker::{Changes, PciProviderOrigin, PciProviderRecord, Tracker};

impl Tracker {
    /// The uuid rtrack would give the provider named after `address` on this node.
    fn derived_pci_provider_uuid(&self, address: &PciAddress) -> Uuid {
        // The node uuid is checked when the daemon starts; a tool passing another string gets
        // uuids derived from the nil uuid, still stable.
        let node = Uuid::parse_str(&self.settings.node_uuid).unwrap_or_default();
        derived_provider_uuid(node, &provider_name(&self.settings.names.node, address))
    }

    /// The uuid of every PCI provider the host reports now, by the address it is named after:
    /// the stored one, else the one rtrack derives.
    pub fn pci_provider_uuids(&self) -> BTreeMap<PciAddress, Uuid> {
        self.view
            .pci_providers
            .keys()
            .map(|a| (*a, self.pci_provider_uuid(a)))
            .collect()
    }

    /// The uuid of the PCI provider named after `address`: the stored one, else the derived one.
    pub fn pci_provider_uuid(&self, address: &PciAddress) -> Uuid {
        self.state
            .pci_providers
            .get(address)
            .map_or_else(|| self.derived_pci_provider_uuid(address), |r| r.uuid)
    }

    /// Devices instances hold that no device spec reports any more, by the provider they were
    /// counted under (see [`held_unreported`]); none without `[pci] report_in_placement`.
    pub fn held_unreported_pci(&self) -> BTreeMap<PciAddress, ProviderGroup> {
        if !self.settings.policy.report_pci_in_placement {
            return BTreeMap::new();
        }
        held_unreported(
            self.state.devices.values().map(|d| &**d),
            &self.view.tracked,
        )
    }

    /// The provider of each device reported in Placement.
    pub(crate) fn pci_device_providers(&self) -> HashMap<PciAddress, Uuid> {
        let uuids = self.pci_provider_uuids();
        let mut out = HashMap::new();
        for (address, group) in &self.view.pci_providers {
            if let Some(uuid) = uuids.get(address) {
                for m in &group.members {
                    out.insert(*m, *uuid);
                }
            }
        }
        out
    }

    /// Stores a derived uuid for every provider that has none yet (at each audit).
    pub(crate) fn record_new_pci_providers(&mut self, changes: &mut Changes) {
        let new: Vec<PciAddress> = self
            .view
            .pci_providers
            .keys()
            .filter(|a| !self.state.pci_providers.contains_key(a))
            .copied()
            .collect();
        for a in new {
            let record = PciProviderRecord {
                uuid: self.derived_pci_provider_uuid(&a),
                origin: PciProviderOrigin::Derived,
            };
            self.state.pci_providers.insert(a, record.clone());
            changes.pci_providers.insert(a, Some(record));
        }
    }

    /// Takes over providers nova-compute created (found in Placement under this compute node
    /// with the names Nova gives them): their uuids replace the ones rtrack would use.
    pub fn adopt_pci_providers(&mut self, adopted: &BTreeMap<PciAddress, Uuid>) -> Changes {
        let mut changes = Changes::default();
        for (a, uuid) in adopted {
            let record = PciProviderRecord {
                uuid: *uuid,
                origin: PciProviderOrigin::Adopted,
            };
            if self.state.pci_providers.get(a) != Some(&record) {
                self.state.pci_providers.insert(*a, record.clone());
                changes.pci_providers.insert(*a, Some(record));
            }
        }
        if !changes.is_empty() {
            *self.pci_index.get_mut() = None;
        }
        changes
    }

    /// Every provider a claim's requests name must be one of this host's PCI providers, with
    /// its device still here: otherwise Placement and the host disagree, and nothing is claimed.
    pub(crate) fn check_provider_mapping(
        &self,
        instance_uuid: &str,
        requests: &[PciRequest],
    ) -> Result<(), ClaimError> {
        let current = self.pci_provider_uuids();
        // A port's devices are not in Placement: Nova ignores its providers, and so does rtrack.
        for r in requests.iter().filter(|r| r.alias_name.is_some()) {
            if !r.rp_uuids.is_empty() && r.rp_uuids.len() != r.count as usize {
                return Err(ClaimError::Invalid {
                    field: format!("pci_requests[{}].rp_uuids", r.request_id),
                    message: format!(
                        "Placement allocated {} device(s) but the request asks for {}",
                        r.rp_uuids.len(),
                        r.count
                    ),
                });
            }
            for rp in &r.rp_uuids {
                if current.values().any(|u| u == rp) {
                    continue;
                }
                let gone = self
                    .state
                    .pci_providers
                    .iter()
                    .find(|(_, rec)| rec.uuid == *rp)
                    .map(|(a, _)| *a);
                let message = match gone {
                    Some(a) => format!(
                        "PCI request {}: Placement allocated from provider {rp}, which stands for PCI device {a}; that device is no longer on this host or no longer matches a device spec reported in Placement",
                        r.request_id
                    ),
                    None if !self.settings.policy.report_pci_in_placement => format!(
                        "PCI request {}: Placement allocated from provider {rp}, but [pci] report_in_placement is off on this host, so it has no PCI providers",
                        r.request_id
                    ),
                    None => format!(
                        "PCI request {}: Placement allocated from provider {rp}, which is not one of this host's PCI providers",
                        r.request_id
                    ),
                };
                return Err(ClaimError::Conflict {
                    id: instance_uuid.to_string(),
                    message,
                });
            }
        }
        Ok(())
    }
}
