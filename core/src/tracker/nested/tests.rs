use std::collections::BTreeMap;

use super::assign::{assign, AssignError, AssignInput};
use super::*;
use crate::config::devices::{EnabledMdevType, MdevPolicy};
use crate::inventory::resources::ResourceClass;
use crate::probes::mdev::{MdevDevice, MdevParent, MdevType};
use crate::probes::HostInventory;

fn gpu_type(id: &str, available: Option<u64>) -> MdevType {
    MdevType {
        type_id: id.into(),
        name: None,
        device_api: Some("vfio-pci".into()),
        available_instances: available,
        description: None,
    }
}

/// Two M60s: 84:00.0 with two nvidia-35 mdevs and 14 more, 85:00.0 with 16.
pub(super) fn host() -> HostInventory {
    let mut h: HostInventory = serde_json::from_value(serde_json::json!({
        "host": {"hostname": null, "arch": "x86_64", "kernel": null},
        "cpu": {"arch": "x86_64", "vendor": null, "model": null, "flags": [], "sockets": 1, "cores": 1,
                "threads": 1, "cores_per_socket": 1, "threads_per_core": 1, "smt": false,
                "online": "0", "offline": "", "present": "0", "possible": "0", "cpus": []},
        "numa_nodes": [],
        "memory": {"total_mb": 1024, "free_mb": null, "available_mb": null,
                   "default_hugepage_size_kb": null, "hugepages": []},
        "disks": {"instances": null, "block_devices": []},
        "pci_devices": [],
        "warnings": []
    }))
    .unwrap();
    h.mediated_devices.parents = vec![
        MdevParent {
            address: "0000:84:00.0".into(),
            types: vec![
                gpu_type("nvidia-35", Some(14)),
                gpu_type("nvidia-36", Some(0)),
            ],
        },
        MdevParent {
            address: "0000:85:00.0".into(),
            types: vec![
                gpu_type("nvidia-35", Some(16)),
                gpu_type("nvidia-36", Some(16)),
            ],
        },
    ];
    h.mediated_devices.devices = ["b", "a"]
        .iter()
        .map(|c| MdevDevice {
            uuid: format!("{}-0000-0000-0000-000000000000", c.repeat(8)),
            parent: Some("0000:84:00.0".into()),
            type_id: Some("nvidia-35".into()),
        })
        .collect();
    h
}

fn policy(types: &[(&str, &[&str], Option<u64>)]) -> MdevPolicy {
    MdevPolicy {
        types: types
            .iter()
            .map(|(t, addrs, max)| EnabledMdevType {
                type_id: t.to_string(),
                device_addresses: addrs.iter().map(|a| a.to_string()).collect(),
                class: "VGPU".into(),
                max_instances: *max,
            })
            .collect(),
        ..MdevPolicy::default()
    }
}

fn totals(p: &[NestedProvider]) -> Vec<(String, i64)> {
    p.iter().map(|p| (p.key.name_suffix(), p.total)).collect()
}

#[test]
fn a_parent_offers_its_existing_mdevs_and_what_it_can_still_create() {
    let mut w = Vec::new();
    let p = nested_providers(&host(), &policy(&[("nvidia-35", &[], None)]), &mut w);
    assert_eq!(
        totals(&p),
        [
            ("pci_0000_84_00_0".into(), 16),
            ("pci_0000_85_00_0".into(), 16)
        ]
    );
    assert!(w.is_empty(), "{w:?}");
    assert_eq!(p[0].max_unit, 16);
    assert_eq!(p[0].mdev_type.as_deref(), Some("nvidia-35"));
}

#[test]
fn a_parent_configured_for_another_type_counts_only_that_type() {
    let mut w = Vec::new();
    // 84:00.0 is given nvidia-36: no such mdevs and none available there.
    let p = nested_providers(
        &host(),
        &policy(&[("nvidia-36", &["0000:84:00.0", "0000:85:00.0"], None)]),
        &mut w,
    );
    assert_eq!(totals(&p), [("pci_0000_85_00_0".into(), 16)]);
}

