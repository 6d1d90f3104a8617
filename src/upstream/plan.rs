//! The local copy of what Placement holds ([`ProviderCache`]) and the pure comparison of it
//! with a [`DesiredState`] ([`plan`]): "no change, no request" is this function returning an
//! empty list.
//!
//! In: the desired state and the cache. Out: the [`Action`]s that make Placement equal to the
//! desired state, in an order Placement accepts (classes and traits before use, parents before
//! children, stale allocations before the inventory under them shrinks, deletions bottom-up).

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use super::allocations::{normalized, Amounts, OwnedParts, Owner};
use super::desired::{is_nested_provider_name, DesiredState, ProviderRole, RatioRule};
use super::traits::COMPUTE_MANAGED_PCI_DEVICE;

/// One inventory record as Placement stores it (every field filled in).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct InventoryRecord {
    /// Amount of the class the provider has, before `reserved` and the ratio apply.
    pub total: i64,
    /// Part of `total` that Placement will not allocate to consumers.
    pub reserved: i64,
    /// Smallest allocation.
    pub min_unit: i64,
    /// Largest allocation.
    pub max_unit: i64,
    /// Allocations of the class must be a multiple of this.
    pub step_size: i64,
    /// Overcommit ratio.
    pub allocation_ratio: f64,
}

impl InventoryRecord {
    /// Equal, with ratios compared to 1e-6 (Placement stores them as floats).
    pub fn same_as(&self, other: &InventoryRecord) -> bool {
        self.total == other.total
            && self.reserved == other.reserved
            && self.min_unit == other.min_unit
            && self.max_unit == other.max_unit
            && self.step_size == other.step_size
            && (self.allocation_ratio - other.allocation_ratio).abs() < 1e-6
    }
}

/// One provider as last seen in (or written to) Placement.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CachedProvider {
    /// The provider's uuid.
    pub uuid: Uuid,
    /// The provider's name (unique in Placement).
    pub name: String,
    /// Parent provider's uuid; `None` for the root of a tree.
    pub parent: Option<Uuid>,
    /// The generation Placement last returned.
    pub generation: u64,
    /// Inventories by class.
    pub inventories: BTreeMap<String, InventoryRecord>,
    /// Every trait set on the provider, rtrack's and others'.
    pub traits: BTreeSet<String>,
    /// Aggregates (by uuid) the provider is a member of.
    pub aggregates: BTreeSet<Uuid>,
    /// Used amounts by class (for the PCI "never below usage" rule).
    pub usages: BTreeMap<String, u64>,
}

/// One consumer's whole allocation (every provider's part), as last read or written.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CachedConsumer {
    /// Consumer generation (`None`: Placement has no such consumer).
    pub generation: Option<u64>,
    /// provider -> class -> amount, on every provider (ours and others').
    pub resources: Amounts,
    /// Project, user and type, as Placement has them.
    pub owner: Option<Owner>,
}

/// The local provider-tree cache.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProviderCache {
    /// Providers of our tree and the sharing provider, by uuid.
    pub providers: BTreeMap<Uuid, CachedProvider>,
    /// Consumers holding allocations on our providers, read whole (only with
    /// report_allocations).
    pub consumers: BTreeMap<Uuid, CachedConsumer>,
    /// Custom resource classes known to exist.
    pub classes: BTreeSet<String>,
    /// Custom traits known to exist.
    pub custom_traits: BTreeSet<String>,
    /// Placement's allocations on our tree as last read (consumer -> provider -> class ->
    /// amount), for reconciliation; read at every refresh, whatever `report_allocations`.
    pub placement_allocations: BTreeMap<Uuid, BTreeMap<Uuid, BTreeMap<String, u64>>>,
}

