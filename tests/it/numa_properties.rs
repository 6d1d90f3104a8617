//! Property tests of NUMA accounting: random sequences of NUMA claims (pinned, shared, mixed,
//! hugepages, isolate, emulator threads), dry runs, aborts, deletes, same-host resizes with
//! confirm or revert, and restarts (a new tracker from the records, then an audit), on hosts
//! with and without SMT, CPU sets and reserved hugepages, and with rtrack's placement policies
//! off or on (L3 alignment, closest cells, dedicated guests on `IntelCore` CPUs only).
//!
//! After every step:
//! - no host CPU is pinned twice, and pinned CPUs are dedicated CPUs of their cell;
//! - with the policies on, no CPU of another core type than `IntelCore` is pinned;
//! - no hugepage pool has more pages used than its total minus the reserved ones;
//! - every cell's usage equals the sum of the placements the model says are held (what each
//!   granted claim answered, minus what was freed), computed apart from the tracker;
//! - a refused or dry-run operation changed nothing;
//! - a restart gives the same usage.

use std::collections::BTreeMap;

use proptest::prelude::*;
use rtrack::config::Config;
use rtrack::probes::{CpuSet, HostInventory};
use rtrack::tracker::model::{FlavorUsage, HostNames, InstanceRequest};
use rtrack::tracker::numa::constraints::ImageProps;
use rtrack::tracker::numa::{FittedTopology, NumaUsage};
use rtrack::tracker::request::numa_of;
use rtrack::tracker::{
    InstanceInfo, InstanceUpdate, MoveRequest, MoveType, Tracker, TrackerSettings, TrackerState,
};
use serde_json::json;

/// The CPUs of `cores` (core ids 0-7, both threads with SMT).
fn cpus_of(cores: impl Iterator<Item = u32> + Clone, threads: u32) -> CpuSet {
    CpuSet::from_ids((0..threads).flat_map(|t| cores.clone().map(move |c| t * 8 + c)))
}

/// Per cell, an L3 per pair of cores, and its last core an `IntelAtom` (the others
/// `IntelCore`): what the policies read.
fn cache_and_core_type_facts(threads: u32) -> serde_json::Value {
    let l3: Vec<serde_json::Value> = (0..4)
        .map(|pair| {
            let cpus = cpus_of(pair * 2..pair * 2 + 2, threads);
            json!({"level": 3, "type": "Unified", "size_kb": 8192, "cpus": cpus.to_string()})
        })
        .collect();
    let atom = cpus_of([3, 7].into_iter(), threads);
    let core = cpus_of([0, 1, 2, 4, 5, 6].into_iter(), threads);
    json!({"caches": l3, "core_types": [
        {"name": "IntelCore", "cpus": core.to_string()},
        {"name": "IntelAtom", "cpus": atom.to_string()}]})
}

/// Two cells of 4 cores; SMT or not; 2M and 1G pools; cache and core type facts or not.
fn host(smt: bool, facts: bool) -> HostInventory {
    let threads = if smt { 2 } else { 1 };
    let per_cell = 4 * threads;
    let mut cpus = Vec::new();
    let mut nodes = Vec::new();
    for n in 0..2u32 {
        let ids: Vec<u32> = (0..threads)
            .flat_map(|t| (0..4).map(move |c| t * 8 + n * 4 + c))
            .collect();
        for &id in &ids {
            let core = id % 8;
            let sib: Vec<u32> = (0..threads).map(|t| t * 8 + core).collect();
            cpus.push(json!({"id": id, "package": n, "die": null, "cluster": null, "core": core,
                              "thread_siblings": CpuSet::from_ids(sib).to_string(), "numa_node": n}));
        }
        nodes.push(json!({"id": n, "cpus": CpuSet::from_ids(ids).to_string(), "memory_mb": 8192,
            "memory_kb": 8192 * 1024, "free_mb": null, "distances": {}, "has_cpu": true, "has_memory": true,
            "hugepages": [{"size_kb": 2048, "total": 512, "free": 512}, {"size_kb": 1048576, "total": 2, "free": 2}]}));
    }
    let online = format!("0-{}", per_cell * 2 - 1);
    let mut inventory = json!({
        "host": {"hostname": "p", "arch": "x86_64", "kernel": null, "os_release": null},
        "cpu": {"arch": "x86_64", "vendor": null, "model": null, "flags": [], "sockets": 2, "cores": 8,
                "threads": per_cell * 2, "cores_per_socket": 4, "threads_per_core": threads, "smt": smt,
                "online": online, "offline": "", "present": online, "possible": online, "cpus": cpus},
        "numa_nodes": nodes,
        "memory": {"total_mb": 16384, "free_mb": null, "available_mb": null, "default_hugepage_size_kb": 2048,
                   "hugepages": [], "base_page_kb": 4},
        "disks": {"instances": null, "block_devices": []},
        "pci_devices": [], "warnings": []
    });
    if facts {
        for (k, v) in cache_and_core_type_facts(threads)
            .as_object()
            .into_iter()
            .flatten()
        {
            inventory[k] = v.clone();
        }
    }
    serde_json::from_value(inventory).expect("an inventory")
}

