//! The compute node's children: one per vGPU parent and one per memory encryption model (named
//! as nova-compute names them), one per PCI provider group; the sharing provider; the vPMEM
//! classes, which Nova reports on the compute node itself; and what provider.yaml adds to any
//! provider of the tree.
//!
//! In: the view's nested providers, the local consumers (a child's or a vPMEM class's total
//! never drops below what is allocated on it), the provider configs. Out: the children with
//! their uuids, the compute node's vPMEM inventories, and the providers with the operators'
//! inventories and traits merged in.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use super::desired::{
    pci_provider_name, pci_provider_uuid, sharing_provider_name, Consumer, DesiredInventory,
    DesiredProvider, PciRaised, ProviderRole, RatioRule, ReportInputs, ResourceKey,
};
use super::traits::{self, MISC_SHARES_VIA_AGGREGATE};
use crate::config::provider_yaml::{ProviderConfigs, ProviderTarget};
use crate::config::ValidConfig;
use crate::probes::pci::PciAddress;
use crate::tracker::host_view::HostView;
use crate::tracker::nested::NestedKey;
use crate::tracker::pci::providers::ProviderGroup;

/// The name nova-compute gives a vGPU parent's or an encryption model's provider:
/// `<hypervisor_hostname>_pci_0000_84_00_0`, `<hypervisor_hostname>_amd_sev`.
pub fn nested_provider_name(hypervisor_hostname: &str, key: &NestedKey) -> String {
    format!("{hypervisor_hostname}_{}", key.name_suffix())
}

/// Whether `name` is one rtrack gives a nested provider under the root named `root`.
pub fn is_nested_provider_name(root: &str, name: &str) -> bool {
    let Some(suffix) = name.strip_prefix(root).and_then(|s| s.strip_prefix('_')) else {
        return false;
    };
    let pci = suffix.strip_prefix("pci_").is_some_and(|rest| {
        let parts: Vec<&str> = rest.split('_').collect();
        parts.len() == 4
            && parts
                .iter()
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_hexdigit()))
    });
    pci || matches!(
        suffix,
        "amd_sev" | "amd_sev_es" | "amd_sev_snp" | "intel_tdx"
    )
}

/// The vGPU and encryption children, and each nested provider's uuid.
pub fn nested_children(
    view: &HostView,
    node_uuid: Uuid,
    hypervisor_hostname: &str,
    consumers: &[Consumer],
) -> (Vec<DesiredProvider>, BTreeMap<NestedKey, Uuid>) {
    let mut nested_provider: BTreeMap<NestedKey, Uuid> = BTreeMap::new();
    let mut providers = Vec::new();
    let mut nested_used: BTreeMap<&NestedKey, u64> = BTreeMap::new();
    for c in consumers {
        for (key, amount) in &c.resources {
            if let ResourceKey::Nested(k, _) = key {
                *nested_used.entry(k).or_default() += amount;
            }
        }
    }
    for p in &view.nested {
        if !p.key.is_child() {
            continue;
        }
        let name = nested_provider_name(hypervisor_hostname, &p.key);
        let uuid = pci_provider_uuid(node_uuid, &name);
        nested_provider.insert(p.key.clone(), uuid);
        // Never below what is allocated here (an mdev parent that shrank).
        let total = p.total.max(
            nested_used
                .get(&p.key)
                .copied()
                .unwrap_or(0)
                .try_into()
                .unwrap_or(i64::MAX),
        );
        providers.push(DesiredProvider {
            uuid,
            name,
            parent: Some(node_uuid),
            role: ProviderRole::Nested,
            inventories: BTreeMap::from([(
                p.class.as_str().to_string(),
                DesiredInventory {
                    max_unit: p.max_unit.min(total),
                    ..DesiredInventory::units(total)
                },
            )]),
            owned_classes: None,
            traits: p.traits.clone(),
            owned_traits: Some(p.traits.clone()),
            aggregates: BTreeSet::new(),
        });
    }
    // A parent or model that is gone while claims still hold units there: its child stays,
    // holding what is allocated, until they are released (deleting it would drop them).
    let mut gone: BTreeMap<(&NestedKey, &String), u64> = BTreeMap::new();
    for c in consumers {
        for (key, amount) in &c.resources {
            if let ResourceKey::Nested(k, class) = key {
                if k.is_child() && !view.nested.iter().any(|p| &p.key == k) {
                    *gone.entry((k, class)).or_default() += amount;
                }
            }
        }
    }
    for ((k, class), used) in gone {
        let name = nested_provider_name(hypervisor_hostname, k);
        let uuid = pci_provider_uuid(node_uuid, &name);
        nested_provider.insert(k.clone(), uuid);
        let total = i64::try_from(used).unwrap_or(i64::MAX);
        if let Some(p) = providers.iter_mut().find(|p| p.uuid == uuid) {
            p.inventories
                .entry(class.clone())
                .or_insert(DesiredInventory::units(total));
            continue;
        }
        providers.push(DesiredProvider {
            uuid,
            name,
            parent: Some(node_uuid),
            role: ProviderRole::Nested,
            inventories: BTreeMap::from([(class.clone(), DesiredInventory::units(total))]),
            owned_classes: None,
            traits: BTreeSet::from([super::traits::OWNER_NOVA.to_string()]),
            owned_traits: Some(BTreeSet::from([super::traits::OWNER_NOVA.to_string()])),
            aggregates: BTreeSet::new(),
        });
    }
    (providers, nested_provider)
}

