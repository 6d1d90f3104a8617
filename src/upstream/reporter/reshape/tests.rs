use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use super::*;
use crate::upstream::desired::{DesiredAllocation, DesiredInventory, DesiredProvider};
use crate::upstream::plan::CachedProvider;

fn inv(total: i64) -> DesiredInventory {
    DesiredInventory::units(total)
}

fn provider(
    uuid: Uuid,
    role: ProviderRole,
    class: Option<(&str, i64)>,
    traits: &[&str],
) -> DesiredProvider {
    DesiredProvider {
        uuid,
        name: uuid.to_string(),
        parent: None,
        role,
        inventories: class
            .map(|(c, n)| (c.to_string(), inv(n)))
            .into_iter()
            .collect(),
        owned_classes: None,
        traits: traits.iter().map(|t| t.to_string()).collect(),
        owned_traits: None,
        aggregates: BTreeSet::new(),
    }
}

fn cached(uuid: Uuid, inventories: &[&str], usages: &[(&str, u64)]) -> CachedProvider {
    CachedProvider {
        uuid,
        name: uuid.to_string(),
        parent: None,
        generation: 1,
        inventories: inventories
            .iter()
            .map(|c| {
                (
                    c.to_string(),
                    crate::upstream::plan::InventoryRecord {
                        total: 8,
                        reserved: 0,
                        min_unit: 1,
                        max_unit: 8,
                        step_size: 1,
                        allocation_ratio: 1.0,
                    },
                )
            })
            .collect(),
        traits: BTreeSet::new(),
        aggregates: BTreeSet::new(),
        usages: usages.iter().map(|(c, n)| (c.to_string(), *n)).collect(),
    }
}

fn alloc(root: Uuid, r: &[(&str, u64)]) -> ConsumerAllocations {
    ConsumerAllocations {
        generation: Some(1),
        resources: BTreeMap::from([(root, r.iter().map(|(c, n)| (c.to_string(), *n)).collect())]),
        owner: Some(("p".into(), "u".into(), "INSTANCE".into())),
    }
}

#[test]
fn units_move_to_children_with_room_and_to_where_rtracks_claim_holds_them() {
    let (root, g1, g2) = (Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3));
    let mut desired = DesiredState {
        root,
        providers: vec![
            provider(root, ProviderRole::ComputeNode, Some(("VCPU", 8)), &[]),
            provider(g1, ProviderRole::Nested, Some(("VGPU", 2)), &[]),
            provider(g2, ProviderRole::Nested, Some(("VGPU", 4)), &[]),
        ],
        allocations: None,
        expected: Default::default(),
        device_providers: Default::default(),
        released: Default::default(),
        left_alone: Default::default(),
        pci_raised: Vec::new(),
        warnings: vec![],
    };
    let cache = ProviderCache {
        providers: BTreeMap::from([
            (root, cached(root, &["VCPU", "VGPU"], &[("VGPU", 5)])),
            (g1, cached(g1, &["VGPU"], &[])),
            (g2, cached(g2, &["VGPU"], &[("VGPU", 1)])),
        ]),
        ..ProviderCache::default()
    };
    assert_eq!(classes_to_reshape(&desired, &cache), ["VGPU"]);
    let (a, b) = (Uuid::from_u128(10), Uuid::from_u128(11));
    let consumers = BTreeMap::from([
        (a, alloc(root, &[("VCPU", 1), ("VGPU", 3)])),
        (b, alloc(root, &[("VGPU", 2)])),
    ]);
    let moved = moved_allocations(&desired, &cache, &["VGPU".into()], &consumers).unwrap();
    // a: 2 fill g1, 1 on g2; b: g2's last 2 of its 3 free; b has nothing left on the root.
    assert_eq!(moved[&a].resources[&root]["VCPU"], 1);
    assert_eq!(moved[&a].resources[&g1]["VGPU"], 2);
    assert_eq!(moved[&a].resources[&g2]["VGPU"], 1);
    assert!(!moved[&b].resources.contains_key(&root));
    assert_eq!(moved[&b].resources[&g2]["VGPU"], 2);
    // One more unit does not fit: refused, naming the consumer.
    let c = Uuid::from_u128(12);
    let mut more = consumers.clone();
    more.insert(c, alloc(root, &[("VGPU", 1)]));
    let e = moved_allocations(&desired, &cache, &["VGPU".into()], &more).unwrap_err();
    assert!(e.contains(&c.to_string()), "{e}");
    // rtrack's own claim for b puts its units on g2: they go there.
    desired.allocations = Some(BTreeMap::from([(
        b,
        DesiredAllocation {
            project_id: Some("p".into()),
            user_id: Some("u".into()),
            consumer_type: "INSTANCE".into(),
            resources: BTreeMap::from([(g2, BTreeMap::from([("VGPU".to_string(), 2)]))]),
        },
    )]));
    let only_b = BTreeMap::from([(b, alloc(root, &[("VGPU", 2)]))]);
    let moved = moved_allocations(&desired, &cache, &["VGPU".into()], &only_b).unwrap();
    assert_eq!(moved[&b].resources[&g2]["VGPU"], 2);
}

#[test]
fn nothing_to_reshape_without_usage_or_children() {
    let (root, g1) = (Uuid::from_u128(1), Uuid::from_u128(2));
    let desired = DesiredState {
        root,
        providers: vec![
            provider(root, ProviderRole::ComputeNode, Some(("VCPU", 8)), &[]),
            provider(g1, ProviderRole::Nested, Some(("VGPU", 2)), &[]),
        ],
        allocations: None,
        expected: Default::default(),
        device_providers: Default::default(),
        released: Default::default(),
        left_alone: Default::default(),
        pci_raised: Vec::new(),
        warnings: vec![],
    };
    let unused = ProviderCache {
        providers: BTreeMap::from([
            (root, cached(root, &["VCPU", "VGPU"], &[])),
            (g1, cached(g1, &["VGPU"], &[])),
        ]),
        ..ProviderCache::default()
    };
    assert!(classes_to_reshape(&desired, &unused).is_empty());
    let no_child = ProviderCache {
        providers: BTreeMap::from([(root, cached(root, &["VCPU", "VGPU"], &[("VGPU", 1)]))]),
        ..ProviderCache::default()
    };
    assert!(classes_to_reshape(&desired, &no_child).is_empty());
}
