//! Which parts of a consumer's allocation are rtrack's to write, and the allocation it writes.
//! `PUT /allocations/{consumer}` replaces the consumer's whole allocation, so rtrack reads it,
//! changes only its own parts and writes the rest back as Placement has it: parts on other
//! providers (a Neutron agent's bandwidth, a sharing provider's addresses) and classes others
//! report stay, and so do the consumer's project, user and type.
//!
//! rtrack's parts: every class on the providers of its tree that it reports (the compute node,
//! its PCI, vGPU and encryption children, and those children it would delete), and DISK_GB on
//! the sharing provider it reports DISK_GB on.
//!
//! In: the desired state, the cache (the tree as read), a consumer's allocation as Placement has
//! it. Out: the allocation to write.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use super::desired::{is_nested_provider_name, DesiredState, ProviderRole};
use super::plan::ProviderCache;
use super::traits::COMPUTE_MANAGED_PCI_DEVICE;

/// provider -> class -> amount.
pub type Amounts = BTreeMap<Uuid, BTreeMap<String, u64>>;

/// A consumer's project, user and type, as Placement holds them.
pub type Owner = (String, String, String);

/// The providers whose parts rtrack writes, each with the classes it writes there (`None`:
/// every class).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OwnedParts(BTreeMap<Uuid, Option<BTreeSet<String>>>);

impl OwnedParts {
    /// rtrack's parts for `desired`, with the stale children of its tree the cache holds.
    pub fn of(desired: &DesiredState, cache: &ProviderCache) -> OwnedParts {
        let mut out = BTreeMap::new();
        for p in &desired.providers {
            let classes = match p.role {
                ProviderRole::Sharing => Some(p.owned_classes.clone().unwrap_or_default()),
                _ => None,
            };
            out.insert(p.uuid, classes);
        }
        let root_name = desired
            .provider(desired.root)
            .map(|r| r.name.as_str())
            .unwrap_or_default();
        for c in cache.providers.values() {
            let ours = c.parent == Some(desired.root)
                && (c.traits.contains(COMPUTE_MANAGED_PCI_DEVICE)
                    || is_nested_provider_name(root_name, &c.name));
            if ours {
                out.entry(c.uuid).or_insert(None);
            }
        }
        OwnedParts(out)
    }

    /// Whether `class` on `provider` is rtrack's to write.
    pub fn owns(&self, provider: &Uuid, class: &str) -> bool {
        match self.0.get(provider) {
            None => false,
            Some(None) => true,
            Some(Some(classes)) => classes.contains(class),
        }
    }

    /// `current` without rtrack's parts (what a release leaves).
    pub fn others(&self, current: &Amounts) -> Amounts {
        let mut out = Amounts::new();
        for (rp, classes) in current {
            for (class, n) in classes {
                if *n > 0 && !self.owns(rp, class) {
                    out.entry(*rp).or_default().insert(class.clone(), *n);
                }
            }
        }
        out
    }

    /// `current` with rtrack's parts replaced by `ours` (whose parts are all rtrack's).
    pub fn merged(&self, current: &Amounts, ours: &Amounts) -> Amounts {
        let mut out = self.others(current);
        for (rp, classes) in ours {
            for (class, n) in classes {
                if *n > 0 {
                    out.entry(*rp).or_default().insert(class.clone(), *n);
                }
            }
        }
        out
    }
}

/// Amounts with zero entries and empty providers dropped (as Placement answers them).
pub fn normalized(a: &Amounts) -> Amounts {
    a.iter()
        .map(|(rp, c)| {
            let c: BTreeMap<String, u64> = c
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(k, n)| (k.clone(), *n))
                .collect();
            (*rp, c)
        })
        .filter(|(_, c)| !c.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn amounts(items: &[(Uuid, &str, u64)]) -> Amounts {
        let mut out = Amounts::new();
        for (rp, class, n) in items {
            out.entry(*rp).or_default().insert(class.to_string(), *n);
        }
        out
    }

    #[test]
    fn only_our_parts_are_replaced() {
        let (root, neutron, shared) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        let owned = OwnedParts(BTreeMap::from([
            (root, None),
            (shared, Some(BTreeSet::from(["DISK_GB".to_string()]))),
        ]));
        let current = amounts(&[
            (root, "VCPU", 2),
            (root, "MEMORY_MB", 512),
            (neutron, "NET_BW_EGR_KILOBIT_PER_SEC", 1000),
            (shared, "DISK_GB", 10),
            (shared, "IPV4_ADDRESS", 1),
        ]);
        let ours = amounts(&[(root, "VCPU", 4), (root, "MEMORY_MB", 512)]);
        assert_eq!(
            owned.merged(&current, &ours),
            amounts(&[
                (root, "VCPU", 4),
                (root, "MEMORY_MB", 512),
                (neutron, "NET_BW_EGR_KILOBIT_PER_SEC", 1000),
                (shared, "IPV4_ADDRESS", 1),
            ]),
            "our DISK_GB on the sharing provider goes with our parts; others' parts stay"
        );
        assert_eq!(
            owned.others(&current),
            amounts(&[
                (neutron, "NET_BW_EGR_KILOBIT_PER_SEC", 1000),
                (shared, "IPV4_ADDRESS", 1),
            ])
        );
    }
}
