//! Three-way reconciliation: the local claims (what they should hold in Placement), Placement's
//! allocations on our tree, and the host as probed (the inventory rtrack reports). Pure: the
//! reporter reads Placement, this compares.
//!
//! In: the [`DesiredState`] (its `expected` allocations and providers) and the
//! [`ProviderCache`] as read at a refresh (with Placement's allocations). Out: a [`Drift`]: each
//! consumer whose allocation differs ([`DriftKind::Unclaimed`]: in Placement, no local claim;
//! [`DriftKind::Missing`]: a local claim, no allocation; [`DriftKind::Different`]: other
//! amounts or providers) and each inventory Placement holds that the host no longer has.
//!
//! Only what rtrack owns is compared: the compute node, its PCI and nested children, and on each
//! the classes rtrack reports there; Neutron's children, the sharing provider (other hosts'
//! consumers) and classes others put there are not rtrack's to judge.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use uuid::Uuid;

use super::desired::{is_nested_provider_name, DesiredState, ProviderRole};
use super::plan::ProviderCache;
use super::traits::COMPUTE_MANAGED_PCI_DEVICE;

pub use super::allocations::Amounts;

/// How a consumer's allocation differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DriftKind {
    /// Placement holds an allocation on this host's providers for a consumer with no local
    /// claim (a build in flight, an instance not adopted, a leftover): never changed by a
    /// report; removed only by an operator's command naming it.
    Unclaimed,
    /// A local claim has no allocation in Placement.
    Missing,
    /// Both exist, with other amounts or on other providers.
    Different,
}

impl DriftKind {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            DriftKind::Unclaimed => "unclaimed",
            DriftKind::Missing => "missing",
            DriftKind::Different => "different",
        }
    }
}

/// Every drift kind, as the metric labels them.
pub const DRIFT_KINDS: [&str; 4] = ["unclaimed", "missing", "different", "inventory_gone"];

/// One consumer's drift.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ConsumerDrift {
    /// Instance or migration uuid.
    pub consumer: Uuid,
    /// How it differs.
    pub kind: DriftKind,
    /// What the local claims hold, on rtrack's providers: provider uuid -> class -> amount.
    #[schema(value_type = BTreeMap<String, BTreeMap<String, u64>>)]
    pub local: Amounts,
    /// What Placement holds, on rtrack's providers: provider uuid -> class -> amount.
    #[schema(value_type = BTreeMap<String, BTreeMap<String, u64>>)]
    pub placement: Amounts,
}

impl ConsumerDrift {
    /// Tells this drift seen again from another: kind and consumer.
    pub fn key(&self) -> String {
        format!("{}:{}", self.kind.as_str(), self.consumer)
    }
}

/// Inventory Placement holds that the host no longer has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct InventoryDrift {
    /// The provider.
    pub provider: Uuid,
    /// Its name.
    pub provider_name: String,
    /// The class.
    pub class: String,
    /// Placement's total.
    pub placement_total: i64,
    /// The host's (0 when the class or the provider is gone).
    pub host_total: i64,
    /// Placement's usage of the class there, when read.
    #[schema(required)]
    pub used: Option<u64>,
}

impl InventoryDrift {
    /// Tells this drift seen again from another: provider and class.
    pub fn key(&self) -> String {
        format!("inventory:{}:{}", self.provider, self.class)
    }
}

/// What differs between the three.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Drift {
    /// Consumers, by uuid.
    pub consumers: Vec<ConsumerDrift>,
    /// Inventories.
    pub inventories: Vec<InventoryDrift>,
}

impl Drift {
    /// Nothing differs.
    pub fn is_empty(&self) -> bool {
        self.consumers.is_empty() && self.inventories.is_empty()
    }

    /// Counts by kind ([`DRIFT_KINDS`]), every kind listed.
    pub fn counts(&self) -> BTreeMap<&'static str, usize> {
        let mut out: BTreeMap<&'static str, usize> = DRIFT_KINDS.iter().map(|k| (*k, 0)).collect();
        for c in &self.consumers {
            *out.entry(c.kind.as_str()).or_default() += 1;
        }
        *out.entry("inventory_gone").or_default() += self.inventories.len();
        out
    }

    /// A key per drift (kind and consumer, or provider and class), to tell a drift seen again
    /// from a new one.
    pub fn keys(&self) -> BTreeSet<String> {
        self.consumers
            .iter()
            .map(ConsumerDrift::key)
            .chain(self.inventories.iter().map(InventoryDrift::key))
            .collect()
    }

    /// Only the drifts whose key is in `keys`.
    pub fn only(&self, keys: &BTreeSet<String>) -> Drift {
        Drift {
            consumers: self
                .consumers
                .iter()
                .filter(|c| keys.contains(&c.key()))
                .cloned()
                .collect(),
            inventories: self
                .inventories
                .iter()
                .filter(|i| keys.contains(&i.key()))
                .cloned()
                .collect(),
        }
    }
}

