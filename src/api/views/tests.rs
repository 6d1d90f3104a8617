use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::*;
use crate::api::openapi::document;
use crate::upstream::reconcile::{ConsumerDrift, Drift, DriftKind, InventoryDrift};
use crate::upstream::reporter::drift::RemovalRefused;

fn claim() -> ClaimView {
    ClaimView {
        instance_uuid: "00000000-0000-4000-8000-000000000001".into(),
        migration_id: Some(3),
        resources: [(crate::inventory::resources::ResourceClass::Vcpu, 2)].into(),
        pci_devices: vec![DeviceGiven {
            address: "0000:3b:01.0".into(),
            request_id: "r1".into(),
        }],
        flavor: FlavorView {
            id: 1,
            flavorid: "f1".into(),
            name: Some("m1.tiny".into()),
            vcpus: 2,
            memory_mb: 512,
            root_gb: 1,
            ephemeral_gb: 0,
            swap: 0,
        },
        is_bfv: false,
        numa_cells: vec![0],
        numa_topology: Some(json!({"nova_object.name": "InstanceNUMATopology"})),
        mdevs: vec![MdevView {
            uuid: "m".into(),
            parent: "0000:84:00.0".into(),
            type_id: "nvidia-35".into(),
            existing: false,
        }],
        pmem_namespaces: vec![PmemNamespaceView {
            name: "ns0".into(),
            label: "SMALL".into(),
            resource_class: "CUSTOM_PMEM_NAMESPACE_SMALL".into(),
            devpath: "/dev/dax0.0".into(),
            size: 1 << 30,
            align: 2 << 20,
        }],
        nested: vec![NestedUnitsView {
            provider: json!({"mdev": "0000:84:00.0"}),
            class: "VGPU".into(),
            amount: 1,
        }],
        claimed_at: "2026-01-01T00:00:00Z".into(),
    }
}

fn migration() -> MigrationView {
    MigrationView::from(&crate::tracker::model::MigrationRecord {
        id: 4,
        uuid: "00000000-0000-4000-8000-000000000004".into(),
        instance_uuid: "00000000-0000-4000-8000-000000000001".into(),
        source_compute: Some("a".into()),
        source_node: Some("a".into()),
        dest_compute: Some("b".into()),
        dest_node: None,
        status: "pre-migrating".into(),
        migration_type: "resize".into(),
        old_instance_type_id: Some(1),
        new_instance_type_id: None,
        created_at: 1,
        updated_at: 2,
    })
}

fn answer() -> ClaimAnswer {
    ClaimAnswer {
        claim: claim(),
        existing: false,
        dry_run: true,
    }
}

fn drift() -> Drift {
    let amounts = BTreeMap::from([(
        uuid::Uuid::from_u128(9),
        BTreeMap::from([("VCPU".to_string(), 1)]),
    )]);
    Drift {
        consumers: vec![ConsumerDrift {
            consumer: uuid::Uuid::from_u128(1),
            kind: DriftKind::Unclaimed,
            local: amounts.clone(),
            placement: amounts,
        }],
        inventories: vec![InventoryDrift {
            provider: uuid::Uuid::from_u128(9),
            provider_name: "cmp1".into(),
            class: "VGPU".into(),
            placement_total: 2,
            host_total: 0,
            used: Some(1),
        }],
    }
}

