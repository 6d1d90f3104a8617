//! vGPUs and encryption contexts through the tracker: claims placed on parents and models,
//! mdevs given and never twice, refusals naming the provider, moves and aborts freeing them.

use rtrack_fixtures::real::scratch_dir;
use rtrack_fixtures::vgpu::VgpuHost;

use super::*;
use crate::tracker::nested::{EncryptionModel, NestedKey};

const MDEV: &str = "[devices]\nenabled_mdev_types = [\"nvidia-35\"]\n";

fn vgpu_tracker(devices: &str) -> Tracker {
    let dir = scratch_dir();
    VgpuHost::mdev_gpu().write(dir.path());
    let mut opts = ProbeOptions::default();
    opts.disk.instances_path = Some(dir.path().to_path_buf());
    let mut inv = probe_host(&HostRoot::under(dir.path()), &opts).unwrap();
    if let Some(fs) = inv.disks.instances.as_mut() {
        fs.total_gb = 1000;
    }
    let f = std::path::Path::new("test.toml");
    let cfg = Config::parse(&format!("{CONFIG}{devices}"), f)
        .unwrap()
        .validate(f)
        .unwrap();
    let mut t = Tracker::new(settings_for(cfg), inv.clone(), TrackerState::default());
    t.audit(inv, time::OffsetDateTime::UNIX_EPOCH);
    t
}

/// A flavor with `extra` specs, its extra classes read as a request decodes them.
fn vflavor(id: i64, extra: &[(&str, &str)]) -> FlavorUsage {
    let mut f = flavor(id, 1, 512, 1, extra);
    let (classes, model) =
        crate::tracker::flavor_classes::extra_classes(&f.extra_specs, "flavor").unwrap();
    f.extra_resources = classes;
    f.mem_encryption_model = model;
    f
}

#[test]
fn vgpus_are_claimed_per_parent_with_mdevs_until_the_host_is_full() {
    let mut t = vgpu_tracker(MDEV);
    // 84:00.0: 2 existing + 14; 85:00.0: 16. VGPU capacity 32.
    assert_eq!(t.inventory()[&ResourceClass::Vgpu].capacity(), 32);
    let a = claim(
        &mut t,
        1,
        req(vflavor(1, &[("resources:VGPU", "2")]), vec![]),
    )
    .unwrap();
    let nested = a.claim.nested.clone().unwrap();
    // Equal free units: the first parent, whose two unassigned mdevs are given.
    assert!(nested
        .mdevs
        .iter()
        .all(|m| m.existing && m.parent == "0000:84:00.0"));
    assert_eq!(nested.mdevs.len(), 2);
    let b = claim(
        &mut t,
        2,
        req(vflavor(1, &[("resources:VGPU", "2")]), vec![]),
    )
    .unwrap();
    let b = b.claim.nested.unwrap();
    // 85:00.0 now has the most free: new mdevs, uuids distinct from the first claim's.
    assert!(b
        .mdevs
        .iter()
        .all(|m| !m.existing && m.parent == "0000:85:00.0"));
    let mut all: Vec<String> = nested
        .mdevs
        .iter()
        .chain(&b.mdevs)
        .map(|m| m.uuid.clone())
        .collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 4);
    assert_eq!(used(&t, ResourceClass::Vgpu), 4);
    // 28 would fit the class, but one request takes one parent: 14 and 14.
    let Err(ClaimError::Refused(r)) = claim(
        &mut t,
        3,
        req(vflavor(1, &[("resources:VGPU", "28")]), vec![]),
    ) else {
        panic!("no parent holds 28");
    };
    assert_eq!(r.resources[0].max_unit, 16);
    for n in [3, 6] {
        claim(
            &mut t,
            n,
            req(vflavor(1, &[("resources:VGPU", "14")]), vec![]),
        )
        .unwrap();
    }
    let before = t.state().clone();
    let Err(ClaimError::Refused(r)) = claim(
        &mut t,
        4,
        req(vflavor(1, &[("resources:VGPU", "1")]), vec![]),
    ) else {
        panic!("the host is full");
    };
    assert_eq!(r.resources[0].class, ResourceClass::Vgpu);
    assert_eq!((r.resources[0].used, r.resources[0].capacity), (32, 32));
    assert_eq!(t.state(), &before);
    // Aborting frees the units and the mdevs: the next claim gets the first claim's mdevs.
    t.abort(&uuid(1)).unwrap();
    let c = claim(
        &mut t,
        5,
        req(vflavor(1, &[("resources:VGPU", "2")]), vec![]),
    )
    .unwrap();
    let mut got: Vec<String> = c
        .claim
        .nested
        .unwrap()
        .mdevs
        .iter()
        .map(|m| m.uuid.clone())
        .collect();
    let mut had: Vec<String> = nested.mdevs.iter().map(|m| m.uuid.clone()).collect();
    got.sort();
    had.sort();
    assert_eq!(got, had);
}

