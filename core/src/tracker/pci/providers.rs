//! Which tracked PCI functions become which Placement child providers (`[pci]
//! report_in_placement`), with Nova's rules (`nova/compute/pci_placement_translator.py`), and the
//! provider names and uuids.
//!
//! In: the tracked devices and the device specs. Out: [`ProviderGroup`]s keyed by the address the
//! provider is named after (a PF's for its VFs, the device's own otherwise), each with its
//! resource class, traits, members and one-time-use flag; and warnings for what is left out.
//! The tracker uses the groups to restrict a claim to the providers Placement allocated from;
//! the reporter turns them into providers.
//!
//! Nova gives each provider a random uuid and keeps it in its PciDevice rows; rtrack keeps one
//! per provider address in its store, derived from the compute node uuid and the name when the
//! provider is first seen, or adopted from a provider nova-compute left in Placement.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use super::devices::{DeviceStatus, TrackedDevice};
use super::spec::DeviceSpec;
use crate::inventory::traits;
use crate::probes::pci::{PciAddress, PciDevType};
use crate::tracker::pci::devices::TrackedDevices;

/// One PCI child provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderGroup {
    /// Address the name is made of: the device's own, or the PF's for a VF group.
    pub address: PciAddress,
    /// Resource class of its inventory.
    pub class: String,
    /// Traits (always `COMPUTE_MANAGED_PCI_DEVICE`; `HW_PCI_LIVE_MIGRATABLE` and
    /// `HW_PCI_ONE_TIME_USE` from the spec's tags).
    pub traits: BTreeSet<String>,
    /// The tracked functions it holds, in address order.
    pub members: Vec<PciAddress>,
    /// `one_time_use = true`: once used, the device stays reserved until an operator releases it.
    pub one_time_use: bool,
}

/// The child provider name Nova uses: `<hypervisor_hostname>_<ADDRESS UPPER-CASE>`.
pub fn provider_name(hypervisor_hostname: &str, address: &PciAddress) -> String {
    format!(
        "{hypervisor_hostname}_{}",
        address.to_string().to_ascii_uppercase()
    )
}

/// The uuid rtrack gives a provider it creates: derived from the compute node uuid and the
/// provider name, so the same host gets the same one again even without its store.
pub fn derived_provider_uuid(node_uuid: Uuid, name: &str) -> Uuid {
    Uuid::new_v5(&node_uuid, name.as_bytes())
}

/// Tracked PCI functions grouped into child providers, with Nova's rules: the first matching
/// device spec decides; a spec with `physical_network` belongs to Neutron and is not reported;
/// VFs group under their PF; a PF with tracked VFs is not reported itself; the VFs of one PF
/// must share one class and trait set. Nova refuses to start on the last two; rtrack reports what
/// it can and warns.
pub fn provider_groups(
    tracked: &TrackedDevices,
    specs: &[DeviceSpec],
    warnings: &mut Vec<String>,
) -> BTreeMap<PciAddress, ProviderGroup> {
    let mut groups: BTreeMap<PciAddress, ProviderGroup> = BTreeMap::new();
    let mut standalone_pfs: Vec<ProviderGroup> = Vec::new();
    for dev in tracked.values() {
        let Some(spec) = specs.get(dev.spec_index) else {
            continue;
        };
        if spec.tags.contains_key("physical_network") {
            continue;
        }
        let (class, traits, one_time_use) = spec_facts(&spec.tags, dev);
        if dev.dev_type == PciDevType::Pf || dev.dev_type == PciDevType::Pci {
            if dev.dev_type == PciDevType::Pf {
                standalone_pfs.push(ProviderGroup {
                    address: dev.address,
                    class,
                    traits,
                    members: vec![dev.address],
                    one_time_use,
                });
            } else {
                groups.insert(
                    dev.address,
                    ProviderGroup {
                        address: dev.address,
                        class,
                        traits,
                        members: vec![dev.address],
                        one_time_use,
                    },
                );
            }
            continue;
        }
        let key = dev.parent_addr.unwrap_or(dev.address);
        if one_time_use {
            warnings.push(format!(
                "PCI {} {}: one_time_use applies to type-PCI and type-PF devices only; it is not reported",
                dev.dev_type.as_str(),
                dev.address
            ));
            continue;
        }
        match groups.get_mut(&key) {
            Some(g) if g.class != class || g.traits != traits => warnings.push(format!(
                "PCI VF {}: its device spec gives class {class} and traits {traits:?}, unlike the other VFs of PF {key} ({} {:?}); it is not reported",
                dev.address, g.class, g.traits
            )),
            Some(g) => g.members.push(dev.address),
            None => {
                groups.insert(
                    key,
                    ProviderGroup {
                        address: key,
                        class,
                        traits,
                        members: vec![dev.address],
                        one_time_use: false,
                    },
                );
            }
        }
    }
    for pf in standalone_pfs {
        match groups.entry(pf.address) {
            std::collections::btree_map::Entry::Occupied(_) => warnings.push(format!(
                "PCI PF {} and some of its VFs match device specs; a PF and its own VFs are never both reported, so only the VFs are",
                pf.address
            )),
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(pf);
            }
        }
    }
    groups
}

