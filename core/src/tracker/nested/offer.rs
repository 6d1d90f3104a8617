//! What the host offers below the compute node under the mdev policy: the vGPU and encryption
//! providers with their totals, the TDX decision and the vPMEM namespaces, and the
//! configuration's problems on this host.

use super::model::*;
use super::{pmem, tdx};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::config::devices::MdevPolicy;
use crate::inventory::resources::{ResourceClass, ResourceInventory};
use crate::probes::HostInventory;

/// The providers the host offers under `policy`, in key order, and warnings (a parent, a model
/// or a namespace left out, and why).
pub fn nested_providers(
    host: &HostInventory,
    policy: &MdevPolicy,
    warnings: &mut Vec<String>,
) -> Vec<NestedProvider> {
    nested_offer(host, policy, warnings).providers
}

/// [`nested_providers`] with the TDX decision and the vPMEM namespaces.
pub fn nested_offer(
    host: &HostInventory,
    policy: &MdevPolicy,
    warnings: &mut Vec<String>,
) -> NestedOffer {
    let (mut providers, left_alone) = vgpu_providers(host, policy, warnings);
    providers.extend(sev_providers(host, policy, warnings));
    let intel_tdx = tdx::tdx_offer(host, policy, warnings);
    providers.extend(tdx::tdx_provider(&intel_tdx));
    let pmem = pmem::offered_namespaces(host, &policy.pmem, warnings);
    providers.extend(pmem::pmem_providers(&pmem));
    providers.sort_by(|a, b| a.key.cmp(&b.key));
    NestedOffer {
        providers,
        intel_tdx,
        pmem,
        left_alone,
    }
}

/// The vGPU providers, and the parents left alone (see [`NestedOffer::left_alone`]).
fn vgpu_providers(
    host: &HostInventory,
    policy: &MdevPolicy,
    warnings: &mut Vec<String>,
) -> (Vec<NestedProvider>, Vec<NestedKey>) {
    let mdevs = &host.mediated_devices;
    // (parent, type, existing, available) in parent order, for the parents with an enabled type.
    let mut rows = Vec::new();
    let mut left_alone = Vec::new();
    let mut existing_per_type: BTreeMap<&str, u64> = BTreeMap::new();
    for parent in &mdevs.parents {
        let Some(t) = policy.type_for(&parent.address) else {
            left_alone.push(NestedKey::Mdev(parent.address.clone()));
            continue;
        };
        let Some(offered) = parent.offered(&t.type_id) else {
            left_alone.push(NestedKey::Mdev(parent.address.clone()));
            if !t.device_addresses.is_empty() {
                warnings.push(format!(
                    "mdev parent {} does not offer type {} it is configured for: no vGPUs there",
                    parent.address, t.type_id
                ));
            }
            continue;
        };
        let existing = mdevs
            .devices
            .iter()
            .filter(|d| {
                d.parent.as_deref() == Some(parent.address.as_str())
                    && d.type_id.as_deref() == Some(t.type_id.as_str())
            })
            .count() as u64;
        let e = existing_per_type.entry(&t.type_id).or_default();
        *e = e.saturating_add(existing);
        rows.push((parent, t, existing, offered));
    }
    let mut granted_per_type: BTreeMap<&str, u64> = BTreeMap::new();
    let mut out = Vec::new();
    for (parent, t, existing, offered) in rows {
        let mut available = offered.available_instances.unwrap_or(0);
        if let Some(limit) = t.max_instances {
            let taken = existing_per_type
                .get(t.type_id.as_str())
                .copied()
                .unwrap_or(0)
                .saturating_add(
                    granted_per_type
                        .get(t.type_id.as_str())
                        .copied()
                        .unwrap_or(0),
                );
            if taken.saturating_add(available) > limit {
                warnings.push(format!(
                    "mdev parent {}: none of its {} more {} devices offered, they would pass max_instances {} ({} taken)",
                    parent.address, available, t.type_id, limit, taken
                ));
                available = 0;
            }
        }
        let g = granted_per_type.entry(&t.type_id).or_default();
        *g = g.saturating_add(available);
        let total = i64::try_from(existing.saturating_add(available)).unwrap_or(i64::MAX);
        if total == 0 {
            continue;
        }
        let Ok(class) = ResourceClass::from_name(&t.class) else {
            continue;
        };
        let mut traits = crate::inventory::traits::gpu_type_traits(offered.description.as_deref());
        traits.insert(crate::inventory::traits::OWNER_NOVA.to_string());
        out.push(NestedProvider {
            key: NestedKey::Mdev(parent.address.clone()),
            class,
            total,
            max_unit: total,
            traits,
            mdev_type: Some(t.type_id.clone()),
        });
    }
    (out, left_alone)
}

