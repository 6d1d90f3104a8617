use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use super::*;
use crate::upstream::desired::{
    DesiredAllocation, DesiredInventory, DesiredProvider, ProviderRole,
};
use crate::upstream::plan::{CachedProvider, InventoryRecord, ProviderCache};

const ROOT: Uuid = Uuid::from_u128(1);
const PCI: Uuid = Uuid::from_u128(2);
const NEUTRON: Uuid = Uuid::from_u128(3);
const GONE: Uuid = Uuid::from_u128(4);
const SHARED: Uuid = Uuid::from_u128(5);

fn inv(total: i64) -> DesiredInventory {
    DesiredInventory::units(total)
}

fn provider(uuid: Uuid, role: ProviderRole, classes: &[(&str, i64)]) -> DesiredProvider {
    DesiredProvider {
        uuid,
        name: format!("p{uuid}"),
        parent: (uuid != ROOT && role != ProviderRole::Sharing).then_some(ROOT),
        role,
        inventories: classes
            .iter()
            .map(|(c, t)| (c.to_string(), inv(*t)))
            .collect(),
        owned_classes: None,
        traits: BTreeSet::new(),
        owned_traits: None,
        aggregates: BTreeSet::new(),
    }
}

fn amounts(items: &[(Uuid, &str, u64)]) -> Amounts {
    let mut out = Amounts::new();
    for (rp, c, n) in items {
        out.entry(*rp).or_default().insert(c.to_string(), *n);
    }
    out
}

fn alloc(items: &[(Uuid, &str, u64)]) -> DesiredAllocation {
    DesiredAllocation {
        project_id: Some("p".into()),
        user_id: Some("u".into()),
        consumer_type: "INSTANCE".into(),
        resources: amounts(items),
    }
}

fn cached(uuid: Uuid, name: &str, parent: Option<Uuid>, classes: &[(&str, i64)]) -> CachedProvider {
    CachedProvider {
        uuid,
        name: name.to_string(),
        parent,
        generation: 1,
        inventories: classes
            .iter()
            .map(|(c, t)| {
                (
                    c.to_string(),
                    InventoryRecord {
                        total: *t,
                        reserved: 0,
                        min_unit: 1,
                        max_unit: *t,
                        step_size: 1,
                        allocation_ratio: 1.0,
                    },
                )
            })
            .collect(),
        ..Default::default()
    }
}

fn setup() -> (DesiredState, ProviderCache) {
    let desired = DesiredState {
        root: ROOT,
        providers: vec![
            provider(
                ROOT,
                ProviderRole::ComputeNode,
                &[("VCPU", 16), ("MEMORY_MB", 8192), ("DISK_GB", 100)],
            ),
            provider(
                PCI,
                ProviderRole::Pci {
                    address: crate::probes::pci::PciAddress::parse("0000:3b:00.0").unwrap(),
                },
                &[("CUSTOM_VF", 4)],
            ),
            provider(SHARED, ProviderRole::Sharing, &[("DISK_GB", 1000)]),
        ],
        allocations: None,
        expected: BTreeMap::new(),
        device_providers: BTreeMap::new(),
        released: Default::default(),
        left_alone: Default::default(),
        pci_raised: Vec::new(),
        warnings: Vec::new(),
    };
    let mut cache = ProviderCache::default();
    cache.providers.insert(
        ROOT,
        cached(
            ROOT,
            "cmp",
            None,
            &[("VCPU", 16), ("MEMORY_MB", 8192), ("DISK_GB", 100)],
        ),
    );
    cache.providers.insert(
        PCI,
        cached(PCI, "cmp_0000:3B:00.0", Some(ROOT), &[("CUSTOM_VF", 4)]),
    );
    cache.providers.insert(
        NEUTRON,
        cached(
            NEUTRON,
            "cmp:Open vSwitch agent",
            Some(ROOT),
            &[("NET_BW_EGR_KILOBIT_PER_SEC", 1000)],
        ),
    );
    (desired, cache)
}