fn settings(legacy: bool, smt: bool, policies: bool) -> TrackerSettings {
    let mut toml = String::from("[resources]\nreserved_host_memory_mb = 0\ncpu_allocation_ratio = 2.0\nreserved_huge_pages = [\"node:1,size:2048,count:100\"]\n");
    if policies {
        toml.push_str("pin_alignment = \"l3\"\nprefer_closest_cells = true\ndedicated_core_types = [\"IntelCore\"]\n");
    }
    if !legacy {
        // One shared core per cell (both its threads), the rest dedicated.
        let (shared, dedicated) = if smt {
            ("0,4,8,12", "1-3,5-7,9-11,13-15")
        } else {
            ("0,4", "1-3,5-7")
        };
        toml.push_str(&format!(
            "cpu_shared_set = \"{shared}\"\ncpu_dedicated_set = \"{dedicated}\"\n"
        ));
    }
    let f = std::path::Path::new("p.toml");
    TrackerSettings {
        policy: Config::parse(&toml, f)
            .and_then(|c| c.validate(f))
            .expect("config")
            .into(),
        names: HostNames {
            host: "h".into(),
            node: "h".into(),
        },
        node_uuid: "11111111-2222-3333-4444-555555555555".into(),
        node_created_at: time::OffsetDateTime::UNIX_EPOCH,
    }
}

/// A flavor shape: vCPUs, memory in MiB, extra specs.
type Shape = (i64, i64, &'static [(&'static str, &'static str)]);

/// Flavor shapes the operations pick from.
const FLAVORS: &[Shape] = &[
    (2, 1024, &[("hw:cpu_policy", "dedicated")]),
    (
        4,
        2048,
        &[("hw:cpu_policy", "dedicated"), ("hw:numa_nodes", "2")],
    ),
    (
        2,
        1024,
        &[
            ("hw:cpu_policy", "dedicated"),
            ("hw:cpu_thread_policy", "isolate"),
        ],
    ),
    (
        2,
        1024,
        &[
            ("hw:cpu_policy", "dedicated"),
            ("hw:cpu_thread_policy", "require"),
        ],
    ),
    (
        2,
        1024,
        &[
            ("hw:cpu_policy", "dedicated"),
            ("hw:emulator_threads_policy", "isolate"),
        ],
    ),
    (
        2,
        2048,
        &[("hw:numa_nodes", "1"), ("hw:mem_page_size", "large")],
    ),
    (
        2,
        1024,
        &[("hw:numa_nodes", "1"), ("hw:mem_page_size", "1GB")],
    ),
    (
        3,
        1536,
        &[("hw:cpu_policy", "mixed"), ("hw:cpu_dedicated_mask", "^0")],
    ),
    (2, 3072, &[("hw:numa_nodes", "1")]),
    (
        1,
        512,
        &[("hw:cpu_policy", "dedicated"), ("hw:mem_page_size", "2048")],
    ),
];

fn request(f: usize, id: i64) -> InstanceRequest {
    let (vcpus, memory_mb, specs) = FLAVORS[f];
    let mut flavor = FlavorUsage {
        id,
        flavorid: format!("f{f}"),
        name: None,
        vcpus,
        memory_mb,
        root_gb: 0,
        ephemeral_gb: 0,
        swap_mb: 0,
        cpus: None,
        extra_resources: Default::default(),
        mem_encryption_model: None,
        extra_specs: specs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    };
    let numa =
        numa_of(&mut flavor, &ImageProps::default(), None, "flavor").expect("valid constraints");
    InstanceRequest {
        flavor,
        is_bfv: true,
        pci_requests: Vec::new(),
        numa,
    }
}

#[derive(Debug, Clone)]
enum Op {
    Claim(u8, usize),
    Check(usize),
    Abort(u8),
    Delete(u8),
    Resize(u8, usize),
    Confirm(u8),
    Revert(u8),
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0u8..8, 0..FLAVORS.len()).prop_map(|(n, f)| Op::Claim(n, f)),
        1 => (0..FLAVORS.len()).prop_map(Op::Check),
        1 => (0u8..8).prop_map(Op::Abort),
        1 => (0u8..8).prop_map(Op::Delete),
        2 => (0u8..8, 0..FLAVORS.len()).prop_map(|(n, f)| Op::Resize(n, f)),
        1 => (0u8..8).prop_map(Op::Confirm),
        1 => (0u8..8).prop_map(Op::Revert),
        1 => Just(Op::Restart),
    ]
}