/// One answer of each documented type, every optional key present: the component the document
/// names, and the answer serialized.
fn samples() -> Vec<(&'static str, Value)> {
    let value = |v: Result<Value, serde_json::Error>| v.unwrap();
    let drift = drift();
    let reconciled = Reconciled {
        found: Some(drift.clone()),
        found_counts: Some(drift.counts()),
        report_allocations: Some(true),
        not_touched: Some(vec![NotTouched {
            consumer: Some(uuid::Uuid::from_u128(1)),
            kind: Some(DriftKind::Missing),
            provider: Some(uuid::Uuid::from_u128(9)),
            class: Some("VGPU".into()),
            why: "why",
        }]),
        removed: Some(vec![uuid::Uuid::from_u128(2)]),
        refused: Some(vec![RemovalRefused {
            consumer: uuid::Uuid::from_u128(3),
            why: "held".into(),
        }]),
        ..Reconciled::inspected(drift.clone())
    };
    let summary = crate::api::shared::ReportSummary {
        changes: 1,
        requests: 2,
        conflicts: 0,
        inventory_in_use: vec![crate::api::shared::InventoryInUse {
            provider: uuid::Uuid::from_u128(9),
            pci: true,
            detail: "in use".into(),
        }],
        pci_raised: vec![crate::upstream::desired::PciRaised {
            provider: "cmp1_0000:3b:00.0".into(),
            class: "CUSTOM_PCI_8086_1889".into(),
            reported: 1,
            total: 2,
        }],
    };
    let health = Health {
        status: HealthStatus::Degraded,
        version: "0.1.0".into(),
        audits_succeeded: 1,
        audits_failing_in_a_row: 0,
        last_audit_at: Some("2026-01-01T00:00:00Z".into()),
        last_audit_seconds: Some(0.5),
        last_audit_error: None,
        store_unavailable: None,
        placement_drift: Some(DriftCounts {
            counts: drift.counts(),
            at: None,
        }),
    };
    let device = PciDeviceView {
        address: "0000:3b:01.0".into(),
        vendor_id: "8086".into(),
        product_id: "1889".into(),
        dev_type: DevType::Vf,
        numa_node: Some(0),
        parent_addr: Some("0000:3b:00.0".into()),
        status: DeviceState::Allocated,
        instance_uuid: Some("00000000-0000-4000-8000-000000000001".into()),
        request_id: Some("r1".into()),
        one_time_use: false,
        resource_provider_uuid: Some(uuid::Uuid::from_u128(9)),
    };
    let plan = AdoptionPlanView {
        applied: false,
        claims: vec![claim()],
        existing: vec!["x".into()],
        problems: vec![AdoptProblem {
            consumer: "y".into(),
            reason: "does not fit".into(),
        }],
        notes: vec![AdoptNote {
            consumer: "z".into(),
            note: "devices chosen".into(),
        }],
    };
    vec![
        ("Claim", value(serde_json::to_value(claim()))),
        ("ClaimAnswer", value(serde_json::to_value(answer()))),
        (
            "ClaimShown",
            value(serde_json::to_value(ClaimShown {
                claim: claim(),
                instance: Some(InstanceState {
                    vm_state: "active".into(),
                    task_state: None,
                    host: Some("cmp1".into()),
                    node: Some("cmp1".into()),
                }),
            })),
        ),
        (
            "DryRun",
            value(serde_json::to_value(DryRun {
                fits: true,
                claim: answer(),
            })),
        ),
        (
            "MoveClaim",
            value(serde_json::to_value(MoveClaim {
                migration: migration(),
                claim: answer(),
            })),
        ),
        (
            "MoveDryRun",
            value(serde_json::to_value(MoveDryRun {
                migration: None,
                claim: answer(),
                fits: true,
            })),
        ),
        ("Migration", value(serde_json::to_value(migration()))),
        (
            "Aborted",
            value(serde_json::to_value(Aborted {
                instance_uuid: "u".into(),
                aborted: true,
            })),
        ),
        (
            "MigrationFinished",
            value(serde_json::to_value(MigrationFinished {
                migration: migration(),
            })),
        ),
        (
            "InstanceUpdated",
            value(serde_json::to_value(InstanceUpdated { instance: None })),
        ),
        ("Health", value(serde_json::to_value(health))),
        ("PciDevice", value(serde_json::to_value(device.clone()))),
        (
            "PciDevices",
            value(serde_json::to_value(PciDevices {
                pci_devices: vec![device],
            })),
        ),
        (
            "Released",
            value(serde_json::to_value(Released {
                address: "0000:01:00.0".into(),
                status: "available".into(),
            })),
        ),
        (
            "Attached",
            value(serde_json::to_value(Attached {
                instance_uuid: "u".into(),
                pci_devices: vec![],
                existing: false,
            })),
        ),
        (
            "Detached",
            value(serde_json::to_value(Detached {
                instance_uuid: "u".into(),
                request_id: "r".into(),
                detached: true,
            })),
        ),
        ("Drift", value(serde_json::to_value(&drift))),
        ("Reconciled", value(serde_json::to_value(reconciled))),
        (
            "Refreshed",
            value(serde_json::to_value(Refreshed {
                audited: true,
                placement: Some(summary.clone()),
            })),
        ),
        ("ReportSummary", value(serde_json::to_value(summary))),
        ("AdoptionPlan", value(serde_json::to_value(plan))),
    ]
}

