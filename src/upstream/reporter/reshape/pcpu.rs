//! Pinned guests' `VCPU` becoming `PCPU` on the compute node, as nova-compute does when a host
//! moves from `vcpu_pin_set` (or no CPU sets) to `cpu_dedicated_set` (Train's reshape): the
//! pinned guests booted before the change hold `VCPU` in Placement, while rtrack now counts
//! their CPUs as `PCPU` and reports no `VCPU` for them. Placement refuses to remove inventory in
//! use, so the root's inventory and the allocations change in one `POST /reshaper`.
//!
//! Only consumers rtrack holds a claim for move (an instance, or the migration of an outgoing
//! move), and only by what their claim counts as `PCPU` on the compute node beyond what
//! Placement holds: an unpinned guest, a mixed guest's shared part and a consumer rtrack does
//! not know keep their `VCPU`.
//!
//! In: the desired state, the cached tree (usages) and the consumers' current allocations.
//! Out: the moved allocations and the compute node's inventory for the reshape.

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::upstream::api::ConsumerAllocations;
use crate::upstream::desired::DesiredState;
use crate::upstream::plan::{resolve_inventories, InventoryRecord, ProviderCache};

const VCPU: &str = "VCPU";
const PCPU: &str = "PCPU";

fn on_root(desired: &DesiredState, consumer: &Uuid, class: &str) -> u64 {
    desired
        .expected
        .get(consumer)
        .and_then(|a| a.resources.get(&desired.root))
        .and_then(|r| r.get(class))
        .copied()
        .unwrap_or(0)
}

/// Whether the cached tree shows pinned claims still holding `VCPU`: the compute node has
/// `VCPU` in use, reports `PCPU`, and the claims count more `PCPU` on it than Placement holds.
/// Cheap (no request); the reporter reads the consumers only when this holds.
pub fn wanted(desired: &DesiredState, cache: &ProviderCache) -> bool {
    let (Some(cached), Some(root)) = (
        cache.providers.get(&desired.root),
        desired.provider(desired.root),
    ) else {
        return false;
    };
    if !root.inventories.contains_key(PCPU) || !cached.inventories.contains_key(VCPU) {
        return false;
    }
    let used = |class: &str| cached.usages.get(class).copied().unwrap_or(0);
    let expected_pcpu: u64 = desired
        .expected
        .keys()
        .map(|c| on_root(desired, c, PCPU))
        .sum();
    used(VCPU) > 0 && expected_pcpu > used(PCPU)
}

/// Each consumer's allocation with the `VCPU` its claim counts as `PCPU` turned into `PCPU` on
/// the compute node. Consumers without a claim here, or with nothing to move, are left out.
pub fn moved_allocations(
    desired: &DesiredState,
    consumers: &BTreeMap<Uuid, ConsumerAllocations>,
) -> BTreeMap<Uuid, ConsumerAllocations> {
    let root = desired.root;
    let mut out = BTreeMap::new();
    for (consumer, current) in consumers {
        if !desired.expected.contains_key(consumer) {
            continue;
        }
        let Some(held) = current.resources.get(&root) else {
            continue;
        };
        let held_vcpu = held.get(VCPU).copied().unwrap_or(0);
        let held_pcpu = held.get(PCPU).copied().unwrap_or(0);
        // What the claim counts as VCPU stays VCPU (a mixed guest's shared CPUs).
        let spare_vcpu = held_vcpu.saturating_sub(on_root(desired, consumer, VCPU));
        let missing_pcpu = on_root(desired, consumer, PCPU).saturating_sub(held_pcpu);
        let n = spare_vcpu.min(missing_pcpu);
        if n == 0 {
            continue;
        }
        let mut moved = current.clone();
        if let Some(r) = moved.resources.get_mut(&root) {
            if held_vcpu == n {
                r.remove(VCPU);
            } else {
                r.insert(VCPU.to_string(), held_vcpu - n);
            }
            r.insert(PCPU.to_string(), held_pcpu + n);
        }
        out.insert(*consumer, moved);
    }
    out
}

