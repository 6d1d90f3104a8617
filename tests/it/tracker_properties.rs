//! Property tests of claim accounting: random sequences of claims, aborts, incoming moves,
//! confirms, reverts, deletes, audits with hot-plugged and unplugged devices, applied to the
//! tracker and, change by change, to a real SQLite store.
//!
//! After every step:
//! - usage equals a separate, naive model of what should be counted;
//! - used <= capacity for every class, and for every vGPU parent and encryption model;
//! - no mediated device is given twice, and each claim holds as many as it asked vGPUs;
//! - PF/VF states are consistent (an allocated VF's PF is unavailable, an allocated PF's VFs are
//!   unavailable, nothing else is unavailable) and every allocated device belongs to a claim;
//! - pool counts add up to the available devices;
//! - every Placement consumer held before a step and not after it is recorded as released with
//!   that step's changes, and nothing held is recorded as released;
//! - a refused operation changed nothing.
//!
//! At the end, reopening the store gives the tracker's state back, and an audit rebuilds the
//! same usage.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use rtrack::config::Config;
use rtrack::inventory::resources::ResourceClass;
use rtrack::probes::pci::{PciAddress, PciDevType};
use rtrack::probes::{probe_host, HostInventory, HostRoot, ProbeOptions};
use rtrack::store::Store;
use rtrack::tracker::model::{FlavorUsage, HostNames, InstanceRequest, PciRequest};
use rtrack::tracker::pci::{DeviceStatus, NumaPolicy};
use rtrack::tracker::{
    InstanceInfo, InstanceUpdate, MoveRequest, Tracker, TrackerSettings, TrackerState,
};
use rtrack_fixtures::real::scratch_dir;
use rtrack_fixtures::synthetic::{SyntheticHost, SyntheticPf};

/// The operator's licences (provider.yaml on the compute node).
const LICENCES: i64 = 2;
const LICENCE_YAML: &str = "meta:\n  schema_version: '1.0'\nproviders:\n  - identification:\n      uuid: $COMPUTE_NODE\n    inventories:\n      additional:\n        - CUSTOM_LICENCE: {total: 2}\n";

const CONFIG: &str = r#"
[resources]
cpu_allocation_ratio = 1.5
reserved_host_memory_mb = 512

[[pci.device_spec]]
vendor_id = "8086"

[devices]
enabled_mdev_types = ["nvidia-35"]
num_memory_encrypted_guests = 3
"#;

/// A GPU pair and SEV grafted onto a probed host: 84:00.0 offers 3 more `nvidia-35` and has
/// one (unassigned), 85:00.0 offers 2 (VGPU 6 in all); 3 SEV and 2 SEV-ES contexts.
fn add_vgpus_and_sev(inv: &mut HostInventory) {
    use rtrack::probes::mdev::{MdevDevice, MdevParent, MdevType};
    let parent = |address: &str, available| MdevParent {
        address: address.into(),
        types: vec![MdevType {
            type_id: "nvidia-35".into(),
            name: None,
            device_api: Some("vfio-pci".into()),
            available_instances: Some(available),
            description: None,
        }],
    };
    inv.mediated_devices.parents = vec![parent("0000:84:00.0", 3), parent("0000:85:00.0", 2)];
    inv.mediated_devices.devices = vec![MdevDevice {
        uuid: "4b20d080-1b54-4048-85b3-a6a62d165c01".into(),
        parent: Some("0000:84:00.0".into()),
        type_id: Some("nvidia-35".into()),
    }];
    let enc = &mut inv.memory_encryption;
    enc.sev = Some(true);
    enc.sev_es = Some(true);
    enc.sev_guests = Some(509);
    enc.sev_es_guests = Some(2);
}

/// Three host variants the audit switches between: the small SR-IOV host, the same with PF
/// 3b:00.0's VFs gone, and with an extra PF.
fn hosts() -> Vec<HostInventory> {
    let mut variants = Vec::new();
    let mut a = SyntheticHost::small();
    a.pfs
        .push(SyntheticPf::e810("0000:86:00.0", 3, 0, Some("iavf")));
    let mut b = SyntheticHost::small();
    b.pfs[0].num_vfs = 2;
    for h in [SyntheticHost::small(), a, b] {
        let dir = scratch_dir();
        h.write(dir.path());
        let mut opts = ProbeOptions::default();
        opts.disk.instances_path = Some(dir.path().to_path_buf());
        let mut inv = probe_host(&HostRoot::under(dir.path()), &opts).unwrap();
        let fs = inv.disks.instances.as_mut().unwrap();
        fs.total_gb = 200;
        fs.free_gb = 200;
        add_vgpus_and_sev(&mut inv);
        variants.push(inv);
    }
    variants
}