/// One change to send.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// `PUT /resource_classes/{name}`.
    EnsureResourceClass(String),
    /// `PUT /traits/{name}`.
    EnsureTrait(String),
    /// `POST /resource_providers`.
    CreateProvider {
        /// Uuid the new provider gets.
        uuid: Uuid,
        /// Name the new provider gets.
        name: String,
        /// Parent provider's uuid; `None` creates a root provider.
        parent: Option<Uuid>,
    },
    /// `PUT /resource_providers/{uuid}` with a new name.
    RenameProvider {
        /// The provider to rename.
        uuid: Uuid,
        /// New name.
        name: String,
    },
    /// `DELETE /resource_providers/{uuid}`.
    DeleteProvider {
        /// The provider to delete.
        uuid: Uuid,
    },
    /// `PUT /resource_providers/{uuid}/inventories` (the whole set).
    PutInventories {
        /// The provider whose inventories are replaced.
        uuid: Uuid,
        /// New set.
        inventories: BTreeMap<String, InventoryRecord>,
    },
    /// `PUT /resource_providers/{uuid}/traits` (the whole set).
    PutTraits {
        /// The provider whose traits are replaced.
        uuid: Uuid,
        /// New set.
        traits: BTreeSet<String>,
    },
    /// `PUT /resource_providers/{uuid}/aggregates` (the whole set).
    PutAggregates {
        /// The provider whose aggregates are replaced.
        uuid: Uuid,
        /// New set.
        aggregates: BTreeSet<Uuid>,
    },
    /// `PUT /allocations/{consumer}`: rtrack's parts as the local claims hold them, the rest
    /// of the consumer's allocation and its owner as Placement has them.
    PutAllocation {
        /// The consumer (instance or migration uuid) whose allocations are replaced.
        consumer: Uuid,
        /// Its whole allocation.
        resources: Amounts,
        /// Project, user and type: Placement's when it knows the consumer, else the claim's.
        owner: Owner,
    },
}

impl Action {
    /// Short name of the request kind, for counting.
    pub fn kind(&self) -> &'static str {
        match self {
            Action::EnsureResourceClass(_) => "put_resource_class",
            Action::EnsureTrait(_) => "put_trait",
            Action::CreateProvider { .. } => "create_provider",
            Action::RenameProvider { .. } => "rename_provider",
            Action::DeleteProvider { .. } => "delete_provider",
            Action::PutInventories { .. } => "put_inventories",
            Action::PutTraits { .. } => "put_traits",
            Action::PutAggregates { .. } => "put_aggregates",
            Action::PutAllocation { .. } => "put_allocation",
        }
    }
}

/// The inventory set to send for one provider: desired classes with ratios resolved (Nova's
/// precedence) and the PCI floor applied, plus the classes rtrack does not own as they are.
pub fn resolve_inventories(
    desired: &super::desired::DesiredProvider,
    cached: Option<&CachedProvider>,
) -> BTreeMap<String, InventoryRecord> {
    let mut out = BTreeMap::new();
    if let (Some(owned), Some(c)) = (&desired.owned_classes, cached) {
        for (class, rec) in &c.inventories {
            if !owned.contains(class) {
                out.insert(class.clone(), rec.clone());
            }
        }
    }
    for (class, d) in &desired.inventories {
        let existing = cached.and_then(|c| c.inventories.get(class));
        let allocation_ratio = match d.ratio {
            RatioRule::Fixed(r) => r,
            RatioRule::InitialOrKeep(initial) => existing.map_or(initial, |e| e.allocation_ratio),
        };
        let mut total = d.total;
        let mut max_unit = d.max_unit;
        if d.floor_at_usage {
            let used = cached
                .and_then(|c| c.usages.get(class))
                .copied()
                .unwrap_or(0);
            let used = i64::try_from(used).unwrap_or(i64::MAX);
            if used > total {
                total = used;
                max_unit = used;
            }
        }
        let reserved = match existing {
            Some(e) if d.reserved_kept => e.reserved.min(total),
            _ => d.reserved,
        };
        out.insert(
            class.clone(),
            InventoryRecord {
                total,
                reserved,
                min_unit: d.min_unit,
                max_unit,
                step_size: d.step_size,
                allocation_ratio,
            },
        );
    }
    out
}

fn same_inventories(
    a: &BTreeMap<String, InventoryRecord>,
    b: &BTreeMap<String, InventoryRecord>,
) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b.iter())
            .all(|((ka, ra), (kb, rb))| ka == kb && ra.same_as(rb))
}

