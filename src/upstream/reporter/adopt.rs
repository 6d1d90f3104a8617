//! Taking over the PCI providers nova-compute left in Placement: Nova names a PCI child
//! `<hypervisor_hostname>_<ADDRESS>` and gives it a random uuid, so rtrack cannot derive it. A
//! child of our compute node with the name rtrack would create is the same device's provider:
//! rtrack reports under its uuid (keeping the allocations the scheduler made against it) instead
//! of creating a second provider, which Placement would refuse for the name anyway.
//!
//! In: the desired state and the cache read from Placement. Out: the adopted uuids by the address
//! each provider is named after, and the desired state with them in place of rtrack's own.

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::probes::pci::PciAddress;
use crate::upstream::desired::{DesiredState, ProviderRole};
use crate::upstream::plan::ProviderCache;

/// The PCI providers of `desired` that Placement holds under another uuid: a child of the root
/// with the same name, while the desired uuid is not in Placement.
pub fn adoptions(desired: &DesiredState, cache: &ProviderCache) -> BTreeMap<PciAddress, Uuid> {
    let mut out = BTreeMap::new();
    for p in &desired.providers {
        let ProviderRole::Pci { address } = p.role else {
            continue;
        };
        if cache.providers.contains_key(&p.uuid) {
            continue;
        }
        if let Some(theirs) = cache
            .providers
            .values()
            .find(|c| c.parent == Some(desired.root) && c.name == p.name)
        {
            out.insert(address, theirs.uuid);
        }
    }
    out
}

/// The vGPU and encryption providers of `desired` that Placement holds under another uuid (a
/// child of the root with the name nova-compute gave it): rtrack's derived uuid -> theirs.
/// Found again at each report, from the provider tree read from Placement.
pub fn nested_adoptions(desired: &DesiredState, cache: &ProviderCache) -> BTreeMap<Uuid, Uuid> {
    let mut out = BTreeMap::new();
    for p in desired
        .providers
        .iter()
        .filter(|p| p.role == ProviderRole::Nested && !cache.providers.contains_key(&p.uuid))
    {
        if let Some(theirs) = cache
            .providers
            .values()
            .find(|c| c.parent == Some(desired.root) && c.name == p.name)
        {
            out.insert(p.uuid, theirs.uuid);
        }
    }
    out
}

/// `desired` with the adopted uuids in place of the PCI providers' own (and of the nested
/// providers' own, `nested`: derived -> theirs), in the providers and in the allocations.
pub fn with_adopted(
    desired: &DesiredState,
    adopted: &BTreeMap<PciAddress, Uuid>,
    nested: &BTreeMap<Uuid, Uuid>,
) -> DesiredState {
    let mut out = desired.clone();
    let mut renamed: BTreeMap<Uuid, Uuid> = BTreeMap::new();
    for p in &mut out.providers {
        let theirs = match p.role {
            ProviderRole::Pci { address } => adopted.get(&address).copied(),
            ProviderRole::Nested => nested.get(&p.uuid).copied(),
            _ => None,
        };
        if let Some(theirs) = theirs {
            renamed.insert(p.uuid, theirs);
            p.uuid = theirs;
        }
    }
    let rename = |rp: Uuid| renamed.get(&rp).copied().unwrap_or(rp);
    for a in out
        .allocations
        .iter_mut()
        .flat_map(|m| m.values_mut())
        .chain(out.expected.values_mut())
    {
        a.resources = std::mem::take(&mut a.resources)
            .into_iter()
            .map(|(rp, r)| (rename(rp), r))
            .collect();
    }
    for (rp, _) in out.device_providers.values_mut() {
        *rp = rename(*rp);
    }
    out
}