/// The vPMEM classes on the compute node, as Nova's libvirt driver reports them (total =
/// max_unit = the class's namespaces), each never below what the consumers hold of it: a class
/// whose namespaces are gone while claims hold them stays with those units.
pub fn pmem_inventories(
    view: &HostView,
    consumers: &[Consumer],
) -> BTreeMap<NestedKey, (String, DesiredInventory)> {
    let mut out: BTreeMap<NestedKey, (String, DesiredInventory)> = BTreeMap::new();
    for p in &view.nested {
        if let NestedKey::Pmem(_) = &p.key {
            out.insert(
                p.key.clone(),
                (
                    p.class.as_str().to_string(),
                    DesiredInventory::units(p.total),
                ),
            );
        }
    }
    let mut used: BTreeMap<(&NestedKey, &String), u64> = BTreeMap::new();
    for c in consumers {
        for (key, amount) in &c.resources {
            if let ResourceKey::Nested(k @ NestedKey::Pmem(_), class) = key {
                *used.entry((k, class)).or_default() += amount;
            }
        }
    }
    for ((k, class), n) in used {
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        let (_, inv) = out
            .entry(k.clone())
            .or_insert_with(|| (class.clone(), DesiredInventory::units(0)));
        if inv.total < n {
            *inv = DesiredInventory::units(n);
        }
    }
    out
}

/// provider.yaml's additional inventories and traits, on the providers they name (the compute
/// node for `$COMPUTE_NODE`; others by uuid or name). Entries naming no provider, or a class the
/// provider already has, were warned about with the view and are left out here.
pub fn merge_provider_configs(providers: &mut [DesiredProvider], configs: &ProviderConfigs) {
    for c in &configs.providers {
        let target = match &c.target {
            ProviderTarget::ComputeNode => Some(0),
            // The tracker counts a uuid as the compute node's only; children go by name.
            ProviderTarget::Uuid(u) => providers
                .first()
                .is_some_and(|root| root.uuid == *u)
                .then_some(0),
            ProviderTarget::Name(n) => providers.iter().position(|p| &p.name == n),
        };
        let Some(p) = target.and_then(|i| providers.get_mut(i)) else {
            continue;
        };
        if p.role == ProviderRole::Sharing {
            continue;
        }
        for (class, inv) in &c.inventories {
            if p.inventories.contains_key(class) {
                continue;
            }
            p.inventories.insert(
                class.clone(),
                DesiredInventory {
                    total: inv.total,
                    reserved: inv.reserved,
                    min_unit: inv.min_unit,
                    max_unit: inv.max_unit.unwrap_or(inv.total),
                    step_size: inv.step_size,
                    ratio: RatioRule::Fixed(inv.allocation_ratio),
                    floor_at_usage: false,
                    reserved_kept: false,
                },
            );
            if let Some(owned) = p.owned_classes.as_mut() {
                owned.insert(class.clone());
            }
        }
        for t in &c.traits {
            p.traits.insert(t.clone());
            if let Some(owned) = p.owned_traits.as_mut() {
                owned.insert(t.clone());
            }
        }
    }
}