#[derive(Debug, Clone)]
enum Op {
    Claim {
        n: u8,
        vcpus: i64,
        mem: i64,
        disk: i64,
        vfs: u32,
        pfs: u32,
        policy: u8,
        vgpus: i64,
        sev: u8,
    },
    Abort {
        n: u8,
    },
    MoveIn {
        n: u8,
        vcpus: i64,
        vfs: u32,
        vgpus: i64,
    },
    Confirm {
        n: u8,
    },
    Revert {
        n: u8,
    },
    Delete {
        n: u8,
        // Asks for the switch to a new flavor too: refused (changing nothing) unless the
        // instance is being resized.
        switch_flavor: bool,
    },
    Audit {
        host: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => ((0u8..12, 1i64..5, 256i64..4096, 0i64..40), (0u32..4, 0u32..2, 0u8..4, 0i64..4, 0u8..3))
            .prop_map(|((n, vcpus, mem, disk), (vfs, pfs, policy, vgpus, sev))| Op::Claim { n, vcpus, mem, disk, vfs, pfs, policy, vgpus, sev }),
        1 => (0u8..12).prop_map(|n| Op::Abort { n }),
        2 => (0u8..12, 1i64..5, 0u32..3, 0i64..3).prop_map(|(n, vcpus, vfs, vgpus)| Op::MoveIn { n, vcpus, vfs, vgpus }),
        1 => (0u8..12).prop_map(|n| Op::Confirm { n }),
        1 => (0u8..12).prop_map(|n| Op::Revert { n }),
        1 => (0u8..12, any::<bool>()).prop_map(|(n, switch_flavor)| Op::Delete { n, switch_flavor }),
        1 => (0usize..3).prop_map(|host| Op::Audit { host }),
    ]
}

fn uuid(n: u8) -> String {
    format!("00000000-0000-4000-8000-{n:012}")
}

fn flavor(id: i64, vcpus: i64, mem: i64, disk: i64) -> FlavorUsage {
    FlavorUsage {
        id,
        flavorid: format!("f{id}"),
        name: None,
        vcpus,
        memory_mb: mem,
        root_gb: disk,
        ephemeral_gb: 0,
        swap_mb: 0,
        cpus: None,
        extra_resources: Default::default(),
        mem_encryption_model: None,
        extra_specs: BTreeMap::new(),
    }
}

/// `flavor` asking `vgpus` VGPU, for `sev` 1 or 2 an SEV or SEV-ES context, and `licences` of
/// the operator's class.
fn flavor_with(
    id: i64,
    vcpus: i64,
    mem: i64,
    disk: i64,
    vgpus: i64,
    sev: u8,
    licences: i64,
) -> FlavorUsage {
    use rtrack::tracker::nested::EncryptionModel;
    let mut f = flavor(id, vcpus, mem, disk);
    if licences > 0 {
        f.extra_resources.insert(
            ResourceClass::from_name("CUSTOM_LICENCE").unwrap(),
            licences,
        );
    }
    if vgpus > 0 {
        f.extra_resources.insert(ResourceClass::Vgpu, vgpus);
    }
    if sev > 0 {
        f.extra_resources
            .insert(ResourceClass::MemEncryptionContext, 1);
        f.mem_encryption_model = Some(if sev == 1 {
            EncryptionModel::AmdSev
        } else {
            EncryptionModel::AmdSevEs
        });
    }
    f
}