/// The actions that make Placement (as cached) equal to `desired`. Empty when nothing changed.
pub fn plan(desired: &DesiredState, cache: &ProviderCache) -> Vec<Action> {
    let mut actions = Vec::new();
    ensure_custom_classes_and_traits(desired, cache, &mut actions);
    create_and_rename_providers(desired, cache, &mut actions);
    // No allocation is removed here: a consumer rtrack does not hold is not its to touch
    // (the reporter removes rtrack's part of the consumers released here, see `release`).
    delete_stale_providers(desired, cache, &mut actions);
    let reserve_after_allocations =
        update_inventories_traits_aggregates(desired, cache, &mut actions);

    // Allocations that are new or changed, once the inventory is there.
    actions.extend(allocation_writes(desired, cache));
    actions.extend(reserve_after_allocations);
    actions
}

/// Custom classes and traits must exist before anything uses them.
fn ensure_custom_classes_and_traits(
    desired: &DesiredState,
    cache: &ProviderCache,
    actions: &mut Vec<Action>,
) {
    let mut classes = BTreeSet::new();
    let mut custom_traits = BTreeSet::new();
    for p in &desired.providers {
        classes.extend(
            p.inventories
                .keys()
                .filter(|c| c.starts_with("CUSTOM_"))
                .cloned(),
        );
        custom_traits.extend(
            p.traits
                .iter()
                .filter(|t| t.starts_with("CUSTOM_"))
                .cloned(),
        );
    }
    for c in classes.difference(&cache.classes) {
        actions.push(Action::EnsureResourceClass(c.clone()));
    }
    for t in custom_traits.difference(&cache.custom_traits) {
        actions.push(Action::EnsureTrait(t.clone()));
    }
}

/// New providers, parents first (desired.providers is in that order); renames of the
/// children rtrack names. The compute node and the sharing provider keep the names they
/// have: rtrack may have taken them over by uuid, and a name is how others find them.
fn create_and_rename_providers(
    desired: &DesiredState,
    cache: &ProviderCache,
    actions: &mut Vec<Action>,
) {
    for p in &desired.providers {
        match cache.providers.get(&p.uuid) {
            None => actions.push(Action::CreateProvider {
                uuid: p.uuid,
                name: p.name.clone(),
                parent: p.parent,
            }),
            Some(c)
                if c.name != p.name
                    && !matches!(p.role, ProviderRole::Sharing | ProviderRole::ComputeNode) =>
            {
                actions.push(Action::RenameProvider {
                    uuid: p.uuid,
                    name: p.name.clone(),
                })
            }
            Some(_) => {}
        }
    }
}

/// PCI children rtrack made, and vGPU parents' and encryption models' children, that are no
/// longer wanted, deepest first (Nova deletes those whose total went to 0), but for the
/// parents no enabled type applies to, which Nova leaves as they are.
fn delete_stale_providers(
    desired: &DesiredState,
    cache: &ProviderCache,
    actions: &mut Vec<Action>,
) {
    let wanted: BTreeSet<Uuid> = desired.providers.iter().map(|p| p.uuid).collect();
    let root_name = desired.provider(desired.root).map(|p| p.name.as_str());
    let mut stale: Vec<&CachedProvider> = cache
        .providers
        .values()
        .filter(|c| {
            let nested = c.parent == Some(desired.root)
                && root_name.is_some_and(|r| is_nested_provider_name(r, &c.name));
            !wanted.contains(&c.uuid)
                && !desired.left_alone.contains(&c.name)
                && c.parent.is_some()
                && (c.traits.contains(COMPUTE_MANAGED_PCI_DEVICE) || nested)
        })
        .collect();
    stale.sort_by_key(|c| std::cmp::Reverse(depth(cache, c.uuid)));
    for c in stale {
        actions.push(Action::DeleteProvider { uuid: c.uuid });
    }
}