#[test]
fn encryption_contexts_come_from_the_models_provider() {
    let mut t = vgpu_tracker("[devices]\nnum_memory_encrypted_guests = 2\n");
    // SEV: min(410, 2) = 2; SEV-ES: 99.
    assert_eq!(
        t.inventory()[&ResourceClass::MemEncryptionContext].capacity(),
        101
    );
    let sev = [("hw:mem_encryption", "true")];
    for n in 1..=2 {
        let o = claim(&mut t, n, req(vflavor(1, &sev), vec![])).unwrap();
        assert_eq!(
            o.claim.nested.unwrap().units[0].provider,
            NestedKey::MemEncryption(EncryptionModel::AmdSev)
        );
    }
    let Err(ClaimError::Refused(r)) = claim(&mut t, 3, req(vflavor(1, &sev), vec![])) else {
        panic!("the two SEV contexts are taken");
    };
    assert_eq!(r.resources[0].provider.as_deref(), Some("amd-sev contexts"));
    assert!(
        r.to_string().contains(
            "MEM_ENCRYPTION_CONTEXT on amd-sev contexts requested 1, used 2 of capacity 2"
        ),
        "{r}"
    );
    // SEV-ES still has room.
    let es = [
        ("hw:mem_encryption", "true"),
        ("hw:mem_encryption_model", "amd-sev-es"),
    ];
    claim(&mut t, 4, req(vflavor(1, &es), vec![])).unwrap();
    assert_eq!(used(&t, ResourceClass::MemEncryptionContext), 3);
}

#[test]
fn custom_classes_without_inventory_are_refused_by_name() {
    let mut t = vgpu_tracker(MDEV);
    let Err(ClaimError::Refused(r)) = claim(
        &mut t,
        1,
        req(vflavor(1, &[("resources:CUSTOM_LICENCE", "1")]), vec![]),
    ) else {
        panic!("no CUSTOM_LICENCE here");
    };
    assert_eq!(r.resources[0].class.as_str(), "CUSTOM_LICENCE");
    assert_eq!(r.resources[0].capacity, 0);
}

#[test]
fn a_resize_here_holds_both_sides_until_confirmed() {
    let mut t = vgpu_tracker(MDEV);
    claim(
        &mut t,
        1,
        req(vflavor(1, &[("resources:VGPU", "1")]), vec![]),
    )
    .unwrap();
    let before: Vec<String> = t.state().instances[&uuid(1)]
        .nested
        .as_ref()
        .unwrap()
        .mdevs
        .iter()
        .map(|m| m.uuid.clone())
        .collect();
    let mv = MoveRequest {
        current_numa: None,
        instance: InstanceInfo {
            uuid: uuid(1),
            host: Some("cmp1".into()),
            node: Some("cmp1".into()),
            vm_state: Some("active".into()),
            ..InstanceInfo::default()
        },
        current: None,
        new: req(vflavor(2, &[("resources:VGPU", "3")]), vec![]),
        move_type: None,
        migration_id: Some(9),
        migration_uuid: None,
        source_compute: None,
        source_node: None,
        dest_compute: None,
        dest_node: None,
    };
    let o = t.move_claim(&mv, 10, false).unwrap().0;
    let new = o.claim.nested.unwrap();
    assert_eq!(new.mdevs.len(), 3);
    assert!(new.mdevs.iter().all(|m| !before.contains(&m.uuid)));
    // Same-node resize: the new flavor counts while the instance has the old one (Nova's rule).
    assert_eq!(used(&t, ResourceClass::Vgpu), 3 + 1);
    t.confirm_move(9, 20).unwrap();
    assert_eq!(used(&t, ResourceClass::Vgpu), 3);
    let inst = &t.state().instances[&uuid(1)];
    assert_eq!(inst.nested.as_ref().unwrap().mdevs, new.mdevs);
}