#[test]
fn a_parent_whose_instances_would_pass_max_instances_offers_only_what_exists() {
    let mut w = Vec::new();
    // 2 exist on 84; 20 allowed: 84 gets 2 + 14 = 16, 85's 16 would pass 20: none offered
    // (Nova's rule; capping at the 4 left would be kinder, but the scheduler would then see
    // another inventory than nova-compute gives it).
    let p = nested_providers(&host(), &policy(&[("nvidia-35", &[], Some(20))]), &mut w);
    assert_eq!(totals(&p), [("pci_0000_84_00_0".into(), 16)]);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("0000:85:00.0") && w[0].contains("max_instances 20"),
        "{w:?}"
    );
    // A limit below what exists: the existing mdevs stay counted (Nova zeroes the parent,
    // which Placement refuses while they are allocated), none more is offered.
    let mut w = Vec::new();
    let p = nested_providers(&host(), &policy(&[("nvidia-35", &[], Some(1))]), &mut w);
    assert_eq!(totals(&p), [("pci_0000_84_00_0".into(), 2)]);
    assert_eq!(w.len(), 2, "{w:?}");
}

#[test]
fn parents_no_enabled_type_applies_to_are_left_alone() {
    let mut w = Vec::new();
    let offer = nested_offer(
        &host(),
        &policy(&[("nvidia-35", &["0000:84:00.0"], None)]),
        &mut w,
    );
    assert_eq!(totals(&offer.providers), [("pci_0000_84_00_0".into(), 16)]);
    assert_eq!(offer.left_alone, [NestedKey::Mdev("0000:85:00.0".into())]);
    let offer = nested_offer(&host(), &MdevPolicy::default(), &mut w);
    assert!(offer.providers.is_empty());
    assert_eq!(offer.left_alone.len(), 2);
}

#[test]
fn sev_contexts_come_from_the_kernel_or_the_configuration_whichever_is_lower() {
    let mut h = host();
    h.memory_encryption.sev = Some(true);
    h.memory_encryption.sev_es = Some(true);
    h.memory_encryption.sev_guests = Some(410);
    h.memory_encryption.sev_es_guests = Some(99);
    let mut w = Vec::new();
    let mut pol = MdevPolicy::default();
    let p = nested_providers(&h, &pol, &mut w);
    assert_eq!(
        totals(&p),
        [("amd_sev".into(), 410), ("amd_sev_es".into(), 99)]
    );
    assert!(p.iter().all(|p| p.max_unit == 1));
    assert!(p[1].traits.contains("HW_CPU_X86_AMD_SEV_ES"));
    pol.num_memory_encrypted_guests = Some(15);
    assert_eq!(nested_providers(&h, &pol, &mut w)[0].total, 15);
    // SNP on: SEV-ES is not offered, SNP takes the SEV-ES contexts (Nova's rule).
    h.memory_encryption.sev_snp = Some(true);
    let p = nested_providers(&h, &MdevPolicy::default(), &mut w);
    assert_eq!(
        totals(&p),
        [("amd_sev".into(), 410), ("amd_sev_snp".into(), 99)]
    );
    // The kernel does not say and nothing is configured: not offered, with a warning.
    h.memory_encryption.sev_guests = None;
    h.memory_encryption.sev_snp = Some(false);
    h.memory_encryption.sev_es = Some(false);
    let mut w = Vec::new();
    assert!(nested_providers(&h, &MdevPolicy::default(), &mut w).is_empty());
    assert!(w[0].contains("num_memory_encrypted_guests"), "{w:?}");
}

#[test]
fn the_class_inventory_adds_nested_units_to_the_root() {
    let mut w = Vec::new();
    let p = nested_providers(&host(), &policy(&[("nvidia-35", &[], None)]), &mut w);
    let all = class_inventory(&BTreeMap::new(), &p);
    assert_eq!(all[&ResourceClass::Vgpu].total, 32);
    // One request's vGPUs come from one parent: the largest unit is a parent's.
    assert_eq!(all[&ResourceClass::Vgpu].max_unit, 16);
}

