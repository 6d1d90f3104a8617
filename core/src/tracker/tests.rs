//! Scenario tests for Nova's rules. Expected outcomes come from the reference notes on Nova's
//! resource tracker (claims, migration statuses, PCI states and policies), not from this code.

use rtrack_fixtures::real::scratch_dir;
use rtrack_fixtures::synthetic::{SyntheticHost, SyntheticPf};

use super::model::{FlavorUsage, HostNames, InstanceRequest, PciRequest};
use super::ops::{ClaimOutcome, InstanceInfo, InstanceUpdate, MoveRequest, MoveType};
use super::pci::{DeviceStatus, NumaPolicy};
use super::ClaimError;
use crate::config::{Config, ValidConfig};
use crate::inventory::resources::ResourceClass;
use crate::probes::{probe_host, HostInventory, HostRoot, ProbeOptions};
use crate::tracker::*;

const CONFIG: &str = r#"
[resources]
cpu_allocation_ratio = 2.0
reserved_host_memory_mb = 1024

[[pci.device_spec]]
vendor_id = "8086"
product_id = "1889"
physical_network = "physnet1"

[[pci.device_spec]]
vendor_id = "8086"
product_id = "1592"

[[pci.alias]]
name = "vf"
vendor_id = "8086"
product_id = "1889"
device_type = "type-VF"

[[pci.alias]]
name = "pf"
vendor_id = "8086"
product_id = "1592"
device_type = "type-PF"
"#;

fn host(h: SyntheticHost) -> HostInventory {
    let dir = scratch_dir();
    h.write(dir.path());
    let mut opts = ProbeOptions::default();
    opts.disk.instances_path = Some(dir.path().to_path_buf());
    let mut inv = probe_host(&HostRoot::under(dir.path()), &opts).unwrap();
    // A fixed instances filesystem, independent of the machine running the tests.
    if let Some(fs) = inv.disks.instances.as_mut() {
        fs.total_gb = 100;
        fs.free_gb = 100;
    }
    inv
}

/// The test configuration with `resources` lines added to its [resources] table.
fn config(resources: &str) -> ValidConfig {
    let text = CONFIG.replacen("[resources]\n", &format!("[resources]\n{resources}\n"), 1);
    let f = std::path::Path::new("test.toml");
    Config::parse(&text, f).unwrap().validate(f).unwrap()
}

/// The settings of host cmp1 under `cfg`.
fn settings_for(cfg: ValidConfig) -> TrackerSettings {
    TrackerSettings {
        policy: cfg.into(),
        names: HostNames {
            host: "cmp1".into(),
            node: "cmp1".into(),
        },
        node_uuid: "11111111-2222-3333-4444-555555555555".into(),
        node_created_at: time::OffsetDateTime::UNIX_EPOCH,
    }
}

/// A neutron port's request: one device on `physnet`, NUMA-affine as `policy` says.
fn port_req(n: u32, physnet: &str, policy: NumaPolicy) -> PciRequest {
    PciRequest {
        request_id: format!("port-req-{n}"),
        count: 1,
        specs: vec![[("physical_network".to_string(), physnet.to_string())].into()],
        alias_name: None,
        numa_policy: policy,
        requester_id: Some(format!("port-{n}")),
        rp_uuids: Vec::new(),
        devices: Vec::new(),
    }
}

fn tracker_with(h: SyntheticHost, extra: &str) -> Tracker {
    let settings = settings_for(config(extra));
    let inv = host(h);
    let mut t = Tracker::new(settings, inv.clone(), TrackerState::default());
    t.audit(inv, time::OffsetDateTime::UNIX_EPOCH);
    t
}

fn tracker() -> Tracker {
    tracker_with(SyntheticHost::small(), "")
}

fn uuid(n: u32) -> String {
    format!("00000000-0000-4000-8000-{n:012}")
}