#[test]
fn the_audit_names_mdevs_that_came_went_or_were_given_and_are_gone() {
    let mut t = vgpu_tracker(MDEV);
    let o = claim(
        &mut t,
        1,
        req(vflavor(1, &[("resources:VGPU", "1")]), vec![]),
    )
    .unwrap();
    let given = o.claim.nested.unwrap().mdevs[0].uuid.clone();
    let mut host = t.host().clone();
    host.mediated_devices.devices.retain(|d| d.uuid != given);
    host.mediated_devices
        .devices
        .push(crate::probes::mdev::MdevDevice {
            uuid: "0e7e57ed-0000-4000-8000-000000000001".into(),
            parent: Some("0000:85:00.0".into()),
            type_id: Some("nvidia-35".into()),
        });
    let (out, _) = t.audit(host, time::OffsetDateTime::UNIX_EPOCH);
    assert_eq!(out.mdevs_vanished, std::slice::from_ref(&given));
    assert_eq!(out.mdevs_appeared, ["0e7e57ed-0000-4000-8000-000000000001"]);
    assert_eq!(out.mdevs_missing, [(uuid(1), given)]);
    // Still counted: the claim holds its unit until it is released.
    assert_eq!(used(&t, ResourceClass::Vgpu), 1);
}

#[test]
fn vgpus_follow_placements_allocation_and_a_stranger_provider_is_a_conflict() {
    let mut t = vgpu_tracker(MDEV);
    let uuids = t.nested_provider_uuids();
    let second = uuids[&NestedKey::Mdev("0000:85:00.0".into())];
    let mut i = info(1);
    i.allocations = [(second, [(ResourceClass::Vgpu, 2)].into())].into();
    let r = req(vflavor(1, &[("resources:VGPU", "2")]), vec![]);
    let o = t.instance_claim(&i, &r, 0, false).unwrap().0;
    let n = o.claim.nested.unwrap();
    assert_eq!(n.units[0].provider, NestedKey::Mdev("0000:85:00.0".into()));
    // A provider nova-compute made, adopted by name at a report: its uuid is followed too.
    let novas = uuid::Uuid::from_u128(0x5eed);
    let derived = uuids[&NestedKey::Mdev("0000:84:00.0".into())];
    t.adopt_nested_providers(&[(derived, novas)].into());
    let mut i = info(2);
    i.allocations = [(novas, [(ResourceClass::Vgpu, 1)].into())].into();
    let o = t
        .instance_claim(
            &i,
            &req(vflavor(1, &[("resources:VGPU", "1")]), vec![]),
            0,
            false,
        )
        .unwrap()
        .0;
    assert_eq!(
        o.claim.nested.unwrap().units[0].provider,
        NestedKey::Mdev("0000:84:00.0".into())
    );
    // The derived uuid is no longer the provider's.
    let mut i = info(3);
    i.allocations = [(derived, [(ResourceClass::Vgpu, 1)].into())].into();
    let before = t.state().clone();
    let e = t
        .instance_claim(
            &i,
            &req(vflavor(1, &[("resources:VGPU", "1")]), vec![]),
            0,
            false,
        )
        .unwrap_err();
    assert!(matches!(e, ClaimError::Conflict { .. }), "{e}");
    assert!(e.to_string().contains(&derived.to_string()), "{e}");
    assert_eq!(t.state(), &before);
}

fn with_provider_yaml(t: &mut Tracker, yaml: &str) {
    let configs =
        crate::config::provider_yaml::parse(yaml, std::path::Path::new("p.yaml")).unwrap();
    let mut settings = t.settings().clone();
    settings.policy.provider_configs = configs;
    t.set_settings(settings);
    let host = t.host().clone();
    t.audit(host, time::OffsetDateTime::UNIX_EPOCH);
}