/// The compute node's inventory for the reshape: what the plan sends, plus the old `VCPU`
/// record while consumers that do not move still use it (Placement refuses to drop it; the
/// plan removes it once nothing uses it). `consumers` are those read, `moved` their new
/// allocations; the usage of the others is the cached tree's.
pub fn root_inventory(
    desired: &DesiredState,
    cache: &ProviderCache,
    moved: &BTreeMap<Uuid, ConsumerAllocations>,
    consumers: &BTreeMap<Uuid, ConsumerAllocations>,
) -> Option<BTreeMap<String, InventoryRecord>> {
    let root = desired.provider(desired.root)?;
    let cached = cache.providers.get(&desired.root);
    let mut inventory = resolve_inventories(root, cached);
    let vcpu = |a: &ConsumerAllocations| {
        a.resources
            .get(&desired.root)
            .and_then(|r| r.get(VCPU))
            .copied()
            .unwrap_or(0)
    };
    let freed: u64 = moved
        .iter()
        .filter_map(|(c, m)| Some(consumers.get(c).map(vcpu)?.saturating_sub(vcpu(m))))
        .sum();
    let used = cached
        .and_then(|c| c.usages.get(VCPU))
        .copied()
        .unwrap_or(0);
    if used > freed && !inventory.contains_key(VCPU) {
        let old = cached.and_then(|c| c.inventories.get(VCPU))?;
        inventory.insert(VCPU.to_string(), old.clone());
    }
    Some(inventory)
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use uuid::Uuid;

    use super::*;
    use crate::upstream::desired::{
        DesiredAllocation, DesiredInventory, DesiredProvider, ProviderRole,
    };
    use crate::upstream::plan::CachedProvider;

    const ROOT: Uuid = Uuid::from_u128(1);
    const PINNED: Uuid = Uuid::from_u128(10);
    const MIXED: Uuid = Uuid::from_u128(11);
    const SHARED: Uuid = Uuid::from_u128(12);
    const UNKNOWN: Uuid = Uuid::from_u128(13);

    fn res(r: &[(&str, u64)]) -> BTreeMap<Uuid, BTreeMap<String, u64>> {
        BTreeMap::from([(ROOT, r.iter().map(|(c, n)| (c.to_string(), *n)).collect())])
    }

    fn desired(classes: &[(&str, i64)], claims: &[(Uuid, &[(&str, u64)])]) -> DesiredState {
        DesiredState {
            root: ROOT,
            providers: vec![DesiredProvider {
                uuid: ROOT,
                name: "node".into(),
                parent: None,
                role: ProviderRole::ComputeNode,
                inventories: classes
                    .iter()
                    .map(|(c, n)| (c.to_string(), DesiredInventory::units(*n)))
                    .collect(),
                owned_classes: None,
                traits: BTreeSet::new(),
                owned_traits: None,
                aggregates: BTreeSet::new(),
            }],
            allocations: None,
            expected: claims
                .iter()
                .map(|(c, r)| {
                    (
                        *c,
                        DesiredAllocation {
                            project_id: None,
                            user_id: None,
                            consumer_type: "INSTANCE".into(),
                            resources: res(r),
                        },
                    )
                })
                .collect(),
            device_providers: BTreeMap::new(),
            released: BTreeMap::new(),
            left_alone: Default::default(),
            pci_raised: Vec::new(),
            warnings: Vec::new(),
        }
    }

    fn record(total: i64) -> InventoryRecord {
        InventoryRecord {
            total,
            reserved: 0,
            min_unit: 1,
            max_unit: total,
            step_size: 1,
            allocation_ratio: 1.0,
        }
    }

    fn cache(inventories: &[(&str, i64)], usages: &[(&str, u64)]) -> ProviderCache {
        let mut c = ProviderCache::default();
        c.providers.insert(
            ROOT,
            CachedProvider {
                uuid: ROOT,
                name: "node".into(),
                generation: 3,
                inventories: inventories
                    .iter()
                    .map(|(c, n)| (c.to_string(), record(*n)))
                    .collect(),
                usages: usages.iter().map(|(c, n)| (c.to_string(), *n)).collect(),
                ..Default::default()
            },
        );
        c
    }

    fn held(r: &[(&str, u64)]) -> ConsumerAllocations {
        ConsumerAllocations {
            generation: Some(1),
            resources: res(r),
            owner: Some(("p".into(), "u".into(), "INSTANCE".into())),
        }
    }

    /// A host that went from "no sets" to cpu_shared_set + cpu_dedicated_set: a pinned guest,
    /// a mixed one (1 shared + 2 dedicated) and an unpinned one booted before, and a consumer
    /// rtrack has no claim for.
    fn host() -> (DesiredState, BTreeMap<Uuid, ConsumerAllocations>) {
        let desired = desired(
            &[("VCPU", 4), ("PCPU", 8), ("MEMORY_MB", 4096)],
            &[
                (PINNED, &[("PCPU", 2), ("MEMORY_MB", 512)]),
                (MIXED, &[("VCPU", 1), ("PCPU", 2)]),
                (SHARED, &[("VCPU", 2)]),
            ],
        );
        let consumers = BTreeMap::from([
            (PINNED, held(&[("VCPU", 2), ("MEMORY_MB", 512)])),
            (MIXED, held(&[("VCPU", 3)])),
            (SHARED, held(&[("VCPU", 2)])),
            (UNKNOWN, held(&[("VCPU", 2)])),
        ]);
        (desired, consumers)
    }

    #[test]
    fn only_what_a_claim_counts_as_pcpu_moves() {
        let (desired, consumers) = host();
        let moved = moved_allocations(&desired, &consumers);
        assert_eq!(moved.keys().copied().collect::<Vec<_>>(), [PINNED, MIXED]);
        assert_eq!(
            moved[&PINNED].resources,
            res(&[("PCPU", 2), ("MEMORY_MB", 512)])
        );
        assert_eq!(moved[&MIXED].resources, res(&[("VCPU", 1), ("PCPU", 2)]));
        // Owner and generation as read: the reshaper writes them back unchanged.
        assert_eq!(moved[&PINNED].owner, consumers[&PINNED].owner);
        assert_eq!(moved[&PINNED].generation, Some(1));
    }

    #[test]
    fn a_consumer_already_holding_pcpu_does_not_move_again() {
        let (desired, mut consumers) = host();
        consumers.insert(PINNED, held(&[("PCPU", 2), ("MEMORY_MB", 512)]));
        consumers.insert(MIXED, held(&[("VCPU", 1), ("PCPU", 2)]));
        assert!(moved_allocations(&desired, &consumers).is_empty());
    }

    #[test]
    fn wanted_only_while_claims_count_more_pcpu_than_placement_holds() {
        let (desired, _) = host();
        // Before the reshape: 9 VCPU used, no PCPU; the claims count 4 PCPU.
        assert!(wanted(
            &desired,
            &cache(&[("VCPU", 16), ("PCPU", 8)], &[("VCPU", 9)])
        ));
        // After it: the PCPU the claims count is there.
        assert!(!wanted(
            &desired,
            &cache(&[("VCPU", 16), ("PCPU", 8)], &[("VCPU", 5), ("PCPU", 4)])
        ));
        // No VCPU in use, or no PCPU reported (vcpu_pin_set: pinned guests count VCPU).
        assert!(!wanted(&desired, &cache(&[("VCPU", 16), ("PCPU", 8)], &[])));
        let legacy = super::tests::desired(&[("VCPU", 8)], &[(PINNED, &[("VCPU", 2)])]);
        assert!(!wanted(&legacy, &cache(&[("VCPU", 8)], &[("VCPU", 2)])));
    }

    #[test]
    fn the_old_vcpu_record_stays_while_unmoved_consumers_use_it() {
        // cpu_dedicated_set only: no VCPU reported any more.
        let desired = desired(&[("PCPU", 8)], &[(PINNED, &[("PCPU", 2)])]);
        let consumers = BTreeMap::from([(PINNED, held(&[("VCPU", 2)]))]);
        let moved = moved_allocations(&desired, &consumers);
        let cached = cache(&[("VCPU", 16), ("PCPU", 8)], &[("VCPU", 2)]);
        let inv = root_inventory(&desired, &cached, &moved, &consumers).unwrap();
        assert_eq!(inv.keys().collect::<Vec<_>>(), ["PCPU"]);
        // A consumer not read (no claim here) holds 2 more.
        let cached = cache(&[("VCPU", 16), ("PCPU", 8)], &[("VCPU", 4)]);
        let inv = root_inventory(&desired, &cached, &moved, &consumers).unwrap();
        assert_eq!(inv.keys().collect::<Vec<_>>(), ["PCPU", "VCPU"]);
        assert!(inv["VCPU"].same_as(&record(16)));
    }
}