/// The PCI children (`[pci] report_in_placement`), one per provider group, and which provider
/// and class each reported device is allocated from. A provider's total never drops below what
/// the claims hold on it (Nova's rule, so a device spec changed under an instance keeps its
/// provider: those raised are listed); a used one-time-use provider is reserved whole.
pub fn pci_children(
    view: &HostView,
    node_uuid: Uuid,
    hypervisor_hostname: &str,
    consumers: &[Consumer],
    pci: &ReportInputs,
) -> PciChildren {
    let mut out = PciChildren::default();
    // Each provider: its group as the device specs report it (None: only held devices are
    // left), and the held devices no spec reports any more.
    let mut groups: BTreeMap<PciAddress, (Option<&ProviderGroup>, Option<&ProviderGroup>)> =
        BTreeMap::new();
    for (a, g) in &view.pci_providers {
        groups.entry(*a).or_default().0 = Some(g);
    }
    for (a, g) in &pci.held_unreported {
        groups.entry(*a).or_default().1 = Some(g);
    }
    let member_of: BTreeMap<PciAddress, PciAddress> = groups
        .iter()
        .flat_map(|(a, (r, h))| {
            let a = *a;
            r.iter()
                .chain(h)
                .flat_map(move |g| g.members.iter().map(move |m| (*m, a)))
        })
        .collect();
    // Local usage per group, so the total never drops below what is claimed.
    let mut used: BTreeMap<PciAddress, u64> = BTreeMap::new();
    for c in consumers {
        for (key, amount) in &c.resources {
            if let ResourceKey::PciDevice(a) = key {
                if let Some(g) = member_of.get(a) {
                    *used.entry(*g).or_default() += amount;
                }
            }
        }
    }
    for (address, (reported, held)) in groups {
        let Some(g) = reported.or(held) else {
            continue;
        };
        let name = pci_provider_name(hypervisor_hostname, &address);
        let uuid = pci
            .uuids
            .get(&address)
            .copied()
            .unwrap_or_else(|| pci_provider_uuid(node_uuid, &name));
        let in_use = used.get(&address).copied().unwrap_or(0);
        let in_use = i64::try_from(in_use).unwrap_or(i64::MAX);
        let selected = reported.map_or(0, |r| r.members.len() as i64);
        let total = selected.max(in_use);
        if total > selected {
            out.raised.push(PciRaised {
                provider: name.clone(),
                class: g.class.clone(),
                reported: selected,
                total,
            });
        }
        for m in reported.iter().chain(&held).flat_map(|g| &g.members) {
            out.device_provider.insert(*m, (uuid, g.class.clone()));
        }
        // Nova reserves a one-time-use provider's whole inventory once its device is used,
        // and never lowers it: an operator does, to clean the device. Otherwise a PCI
        // provider's `reserved` is the operator's, as in Nova, but after `rtrackctl pci release`.
        let any_of = |set: &BTreeSet<PciAddress>| g.members.iter().any(|m| set.contains(m));
        let reserved = match g.one_time_use {
            true if in_use > 0 || any_of(&pci.one_time_used) => Reserved::Whole,
            true if any_of(&pci.one_time_kept) => Reserved::AsPlacementHoldsElseWhole,
            true if any_of(&pci.one_time_unreserve) => Reserved::None,
            _ => Reserved::AsPlacementHoldsElseNone,
        };
        out.providers
            .push(pci_provider(g, uuid, name, node_uuid, total, reserved));
    }
    out
}