/// Inventories, traits, aggregates: children first, as Nova flushes (a parent's traits or
/// inventory never depend on a child's, and the order keeps PCI capacity in place before
/// the root changes).
///
/// A reservation that would leave no room for an allocation about to be written (a
/// one-time-use device's, reserved from its first use) is written after that allocation, as
/// in Nova, where the scheduler allocates before the compute reserves: Placement refuses an
/// allocation beyond (total - reserved) but keeps one made before. Returns those later
/// inventory writes.
fn update_inventories_traits_aggregates(
    desired: &DesiredState,
    cache: &ProviderCache,
    actions: &mut Vec<Action>,
) -> Vec<Action> {
    let mut reserve_after_allocations = Vec::new();
    for p in desired.providers.iter().rev() {
        let cached = cache.providers.get(&p.uuid);
        let inventories = resolve_inventories(p, cached);
        let empty = BTreeMap::new();
        let have = cached.map_or(&empty, |c| &c.inventories);
        if !same_inventories(&inventories, have) {
            if reserves_before_new_allocation(desired, cache, p.uuid, &inventories, have) {
                let first: BTreeMap<String, InventoryRecord> = inventories
                    .iter()
                    .map(|(class, rec)| {
                        let reserved = have.get(class).map_or(0, |h| h.reserved.min(rec.reserved));
                        (
                            class.clone(),
                            InventoryRecord {
                                reserved,
                                ..rec.clone()
                            },
                        )
                    })
                    .collect();
                if !same_inventories(&first, have) {
                    actions.push(Action::PutInventories {
                        uuid: p.uuid,
                        inventories: first,
                    });
                }
                reserve_after_allocations.push(Action::PutInventories {
                    uuid: p.uuid,
                    inventories,
                });
            } else {
                actions.push(Action::PutInventories {
                    uuid: p.uuid,
                    inventories,
                });
            }
        }

        let have_traits = cached.map(|c| c.traits.clone()).unwrap_or_default();
        let traits: BTreeSet<String> = match &p.owned_traits {
            None => p.traits.clone(),
            Some(owned) => have_traits
                .iter()
                .filter(|t| !owned.contains(*t))
                .cloned()
                .chain(p.traits.iter().cloned())
                .collect(),
        };
        if traits != have_traits {
            actions.push(Action::PutTraits {
                uuid: p.uuid,
                traits,
            });
        }

        let have_aggs = cached.map(|c| c.aggregates.clone()).unwrap_or_default();
        let aggs: BTreeSet<Uuid> = have_aggs.union(&p.aggregates).copied().collect();
        if aggs != have_aggs {
            actions.push(Action::PutAggregates {
                uuid: p.uuid,
                aggregates: aggs,
            });
        }
    }
    reserve_after_allocations
}

/// The allocations of the local claims that Placement does not hold as they are: rtrack's parts
/// written, every other part and the owner kept as Placement has them.
fn allocation_writes(desired: &DesiredState, cache: &ProviderCache) -> Vec<Action> {
    let Some(wanted) = &desired.allocations else {
        return Vec::new();
    };
    let owned = OwnedParts::of(desired, cache);
    let empty = Amounts::new();
    let mut out = Vec::new();
    for (consumer, a) in wanted {
        let cached = cache.consumers.get(consumer);
        let resources = owned.merged(cached.map_or(&empty, |c| &c.resources), &a.resources);
        if cached.is_some_and(|c| normalized(&c.resources) == resources) {
            continue;
        }
        let Some(owner) = owner_to_write(desired, cache, consumer) else {
            continue;
        };
        out.push(Action::PutAllocation {
            consumer: *consumer,
            resources,
            owner,
        });
    }
    out
}

/// The owner to write for `consumer`: Placement's when it has one, else the claim's.
fn owner_to_write(desired: &DesiredState, cache: &ProviderCache, consumer: &Uuid) -> Option<Owner> {
    if let Some(o) = cache.consumers.get(consumer).and_then(|c| c.owner.clone()) {
        return Some(o);
    }
    let a = desired.allocations.as_ref()?.get(consumer)?;
    Some((
        a.project_id.clone()?,
        a.user_id.clone()?,
        a.consumer_type.clone(),
    ))
}

/// Consumers of the local claims that cannot be written: Placement does not know them and the
/// claim named no project or user (Placement needs both).
pub fn unowned(desired: &DesiredState, cache: &ProviderCache) -> Vec<Uuid> {
    let Some(wanted) = &desired.allocations else {
        return Vec::new();
    };
    wanted
        .keys()
        .filter(|c| owner_to_write(desired, cache, c).is_none())
        .copied()
        .collect()
}

