//! Places a claim's units of nested classes on providers, and gives it its mediated devices and
//! vPMEM namespaces.
//!
//! In: the units asked per class, the encryption model, the providers and their usage, the
//! providers Placement allocated from (when the caller sends them), the host's mdevs. Out: a
//! [`NestedAllocation`], or why not. Pure.
//!
//! Placement's choice is followed when it is given (Nova's `_allocate_mdevs` takes the parent
//! from the allocation's provider). Otherwise the units of a class go to the parent with the
//! most free units that holds them all: Placement takes one class of one request group from
//! one provider. Each vGPU unit gets an mdev of the parent's type that exists and is not given
//! to anyone (lowest uuid first; Nova pops an arbitrary one), else a new uuid, distinct from
//! every mdev given or present, for the hypervisor side to create it with. Each vPMEM unit gets
//! a free namespace of its class ([`super::pmem::give_namespaces`]).

use std::collections::{BTreeMap, BTreeSet};

use super::{
    EncryptionModel, MdevGiven, NestedAllocation, NestedKey, NestedProvider, NestedUnits,
    NestedUsage,
};
use crate::inventory::resources::ResourceClass;
use crate::probes::mdev::MediatedDevices;
use crate::tracker::error::ResourceShortfall;

/// What [`assign`] needs besides the providers.
pub struct AssignInput<'a> {
    /// Units per class (only classes some nested provider holds are placed).
    pub requested: &'a BTreeMap<ResourceClass, i64>,
    /// The encryption model asked for, with MEM_ENCRYPTION_CONTEXT.
    pub model: Option<EncryptionModel>,
    /// Placement's allocation: units per provider and class, when the caller sent it.
    pub mapping: Option<&'a BTreeMap<NestedKey, BTreeMap<ResourceClass, i64>>>,
    /// Units and mdevs held by the consumers counted now.
    pub usage: &'a NestedUsage,
    /// The host's mediated devices.
    pub mdevs: &'a MediatedDevices,
    /// The vPMEM namespaces offered.
    pub pmem: &'a [crate::inventory::offered::VpmemNamespace],
    /// Makes new mdev uuids unique to this claim and stable across its retries (instance and
    /// side of a move).
    pub salt: &'a str,
}

/// Why a claim's nested units cannot be placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AssignError {
    /// Not enough room on the providers that may serve it.
    Shortfall(Vec<ResourceShortfall>),
    /// Placement's allocation does not fit the request (amounts differ, a provider of another
    /// class).
    Mapping(String),
}

fn shortfall(
    class: &ResourceClass,
    provider: String,
    requested: i64,
    used: i64,
    capacity: i64,
    max_unit: i64,
) -> ResourceShortfall {
    ResourceShortfall {
        class: class.clone(),
        requested,
        used,
        capacity,
        max_unit,
        provider: Some(provider),
    }
}