/// The class, traits and one-time-use flag a device spec's tags give `dev` (Nova's rules).
fn spec_facts(
    tags: &BTreeMap<String, String>,
    dev: &TrackedDevice,
) -> (String, BTreeSet<String>, bool) {
    let class = traits::pci_resource_class(
        tags.get("resource_class").map(String::as_str),
        &dev.vendor_id,
        &dev.product_id,
    );
    let mut traits = traits::pci_traits(tags.get("traits").map(String::as_str));
    let one_time_use = tags.get("one_time_use").map(String::as_str) == Some("true");
    if one_time_use {
        traits.insert(traits::HW_PCI_ONE_TIME_USE.to_string());
    }
    if tags.get("live_migratable").map(String::as_str) == Some("true") {
        traits.insert(traits::HW_PCI_LIVE_MIGRATABLE.to_string());
    }
    (class, traits, one_time_use)
}

/// The devices an instance holds that are no longer reported (no device spec selects them any
/// more, or they left the host), grouped by the provider they were counted under, with the
/// class and traits their spec gave them when they were claimed. Nova keeps such a provider
/// while it holds allocations, its total raised to them (`_adjust_for_removals_and_held_devices`).
pub fn held_unreported<'a>(
    devices: impl IntoIterator<Item = &'a TrackedDevice>,
    reported: &TrackedDevices,
) -> BTreeMap<PciAddress, ProviderGroup> {
    let mut groups: BTreeMap<PciAddress, ProviderGroup> = BTreeMap::new();
    for dev in devices {
        let held = matches!(dev.status, DeviceStatus::Claimed | DeviceStatus::Allocated);
        if !held || reported.contains_key(&dev.address) || dev.tags.contains_key("physical_network")
        {
            continue;
        }
        let (class, traits, one_time_use) = spec_facts(&dev.tags, dev);
        let key = match dev.dev_type {
            PciDevType::Pf | PciDevType::Pci => dev.address,
            _ => dev.parent_addr.unwrap_or(dev.address),
        };
        groups
            .entry(key)
            .or_insert_with(|| ProviderGroup {
                address: key,
                class,
                traits,
                members: Vec::new(),
                one_time_use,
            })
            .members
            .push(dev.address);
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_novas_and_derived_uuids_stable() {
        let a = PciAddress::parse("0000:3b:00.0").unwrap();
        assert_eq!(provider_name("cmp-1", &a), "cmp-1_0000:3B:00.0");
        let n = Uuid::from_u128(7);
        assert_eq!(
            derived_provider_uuid(n, "cmp-1_0000:3B:00.0"),
            derived_provider_uuid(n, "cmp-1_0000:3B:00.0")
        );
        assert_ne!(
            derived_provider_uuid(n, "cmp-1_0000:3B:00.0"),
            derived_provider_uuid(n, "cmp-1_0000:3B:00.1")
        );
    }
}