#[test]
fn provider_yaml_classes_are_claimed_on_their_provider_until_full() {
    let mut t = vgpu_tracker(MDEV);
    with_provider_yaml(
        &mut t,
        "meta: {schema_version: '1.0'}\nproviders:\n  - identification: {uuid: $COMPUTE_NODE}\n    inventories: {additional: [{CUSTOM_LICENCE: {total: 3, reserved: 1}}]}\n  - identification: {name: cmp1_pci_0000_85_00_0}\n    inventories: {additional: [{CUSTOM_NVLINK: {total: 1}}]}\n  - identification: {name: nowhere}\n    inventories: {additional: [{CUSTOM_X: {total: 1}}]}\n",
    );
    assert_eq!(
        t.inventory()[&ResourceClass::from_name("CUSTOM_LICENCE").unwrap()].capacity(),
        2
    );
    let lic = [("resources:CUSTOM_LICENCE", "1")];
    claim(&mut t, 1, req(vflavor(1, &lic), vec![])).unwrap();
    let o = claim(
        &mut t,
        2,
        req(
            vflavor(
                1,
                &[
                    ("resources:CUSTOM_LICENCE", "1"),
                    ("resources1:CUSTOM_NVLINK", "1"),
                ],
            ),
            vec![],
        ),
    )
    .unwrap();
    let units = o.claim.nested.unwrap().units.clone();
    assert!(units.iter().any(|u| u.provider
        == NestedKey::Operator {
            provider: "cmp1_pci_0000_85_00_0".into(),
            class: "CUSTOM_NVLINK".into()
        }));
    let Err(ClaimError::Refused(r)) = claim(&mut t, 3, req(vflavor(1, &lic), vec![])) else {
        panic!("two licences only");
    };
    assert_eq!(r.resources[0].class.as_str(), "CUSTOM_LICENCE");
    assert_eq!((r.resources[0].used, r.resources[0].capacity), (2, 2));
}

/// A resize on this host of instance 1 (1 vGPU) to `vgpus`, migration 9.
fn resize_here(t: &mut Tracker, vgpus: &str) -> ClaimOutcome {
    let mv = MoveRequest {
        current_numa: None,
        instance: InstanceInfo {
            uuid: uuid(1),
            host: Some("cmp1".into()),
            node: Some("cmp1".into()),
            vm_state: Some("active".into()),
            ..InstanceInfo::default()
        },
        current: None,
        new: req(vflavor(2, &[("resources:VGPU", vgpus)]), vec![]),
        move_type: None,
        migration_id: Some(9),
        migration_uuid: None,
        source_compute: None,
        source_node: None,
        dest_compute: None,
        dest_node: None,
    };
    t.move_claim(&mv, 10, false).unwrap().0
}