#[test]
fn problems_name_unknown_types_and_addresses() {
    let pol = policy(&[
        ("nvidia-99", &[], None),
        ("nvidia-36", &["0000:84:00.0", "0000:99:00.0"], None),
    ]);
    let problems = host_mismatches(&host(), &pol);
    let keys: Vec<&str> = problems.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        [
            "devices.enabled_mdev_types[0]",
            "mdev.nvidia-36.device_addresses[1]"
        ]
    );
    assert!(
        problems[0].1.contains("nvidia-35, nvidia-36"),
        "{}",
        problems[0].1
    );
    assert!(
        problems[1].1.contains("0000:84:00.0, 0000:85:00.0"),
        "{}",
        problems[1].1
    );
}

fn input<'a>(
    requested: &'a BTreeMap<ResourceClass, i64>,
    usage: &'a NestedUsage,
    mdevs: &'a crate::probes::mdev::MediatedDevices,
) -> AssignInput<'a> {
    AssignInput {
        requested,
        model: None,
        mapping: None,
        usage,
        mdevs,
        pmem: &[],
        salt: "instance-1/build",
    }
}

#[test]
fn vgpus_go_to_the_freest_parent_and_reuse_unassigned_mdevs() {
    let h = host();
    let mut w = Vec::new();
    let p = nested_providers(&h, &policy(&[("nvidia-35", &[], None)]), &mut w);
    let want = BTreeMap::from([(ResourceClass::Vgpu, 2)]);
    let mut usage = NestedUsage::default();
    // Equal free: the first parent; its two mdevs exist and are given, lowest uuid first.
    let a = assign(&p, &input(&want, &usage, &h.mediated_devices)).unwrap();
    assert_eq!(a.units.len(), 1);
    assert_eq!(a.units[0].provider, NestedKey::Mdev("0000:84:00.0".into()));
    assert_eq!(a.mdevs.len(), 2);
    assert!(a.mdevs.iter().all(|m| m.existing));
    assert!(a.mdevs[0].uuid.starts_with("aaaaaaaa"));
    usage.add(&a);
    // Now 85:00.0 is the freest; it has no mdevs: new uuids, stable for the same salt.
    let b = assign(&p, &input(&want, &usage, &h.mediated_devices)).unwrap();
    assert_eq!(b.units[0].provider, NestedKey::Mdev("0000:85:00.0".into()));
    assert!(b.mdevs.iter().all(|m| !m.existing));
    assert_ne!(b.mdevs[0].uuid, b.mdevs[1].uuid);
    assert_eq!(
        b,
        assign(&p, &input(&want, &usage, &h.mediated_devices)).unwrap()
    );
}

#[test]
fn a_request_takes_one_parent_and_one_no_parent_holds_is_refused_naming_them() {
    let h = host();
    let mut w = Vec::new();
    let p = nested_providers(&h, &policy(&[("nvidia-35", &[], None)]), &mut w);
    let usage = NestedUsage::default();
    let want = BTreeMap::from([(ResourceClass::Vgpu, 12)]);
    let a = assign(&p, &input(&want, &usage, &h.mediated_devices)).unwrap();
    assert_eq!(a.units.len(), 1);
    assert_eq!(a.units[0].amount, 12);
    assert_eq!(a.mdevs.len(), 12);
    let mut used = NestedUsage::default();
    used.add(&a);
    // 4 left on one parent, 16 on the other: 13 fits on the other only.
    let want = BTreeMap::from([(ResourceClass::Vgpu, 13)]);
    let b = assign(&p, &input(&want, &used, &h.mediated_devices)).unwrap();
    assert_ne!(b.units[0].provider, a.units[0].provider);
    used.add(&b);
    // 4 and 3 left: 5 fits on neither, though 7 are free in all (Placement would not split it).
    let want = BTreeMap::from([(ResourceClass::Vgpu, 5)]);
    let Err(AssignError::Shortfall(s)) = assign(&p, &input(&want, &used, &h.mediated_devices))
    else {
        panic!("expected a shortfall");
    };
    assert_eq!((s[0].requested, s[0].used, s[0].capacity), (5, 25, 32));
    assert!(s[0].provider.as_deref().unwrap().contains("0000:85:00.0"));
}