fn uuid(n: u8) -> String {
    format!("00000000-0000-4000-8000-{n:012}")
}

/// What the model says each instance holds: its placement, and a resize's new one.
#[derive(Default)]
struct Model {
    held: BTreeMap<u8, FittedTopology>,
    moving: BTreeMap<u8, (i64, FittedTopology)>,
}

fn check(t: &Tracker, model: &Model, policies: bool) {
    let host = t.numa_host();
    let usage = t.numa_usage(&t.usage());
    if policies {
        let atom = cpus_of([3, 7].into_iter(), 2);
        for c in &host.cells {
            let on_atom = usage.cell(c.id).pinned.intersection(&atom);
            assert!(
                on_atom.is_empty(),
                "cell {}: pinned {on_atom} of IntelAtom",
                c.id
            );
        }
    }
    assert!(
        usage.double_pinned.is_empty(),
        "CPUs pinned twice: {:?}",
        usage.double_pinned
    );
    assert_eq!(
        usage.overcommit(host),
        Vec::<String>::new(),
        "over capacity"
    );
    let expected = NumaUsage::of(
        host,
        model
            .held
            .values()
            .chain(model.moving.values().map(|(_, t)| t)),
    );
    for c in &host.cells {
        assert_eq!(
            usage.cell(c.id),
            expected.cell(c.id),
            "cell {} usage differs from the sum of the placements held",
            c.id
        );
        for p in c.pages.iter().skip(1) {
            assert!(usage.cell(c.id).pages(p.size_kb) <= p.total - p.reserved);
        }
    }
}