fn flavor(id: i64, vcpus: i64, mem: i64, disk: i64, extra: &[(&str, &str)]) -> FlavorUsage {
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
        extra_specs: extra
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

fn req(f: FlavorUsage, pci: Vec<PciRequest>) -> InstanceRequest {
    InstanceRequest {
        flavor: f,
        is_bfv: false,
        pci_requests: pci,
        numa: None,
    }
}

/// A one-cell guest with one floating CPU (as `hw:numa_nodes=1` gives).
fn one_cell_guest(memory_mb: i64) -> crate::tracker::numa::GuestTopology {
    crate::tracker::numa::GuestTopology {
        cells: vec![crate::tracker::numa::GuestCell {
            id: 0,
            cpuset: crate::probes::CpuSet::from_ids([0]),
            pcpuset: crate::probes::CpuSet::new(),
            memory_mb,
        }],
        cpu_policy: None,
        thread_policy: None,
        emulator_threads: None,
        pagesize: None,
        networks: Default::default(),
        core_types: None,
    }
}

fn pci(alias: &str, count: u32, policy: NumaPolicy) -> PciRequest {
    let (product, dev_type) = if alias == "pf" {
        ("1592", "type-PF")
    } else {
        ("1889", "type-VF")
    };
    PciRequest {
        request_id: format!("req-{alias}-{count}"),
        count,
        specs: vec![[
            ("vendor_id", "8086"),
            ("product_id", product),
            ("dev_type", dev_type),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()],
        alias_name: Some(alias.into()),
        numa_policy: policy,
        requester_id: None,
        rp_uuids: Vec::new(),
        devices: Vec::new(),
    }
}

fn info(n: u32) -> InstanceInfo {
    InstanceInfo {
        uuid: uuid(n),
        vm_state: Some("active".into()),
        ..InstanceInfo::default()
    }
}

fn claim(t: &mut Tracker, n: u32, r: InstanceRequest) -> Result<ClaimOutcome, ClaimError> {
    t.instance_claim(&info(n), &r, 0, false).map(|(o, _)| o)
}

fn used(t: &Tracker, c: ResourceClass) -> i64 {
    t.usage().used(c)
}

fn count_status(t: &Tracker, s: DeviceStatus) -> usize {
    t.state().devices.values().filter(|d| d.status == s).count()
}

#[test]
fn claims_fit_until_capacity_and_refusals_say_why() {
    let mut t = tracker();
    // 8 CPUs x ratio 2.0 = 16 VCPU; 16384 - 1024 reserved = 15360 MiB; 100 GiB disk.
    assert_eq!(t.inventory()[&ResourceClass::Vcpu].capacity(), 16);
    claim(&mut t, 1, req(flavor(1, 8, 4096, 40, &[]), vec![])).unwrap();
    let before = t.state().clone();
    let e = claim(&mut t, 2, req(flavor(1, 8, 12000, 80, &[]), vec![])).unwrap_err();
    let ClaimError::Refused(r) = &e else {
        panic!("{e}")
    };
    let classes: Vec<ResourceClass> = r.resources.iter().map(|s| s.class.clone()).collect();
    assert_eq!(
        classes,
        vec![ResourceClass::MemoryMb, ResourceClass::DiskGb]
    );
    assert_eq!(
        (
            r.resources[0].requested,
            r.resources[0].used,
            r.resources[0].capacity
        ),
        (12000, 4096, 15360)
    );
    let msg = e.to_string();
    assert!(
        msg.contains("MEMORY_MB requested 12000, used 4096 of capacity 15360 (free 11264)"),
        "{msg}"
    );
    // A refused claim leaves no trace.
    assert_eq!(t.state(), &before);
    claim(&mut t, 3, req(flavor(1, 8, 11264, 60, &[]), vec![])).unwrap();
    assert_eq!(used(&t, ResourceClass::Vcpu), 16);
    assert_eq!(used(&t, ResourceClass::MemoryMb), 15360);
    let e = claim(&mut t, 4, req(flavor(1, 1, 1, 0, &[]), vec![])).unwrap_err();
    assert!(
        e.to_string()
            .contains("VCPU requested 1, used 16 of capacity 16 (free 0)"),
        "{e}"
    );
    // One instance may not have more than the host has (max_unit), whatever the ratio.
    let e = claim(&mut t, 5, req(flavor(1, 9, 1, 0, &[]), vec![])).unwrap_err();
    assert!(
        e.to_string()
            .contains("VCPU requested 9 is more than the largest allowed unit 8"),
        "{e}"
    );
}

#[test]
fn the_same_claim_twice_is_one_claim_and_a_different_one_conflicts() {
    let mut t = tracker();
    let r = req(
        flavor(1, 2, 1024, 10, &[]),
        vec![pci("vf", 1, NumaPolicy::Legacy)],
    );
    let a = claim(&mut t, 1, r.clone()).unwrap();
    let b = claim(&mut t, 1, r.clone()).unwrap();
    assert!(!a.existing && b.existing);
    assert_eq!(a.claim.assignments, b.claim.assignments);
    assert_eq!(used(&t, ResourceClass::Vcpu), 2);
    let e = claim(&mut t, 1, req(flavor(2, 4, 1024, 10, &[]), vec![])).unwrap_err();
    assert!(matches!(e, ClaimError::Conflict { .. }), "{e}");
}

#[test]
fn dry_run_answers_without_claiming() {
    let mut t = tracker();
    let before = t.state().clone();
    let (o, changes) = t
        .instance_claim(
            &info(1),
            &req(
                flavor(1, 2, 1024, 10, &[]),
                vec![pci("vf", 2, NumaPolicy::Legacy)],
            ),
            0,
            true,
        )
        .unwrap();
    assert!(o.dry_run && changes.is_empty());
    assert_eq!(o.claim.assignments.len(), 2);
    assert_eq!(t.state(), &before);
}

#[test]
fn vf_claim_makes_its_pf_unavailable_and_freeing_restores_exactly() {
    let mut t = tracker();
    let start = t.state().clone();
    let pools_before = t.pools();
    let o = claim(
        &mut t,
        1,
        req(
            flavor(1, 1, 512, 1, &[]),
            vec![pci("vf", 1, NumaPolicy::Legacy)],
        ),
    )
    .unwrap();
    let vf = o.claim.assignments[0].address;
    let parent = t.state().devices[&vf].parent_addr.unwrap();
    assert_eq!(t.state().devices[&vf].status, DeviceStatus::Allocated);
    assert_eq!(t.state().devices[&parent].status, DeviceStatus::Unavailable);
    // The PF pool shrank, the VF pool of that PF has one fewer.
    let total = |pools: &[super::pci::Pool]| pools.iter().map(|p| p.count()).sum::<usize>();
    assert_eq!(total(&t.pools()), total(&pools_before) - 2);
    t.abort(&uuid(1)).unwrap();
    // Everything is as before but the order the pools give devices in: the VF and its PF went
    // back last, so each is its pool's next.
    let mut after = t.state().clone();
    for a in [vf, parent] {
        assert!(after.devices[&a].returned > 0, "{a}");
        std::sync::Arc::make_mut(after.devices.get_mut(&a).unwrap()).returned = 0;
    }
    assert_eq!(&after, &start);
}

/// The service's committed view is a clone of the working tracker that then applies each
/// operation's changes: both hold the same records, not copies. A record the working tracker
/// changes is copied there first, so the committed view keeps what was committed.
#[test]
fn the_committed_view_shares_records_with_the_working_tracker() {
    use std::sync::Arc;
    let mut t = tracker();
    let mut committed = t.clone();
    let shared = |a: &Tracker, b: &Tracker| {
        let s = (a.state(), b.state());
        let devices =
            s.0.devices
                .iter()
                .filter(|(k, v)| Arc::ptr_eq(v, &s.1.devices[*k]));
        let instances =
            s.0.instances
                .iter()
                .filter(|(k, v)| Arc::ptr_eq(v, &s.1.instances[*k]));
        let claims =
            s.0.claims
                .iter()
                .filter(|(k, v)| Arc::ptr_eq(v, &s.1.claims[*k]));
        (devices.count(), instances.count(), claims.count())
    };
    let devices = t.state().devices.len();
    assert!(devices > 2);
    assert_eq!(shared(&t, &committed), (devices, 0, 0));
    let r = req(
        flavor(1, 1, 512, 1, &[]),
        vec![pci("vf", 1, NumaPolicy::Legacy)],
    );
    let (o, changes) = t.instance_claim(&info(1), &r, 0, false).unwrap();
    let vf = o.claim.assignments[0].address;
    let pf = t.state().devices[&vf].parent_addr.unwrap();
    // Before the commit: the VF and its PF were copied to change them; the committed view
    // still holds them as they were.
    assert_eq!(
        committed.state().devices[&vf].status,
        DeviceStatus::Available
    );
    assert!(!Arc::ptr_eq(
        &t.state().devices[&vf],
        &committed.state().devices[&vf]
    ));
    committed.apply_committed(None, changes);
    assert_eq!(committed.state(), t.state());
    assert_eq!(shared(&t, &committed), (devices, 1, 1));
    assert!(Arc::ptr_eq(
        &t.state().devices[&pf],
        &committed.state().devices[&pf]
    ));
}

#[test]
fn pf_claim_hides_its_vfs() {
    let mut t = tracker();
    let o = claim(
        &mut t,
        1,
        req(
            flavor(1, 1, 512, 1, &[]),
            vec![pci("pf", 1, NumaPolicy::Legacy)],
        ),
    )
    .unwrap();
    let pf = o.claim.assignments[0].address;
    let vfs: Vec<_> = t
        .state()
        .devices
        .values()
        .filter(|d| d.parent_addr == Some(pf))
        .collect();
    assert!(
        vfs.iter().all(|d| d.status == DeviceStatus::Unavailable),
        "{vfs:?}"
    );
    // The PF chosen is the one without VFs in use and, of equal ones, the plainest pool first.
    let e = claim(
        &mut t,
        2,
        req(
            flavor(1, 1, 512, 1, &[]),
            vec![pci("pf", 3, NumaPolicy::Legacy)],
        ),
    )
    .unwrap_err();
    let ClaimError::Refused(r) = e else { panic!() };
    let p = r.pci.unwrap();
    assert_eq!((p.requested, p.usable), (3, 2));
}

#[test]
fn pf_and_its_own_vfs_in_one_instance_is_refused_exactly_and_leaves_nothing() {
    // Nova's pre-claim test only counts pools: one PF + all VFs "fit", the claim then fails
    // half-way. rtrack applies the requests together on a copy.
    let mut h = SyntheticHost::small();
    h.pfs.truncate(1); // a single PF (3b:00.0) with 8 VFs
    let mut t = tracker_with(h, "");
    let before = t.state().clone();
    let e = claim(
        &mut t,
        1,
        req(
            flavor(1, 1, 512, 1, &[]),
            vec![
                pci("pf", 1, NumaPolicy::Legacy),
                pci("vf", 8, NumaPolicy::Legacy),
            ],
        ),
    )
    .unwrap_err();
    let ClaimError::Refused(r) = e else { panic!() };
    let p = r.pci.unwrap();
    assert_eq!(p.request_id, "req-vf-8");
    assert_eq!(p.taken_by_earlier_requests.len(), 1);
    assert_eq!(t.state(), &before);
    assert_eq!(count_status(&t, DeviceStatus::Available), 9);
}

#[test]
fn numa_policies() {
    // Two nodes; VFs of a PF on node 0 and of one on node 1; a third PF with unknown node.
    let mut h = SyntheticHost::bus_crossing();
    h.pfs = vec![
        SyntheticPf::e810("0000:3b:00.0", 2, 0, Some("iavf")),
        SyntheticPf::e810("0000:af:00.0", 2, 1, Some("iavf")),
        SyntheticPf::e810("0000:d8:00.0", 2, -1, Some("iavf")),
    ];
    let t0 = tracker_with(h, "");
    let on_cells = |policy, count, cells: Vec<u32>| {
        let mut t = t0.clone();
        let mut r = req(flavor(1, 1, 512, 1, &[]), vec![pci("vf", count, policy)]);
        // A one-cell guest, which the fit puts on node 0 when its devices allow (both nodes
        // are alike, so node order decides).
        if !cells.is_empty() {
            r.numa = Some(one_cell_guest(512));
        }
        claim(&mut t, 1, r).map(|o| {
            o.claim
                .assignments
                .iter()
                .map(|a| t.state().devices[&a.address].numa_node)
                .collect::<Vec<_>>()
        })
    };
    // required: only node 0.
    assert_eq!(
        on_cells(NumaPolicy::Required, 2, vec![0]).unwrap(),
        vec![Some(0), Some(0)]
    );
    assert!(on_cells(NumaPolicy::Required, 3, vec![0]).is_err());
    // legacy: local first, then devices with no NUMA node, never another node.
    let l = on_cells(NumaPolicy::Legacy, 4, vec![0]).unwrap();
    assert_eq!(l, vec![Some(0), Some(0), None, None]);
    assert!(on_cells(NumaPolicy::Legacy, 5, vec![0]).is_err());
    // preferred: anything; local, then unknown, then the rest.
    let p = on_cells(NumaPolicy::Preferred, 6, vec![0]).unwrap();
    assert_eq!(p, vec![Some(0), Some(0), None, None, Some(1), Some(1)]);
    // socket: node 1 is socket 1; devices on node 0 (socket 0) only; never unknown.
    let s = on_cells(NumaPolicy::Socket, 2, vec![0]).unwrap();
    assert_eq!(s, vec![Some(0), Some(0)]);
    assert!(on_cells(NumaPolicy::Socket, 3, vec![0]).is_err());
    // No guest NUMA cells: no NUMA filtering at all (Nova).
    assert_eq!(on_cells(NumaPolicy::Required, 6, vec![]).unwrap().len(), 6);
}

fn incoming_resize(t: &mut Tracker, n: u32, id: i64, new_vcpus: i64) -> ClaimOutcome {
    let mv = MoveRequest {
        current_numa: None,
        instance: InstanceInfo {
            uuid: uuid(n),
            host: Some("cmp0".into()),
            node: Some("cmp0".into()),
            vm_state: Some("active".into()),
            ..InstanceInfo::default()
        },
        current: Some(req(flavor(1, 2, 1024, 10, &[]), vec![])),
        new: req(
            flavor(2, new_vcpus, 2048, 20, &[]),
            vec![pci("vf", 1, NumaPolicy::Legacy)],
        ),
        move_type: None,
        migration_id: Some(id),
        migration_uuid: None,
        source_compute: None,
        source_node: None,
        dest_compute: None,
        dest_node: None,
    };
    t.move_claim(&mv, 10, false).unwrap().0
}

#[test]
fn incoming_resize_counts_the_new_flavor_until_reverted() {
    let mut t = tracker();
    let o = incoming_resize(&mut t, 1, 7, 4);
    assert_eq!(t.state().migrations[&7].migration_type, "resize");
    assert_eq!(t.state().migrations[&7].status, "pre-migrating");
    assert_eq!(used(&t, ResourceClass::Vcpu), 4);
    assert_eq!(used(&t, ResourceClass::MemoryMb), 2048);
    assert_eq!(o.claim.assignments.len(), 1);
    t.revert_move(7, 20).unwrap();
    assert_eq!(t.state().migrations[&7].status, "reverted");
    assert_eq!(used(&t, ResourceClass::Vcpu), 0);
    assert_eq!(count_status(&t, DeviceStatus::Allocated), 0);
    assert!(!t.state().instances.contains_key(&uuid(1)));
}

#[test]
fn confirmed_incoming_resize_leaves_the_instance_here_with_its_new_flavor() {
    let mut t = tracker();
    incoming_resize(&mut t, 1, 7, 4);
    t.confirm_move(7, 20).unwrap();
    assert_eq!(t.state().migrations[&7].status, "confirmed");
    let inst = &t.state().instances[&uuid(1)];
    assert_eq!(inst.host.as_deref(), Some("cmp1"));
    assert_eq!(inst.request.flavor.vcpus, 4);
    assert_eq!(used(&t, ResourceClass::Vcpu), 4);
    assert_eq!(count_status(&t, DeviceStatus::Allocated), 1);
    assert!(t.state().claims.contains_key(&uuid(1)));
    // Deleting it frees everything.
    t.update_instance(
        &uuid(1),
        &InstanceUpdate {
            vm_state: Some("deleted".into()),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(used(&t, ResourceClass::Vcpu), 0);
    assert_eq!(count_status(&t, DeviceStatus::Allocated), 0);
}

#[test]
fn migration_status_table() {
    // Statuses that hold resources and those that do not (error counts; the finished ones don't).
    for (status, counts) in [
        ("pre-migrating", true),
        ("migrating", true),
        ("post-migrating", true),
        ("finished", true),
        ("error", true),
        ("confirmed", false),
        ("reverted", false),
        ("failed", false),
        ("completed", false),
        ("cancelled", false),
        ("done", false),
    ] {
        let mut t = tracker();
        incoming_resize(&mut t, 1, 7, 4);
        let mut state = t.state().clone();
        state.migrations.get_mut(&7).unwrap().status = status.into();
        t.replace_state(state);
        assert_eq!(
            used(&t, ResourceClass::Vcpu) == 4,
            counts,
            "status {status}"
        );
    }
}

#[test]
fn migrations_count_only_while_the_instance_is_resizing_or_live_migrating() {
    let mut t = tracker();
    incoming_resize(&mut t, 1, 7, 4);
    for (vm, task, counts) in [
        ("active", "resize_prep", true),
        ("resized", "", true),
        ("stopped", "resize_migrating", true),
        ("active", "rebuilding", true),
        ("active", "migrating", true),
        ("paused", "migrating", true),
        ("active", "", false),
        ("error", "resize_prep", false),
    ] {
        let mut t2 = t.clone();
        t2.update_instance(
            &uuid(1),
            &InstanceUpdate {
                vm_state: Some(vm.into()),
                task_state: Some(task.into()),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(used(&t2, ResourceClass::Vcpu) == 4, counts, "{vm}/{task}");
    }
}

#[test]
fn newest_migration_per_instance_wins_and_stale_ones_are_marked_error() {
    let mut t = tracker();
    incoming_resize(&mut t, 1, 7, 4);
    let mut state = t.state().clone();
    let mut older = state.migrations[&7].clone();
    older.id = 3;
    older.updated_at = 1;
    older.new_instance_type_id = Some(9);
    state.migrations.insert(3, older);
    t.replace_state(state);
    // Migration 7 is newer: counted once, with its flavor.
    assert_eq!(used(&t, ResourceClass::Vcpu), 4);
    // Make 3 the newest: the instance's context names 7, so 3 is stale, counts nothing, and the
    // audit marks it error.
    let mut state = t.state().clone();
    state.migrations.get_mut(&3).unwrap().updated_at = 100;
    t.replace_state(state);
    assert_eq!(used(&t, ResourceClass::Vcpu), 0);
    let host = t.host().clone();
    let (outcome, _) = t.audit(host, time::OffsetDateTime::UNIX_EPOCH);
    assert_eq!(outcome.stale_migrations, vec![3]);
    assert_eq!(t.state().migrations[&3].status, "error");
}

/// A move of instance `n`, on node cmp1 now, from `current` to `new` (to this node unless the
/// caller sets a destination).
fn move_from_cmp1(n: u32, id: i64, current: InstanceRequest, new: InstanceRequest) -> MoveRequest {
    MoveRequest {
        current_numa: None,
        instance: InstanceInfo {
            uuid: uuid(n),
            host: Some("cmp1".into()),
            node: Some("cmp1".into()),
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
    }
}

#[test]
fn outgoing_resize_holds_the_old_flavor_after_the_instance_left() {
    let mut t = tracker();
    claim(&mut t, 1, req(flavor(1, 2, 1024, 10, &[]), vec![])).unwrap();
    let mv = MoveRequest {
        dest_compute: Some("cmp2".into()),
        dest_node: Some("cmp2".into()),
        ..move_from_cmp1(
            1,
            5,
            req(flavor(1, 2, 1024, 10, &[]), vec![]),
            req(flavor(2, 4, 2048, 20, &[]), vec![]),
        )
    };
    let (o, _) = t.move_claim(&mv, 10, false).unwrap();
    assert!(
        o.claim.resources.is_empty(),
        "nothing is claimed at the source"
    );
    // Still here: counted as an instance, the outgoing migration adds nothing.
    assert_eq!(used(&t, ResourceClass::Vcpu), 2);
    // finish_resize: the instance now lives on cmp2; the source holds the old flavor for a revert.
    t.update_instance(
        &uuid(1),
        &InstanceUpdate {
            vm_state: Some("resized".into()),
            host: Some("cmp2".into()),
            node: Some("cmp2".into()),
            task_state: Some(String::new()),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(used(&t, ResourceClass::Vcpu), 2);
    assert_eq!(
        t.usage().consumers[0].source,
        super::usage::UsageSource::OutgoingMigration
    );
    t.confirm_move(5, 20).unwrap();
    assert_eq!(used(&t, ResourceClass::Vcpu), 0);
    assert!(t.state().instances.is_empty() && t.state().claims.is_empty());
}

#[test]
fn same_node_resize_counts_new_then_old() {
    let mut t = tracker();
    claim(&mut t, 1, req(flavor(1, 2, 1024, 10, &[]), vec![])).unwrap();
    let mv = move_from_cmp1(
        1,
        6,
        req(flavor(1, 2, 1024, 10, &[]), vec![]),
        req(flavor(2, 4, 2048, 20, &[]), vec![]),
    );
    t.move_claim(&mv, 10, false).unwrap();
    // Instance still has its old flavor: old (instance) + new (migration).
    assert_eq!(used(&t, ResourceClass::Vcpu), 6);
    // finish_resize switches the flavor: new (instance) + old held for revert (migration).
    t.update_instance(
        &uuid(1),
        &InstanceUpdate {
            vm_state: Some("resized".into()),
            task_state: Some(String::new()),
            apply_new_flavor: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(used(&t, ResourceClass::Vcpu), 6);
    t.confirm_move(6, 20).unwrap();
    assert_eq!(used(&t, ResourceClass::Vcpu), 4);
}

/// A same-node resize of an instance with a Neutron port: the port's request id is the same
/// before and after, so the old and new VFs serve one request. Confirming frees only the old
/// VF; reverting only the new one (Nova frees by device: test_resize_same_host).
#[test]
fn same_node_resize_with_a_port_frees_only_the_side_that_ends() {
    for confirm in [true, false] {
        let mut t = tracker();
        let port = port_req(1, "physnet1", NumaPolicy::Legacy);
        let o = claim(
            &mut t,
            1,
            req(flavor(1, 2, 1024, 10, &[]), vec![port.clone()]),
        )
        .unwrap();
        let old_vf = o.claim.assignments[0].address;
        let mv = move_from_cmp1(
            1,
            6,
            req(flavor(1, 2, 1024, 10, &[]), vec![port.clone()]),
            req(flavor(2, 4, 2048, 20, &[]), vec![port.clone()]),
        );
        let o = t.move_claim(&mv, 10, false).unwrap().0;
        let new_vf = o.claim.assignments[0].address;
        assert_ne!(old_vf, new_vf);
        assert_eq!(count_status(&t, DeviceStatus::Allocated), 2);
        let (kept, freed) = if confirm {
            t.confirm_move(6, 20).unwrap();
            (new_vf, old_vf)
        } else {
            t.revert_move(6, 20).unwrap();
            (old_vf, new_vf)
        };
        assert_eq!(
            t.state().devices[&kept].status,
            DeviceStatus::Allocated,
            "confirm={confirm}"
        );
        assert_eq!(
            t.state().devices[&freed].status,
            DeviceStatus::Available,
            "confirm={confirm}"
        );
        let pf = t.state().devices[&kept].parent_addr.unwrap();
        assert_eq!(t.state().devices[&pf].status, DeviceStatus::Unavailable);
    }
}

#[test]
fn shelved_offloaded_and_deleted_instances_stop_counting() {
    let mut t = tracker();
    claim(
        &mut t,
        1,
        req(
            flavor(1, 2, 1024, 10, &[]),
            vec![pci("vf", 1, NumaPolicy::Legacy)],
        ),
    )
    .unwrap();
    claim(&mut t, 2, req(flavor(1, 2, 1024, 10, &[]), vec![])).unwrap();
    t.update_instance(
        &uuid(1),
        &InstanceUpdate {
            vm_state: Some("shelved_offloaded".into()),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(used(&t, ResourceClass::Vcpu), 2);
    assert_eq!(count_status(&t, DeviceStatus::Allocated), 0);
    t.update_instance(
        &uuid(2),
        &InstanceUpdate {
            vm_state: Some("deleted".into()),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(used(&t, ResourceClass::Vcpu), 0);
    assert!(matches!(
        t.update_instance(&uuid(9), &InstanceUpdate::default()),
        Err(ClaimError::NotFound { .. })
    ));
}

#[test]
fn hot_plug_adds_removes_and_defers_busy_devices() {
    let mut t = tracker();
    // A VF of PF 3b:00.0 (ens1f0): the vfio-pci VFs of 5e:00.0 form a plainer pool, used first.
    let mut vf = pci("vf", 1, NumaPolicy::Legacy);
    vf.specs[0].insert("parent_ifname".into(), "ens1f0".into());
    let o = claim(&mut t, 1, req(flavor(1, 1, 512, 1, &[]), vec![vf])).unwrap();
    let busy = o.claim.assignments[0].address;
    let total_before = t.state().devices.len();
    // The next probe: PF 3b:00.0 (whose VF is busy) lost its VFs; a new PF appeared.
    let mut h = SyntheticHost::small();
    h.pfs[0].num_vfs = 0;
    h.pfs
        .push(SyntheticPf::e810("0000:86:00.0", 2, 0, Some("iavf")));
    let (out, changes) = t.audit(host(h.clone()), time::OffsetDateTime::UNIX_EPOCH);
    assert_eq!(out.devices_added.len(), 3);
    assert_eq!(out.devices_removed.len(), 7, "the 7 free VFs of 3b:00.0");
    assert_eq!(out.devices_deferred, vec![busy]);
    assert!(t.state().devices.contains_key(&busy));
    assert_eq!(t.state().devices.len(), total_before - 7 + 3);
    assert!(!changes.is_empty());
    // Freed, the vanished device goes at the next audit.
    t.abort(&uuid(1)).unwrap();
    let (out, _) = t.audit(host(h), time::OffsetDateTime::UNIX_EPOCH);
    assert_eq!(out.devices_removed, vec![busy]);
    assert!(!t.state().devices.contains_key(&busy));
}

#[test]
fn devices_held_by_unknown_owners_are_reclaimed_by_the_audit() {
    let mut t = tracker();
    claim(
        &mut t,
        1,
        req(
            flavor(1, 1, 512, 1, &[]),
            vec![pci("vf", 1, NumaPolicy::Legacy)],
        ),
    )
    .unwrap();
    let mut state = t.state().clone();
    state.instances.clear();
    state.claims.clear();
    t.replace_state(state);
    let host = t.host().clone();
    let (out, _) = t.audit(host, time::OffsetDateTime::UNIX_EPOCH);
    assert_eq!(out.devices_reclaimed.len(), 1);
    assert_eq!(count_status(&t, DeviceStatus::Allocated), 0);
    assert_eq!(count_status(&t, DeviceStatus::Unavailable), 0);
}

#[test]
fn vcpu_pin_set_is_novas_legacy_cpu_set() {
    // Nova's deprecated option: VCPU is those CPUs, and pinned guests pin from them as VCPU.
    let mut t = tracker_with(SyntheticHost::small(), "vcpu_pin_set = \"2-5\"");
    assert_eq!(t.inventory()[&ResourceClass::Vcpu].total, 4);
    assert!(!t.inventory().contains_key(&ResourceClass::Pcpu));
    let numa = |f| {
        req(
            flavor(
                1,
                2,
                512,
                1,
                &[("hw:cpu_policy", "dedicated"), ("hw:numa_nodes", f)],
            ),
            vec![],
        )
    };
    let mut r = numa("1");
    r.numa = crate::tracker::request::numa_of(&mut r.flavor, &Default::default(), None, "flavor")
        .unwrap();
    let o = claim(&mut t, 1, r).unwrap();
    let pinned: Vec<u32> = o.claim.numa_topology.unwrap().cells[0]
        .cpu_pinning
        .values()
        .copied()
        .collect();
    assert!(pinned.iter().all(|c| (2..=5).contains(c)), "{pinned:?}");
    assert_eq!(used(&t, ResourceClass::Vcpu), 2);
}

#[test]
fn dedicated_cpus_come_from_pcpu() {
    let mut t = tracker_with(
        SyntheticHost::small(),
        "cpu_dedicated_set = \"4-7\"\ncpu_shared_set = \"0-3\"",
    );
    let e = claim(
        &mut t,
        1,
        req(
            flavor(1, 5, 512, 1, &[("hw:cpu_policy", "dedicated")]),
            vec![],
        ),
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("PCPU requested 5 is more than the largest allowed unit 4"),
        "{e}"
    );
    claim(
        &mut t,
        2,
        req(
            flavor(1, 4, 512, 1, &[("hw:cpu_policy", "dedicated")]),
            vec![],
        ),
    )
    .unwrap();
    assert_eq!(used(&t, ResourceClass::Pcpu), 4);
    assert_eq!(used(&t, ResourceClass::Vcpu), 0);
}

#[test]
fn failed_claims_keep_state_and_changes_empty() {
    let mut t = tracker();
    let before = t.state().clone();
    let r = t.instance_claim(&info(1), &req(flavor(1, 1000, 1, 1, &[]), vec![]), 0, false);
    assert!(r.is_err());
    assert_eq!(t.state(), &before);
    let r = t.instance_claim(
        &InstanceInfo {
            uuid: "not-a-uuid".into(),
            ..Default::default()
        },
        &req(flavor(1, 1, 1, 1, &[]), vec![]),
        0,
        false,
    );
    assert!(matches!(r, Err(ClaimError::Invalid { .. })));
    assert!(matches!(
        t.abort(&uuid(42)),
        Err(ClaimError::NotFound { .. })
    ));
}

#[test]
fn the_first_matching_device_spec_gives_the_tags() {
    // Both specs match the VFs; the first one's physical_network must be the pools'.
    let extra = r#"
[[pci.device_spec]]
vendor_id = "8086"
product_id = "1889"
physical_network = "physnet9"
"#;
    let mut cfg_text = CONFIG.to_string();
    cfg_text.push_str(extra);
    let f = std::path::Path::new("t.toml");
    let cfg = Config::parse(&cfg_text, f).unwrap().validate(f).unwrap();
    let settings = TrackerSettings {
        policy: cfg.into(),
        names: HostNames {
            host: "cmp1".into(),
            node: "cmp1".into(),
        },
        node_uuid: "11111111-2222-3333-4444-555555555555".into(),
        node_created_at: time::OffsetDateTime::UNIX_EPOCH,
    };
    let inv = host(SyntheticHost::small());
    let mut t = Tracker::new(settings, inv.clone(), TrackerState::default());
    t.audit(inv, time::OffsetDateTime::UNIX_EPOCH);
    let vf_pools: Vec<_> = t
        .pools()
        .into_iter()
        .filter(|p| p.key.tags["dev_type"] == "type-VF")
        .collect();
    assert!(!vf_pools.is_empty());
    assert!(vf_pools
        .iter()
        .all(|p| p.key.tags["physical_network"] == "physnet1"));
}

#[test]
fn the_compute_node_is_kept_only_when_it_changes() {
    let mut t = tracker();
    let first = t
        .state()
        .compute_node
        .clone()
        .expect("the first audit keeps it");
    // Same host, later: only updated_at differs, nothing to keep.
    let later = time::OffsetDateTime::UNIX_EPOCH + time::Duration::hours(1);
    let (_, changes) = t.audit(host(SyntheticHost::small()), later);
    assert_eq!(changes.compute_node, None);
    assert_eq!(t.state().compute_node.as_ref(), Some(&first));
    // A claim changes the usage: the next audit keeps the new node.
    claim(&mut t, 1, req(flavor(1, 2, 512, 1, &[]), vec![])).unwrap();
    let (_, changes) = t.audit(host(SyntheticHost::small()), later);
    let node = changes.compute_node.expect("changed");
    assert_eq!(node["nova_object.data"]["vcpus_used"], 2);
    assert_eq!(t.state().compute_node.as_ref(), Some(&node));
}

#[test]
fn parent_ifname_only_on_vfs_that_are_network_interfaces() {
    // PF 3b:00.0 (ens1f0) has 8 iavf VFs with netdevs; PF 5e:00.0 (ens2f0) has 4 vfio-pci VFs
    // without: only the former carry their PF's interface name, as Nova (libvirt) reports.
    let t = tracker();
    let vf = |a: &str| &t.state().devices[&crate::probes::pci::PciAddress::parse(a).unwrap()];
    assert_eq!(vf("0000:3b:01.0").parent_ifname.as_deref(), Some("ens1f0"));
    assert_eq!(vf("0000:5e:01.0").parent_ifname, None);
    let pools = t.pool_usage();
    assert!(pools
        .iter()
        .any(
            |p| p.tags.get("parent_ifname").map(String::as_str) == Some("ens1f0") && p.total == 8
        ));
    assert!(pools
        .iter()
        .any(
            |p| p.tags.get("address").map(String::as_str) == Some("0000:5e:00.0")
                && !p.tags.contains_key("parent_ifname")
                && p.total == 4
        ));
}

#[test]
fn pools_that_tie_stay_in_discovery_order() {
    // Two VF pools with the same keys but their NUMA node: PF 3b:00.0 on node 1, PF 5e:00.0 on
    // node 0. Nova keeps tied pools in discovery (address) order, so a request with no NUMA
    // affinity takes one of 3b's VFs (the last, as Nova's pool pops), though node 0 sorts before
    // node 1.
    let mut h = SyntheticHost::bus_crossing();
    h.pfs = vec![
        SyntheticPf::e810("0000:3b:00.0", 2, 1, Some("iavf")),
        SyntheticPf::e810("0000:5e:00.0", 2, 0, Some("iavf")),
    ];
    let mut t = tracker_with(h, "");
    let o = claim(
        &mut t,
        1,
        req(
            flavor(1, 1, 512, 1, &[]),
            vec![pci("vf", 1, NumaPolicy::Legacy)],
        ),
    )
    .unwrap();
    assert_eq!(o.claim.assignments[0].address.to_string(), "0000:3b:01.1");
}

mod attach;
mod live_pci;
mod placed;
mod placement;
mod power;
mod released;
mod remote_managed;
mod vdpa;
mod vgpu;

/// A refused update changes nothing: a flavor switch with no resize in progress that also
/// names a new state leaves the record (and what it counts) as it was, since the service keeps
/// the working tracker after a refusal (the instance would otherwise stop counting in memory
/// while the store still has it active).
#[test]
fn a_refused_state_update_leaves_the_record_as_it_was() {
    let mut t = tracker();
    claim(&mut t, 1, req(flavor(1, 2, 1024, 10, &[]), vec![])).unwrap();
    let before = t.state().instances[&uuid(1)].clone();
    let e = t
        .update_instance(
            &uuid(1),
            &InstanceUpdate {
                vm_state: Some("deleted".into()),
                task_state: Some("deleting".into()),
                host: Some("cmp9".into()),
                apply_new_flavor: true,
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(matches!(e, ClaimError::Conflict { .. }), "{e:?}");
    assert_eq!(t.state().instances[&uuid(1)], before);
    assert_eq!(used(&t, ResourceClass::Vcpu), 2);
}

/// Well-formed requests that the tracked state does not allow are conflicts (409), not
/// malformed requests: a flavor switch with no resize in progress, a move not involving this host.
#[test]
fn requests_the_state_does_not_allow_are_conflicts() {
    let mut t = tracker();
    claim(&mut t, 1, req(flavor(1, 2, 1024, 10, &[]), vec![])).unwrap();
    let e = t
        .update_instance(
            &uuid(1),
            &InstanceUpdate {
                apply_new_flavor: true,
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(
        matches!(&e, ClaimError::Conflict { message, .. } if message.contains("no resize in progress")),
        "{e:?}"
    );
    let mv = MoveRequest {
        current_numa: None,
        instance: InstanceInfo {
            host: Some("cmp7".into()),
            node: Some("cmp7".into()),
            ..info(2)
        },
        current: None,
        new: req(flavor(2, 1, 512, 1, &[]), vec![]),
        move_type: None,
        migration_id: Some(9),
        migration_uuid: None,
        source_compute: None,
        source_node: None,
        dest_compute: Some("cmp8".into()),
        dest_node: Some("cmp8".into()),
    };
    let e = t.move_claim(&mv, 10, false).unwrap_err();
    assert!(
        matches!(&e, ClaimError::Conflict { message, .. } if message.contains("neither source")),
        "{e:?}"
    );
}