fn keys(v: &Value) -> Vec<String> {
    v.as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// The document's schema of each answer is derived from its type: it lists exactly the keys the
/// answer has, in the answer's order, and requires those every answer has. A field added to a
/// view type shows in the document without anything else changing.
#[test]
fn each_answer_has_exactly_the_properties_of_its_component() {
    let doc = document();
    let schemas = &doc["components"]["schemas"];
    for (name, answer) in samples() {
        let schema = &schemas[name];
        assert_eq!(keys(&schema["properties"]), keys(&answer), "{name}");
        for required in schema["required"].as_array().unwrap() {
            assert!(
                answer.get(required.as_str().unwrap()).is_some(),
                "{name}: {required} is required"
            );
        }
        // Nulls only where the document allows them.
        for (key, v) in answer.as_object().unwrap() {
            if v.is_null() {
                let property = &schema["properties"][key];
                let accepts_null = property["type"]
                    .as_array()
                    .is_some_and(|t| t.contains(&json!("null")))
                    || property["oneOf"]
                        .as_array()
                        .is_some_and(|a| a.contains(&json!({"type": "null"})));
                assert!(accepts_null, "{name}.{key}: null, documented {property}");
            }
        }
    }
    // The document's components are the registered types' own schemas.
    let derived = super::schemas();
    for name in [
        "Claim",
        "Migration",
        "Health",
        "PciDevice",
        "Drift",
        "Refreshed",
    ] {
        let (documented, own) = (&schemas[name], &derived[name]);
        assert_eq!(
            keys(&documented["properties"]),
            keys(&own["properties"]),
            "{name}"
        );
        assert_eq!(documented["required"], own["required"], "{name}");
        assert_eq!(documented["description"], own["description"], "{name}");
    }
}

/// The answers a client tells apart are exact: every key required, no other.
#[test]
fn claim_answers_are_exact() {
    let doc = document();
    for name in ["ClaimAnswer", "DryRun", "MoveClaim", "MoveDryRun"] {
        let schema = &doc["components"]["schemas"][name];
        assert_eq!(schema["additionalProperties"], false, "{name}");
        let required: Vec<String> = serde_json::from_value(schema["required"].clone()).unwrap();
        assert_eq!(required, keys(&schema["properties"]), "{name}");
    }
}

/// The wire: each answer's keys in the order clients have always read them.
#[test]
fn answers_keep_their_keys_and_order() {
    let all: BTreeMap<&str, Value> = samples().into_iter().collect();
    let claim_keys = [
        "instance_uuid",
        "migration_id",
        "resources",
        "pci_devices",
        "flavor",
        "is_bfv",
        "numa_cells",
        "numa_topology",
        "mdevs",
        "pmem_namespaces",
        "nested",
        "claimed_at",
    ];
    assert_eq!(keys(&all["Claim"]), claim_keys);
    let mut answer_keys = claim_keys.to_vec();
    answer_keys.extend(["existing", "dry_run"]);
    assert_eq!(keys(&all["ClaimAnswer"]), answer_keys);
    assert_eq!(keys(&all["DryRun"]), ["fits", "claim"]);
    assert_eq!(keys(&all["MoveClaim"]), ["migration", "claim"]);
    assert_eq!(keys(&all["MoveDryRun"]), ["migration", "claim", "fits"]);
    assert_eq!(
        keys(&all["Claim"]["flavor"]),
        [
            "id",
            "flavorid",
            "name",
            "vcpus",
            "memory_mb",
            "root_gb",
            "ephemeral_gb",
            "swap"
        ]
    );
    assert_eq!(
        keys(&all["Claim"]["mdevs"][0]),
        ["uuid", "parent", "type", "existing"]
    );
    assert_eq!(
        keys(&all["Health"]),
        [
            "status",
            "version",
            "audits_succeeded",
            "audits_failing_in_a_row",
            "last_audit_at",
            "last_audit_seconds",
            "last_audit_error",
            "store_unavailable",
            "placement_drift"
        ]
    );
    // The drift counts, then when.
    let counts = &all["Health"]["placement_drift"];
    assert_eq!(keys(counts).last().map(String::as_str), Some("at"));
    assert_eq!(
        keys(&all["Reconciled"]),
        [
            "drift",
            "counts",
            "found",
            "found_counts",
            "fixed",
            "report_allocations",
            "not_touched",
            "removed",
            "refused"
        ]
    );
    let inspected = serde_json::to_value(Reconciled::inspected(drift())).unwrap();
    assert_eq!(keys(&inspected), ["drift", "counts", "fixed"]);
    assert_eq!(
        keys(&all["AdoptionPlan"]),
        ["applied", "claims", "existing", "problems", "notes"]
    );
}

/// The mirrors of the tracker's records serialize as the records do (the answers used to be
/// the records' own serialization).
#[test]
fn mirrors_serialize_as_the_records() {
    let record = crate::tracker::model::MigrationRecord {
        id: 4,
        uuid: "u".into(),
        instance_uuid: "i".into(),
        source_compute: None,
        source_node: Some("a".into()),
        dest_compute: Some("b".into()),
        dest_node: None,
        status: "finished".into(),
        migration_type: "migration".into(),
        old_instance_type_id: None,
        new_instance_type_id: Some(2),
        created_at: 1,
        updated_at: 2,
    };
    let text = |v: Result<String, serde_json::Error>| v.unwrap();
    assert_eq!(
        text(serde_json::to_string(&MigrationView::from(&record))),
        text(serde_json::to_string(&record))
    );
    let pool = crate::tracker::PoolUsage {
        vendor_id: "8086".into(),
        product_id: "1889".into(),
        numa_node: None,
        tags: [("dev_type".to_string(), "type-VF".to_string())].into(),
        total: 8,
        free: 7,
    };
    assert_eq!(
        text(serde_json::to_string(&PciPool::from(pool.clone()))),
        text(serde_json::to_string(&pool))
    );
    let pin = crate::tracker::numa::power::OfflinePin {
        cpu: 3,
        instance: "i".into(),
        running: true,
        powered_down: false,
    };
    assert_eq!(
        text(serde_json::to_string(&OfflinePinned::from(pin.clone()))),
        text(serde_json::to_string(&pin))
    );
    for strategy in [
        crate::config::PowerStrategy::CpuState,
        crate::config::PowerStrategy::Governor,
    ] {
        let power = crate::config::CpuPowerManagement {
            strategy,
            governor_low: "powersave".into(),
            governor_high: "performance".into(),
        };
        assert_eq!(
            text(serde_json::to_string(&PowerManagement::from(&power))),
            text(serde_json::to_string(&power))
        );
    }
    let mdev = crate::tracker::nested::MdevGiven {
        uuid: "m".into(),
        parent: "p".into(),
        type_id: "t".into(),
        existing: true,
    };
    assert_eq!(
        text(serde_json::to_string(&MdevView::from(&mdev))),
        text(serde_json::to_string(&mdev))
    );
    let pmem = crate::inventory::offered::VpmemNamespace {
        name: "ns0".into(),
        label: "SMALL".into(),
        resource_class: "CUSTOM_PMEM_NAMESPACE_SMALL".into(),
        devpath: "/dev/dax0.0".into(),
        size: 1,
        align: 2,
    };
    assert_eq!(
        text(serde_json::to_string(&PmemNamespaceView::from(&pmem))),
        text(serde_json::to_string(&pmem))
    );
}