#[test]
fn a_resize_here_reverted_after_finish_gets_its_old_vgpus_back() {
    let mut t = vgpu_tracker(MDEV);
    let old = claim(
        &mut t,
        1,
        req(vflavor(1, &[("resources:VGPU", "1")]), vec![]),
    )
    .unwrap()
    .claim
    .nested
    .unwrap();
    resize_here(&mut t, "3");
    // finish_resize: the instance takes its new flavor and vGPUs.
    t.update_instance(
        &uuid(1),
        &InstanceUpdate {
            vm_state: Some("resized".into()),
            apply_new_flavor: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(
        t.state().instances[&uuid(1)]
            .nested
            .as_ref()
            .unwrap()
            .mdevs
            .len(),
        3
    );
    t.revert_move(9, 20).unwrap();
    let inst = &t.state().instances[&uuid(1)];
    assert_eq!(inst.nested.as_deref(), Some(&*old));
    assert_eq!(used(&t, ResourceClass::Vgpu), 1);
    // Its mdev is its own again: the next claim does not get it.
    let next = claim(
        &mut t,
        2,
        req(vflavor(1, &[("resources:VGPU", "1")]), vec![]),
    )
    .unwrap()
    .claim
    .nested
    .unwrap();
    assert_ne!(next.mdevs[0].uuid, old.mdevs[0].uuid);
}

#[test]
fn a_state_change_that_would_give_an_mdev_twice_is_refused() {
    let mut t = vgpu_tracker(MDEV);
    // An incoming resize of instance 1 from cmp0 holds an mdev here.
    let mv = MoveRequest {
        current_numa: None,
        instance: InstanceInfo {
            uuid: uuid(1),
            host: Some("cmp0".into()),
            node: Some("cmp0".into()),
            vm_state: Some("active".into()),
            task_state: Some("resize_prep".into()),
            ..InstanceInfo::default()
        },
        current: Some(req(vflavor(1, &[]), vec![])),
        new: req(vflavor(2, &[("resources:VGPU", "1")]), vec![]),
        move_type: None,
        migration_id: Some(9),
        migration_uuid: None,
        source_compute: None,
        source_node: None,
        dest_compute: None,
        dest_node: None,
    };
    let held = t
        .move_claim(&mv, 10, false)
        .unwrap()
        .0
        .claim
        .nested
        .unwrap();
    // Its task is cleared: the move stops counting, and another instance gets that mdev.
    t.update_instance(
        &uuid(1),
        &InstanceUpdate {
            task_state: Some(String::new()),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(used(&t, ResourceClass::Vgpu), 0);
    let taken = claim(
        &mut t,
        2,
        req(vflavor(1, &[("resources:VGPU", "1")]), vec![]),
    )
    .unwrap()
    .claim
    .nested
    .unwrap();
    assert_eq!(taken.mdevs[0].uuid, held.mdevs[0].uuid);
    // Back in a resize state, the move would count again and hold that mdev twice: refused,
    // nothing changed (the class alone would still fit).
    let before = t.state().clone();
    let e = t
        .update_instance(
            &uuid(1),
            &InstanceUpdate {
                task_state: Some("resize_finish".into()),
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(e.to_string().contains(&held.mdevs[0].uuid), "{e}");
    assert_eq!(t.state(), &before);
}

#[test]
fn provider_yaml_classes_follow_placements_allocation_on_the_compute_node() {
    let mut t = vgpu_tracker(MDEV);
    with_provider_yaml(
        &mut t,
        "meta: {schema_version: '1.0'}\nproviders:\n  - identification: {uuid: $COMPUTE_NODE}\n    inventories: {additional: [{CUSTOM_LICENCE: {total: 3}}, {CUSTOM_SEAT: {total: 2}}]}\n",
    );
    let node = uuid::Uuid::parse_str(&t.settings().node_uuid).unwrap();
    let mut i = info(1);
    i.allocations = [(
        node,
        [
            (ResourceClass::from_name("CUSTOM_LICENCE").unwrap(), 1),
            (ResourceClass::from_name("CUSTOM_SEAT").unwrap(), 2),
            (ResourceClass::Vcpu, 1),
        ]
        .into(),
    )]
    .into();
    let r = req(
        vflavor(
            1,
            &[
                ("resources:CUSTOM_LICENCE", "1"),
                ("resources:CUSTOM_SEAT", "2"),
            ],
        ),
        vec![],
    );
    let o = t.instance_claim(&i, &r, 0, false).unwrap().0;
    assert_eq!(o.claim.nested.unwrap().units.len(), 2);
}

#[test]
fn records_of_an_older_rtrack_count_their_flavors_classes_when_loaded() {
    let mut t = vgpu_tracker(MDEV);
    claim(
        &mut t,
        1,
        req(vflavor(1, &[("resources:VGPU", "2")]), vec![]),
    )
    .unwrap();
    // As an rtrack that did not read them wrote it: no classes beyond the four, no placement.
    let mut old = t.state().clone();
    for inst in old.instances.values_mut().map(std::sync::Arc::make_mut) {
        let r = std::sync::Arc::make_mut(&mut inst.request);
        r.flavor.extra_resources.clear();
        inst.nested = None;
    }
    for c in old.claims.values_mut().map(std::sync::Arc::make_mut) {
        std::sync::Arc::make_mut(&mut c.request)
            .flavor
            .extra_resources
            .clear();
        c.nested = None;
    }
    let loaded = Tracker::new(t.settings().clone(), t.host().clone(), old);
    assert_eq!(loaded.usage().used(ResourceClass::Vgpu), 2);
}