#[test]
fn equal_claims_and_allocations_are_no_drift_whatever_others_hold() {
    let (mut d, mut c) = setup();
    let a = Uuid::from_u128(100);
    d.expected.insert(
        a,
        alloc(&[
            (ROOT, "VCPU", 2),
            (ROOT, "MEMORY_MB", 512),
            (PCI, "CUSTOM_VF", 1),
        ]),
    );
    // Placement also holds Neutron's bandwidth and the sharing provider's disk for it: not
    // rtrack's to judge.
    c.placement_allocations.insert(
        a,
        amounts(&[
            (ROOT, "VCPU", 2),
            (ROOT, "MEMORY_MB", 512),
            (PCI, "CUSTOM_VF", 1),
            (NEUTRON, "NET_BW_EGR_KILOBIT_PER_SEC", 100),
            (SHARED, "DISK_GB", 10),
        ]),
    );
    let drift = compare(&d, &c);
    assert!(drift.is_empty(), "{drift:?}");
    assert_eq!(drift.counts().values().sum::<usize>(), 0);
}

#[test]
fn unclaimed_missing_different_and_gone_inventory_are_found() {
    let (mut d, mut c) = setup();
    let (unclaimed, missing, different, foreign) = (
        Uuid::from_u128(101),
        Uuid::from_u128(102),
        Uuid::from_u128(103),
        Uuid::from_u128(104),
    );
    c.placement_allocations.insert(
        unclaimed,
        amounts(&[(ROOT, "VCPU", 1), (ROOT, "MEMORY_MB", 256)]),
    );
    d.expected.insert(missing, alloc(&[(ROOT, "VCPU", 4)]));
    d.expected.insert(
        different,
        alloc(&[(ROOT, "VCPU", 2), (PCI, "CUSTOM_VF", 1)]),
    );
    c.placement_allocations.insert(
        different,
        amounts(&[(ROOT, "VCPU", 4), (PCI, "CUSTOM_VF", 1)]),
    );
    // Only on a provider that is not rtrack's: not unclaimed drift of rtrack's.
    c.placement_allocations.insert(
        foreign,
        amounts(&[(NEUTRON, "NET_BW_EGR_KILOBIT_PER_SEC", 1)]),
    );
    // The host lost memory and a PF; Placement still has both.
    d.providers[0]
        .inventories
        .insert("MEMORY_MB".into(), inv(4096));
    let mut gone = cached(GONE, "cmp_0000:5E:00.0", Some(ROOT), &[("CUSTOM_VF", 2)]);
    gone.traits.insert(COMPUTE_MANAGED_PCI_DEVICE.to_string());
    gone.usages.insert("CUSTOM_VF".into(), 1);
    c.providers.insert(GONE, gone);

    let drift = compare(&d, &c);
    let kinds: BTreeMap<Uuid, DriftKind> = drift
        .consumers
        .iter()
        .map(|x| (x.consumer, x.kind))
        .collect();
    assert_eq!(
        kinds,
        BTreeMap::from([
            (unclaimed, DriftKind::Unclaimed),
            (missing, DriftKind::Missing),
            (different, DriftKind::Different)
        ])
    );
    let diff = drift
        .consumers
        .iter()
        .find(|x| x.consumer == different)
        .unwrap();
    assert_eq!(diff.local[&ROOT]["VCPU"], 2);
    assert_eq!(diff.placement[&ROOT]["VCPU"], 4);
    let inv: Vec<(Uuid, &str, i64, i64, Option<u64>)> = drift
        .inventories
        .iter()
        .map(|i| {
            (
                i.provider,
                i.class.as_str(),
                i.placement_total,
                i.host_total,
                i.used,
            )
        })
        .collect();
    assert_eq!(
        inv,
        vec![
            (ROOT, "MEMORY_MB", 8192, 4096, None),
            (GONE, "CUSTOM_VF", 2, 0, Some(1)),
        ]
    );
    assert_eq!(
        drift.counts(),
        BTreeMap::from([
            ("different", 1),
            ("inventory_gone", 2),
            ("missing", 1),
            ("unclaimed", 1)
        ])
    );
    // Keys tell the same drift seen again from another.
    let again = compare(&d, &c);
    assert_eq!(again.keys(), drift.keys());
    let one: BTreeSet<String> = [format!("unclaimed:{unclaimed}")].into();
    assert_eq!(drift.only(&one).consumers.len(), 1);
    assert!(drift.only(&one).inventories.is_empty());
}