fn pci(n: u8, kind: &str, count: u32, policy: NumaPolicy) -> PciRequest {
    let (product, dev_type) = if kind == "pf" {
        ("1592", "type-PF")
    } else {
        ("1889", "type-VF")
    };
    PciRequest {
        request_id: format!("{}-{kind}", uuid(n)),
        count,
        specs: vec![[
            ("vendor_id", "8086"),
            ("product_id", product),
            ("dev_type", dev_type),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()],
        alias_name: Some(kind.into()),
        numa_policy: policy,
        requester_id: None,
        rp_uuids: Vec::new(),
        devices: Vec::new(),
    }
}

/// What one instance counts: vcpus, memory, disk, vGPUs, encryption contexts, and the
/// operator's provider.yaml class (CUSTOM_LICENCE).
type Counted = (i64, i64, i64, i64, i64, i64);

/// The naive model: what should be counted, per instance.
#[derive(Debug, Default, Clone)]
struct Model {
    here: BTreeMap<String, Counted>,
    incoming: BTreeMap<i64, (String, Counted)>,
}

impl Model {
    fn used(&self) -> Counted {
        let mut t = (0, 0, 0, 0, 0, 0);
        for v in self
            .here
            .values()
            .chain(self.incoming.values().map(|(_, v)| v))
        {
            t.0 += v.0;
            t.1 += v.1;
            t.2 += v.2;
            t.3 += v.3;
            t.4 += v.4;
            t.5 += v.5;
        }
        t
    }
}

fn check_invariants(t: &Tracker, model: &Model) {
    let usage = t.usage();
    let (v, m, d, g, e, l) = model.used();
    assert_eq!(usage.used(ResourceClass::Vcpu), v, "VCPU usage");
    assert_eq!(usage.used(ResourceClass::MemoryMb), m, "MEMORY_MB usage");
    assert_eq!(usage.used(ResourceClass::DiskGb), d, "DISK_GB usage");
    assert_eq!(usage.used(ResourceClass::Vgpu), g, "VGPU usage");
    assert_eq!(
        usage.used(ResourceClass::MemEncryptionContext),
        e,
        "MEM_ENCRYPTION_CONTEXT usage"
    );
    let licence = ResourceClass::from_name("CUSTOM_LICENCE").unwrap();
    assert_eq!(usage.used(licence.clone()), l, "CUSTOM_LICENCE usage");
    assert!(
        l <= LICENCES,
        "CUSTOM_LICENCE over its total: {l} of {LICENCES}"
    );
    // Per provider below the compute node: within its total; each consumer holds what it
    // asked; no mdev given twice.
    let nested = t.nested_usage(&usage);
    for p in &t.view().nested {
        let used = nested.used.get(&p.key).copied().unwrap_or(0);
        assert!(
            used <= p.total,
            "{} over its total: {used} of {}",
            p.key,
            p.total
        );
    }
    let mut mdevs = BTreeSet::new();
    for c in &usage.consumers {
        let held = |class: &ResourceClass| -> i64 {
            c.nested
                .iter()
                .flat_map(|n| n.units.iter())
                .filter(|u| &u.class == class)
                .map(|u| u.amount)
                .sum()
        };
        for class in [ResourceClass::Vgpu, ResourceClass::MemEncryptionContext] {
            assert_eq!(
                held(&class),
                c.resources.get(&class).copied().unwrap_or(0),
                "{} holds other {class} than it asked",
                c.instance_uuid
            );
        }
        for m in c.nested.iter().flat_map(|n| n.mdevs.iter()) {
            assert!(mdevs.insert(m.uuid.clone()), "mdev {} given twice", m.uuid);
        }
        assert_eq!(
            c.nested.as_ref().map_or(0, |n| n.mdevs.len()) as i64,
            held(&ResourceClass::Vgpu)
        );
    }
    for (class, inv) in t.inventory() {
        assert!(
            usage.used(class.clone()) <= inv.capacity(),
            "{class} over capacity"
        );
    }
    let devs = &t.state().devices;
    let busy = |s: DeviceStatus| {
        matches!(
            s,
            DeviceStatus::Allocated | DeviceStatus::Claimed | DeviceStatus::Reserved
        )
    };
    let busy_pfs: BTreeSet<PciAddress> = devs
        .values()
        .filter(|d| d.dev_type == PciDevType::Pf && busy(d.status))
        .map(|d| d.address)
        .collect();
    let pfs_of_busy_vfs: BTreeSet<PciAddress> = devs
        .values()
        .filter(|d| d.dev_type.is_child() && busy(d.status))
        .filter_map(|d| d.parent_addr)
        .collect();
    for d in devs.values() {
        match d.status {
            DeviceStatus::Allocated | DeviceStatus::Claimed => {
                assert!(d.owner.is_some(), "{} busy without owner", d.address);
                let owner = &d.owner.as_ref().unwrap().instance_uuid;
                assert!(
                    t.state().instances.contains_key(owner),
                    "{} owned by unknown {owner}",
                    d.address
                );
            }
            DeviceStatus::Unavailable => {
                assert!(d.owner.is_none());
                let blocked = match d.dev_type {
                    PciDevType::Pf => pfs_of_busy_vfs.contains(&d.address),
                    PciDevType::Vf | PciDevType::Vdpa => {
                        d.parent_addr.is_some_and(|p| busy_pfs.contains(&p))
                    }
                    PciDevType::Pci => false,
                };
                assert!(blocked, "{} unavailable for no reason", d.address);
            }
            DeviceStatus::Available => {
                assert!(d.owner.is_none());
                assert!(
                    !pfs_of_busy_vfs.contains(&d.address),
                    "PF {} available while a VF is busy",
                    d.address
                );
                assert!(
                    !d.parent_addr.is_some_and(|p| busy_pfs.contains(&p)),
                    "VF {} available while its PF is busy",
                    d.address
                );
            }
            DeviceStatus::Unclaimable => panic!("{} unclaimable outside a claim", d.address),
            DeviceStatus::Reserved => {
                assert!(d.owner.is_none(), "{} reserved with an owner", d.address);
                assert!(
                    d.tags.get("one_time_use").map(String::as_str) == Some("true"),
                    "{} reserved but not one-time-use",
                    d.address
                );
            }
        }
    }
    let available = devs
        .values()
        .filter(|d| d.status == DeviceStatus::Available)
        .count();
    let pooled: usize = t.pools().iter().map(|p| p.count()).sum();
    assert_eq!(pooled, available, "pool counts vs available devices");
    // Every claim's devices are owned by its instance.
    for c in t
        .state()
        .claims
        .values()
        .chain(t.state().move_claims.values())
    {
        for a in &c.assignments {
            let d = &devs[&a.address];
            assert_eq!(
                d.owner.as_ref().map(|o| o.instance_uuid.as_str()),
                Some(c.instance_uuid.as_str())
            );
        }
    }
}

/// Every Placement consumer held before and not now was released (recorded); nothing held now
/// is recorded as released.
fn check_releases(t: &Tracker, held_before: &mut BTreeSet<uuid::Uuid>) {
    let held: BTreeSet<uuid::Uuid> = t
        .usage()
        .consumers
        .iter()
        .filter_map(|c| c.holder.uuid.parse().ok())
        .collect();
    let released: BTreeSet<uuid::Uuid> = t.state().released_consumers.keys().copied().collect();
    assert!(
        held.is_disjoint(&released),
        "held and released at once: {:?}",
        held.intersection(&released).collect::<Vec<_>>()
    );
    for gone in held_before.difference(&held) {
        assert!(
            released.contains(gone),
            "{gone} was held, is not, and was not recorded as released"
        );
    }
    *held_before = held;
}

fn run(ops: Vec<Op>, hosts: &[HostInventory]) {
    let f = std::path::Path::new("props.toml");
    let mut cfg = Config::parse(CONFIG, f).unwrap().validate(f).unwrap();
    cfg.provider_configs =
        rtrack::config::provider_yaml::parse(LICENCE_YAML, std::path::Path::new("licence.yaml"))
            .unwrap();
    let settings = TrackerSettings {
        policy: cfg.into(),
        names: HostNames {
            host: "cmp1".into(),
            node: "cmp1".into(),
        },
        node_uuid: "11111111-2222-3333-4444-555555555555".into(),
        node_created_at: time::OffsetDateTime::UNIX_EPOCH,
    };
    let mut t = Tracker::new(settings, hosts[0].clone(), TrackerState::default());
    let db_dir = scratch_dir();
    let db = db_dir.path().join("rtrack.sqlite");
    let mut store = Store::open(&db).unwrap();
    let (_, changes) = t.audit(hosts[0].clone(), time::OffsetDateTime::UNIX_EPOCH);
    store.commit(&[changes]).unwrap();
    let mut model = Model::default();
    let mut held_before: BTreeSet<uuid::Uuid> = BTreeSet::new();
    let mut next_migration = 100;
    let now = 1_000;
    for op in ops {
        let before = t.state().clone();
        let result = match op {
            Op::Claim {
                n,
                vcpus,
                mem,
                disk,
                vfs,
                pfs,
                policy,
                vgpus,
                sev,
            } => {
                let mut pci_reqs = Vec::new();
                let policy = [
                    NumaPolicy::Legacy,
                    NumaPolicy::Required,
                    NumaPolicy::Preferred,
                    NumaPolicy::Socket,
                ][policy as usize];
                if pfs > 0 {
                    pci_reqs.push(pci(n, "pf", pfs, policy));
                }
                if vfs > 0 {
                    pci_reqs.push(pci(n, "vf", vfs, policy));
                }
                // Every third instance holds one of the operator's licences.
                let licences = i64::from(n % 3 == 0);
                let req = InstanceRequest {
                    flavor: flavor_with(1, vcpus, mem, disk, vgpus, sev, licences),
                    is_bfv: false,
                    pci_requests: pci_reqs,
                    numa: None,
                };
                let info = InstanceInfo {
                    uuid: uuid(n),
                    vm_state: Some("active".into()),
                    ..Default::default()
                };
                t.instance_claim(&info, &req, now, false).map(|(o, c)| {
                    if !o.existing {
                        model.here.insert(
                            uuid(n),
                            (vcpus, mem, disk, vgpus, i64::from(sev > 0), licences),
                        );
                    }
                    c
                })
            }
            Op::Abort { n } => {
                let moving = t
                    .state()
                    .move_claims
                    .iter()
                    .find(|(_, c)| c.instance_uuid == uuid(n))
                    .map(|(id, _)| *id);
                t.abort(&uuid(n)).inspect(|_| {
                    if model.here.remove(&uuid(n)).is_none() {
                        if let Some(id) = moving {
                            model.incoming.remove(&id);
                        }
                    }
                })
            }
            Op::MoveIn {
                n,
                vcpus,
                vfs,
                vgpus,
            } => {
                let id = next_migration;
                let licences = i64::from(n % 2 == 0);
                next_migration += 1;
                let current = InstanceRequest {
                    flavor: flavor(1, 1, 512, 10),
                    is_bfv: false,
                    pci_requests: vec![],
                    numa: None,
                };
                let new = InstanceRequest {
                    flavor: flavor_with(2, vcpus, 1024, 20, vgpus, 0, licences),
                    is_bfv: false,
                    pci_requests: if vfs > 0 {
                        vec![pci(n, "vf", vfs, NumaPolicy::Legacy)]
                    } else {
                        vec![]
                    },
                    numa: None,
                };
                let mv = MoveRequest {
                    current_numa: None,
                    instance: InstanceInfo {
                        uuid: uuid(n),
                        host: Some("cmp0".into()),
                        node: Some("cmp0".into()),
                        vm_state: Some("active".into()),
                        ..Default::default()
                    },
                    current: Some(current),
                    new,
                    move_type: None,
                    migration_id: Some(id),
                    migration_uuid: None,
                    source_compute: None,
                    source_node: None,
                    dest_compute: None,
                    dest_node: None,
                };
                t.move_claim(&mv, now, false).map(|(_, c)| {
                    model
                        .incoming
                        .insert(id, (uuid(n), (vcpus, 1024, 20, vgpus, 0, licences)));
                    c
                })
            }
            Op::Confirm { n } | Op::Revert { n } => {
                let id = model
                    .incoming
                    .iter()
                    .find(|(_, (u, _))| *u == uuid(n))
                    .map(|(id, _)| *id)
                    .unwrap_or(99);
                let confirm = matches!(op, Op::Confirm { .. });
                let r = if confirm {
                    t.confirm_move(id, now)
                } else {
                    t.revert_move(id, now)
                };
                r.inspect(|_| {
                    if let Some((u, usage)) = model.incoming.remove(&id) {
                        if confirm {
                            model.here.insert(u, usage);
                        }
                    }
                })
            }
            Op::Delete { n, switch_flavor } => t
                .update_instance(
                    &uuid(n),
                    &InstanceUpdate {
                        vm_state: Some("deleted".into()),
                        apply_new_flavor: switch_flavor,
                        ..Default::default()
                    },
                )
                .inspect(|_| {
                    model.here.remove(&uuid(n));
                    model.incoming.retain(|_, (u, _)| *u != uuid(n));
                }),
            Op::Audit { host } => Ok(t
                .audit(hosts[host].clone(), time::OffsetDateTime::UNIX_EPOCH)
                .1),
        };
        match result {
            Ok(mut changes) => {
                // As the service does: the releases are recorded with the operation.
                t.note_releases(&mut changes, now);
                store.commit(&[changes]).unwrap();
            }
            Err(_) => assert_eq!(t.state(), &before, "a refused operation changed the state"),
        }
        check_invariants(&t, &model);
        check_releases(&t, &mut held_before);
    }
    // What was committed change by change is the state.
    drop(store);
    let reloaded = Store::open(&db).unwrap().load().unwrap();
    assert_eq!(
        &reloaded,
        t.state(),
        "store and tracker disagree after reopening"
    );
    // An audit on the same host rebuilds the same usage.
    let usage = t.usage();
    let host = t.host().clone();
    t.audit(host, time::OffsetDateTime::UNIX_EPOCH);
    assert_eq!(t.usage().used, usage.used);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn accounting_holds_under_random_operations(ops in proptest::collection::vec(op(), 1..60)) {
        thread_local!(static HOSTS: Vec<HostInventory> = hosts());
        HOSTS.with(|h| run(ops, h));
    }
}