/// The AMD models' providers (SEV, and SEV-ES or SEV-SNP) when KVM runs SEV guests.
fn sev_providers(
    host: &HostInventory,
    policy: &MdevPolicy,
    warnings: &mut Vec<String>,
) -> Vec<NestedProvider> {
    let enc = &host.memory_encryption;
    let x86 = host.cpu.arch.as_deref() == Some("x86_64");
    if enc.sev != Some(true) || !x86 {
        return Vec::new();
    }
    let configured = policy.num_memory_encrypted_guests;
    let mut out = Vec::new();
    let mut push = |model: EncryptionModel, kernel: Option<u64>, configured: Option<u64>| {
        let slots = match (kernel, configured) {
            (Some(k), Some(c)) => Some(k.min(c)),
            (k, c) => k.or(c),
        };
        match slots {
            Some(0) => {}
            Some(n) => out.push(NestedProvider {
                key: NestedKey::MemEncryption(model),
                class: ResourceClass::MemEncryptionContext,
                total: i64::try_from(n).unwrap_or(i64::MAX),
                max_unit: 1,
                traits: BTreeSet::from([
                    model.trait_name().to_string(),
                    crate::inventory::traits::OWNER_NOVA.to_string(),
                ]),
                mdev_type: None,
            }),
            None => warnings.push(format!(
                "{} is on but the kernel does not say how many guests it runs (no misc cgroup capacity) and devices.num_memory_encrypted_guests is not set: not offered",
                model.as_str()
            )),
        }
    };
    push(EncryptionModel::AmdSev, enc.sev_guests, configured);
    // Nova: SNP on hides SEV-ES; SNP guests use the SEV-ES contexts.
    if enc.sev_snp == Some(true) {
        push(EncryptionModel::AmdSevSnp, enc.sev_es_guests, None);
    } else if enc.sev_es == Some(true) {
        push(EncryptionModel::AmdSevEs, enc.sev_es_guests, None);
    }
    out
}

/// The host's inventory per class with the nested providers' units added to the compute node's
/// (what a claim is checked against first; the provider it lands on is chosen after).
pub fn class_inventory(
    root: &BTreeMap<ResourceClass, ResourceInventory>,
    nested: &[NestedProvider],
) -> BTreeMap<ResourceClass, ResourceInventory> {
    let mut all = root.clone();
    for p in nested {
        let e = all
            .entry(p.class.clone())
            .or_insert_with(|| ResourceInventory {
                class: p.class.clone(),
                total: 0,
                reserved: 0,
                min_unit: 1,
                max_unit: 0,
                step_size: 1,
                allocation_ratio: 1.0,
            });
        e.total = e.total.saturating_add(p.total);
    }
    // One class of a request comes from one provider: the largest unit is the largest any
    // provider of the class takes.
    for p in nested {
        if let Some(e) = all.get_mut(&p.class) {
            e.max_unit = e.max_unit.max(p.max_unit);
        }
    }
    all
}

/// What the configuration asks of mediated devices that this host does not have (yet): types no
/// parent offers, addresses that are not mdev parents or do not offer the type. `(key, why)`
/// warnings, not refusals: a vendor driver may create its mdev parents after rtrackd starts (the
/// next audit offers them), and Nova starts and offers nothing for them too.
pub fn host_mismatches(host: &HostInventory, policy: &MdevPolicy) -> Vec<(String, String)> {
    let mdevs = &host.mediated_devices;
    let parents: Vec<&str> = mdevs.parents.iter().map(|p| p.address.as_str()).collect();
    let shown = |list: &[&str]| -> String {
        if list.is_empty() {
            "none".into()
        } else if list.len() > 8 {
            format!("{} and {} more", list[..8].join(", "), list.len() - 8)
        } else {
            list.join(", ")
        }
    };
    let mut out = Vec::new();
    for (i, t) in policy.types.iter().enumerate() {
        let offered_by: Vec<&str> = mdevs
            .parents
            .iter()
            .filter(|p| p.offered(&t.type_id).is_some())
            .map(|p| p.address.as_str())
            .collect();
        if offered_by.is_empty() {
            let mut known: Vec<&str> = mdevs
                .parents
                .iter()
                .flat_map(|p| p.types.iter().map(|x| x.type_id.as_str()))
                .collect();
            known.sort_unstable();
            known.dedup();
            out.push((
                format!("devices.enabled_mdev_types[{i}]"),
                format!(
                    "type {} is offered by no mdev parent on this host (types offered: {})",
                    crate::echo::quoted(&t.type_id),
                    shown(&known)
                ),
            ));
        }
        for (j, a) in t.device_addresses.iter().enumerate() {
            let key = format!("mdev.{}.device_addresses[{j}]", t.type_id);
            match mdevs.parent(a) {
                None => out.push((
                    key,
                    format!(
                        "{a} is not an mdev parent on this host (sys/class/mdev_bus lists: {})",
                        shown(&parents)
                    ),
                )),
                Some(p) if p.offered(&t.type_id).is_none() => out.push((
                    key,
                    format!(
                        "{a} does not offer type {} (it offers: {})",
                        crate::echo::quoted(&t.type_id),
                        shown(
                            &p.types
                                .iter()
                                .map(|x| x.type_id.as_str())
                                .collect::<Vec<_>>()
                        )
                    ),
                )),
                Some(_) => {}
            }
        }
    }
    out
}

/// Mdevs given to claims that the host no longer shows, with the claim holding each: the
/// audit's inconsistency report (a vGPU the hypervisor side was to create and has not is not
/// one: it never existed).
pub fn missing_mdevs<'a>(
    host: &HostInventory,
    held: impl Iterator<Item = (&'a str, &'a Arc<NestedAllocation>)>,
) -> Vec<(String, MdevGiven)> {
    let present: BTreeSet<&str> = host
        .mediated_devices
        .devices
        .iter()
        .map(|d| d.uuid.as_str())
        .collect();
    let mut out = Vec::new();
    for (instance, alloc) in held {
        for m in &alloc.mdevs {
            if m.existing && !present.contains(m.uuid.as_str()) {
                out.push((instance.to_string(), m.clone()));
            }
        }
    }
    out
}