#[test]
fn a_new_mdev_uuid_is_never_one_given_or_on_the_host() {
    let mut h = host();
    let mut w = Vec::new();
    let p = nested_providers(&h, &policy(&[("nvidia-35", &[], None)]), &mut w);
    let want = BTreeMap::from([(ResourceClass::Vgpu, 2)]);
    // What a claim with this salt would be given on the second parent (no mdevs there)...
    let mut full_first = NestedUsage::default();
    full_first
        .used
        .insert(NestedKey::Mdev("0000:84:00.0".into()), 16);
    let first = assign(&p, &input(&want, &full_first, &h.mediated_devices)).unwrap();
    // ...is on the host now (created for that claim, then left when it was released), and one
    // of them is given to someone else: the same salt must not give either again.
    h.mediated_devices
        .devices
        .push(crate::probes::mdev::MdevDevice {
            uuid: first.mdevs[0].uuid.clone(),
            parent: Some("0000:84:00.0".into()),
            type_id: Some("nvidia-99".into()),
        });
    let mut held = full_first.clone();
    held.mdevs.insert(first.mdevs[1].uuid.clone());
    let again = assign(&p, &input(&want, &held, &h.mediated_devices)).unwrap();
    for m in &again.mdevs {
        assert!(
            !first.mdevs.iter().any(|f| f.uuid == m.uuid),
            "{} given again",
            m.uuid
        );
    }
    assert_ne!(again.mdevs[0].uuid, again.mdevs[1].uuid);
}

#[test]
fn placements_choice_is_followed_and_checked() {
    let h = host();
    let mut w = Vec::new();
    let p = nested_providers(&h, &policy(&[("nvidia-35", &[], None)]), &mut w);
    let want = BTreeMap::from([(ResourceClass::Vgpu, 1)]);
    let usage = NestedUsage::default();
    let mapping = BTreeMap::from([(
        NestedKey::Mdev("0000:85:00.0".into()),
        BTreeMap::from([(ResourceClass::Vgpu, 1)]),
    )]);
    let mut i = input(&want, &usage, &h.mediated_devices);
    i.mapping = Some(&mapping);
    let a = assign(&p, &i).unwrap();
    assert_eq!(a.units[0].provider, NestedKey::Mdev("0000:85:00.0".into()));
    let wrong = BTreeMap::from([(
        NestedKey::Mdev("0000:85:00.0".into()),
        BTreeMap::from([(ResourceClass::Vgpu, 2)]),
    )]);
    i.mapping = Some(&wrong);
    assert!(matches!(assign(&p, &i), Err(AssignError::Mapping(_))));
}

#[test]
fn an_encryption_model_takes_its_own_contexts() {
    let mut h = host();
    h.memory_encryption.sev = Some(true);
    h.memory_encryption.sev_es = Some(true);
    h.memory_encryption.sev_guests = Some(4);
    h.memory_encryption.sev_es_guests = Some(1);
    let mut w = Vec::new();
    let p = nested_providers(&h, &MdevPolicy::default(), &mut w);
    let want = BTreeMap::from([(ResourceClass::MemEncryptionContext, 1)]);
    let mut usage = NestedUsage::default();
    let mut i = input(&want, &usage, &h.mediated_devices);
    i.model = Some(EncryptionModel::AmdSevEs);
    let a = assign(&p, &i).unwrap();
    assert_eq!(
        a.units[0].provider,
        NestedKey::MemEncryption(EncryptionModel::AmdSevEs)
    );
    usage.add(&a);
    let mut i = input(&want, &usage, &h.mediated_devices);
    i.model = Some(EncryptionModel::AmdSevEs);
    let Err(AssignError::Shortfall(s)) = assign(&p, &i) else {
        panic!("the one SEV-ES context is taken");
    };
    assert_eq!(s[0].provider.as_deref(), Some("amd-sev-es contexts"));
    i.model = Some(EncryptionModel::AmdSevSnp);
    let Err(AssignError::Shortfall(s)) = assign(&p, &i) else {
        panic!("no SNP here");
    };
    assert!(s[0].provider.as_deref().unwrap().contains("not offered"));
    // Plain SEV still has room.
    i.model = Some(EncryptionModel::AmdSev);
    assert!(assign(&p, &i).is_ok());
}