/// Whether `inventories` raise a class's `reserved` on `provider` while an allocation this plan
/// writes adds to what is used there.
fn reserves_before_new_allocation(
    desired: &DesiredState,
    cache: &ProviderCache,
    provider: Uuid,
    inventories: &BTreeMap<String, InventoryRecord>,
    have: &BTreeMap<String, InventoryRecord>,
) -> bool {
    let raised: Vec<&String> = inventories
        .iter()
        .filter(|(class, rec)| rec.reserved > have.get(*class).map_or(0, |h| h.reserved))
        .map(|(class, _)| class)
        .collect();
    if raised.is_empty() {
        return false;
    }
    let Some(wanted) = &desired.allocations else {
        return false;
    };
    wanted.iter().any(|(consumer, a)| {
        let held = cache
            .consumers
            .get(consumer)
            .and_then(|c| c.resources.get(&provider));
        a.resources.get(&provider).is_some_and(|r| {
            raised.iter().any(|class| {
                r.get(*class).copied().unwrap_or(0)
                    > held.and_then(|h| h.get(*class)).copied().unwrap_or(0)
            })
        })
    })
}

fn depth(cache: &ProviderCache, mut uuid: Uuid) -> usize {
    let mut d = 0;
    while let Some(parent) = cache.providers.get(&uuid).and_then(|p| p.parent) {
        d += 1;
        uuid = parent;
        if d > 64 {
            break; // a cycle cannot come from Placement; stop anyway
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::desired::{DesiredAllocation, DesiredInventory, DesiredProvider};

    fn root(uuid: Uuid) -> DesiredProvider {
        DesiredProvider {
            uuid,
            name: "cmp-1".into(),
            parent: None,
            role: ProviderRole::ComputeNode,
            inventories: BTreeMap::from([(
                "VCPU".to_string(),
                DesiredInventory {
                    total: 8,
                    reserved: 0,
                    min_unit: 1,
                    max_unit: 8,
                    step_size: 1,
                    ratio: RatioRule::InitialOrKeep(4.0),
                    floor_at_usage: false,
                    reserved_kept: false,
                },
            )]),
            owned_classes: None,
            traits: BTreeSet::from(["COMPUTE_NODE".to_string(), "CUSTOM_X".to_string()]),
            owned_traits: Some(BTreeSet::from([
                "COMPUTE_NODE".to_string(),
                "CUSTOM_X".to_string(),
                "COMPUTE_STATUS_DISABLED".to_string(),
            ])),
            aggregates: BTreeSet::new(),
        }
    }

    fn state(providers: Vec<DesiredProvider>) -> DesiredState {
        DesiredState {
            expected: Default::default(),
            device_providers: Default::default(),
            root: providers[0].uuid,
            providers,
            allocations: None,
            released: Default::default(),
            left_alone: Default::default(),
            pci_raised: Vec::new(),
            warnings: vec![],
        }
    }

    /// The cache as it is after every action of `plan` succeeded (what the reporter does).
    fn applied(desired: &DesiredState, cache: &ProviderCache) -> ProviderCache {
        let mut c = cache.clone();
        for a in plan(desired, cache) {
            match a {
                Action::EnsureResourceClass(n) => {
                    c.classes.insert(n);
                }
                Action::EnsureTrait(n) => {
                    c.custom_traits.insert(n);
                }
                Action::CreateProvider { uuid, name, parent } => {
                    c.providers.insert(
                        uuid,
                        CachedProvider {
                            uuid,
                            name,
                            parent,
                            ..Default::default()
                        },
                    );
                }
                Action::RenameProvider { uuid, name } => {
                    c.providers.get_mut(&uuid).unwrap().name = name
                }
                Action::DeleteProvider { uuid } => {
                    c.providers.remove(&uuid);
                }
                Action::PutInventories { uuid, inventories } => {
                    let p = c.providers.get_mut(&uuid).unwrap();
                    p.inventories = inventories;
                    p.generation += 1;
                }
                Action::PutTraits { uuid, traits } => {
                    c.providers.get_mut(&uuid).unwrap().traits = traits
                }
                Action::PutAggregates { uuid, aggregates } => {
                    c.providers.get_mut(&uuid).unwrap().aggregates = aggregates
                }
                Action::PutAllocation {
                    consumer,
                    resources,
                    owner,
                } => {
                    c.consumers.insert(
                        consumer,
                        CachedConsumer {
                            generation: Some(1),
                            resources,
                            owner: Some(owner),
                        },
                    );
                }
            }
        }
        c
    }

    #[test]
    fn first_report_creates_then_nothing_more() {
        let d = state(vec![root(Uuid::new_v4())]);
        let p = plan(&d, &ProviderCache::default());
        let kinds: Vec<&str> = p.iter().map(Action::kind).collect();
        assert_eq!(
            kinds,
            [
                "put_trait",
                "create_provider",
                "put_inventories",
                "put_traits"
            ]
        );
        let after = applied(&d, &ProviderCache::default());
        assert_eq!(plan(&d, &after), vec![], "no change, no request");
        // Several unchanged cycles stay empty.
        let again = applied(&d, &after);
        assert_eq!(again, after);
        assert!(plan(&d, &again).is_empty());
    }

    #[test]
    fn one_change_gives_one_put() {
        let mut d = state(vec![root(Uuid::new_v4())]);
        let cache = applied(&d, &ProviderCache::default());
        d.providers[0].inventories.get_mut("VCPU").unwrap().total = 16;
        let p = plan(&d, &cache);
        assert_eq!(p.len(), 1);
        match &p[0] {
            Action::PutInventories { inventories, .. } => {
                assert_eq!(inventories["VCPU"].total, 16);
                assert_eq!(inventories["VCPU"].allocation_ratio, 4.0);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn ratio_precedence_is_novas() {
        let d = state(vec![root(Uuid::new_v4())]);
        let mut cache = applied(&d, &ProviderCache::default());
        // An operator set 2.0 through the API: kept, since nothing is configured.
        let uuid = d.root;
        cache
            .providers
            .get_mut(&uuid)
            .unwrap()
            .inventories
            .get_mut("VCPU")
            .unwrap()
            .allocation_ratio = 2.0;
        assert!(plan(&d, &cache).is_empty());
        // A configured ratio overrides it.
        let mut fixed = d.clone();
        fixed.providers[0]
            .inventories
            .get_mut("VCPU")
            .unwrap()
            .ratio = RatioRule::Fixed(3.0);
        match &plan(&fixed, &cache)[0] {
            Action::PutInventories { inventories, .. } => {
                assert_eq!(inventories["VCPU"].allocation_ratio, 3.0)
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn foreign_traits_are_kept_and_owned_ones_removed() {
        let d = state(vec![root(Uuid::new_v4())]);
        let mut cache = applied(&d, &ProviderCache::default());
        let p = cache.providers.get_mut(&d.root).unwrap();
        p.traits.insert("CUSTOM_OPERATOR_SET".into());
        p.traits.insert("COMPUTE_STATUS_DISABLED".into());
        match plan(&d, &cache).as_slice() {
            [Action::PutTraits { traits, .. }] => {
                assert!(traits.contains("CUSTOM_OPERATOR_SET"));
                assert!(!traits.contains("COMPUTE_STATUS_DISABLED"));
                assert!(traits.contains("COMPUTE_NODE"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn pci_floor_and_stale_children() {
        let node = Uuid::new_v4();
        let child = Uuid::new_v4();
        let mut pci = root(child);
        pci.name = "cmp-1_0000:3B:00.0".into();
        pci.parent = Some(node);
        pci.role = ProviderRole::Pci {
            address: crate::probes::pci::PciAddress::parse("0000:3b:00.0").unwrap(),
        };
        pci.owned_traits = None;
        pci.traits = BTreeSet::from([COMPUTE_MANAGED_PCI_DEVICE.to_string()]);
        pci.inventories = BTreeMap::from([(
            "CUSTOM_PCI_8086_1889".to_string(),
            DesiredInventory {
                total: 4,
                reserved: 0,
                min_unit: 1,
                max_unit: 4,
                step_size: 1,
                ratio: RatioRule::Fixed(1.0),
                floor_at_usage: true,
                reserved_kept: false,
            },
        )]);
        let d = state(vec![root(node), pci]);
        let mut cache = applied(&d, &ProviderCache::default());
        cache
            .providers
            .get_mut(&child)
            .unwrap()
            .usages
            .insert("CUSTOM_PCI_8086_1889".into(), 6);
        match plan(&d, &cache).as_slice() {
            [Action::PutInventories { inventories, .. }] => {
                let r = &inventories["CUSTOM_PCI_8086_1889"];
                assert_eq!((r.total, r.max_unit), (6, 6));
            }
            other => panic!("{other:?}"),
        }
        // The device is gone: its provider is deleted; a foreign child is not.
        let foreign = Uuid::new_v4();
        cache.providers.insert(
            foreign,
            CachedProvider {
                uuid: foreign,
                name: "cmp-1:ovs:br-ex".into(),
                parent: Some(node),
                ..Default::default()
            },
        );
        let only_root = state(vec![root(node)]);
        let p = plan(&only_root, &cache);
        assert_eq!(p, vec![Action::DeleteProvider { uuid: child }]);
    }

    /// A vGPU parent's provider is deleted when it is not wanted (its instances would pass
    /// `max_instances`, or the parent is gone), whatever its inventory was, as Nova deletes
    /// those whose total went to 0; one whose parent no enabled type applies to any more is left
    /// as it is, as Nova leaves it (docs/differences.md). Placement refuses a deletion while the
    /// provider holds allocations.
    #[test]
    fn a_vgpu_parent_no_longer_wanted_is_deleted_unless_left_alone() {
        let node = Uuid::new_v4();
        let gpu = Uuid::new_v4();
        let mut d = state(vec![root(node)]);
        let mut cache = applied(&d, &ProviderCache::default());
        cache.providers.insert(
            gpu,
            CachedProvider {
                uuid: gpu,
                name: "cmp-1_pci_0000_81_00_0".into(),
                parent: Some(node),
                traits: BTreeSet::from(["CUSTOM_NVIDIA_11".to_string()]),
                ..Default::default()
            },
        );
        assert_eq!(plan(&d, &cache), vec![Action::DeleteProvider { uuid: gpu }]);
        let owns =
            |d: &DesiredState| crate::upstream::allocations::OwnedParts::of(d, &cache).owns(&gpu);
        assert!(owns(&d));
        d.left_alone.insert("cmp-1_pci_0000_81_00_0".into());
        assert_eq!(plan(&d, &cache), vec![]);
        // Nor are allocations on it rtrack's to write.
        assert!(!owns(&d));
    }

    #[test]
    fn a_one_time_use_reservation_follows_the_allocation_it_would_block() {
        let node = Uuid::new_v4();
        let drive = Uuid::new_v4();
        let mut otu = root(drive);
        otu.name = "cmp-1_0000:01:00.0".into();
        otu.parent = Some(node);
        otu.role = ProviderRole::Pci {
            address: crate::probes::pci::PciAddress::parse("0000:01:00.0").unwrap(),
        };
        otu.owned_traits = None;
        otu.traits = BTreeSet::from([COMPUTE_MANAGED_PCI_DEVICE.to_string()]);
        let inv = |reserved| DesiredInventory {
            total: 1,
            reserved,
            min_unit: 1,
            max_unit: 1,
            step_size: 1,
            ratio: RatioRule::Fixed(1.0),
            floor_at_usage: true,
            reserved_kept: false,
        };
        otu.inventories = BTreeMap::from([("CUSTOM_PCI_144D_A808".to_string(), inv(0))]);
        let mut d = state(vec![root(node), otu.clone()]);
        d.allocations = Some(BTreeMap::new());
        let cache = applied(&d, &ProviderCache::default());
        // The device is used: reserved, and an allocation on it.
        otu.inventories = BTreeMap::from([("CUSTOM_PCI_144D_A808".to_string(), inv(1))]);
        let mut d = state(vec![root(node), otu]);
        let c = Uuid::new_v4();
        d.allocations = Some(BTreeMap::from([(
            c,
            DesiredAllocation {
                project_id: Some("p".into()),
                user_id: Some("u".into()),
                consumer_type: "INSTANCE".into(),
                resources: BTreeMap::from([(
                    drive,
                    BTreeMap::from([("CUSTOM_PCI_144D_A808".to_string(), 1)]),
                )]),
            },
        )]));
        match plan(&d, &cache).as_slice() {
            [Action::PutAllocation { consumer, .. }, Action::PutInventories { uuid, inventories }] =>
            {
                assert_eq!((*consumer, *uuid), (c, drive));
                assert_eq!(inventories["CUSTOM_PCI_144D_A808"].reserved, 1);
            }
            other => panic!("{other:?}"),
        }
        // Once the allocation is there, the reservation goes alone (and after a release, too).
        let mut cache = applied(&d, &cache);
        cache
            .providers
            .get_mut(&drive)
            .unwrap()
            .inventories
            .get_mut("CUSTOM_PCI_144D_A808")
            .unwrap()
            .reserved = 0;
        match plan(&d, &cache).as_slice() {
            [Action::PutInventories { uuid, .. }] => assert_eq!(*uuid, drive),
            other => panic!("{other:?}"),
        }
        // Freed after its reservation was seen: reserved is what Placement holds, so an
        // operator's clean (reserved 0) is not written back, and nor is anything else.
        let kept = |d: &mut DesiredState| {
            for p in d.providers.iter_mut().filter(|p| p.uuid == drive) {
                for inv in p.inventories.values_mut() {
                    inv.reserved_kept = true;
                }
            }
        };
        let mut freed = d.clone();
        freed.allocations = Some(BTreeMap::new());
        kept(&mut freed);
        assert!(plan(&freed, &cache).is_empty());
        // A provider Placement does not have yet is created reserved whole.
        let fresh = plan(&freed, &ProviderCache::default());
        assert!(fresh.iter().any(|a| matches!(a,
            Action::PutInventories { uuid, inventories }
                if *uuid == drive && inventories["CUSTOM_PCI_144D_A808"].reserved == 1)));
    }

    #[test]
    fn allocations_are_written_whole_and_never_removed_by_the_plan() {
        let node = Uuid::new_v4();
        let neutron = Uuid::new_v4();
        let mut d = state(vec![root(node)]);
        let c1 = Uuid::new_v4();
        let alloc = DesiredAllocation {
            project_id: Some("p".into()),
            user_id: Some("u".into()),
            consumer_type: "INSTANCE".into(),
            resources: BTreeMap::from([(node, BTreeMap::from([("VCPU".to_string(), 2)]))]),
        };
        d.allocations = Some(BTreeMap::from([(c1, alloc.clone())]));
        let mut cache = applied(&d, &ProviderCache::default());
        assert!(plan(&d, &cache).is_empty());
        // Placement's copy has a Neutron part and another owner: a change of ours keeps both.
        let bw = BTreeMap::from([("NET_BW_EGR_KILOBIT_PER_SEC".to_string(), 1000)]);
        let c = cache.consumers.get_mut(&c1).unwrap();
        c.resources.insert(neutron, bw.clone());
        c.owner = Some(("proj".into(), "user".into(), "INSTANCE".into()));
        assert!(plan(&d, &cache).is_empty(), "foreign parts are not drift");
        d.allocations
            .as_mut()
            .unwrap()
            .get_mut(&c1)
            .unwrap()
            .resources = BTreeMap::from([(node, BTreeMap::from([("VCPU".to_string(), 4)]))]);
        match plan(&d, &cache).as_slice() {
            [Action::PutAllocation {
                consumer,
                resources,
                owner,
            }] => {
                assert_eq!(*consumer, c1);
                assert_eq!(resources[&neutron], bw);
                assert_eq!(resources[&node]["VCPU"], 4);
                assert_eq!(owner.0, "proj", "Placement's owner kept");
            }
            other => panic!("{other:?}"),
        }
        // A consumer the claims no longer hold, or never held, is not removed by a plan.
        d.allocations = Some(BTreeMap::new());
        assert!(plan(&d, &cache).is_empty());
        // A new consumer whose claim names no owner is not written.
        let c2 = Uuid::new_v4();
        d.allocations = Some(BTreeMap::from([(
            c2,
            DesiredAllocation {
                project_id: None,
                ..alloc
            },
        )]));
        assert!(plan(&d, &cache).is_empty());
        assert_eq!(unowned(&d, &cache), vec![c2]);
        // Without allocation management, Placement's allocations are never touched.
        d.allocations = None;
        assert!(plan(&d, &cache).is_empty());
    }
}