fn run(ops: Vec<Op>, legacy: bool, smt: bool, policies: bool) {
    let inv = host(smt, policies);
    let settings = settings(legacy, smt, policies);
    let now = time::OffsetDateTime::UNIX_EPOCH;
    let mut t = Tracker::new(settings.clone(), inv.clone(), TrackerState::default());
    let _ = t.audit(inv.clone(), now);
    let mut model = Model::default();
    let mut next_migration = 1;
    for op in ops {
        let before = t.state().clone();
        match op {
            Op::Claim(n, f) => {
                let info = InstanceInfo {
                    uuid: uuid(n),
                    ..Default::default()
                };
                if let Ok((o, _)) = t.instance_claim(&info, &request(f, f as i64 + 1), 1, false) {
                    if !o.existing {
                        model.held.insert(
                            n,
                            o.claim
                                .numa_topology
                                .as_deref()
                                .cloned()
                                .expect("a placement"),
                        );
                    }
                } else {
                    assert_eq!(t.state(), &before, "a refused claim changed the records");
                }
            }
            Op::Check(f) => {
                let info = InstanceInfo {
                    uuid: uuid(200),
                    ..Default::default()
                };
                let _ = t.instance_claim(&info, &request(f, f as i64 + 1), 1, true);
                assert_eq!(t.state(), &before, "a dry run changed the records");
            }
            Op::Abort(n) => {
                // A build that failed (Nova never aborts a build claim mid-resize).
                if !model.moving.contains_key(&n) && t.abort(&uuid(n)).is_ok() {
                    model.held.remove(&n);
                }
            }
            Op::Delete(n) => {
                let up = InstanceUpdate {
                    vm_state: Some("deleted".into()),
                    ..Default::default()
                };
                if t.update_instance(&uuid(n), &up).is_ok() {
                    model.held.remove(&n);
                    model.moving.remove(&n);
                }
            }
            Op::Resize(n, f) => {
                if !model.held.contains_key(&n) || model.moving.contains_key(&n) {
                    continue;
                }
                let info = InstanceInfo {
                    uuid: uuid(n),
                    vm_state: Some("active".into()),
                    task_state: Some("resize_prep".into()),
                    host: Some("h".into()),
                    node: Some("h".into()),
                    ..Default::default()
                };
                let id = next_migration;
                let mv = MoveRequest {
                    instance: info,
                    current: None,
                    new: request(f, 100 + f as i64),
                    current_numa: None,
                    move_type: Some(MoveType::Resize),
                    migration_id: Some(id),
                    migration_uuid: None,
                    source_compute: None,
                    source_node: None,
                    dest_compute: None,
                    dest_node: None,
                };
                match t.move_claim(&mv, 1, false) {
                    Ok((o, _)) => {
                        next_migration += 1;
                        model.moving.insert(
                            n,
                            (
                                id,
                                o.claim
                                    .numa_topology
                                    .as_deref()
                                    .cloned()
                                    .expect("a placement"),
                            ),
                        );
                    }
                    Err(_) => assert_eq!(t.state(), &before, "a refused move changed the records"),
                }
            }
            Op::Confirm(n) | Op::Revert(n) => {
                let Some((id, new)) = model.moving.get(&n).cloned() else {
                    continue;
                };
                let confirm = matches!(op, Op::Confirm(_));
                let r = if confirm {
                    t.confirm_move(id, 2)
                } else {
                    t.revert_move(id, 2)
                };
                r.expect("a move in progress finishes");
                model.moving.remove(&n);
                if confirm {
                    model.held.insert(n, new);
                }
            }
            Op::Restart => {
                let usage = t.numa_usage(&t.usage());
                t = Tracker::new(settings.clone(), inv.clone(), t.state().clone());
                let _ = t.audit(inv.clone(), now);
                assert_eq!(
                    t.numa_usage(&t.usage()),
                    usage,
                    "a restart changed the usage"
                );
            }
        }
        check(&t, &model, policies);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 150, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn numa_accounting_holds_under_random_operations(
        ops in proptest::collection::vec(op(), 1..50),
        legacy in any::<bool>(),
        smt in any::<bool>(),
        policies in any::<bool>(),
    ) {
        run(ops, legacy, smt, policies);
    }
}

/// A live migration keeps the page size a guest was given (Nova's
/// `_test_live_migration_page_size`), and needs the source's placement to know it.
#[test]
fn a_live_migration_keeps_its_page_size() {
    let inv = host(true, false);
    let settings = settings(false, true, false);
    let mut t = Tracker::new(settings, inv.clone(), TrackerState::default());
    let _ = t.audit(inv, time::OffsetDateTime::UNIX_EPOCH);
    // The guest asks for "large" pages; at the source it got 2M ones.
    let mut new = request(5, 6);
    new.flavor
        .extra_specs
        .insert("hw:mem_page_size".into(), "large".into());
    let source_placement: FittedTopology = serde_json::from_value(json!({
        "cells": [{"guest_cell": 0, "host_cell": 0, "cpuset": "0-1", "pcpuset": "", "memory_mb": 2048,
                   "pagesize_kb": 2048, "cpu_pinning": {}, "cpuset_reserved": null, "cpu_policy": null, "thread_policy": null}],
        "emulator_threads": null}))
    .unwrap();
    let mv = |current_numa: Option<FittedTopology>, new: InstanceRequest| MoveRequest {
        instance: InstanceInfo {
            uuid: uuid(1),
            vm_state: Some("active".into()),
            task_state: Some("migrating".into()),
            host: Some("src".into()),
            node: Some("src".into()),
            ..Default::default()
        },
        current: None,
        new,
        current_numa,
        move_type: Some(MoveType::LiveMigration),
        migration_id: Some(7),
        migration_uuid: None,
        source_compute: None,
        source_node: None,
        dest_compute: None,
        dest_node: None,
    };
    // Without the source's placement the page size cannot be kept: 400 naming the field.
    let e = t
        .move_claim(&mv(None, new.clone()), 1, true)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("instance.numa_topology:"), "{e}");
    // 2 GiB of "large" pages here: the 1G pool (2 pages) is tried first and fits, but the guest
    // has 2M pages, so it is refused.
    let e = t
        .move_claim(&mv(Some(source_placement.clone()), new.clone()), 1, true)
        .unwrap_err()
        .to_string();
    assert!(e.contains("Requested page size is different from current page size: the guest has 2048 KiB pages, this host would give 1048576 KiB"), "{e}");
    // A guest that has 1G pages at the source keeps them: granted, with a fresh placement.
    let mut one_g = source_placement;
    one_g.cells[0].pagesize_kb = Some(1_048_576);
    let (o, _) = t.move_claim(&mv(Some(one_g), new), 1, false).unwrap();
    let placed = o.claim.numa_topology.as_deref().unwrap();
    assert_eq!(placed.cells[0].pagesize_kb, Some(1_048_576));
}
