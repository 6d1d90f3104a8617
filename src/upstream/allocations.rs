//! Which parts of a consumer's allocation are rtrack's to write, and the allocation it writes.
//! `PUT /allocations/{consumer}` replaces the consumer's whole allocation, so rtrack reads it,
//! changes only its own parts and writes the rest back as Placement has it: parts on other
//! providers (a Neutron agent's bandwidth, a sharing provider's addresses) and classes others
//! report stay, and so do the consumer's project, user and type.
//!
//! rtrack's parts: every class on the providers of its tree (the compute node, its PCI, vGPU and
//! encryption children, and those children it would delete). Never the sharing provider's:
//! with shared storage a claim does not count DISK_GB (Nova's rule), so the scheduler's DISK_GB
//! part there stays as it is, like every other provider's.
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

/// The providers whose parts (every class) rtrack writes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OwnedParts(BTreeSet<Uuid>);

impl OwnedParts {
    /// rtrack's parts for `desired`, with the stale children of its tree the cache holds.
    pub fn of(desired: &DesiredState, cache: &ProviderCache) -> OwnedParts {
        let mut out: BTreeSet<Uuid> = desired
            .providers
            .iter()
            .filter(|p| p.role != ProviderRole::Sharing)
            .map(|p| p.uuid)
            .collect();
        let root_name = desired
            .provider(desired.root)
            .map(|r| r.name.as_str())
            .unwrap_or_default();
        for c in cache.providers.values() {
            // A provider the report leaves alone (an mdev parent no enabled type applies to)
            // is not rtrack's to write allocations on either.
            let ours = c.parent == Some(desired.root)
                && !desired.left_alone.contains(&c.name)
                && (c.traits.contains(COMPUTE_MANAGED_PCI_DEVICE)
                    || is_nested_provider_name(root_name, &c.name));
            if ours {
                out.insert(c.uuid);
            }
        }
        OwnedParts(out)
    }

    /// Whether parts on `provider` are rtrack's to write.
    pub fn owns(&self, provider: &Uuid) -> bool {
        self.0.contains(provider)
    }

    /// `current` without rtrack's parts (what a release leaves).
    pub fn others(&self, current: &Amounts) -> Amounts {
        let mut out = Amounts::new();
        for (rp, classes) in current {
            for (class, n) in classes {
                if *n > 0 && !self.owns(rp) {
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
        let owned = OwnedParts(BTreeSet::from([root]));
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
                (shared, "DISK_GB", 10),
                (shared, "IPV4_ADDRESS", 1),
            ]),
            "others' parts stay"
        );
        assert_eq!(
            owned.others(&current),
            amounts(&[
                (neutron, "NET_BW_EGR_KILOBIT_PER_SEC", 1000),
                (shared, "DISK_GB", 10),
                (shared, "IPV4_ADDRESS", 1),
            ])
        );
    }
}