/// Places `input.requested` on `providers`; see the module comment.
pub fn assign(
    providers: &[NestedProvider],
    input: &AssignInput<'_>,
) -> Result<NestedAllocation, AssignError> {
    let mut units: Vec<NestedUnits> = Vec::new();
    let mut shortfalls = Vec::new();
    let free = |p: &NestedProvider| p.total - input.usage.used.get(&p.key).copied().unwrap_or(0);
    for (class, &amount) in input.requested {
        if amount <= 0 || !providers.iter().any(|p| &p.class == class) {
            continue;
        }
        let model = match class {
            ResourceClass::MemEncryptionContext => input.model,
            _ => None,
        };
        let candidates: Vec<&NestedProvider> = providers
            .iter()
            .filter(|p| &p.class == class)
            .filter(|p| model.is_none_or(|m| p.key == NestedKey::MemEncryption(m)))
            .collect();
        if candidates.is_empty() {
            let m = model.map_or("none", EncryptionModel::as_str);
            shortfalls.push(shortfall(
                class,
                format!("{m} (not offered on this host)"),
                amount,
                0,
                0,
                0,
            ));
            continue;
        }
        let mapped: Vec<(&NestedKey, i64)> = input
            .mapping
            .into_iter()
            .flatten()
            .filter_map(|(k, per)| per.get(class).map(|n| (k, *n)))
            .filter(|(_, n)| *n > 0)
            .collect();
        if !mapped.is_empty() {
            let sum: i64 = mapped.iter().fold(0i64, |a, (_, n)| a.saturating_add(*n));
            if sum != amount {
                return Err(AssignError::Mapping(format!(
                    "Placement's allocation (allocations, or request_spec.requested_resources) gives {sum} {class} but the flavor asks for {amount}"
                )));
            }
            for (key, n) in mapped {
                let Some(p) = candidates.iter().find(|p| &p.key == key) else {
                    return Err(AssignError::Mapping(format!(
                        "Placement's allocation (allocations, or request_spec.requested_resources) puts {class} on the provider of {key}, which does not serve this request"
                    )));
                };
                let f = free(p);
                if n > f || n > p.max_unit {
                    shortfalls.push(shortfall(
                        class,
                        key.to_string(),
                        n,
                        p.total - f,
                        p.total,
                        p.max_unit,
                    ));
                    continue;
                }
                units.push(NestedUnits {
                    provider: key.clone(),
                    class: class.clone(),
                    amount: n,
                });
            }
            continue;
        }
        // Placement takes one class of one request group from one provider (and Nova's
        // `_allocate_mdevs` creates a guest's vGPUs on one parent): the freest that holds it all.
        let mut order = candidates.clone();
        order.sort_by(|a, b| free(b).cmp(&free(a)).then_with(|| a.key.cmp(&b.key)));
        match order
            .iter()
            .find(|p| free(p) >= amount && p.max_unit >= amount)
        {
            Some(p) => units.push(NestedUnits {
                provider: p.key.clone(),
                class: class.clone(),
                amount,
            }),
            None => {
                let total: i64 = candidates.iter().map(|p| p.total).sum();
                let used: i64 = candidates.iter().map(|p| p.total - free(p)).sum();
                let max_unit = candidates.iter().map(|p| p.max_unit).max().unwrap_or(0);
                let names: Vec<String> = candidates.iter().map(|p| p.key.to_string()).collect();
                shortfalls.push(shortfall(
                    class,
                    names.join(", "),
                    amount,
                    used,
                    total,
                    max_unit,
                ));
            }
        }
    }
    if !shortfalls.is_empty() {
        return Err(AssignError::Shortfall(shortfalls));
    }
    let mdevs = give_mdevs(providers, &units, input);
    let pmem = super::pmem::give_namespaces(&units, input.pmem, &input.usage.pmem);
    Ok(NestedAllocation { units, mdevs, pmem })
}

/// One mdev per vGPU unit: unassigned existing ones of the parent's type first.
fn give_mdevs(
    providers: &[NestedProvider],
    units: &[NestedUnits],
    input: &AssignInput<'_>,
) -> Vec<MdevGiven> {
    let mut given: BTreeSet<String> = BTreeSet::new();
    let mut out = Vec::new();
    for u in units {
        let NestedKey::Mdev(parent) = &u.provider else {
            continue;
        };
        let Some(type_id) = providers
            .iter()
            .find(|p| p.key == u.provider)
            .and_then(|p| p.mdev_type.clone())
        else {
            continue;
        };
        let mut free_existing: Vec<&str> = input
            .mdevs
            .devices
            .iter()
            .filter(|d| {
                d.parent.as_deref() == Some(parent.as_str())
                    && d.type_id.as_deref() == Some(type_id.as_str())
                    && !input.usage.mdevs.contains(&d.uuid)
                    && !given.contains(&d.uuid)
            })
            .map(|d| d.uuid.as_str())
            .collect();
        free_existing.sort_unstable();
        let mut existing = free_existing.into_iter();
        let mut next = 0u64;
        for _ in 0..u.amount {
            let (uuid, was) = match existing.next() {
                Some(e) => (e.to_string(), true),
                None => {
                    // Stable for the claim, and never one that is given or on the host already.
                    let fresh = loop {
                        let candidate = uuid::Uuid::new_v5(
                            &uuid::Uuid::NAMESPACE_OID,
                            format!("rtrack-mdev/{}/{parent}/{next}", input.salt).as_bytes(),
                        )
                        .to_string();
                        next += 1;
                        let taken = input.usage.mdevs.contains(&candidate)
                            || given.contains(&candidate)
                            || input.mdevs.devices.iter().any(|d| d.uuid == candidate);
                        if !taken {
                            break candidate;
                        }
                    };
                    (fresh, false)
                }
            };
            given.insert(uuid.clone());
            out.push(MdevGiven {
                uuid,
                parent: parent.clone(),
                type_id: type_id.clone(),
                existing: was,
            });
        }
    }
    out
}