/// The providers rtrack owns in `cache` and the classes it judges on each: the desired
/// providers but the sharing one (their reported classes), and the children rtrack would
/// delete (every class).
fn judged(
    desired: &DesiredState,
    cache: &ProviderCache,
) -> BTreeMap<Uuid, Option<BTreeSet<String>>> {
    let mut out = BTreeMap::new();
    for p in desired
        .providers
        .iter()
        .filter(|p| p.role != ProviderRole::Sharing)
    {
        out.insert(p.uuid, Some(p.inventories.keys().cloned().collect()));
    }
    let root_name = cache
        .providers
        .get(&desired.root)
        .map(|r| r.name.as_str())
        .or_else(|| desired.provider(desired.root).map(|r| r.name.as_str()))
        .unwrap_or_default();
    for c in cache.providers.values() {
        let ours_gone = c.parent == Some(desired.root)
            && desired.provider(c.uuid).is_none()
            && (c.traits.contains(COMPUTE_MANAGED_PCI_DEVICE)
                || is_nested_provider_name(root_name, &c.name));
        if ours_gone {
            out.insert(c.uuid, None);
        }
    }
    out
}

fn restrict(
    amounts: &Amounts,
    judged: &BTreeMap<Uuid, Option<BTreeSet<String>>>,
    also: Option<&Amounts>,
) -> Amounts {
    let mut out = Amounts::new();
    for (rp, classes) in amounts {
        let Some(allowed) = judged.get(rp) else {
            continue;
        };
        for (class, amount) in classes {
            let local_has = also
                .and_then(|a| a.get(rp))
                .is_some_and(|c| c.contains_key(class));
            let ok = match allowed {
                None => true,
                Some(set) => set.contains(class) || local_has,
            };
            if ok && *amount > 0 {
                out.entry(*rp).or_default().insert(class.clone(), *amount);
            }
        }
    }
    out
}

/// Compares the local claims with Placement's allocations on our tree, and the host's
/// inventory with Placement's. `cache` must have been read at a refresh.
pub fn compare(desired: &DesiredState, cache: &ProviderCache) -> Drift {
    let judged = judged(desired, cache);
    let mut drift = Drift::default();
    let consumers: BTreeSet<Uuid> = desired
        .expected
        .keys()
        .chain(cache.placement_allocations.keys())
        .copied()
        .collect();
    let empty = Amounts::new();
    for c in consumers {
        let local = desired
            .expected
            .get(&c)
            .map(|a| restrict(&a.resources, &judged, None))
            .unwrap_or_default();
        let placement = restrict(
            cache.placement_allocations.get(&c).unwrap_or(&empty),
            &judged,
            Some(&local),
        );
        let kind = match (local.is_empty(), placement.is_empty()) {
            (true, true) => continue,
            (true, false) => DriftKind::Unclaimed,
            (false, true) => DriftKind::Missing,
            (false, false) if local != placement => DriftKind::Different,
            (false, false) => continue,
        };
        drift.consumers.push(ConsumerDrift {
            consumer: c,
            kind,
            local,
            placement,
        });
    }
    for (rp, classes) in &judged {
        let Some(cached) = cache.providers.get(rp) else {
            continue;
        };
        let wanted = desired.provider(*rp);
        for (class, rec) in &cached.inventories {
            let host_total = match (classes, wanted) {
                (Some(_), Some(w)) => w.inventories.get(class).map_or(0, |i| i.total),
                _ => 0,
            };
            if rec.total > host_total {
                drift.inventories.push(InventoryDrift {
                    provider: *rp,
                    provider_name: cached.name.clone(),
                    class: class.clone(),
                    placement_total: rec.total,
                    host_total,
                    used: cached.usages.get(class).copied(),
                });
            }
        }
    }
    drift
}

#[cfg(test)]
mod tests;