/// [`pci_children`]' answer.
#[derive(Debug, Default)]
pub struct PciChildren {
    /// The providers.
    pub providers: Vec<DesiredProvider>,
    /// The provider and class each device is allocated from.
    pub device_provider: BTreeMap<PciAddress, (Uuid, String)>,
    /// The providers whose total is raised to what is held there.
    pub raised: Vec<PciRaised>,
}

/// What a PCI provider's `reserved` is.
enum Reserved {
    /// 0 (a one-time-use device released by `rtrackctl pci release`).
    None,
    /// The whole total (a one-time-use device in use, or its reservation not yet seen).
    Whole,
    /// What Placement holds, the whole total if it has no record (a one-time-use device
    /// reserved after use, its reservation seen there).
    AsPlacementHoldsElseWhole,
    /// What Placement holds, 0 if it has no record: the operator's.
    AsPlacementHoldsElseNone,
}

fn pci_provider(
    g: &ProviderGroup,
    uuid: Uuid,
    name: String,
    node_uuid: Uuid,
    total: i64,
    reserved: Reserved,
) -> DesiredProvider {
    DesiredProvider {
        uuid,
        name,
        parent: Some(node_uuid),
        role: ProviderRole::Pci { address: g.address },
        inventories: BTreeMap::from([(
            g.class.clone(),
            DesiredInventory {
                total,
                reserved: match reserved {
                    Reserved::None | Reserved::AsPlacementHoldsElseNone => 0,
                    Reserved::Whole | Reserved::AsPlacementHoldsElseWhole => total,
                },
                min_unit: 1,
                max_unit: total,
                step_size: 1,
                ratio: RatioRule::Fixed(1.0),
                floor_at_usage: true,
                reserved_kept: matches!(
                    reserved,
                    Reserved::AsPlacementHoldsElseWhole | Reserved::AsPlacementHoldsElseNone
                ),
            },
        )]),
        owned_classes: None,
        // Nova 34 marks every provider it manages (its owner_nova_filter requires the trait on
        // PCI request groups).
        traits: g
            .traits
            .iter()
            .cloned()
            .chain([traits::OWNER_NOVA.to_string()])
            .collect(),
        owned_traits: None,
        aggregates: BTreeSet::new(),
    }
}

/// The shared storage provider (`[resources] shared_storage_provider`): DISK_GB from the
/// instances filesystem, when it was measured (other hosts report the same provider).
pub fn sharing_provider(
    s: Uuid,
    inv: &crate::probes::HostInventory,
    config: &ValidConfig,
    warnings: &mut Vec<String>,
) -> DesiredProvider {
    let res = &config.resources;
    let mut inventories = BTreeMap::new();
    let mut owned = BTreeSet::new();
    match inv.disks.instances.as_ref().filter(|f| f.total_gb > 0) {
        Some(fs) => {
            owned.insert("DISK_GB".to_string());
            let total = i64::try_from(fs.total_gb).unwrap_or(i64::MAX);
            inventories.insert(
                "DISK_GB".to_string(),
                DesiredInventory {
                    total,
                    reserved: crate::inventory::resources::reserved_disk_gb(
                        res.reserved_host_disk_mb,
                    ),
                    min_unit: 1,
                    max_unit: total,
                    step_size: 1,
                    ratio: res.disk_allocation_ratio.map_or(
                        RatioRule::InitialOrKeep(res.initial_disk_allocation_ratio),
                        RatioRule::Fixed,
                    ),
                    floor_at_usage: false,
                    reserved_kept: false,
                },
            );
        }
        // Other hosts report the same provider: an unmeasured filesystem must not
        // remove their DISK_GB.
        None => warnings.push(format!(
            "shared storage provider {s}: the instances filesystem was not measured; its DISK_GB is left as it is"
        )),
    }
    DesiredProvider {
        uuid: s,
        name: sharing_provider_name(s),
        parent: None,
        role: ProviderRole::Sharing,
        inventories,
        owned_classes: Some(owned),
        traits: BTreeSet::from([MISC_SHARES_VIA_AGGREGATE.to_string()]),
        owned_traits: Some(BTreeSet::from([MISC_SHARES_VIA_AGGREGATE.to_string()])),
        aggregates: BTreeSet::from([s]),
    }
}
