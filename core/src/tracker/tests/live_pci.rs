//! Live migration of an instance with SR-IOV ports and flavor devices: the destination claims
//! devices for them on its own NUMA cells (Nova's `check_can_live_migrate_destination`:
//! `_flavor_based_pci_claim` and `_claim_pci_for_instance_vifs`), frees them on rollback and
//! keeps them on success; the source frees its devices when the move completes
//! (`post_live_migration`) and keeps them on rollback.

use super::*;

fn port(n: u32, physnet: &str, policy: NumaPolicy) -> PciRequest {
    port_req(n, physnet, policy)
}

fn live_move(n: u32, id: i64, new: InstanceRequest, from: &str, to: &str) -> MoveRequest {
    MoveRequest {
        current_numa: None,
        instance: InstanceInfo {
            uuid: uuid(n),
            host: Some(from.into()),
            node: Some(from.into()),
            vm_state: Some("active".into()),
            task_state: Some("migrating".into()),
            ..InstanceInfo::default()
        },
        current: Some(new.clone()),
        new,
        move_type: Some(MoveType::LiveMigration),
        migration_id: Some(id),
        migration_uuid: None,
        source_compute: None,
        source_node: None,
        dest_compute: Some(to.into()),
        dest_node: Some(to.into()),
    }
}

#[test]
fn the_destination_claims_port_devices_on_its_numa_cells_and_frees_them_on_rollback() {
    // Two cells; the only VFs (of PF af:00.0) are on cell 1.
    let mut t = tracker_with(SyntheticHost::bus_crossing(), "");
    let mut r = req(
        flavor(1, 2, 1024, 1, &[]),
        vec![port(1, "physnet1", NumaPolicy::Required)],
    );
    r.numa = Some(one_cell_guest(1024));
    let (o, _) = t
        .move_claim(&live_move(1, 3, r.clone(), "cmp0", "cmp1"), 10, false)
        .unwrap();
    assert_eq!(o.claim.assignments.len(), 1);
    let vf = o.claim.assignments[0].address;
    assert_eq!(t.state().devices[&vf].numa_node, Some(1));
    let fitted = o.claim.numa_topology.as_ref().unwrap();
    assert_eq!(fitted.cells[0].host_cell, 1, "the guest follows its device");
    assert_eq!(t.state().devices[&vf].status, DeviceStatus::Allocated);
    // Rollback: the destination frees what it claimed.
    t.revert_move(3, 20).unwrap();
    assert_eq!(count_status(&t, DeviceStatus::Allocated), 0);
    assert!(t.state().instances.is_empty());
    // Success: the devices stay with the instance, which now lives here.
    let (o, _) = t
        .move_claim(&live_move(1, 4, r, "cmp0", "cmp1"), 30, false)
        .unwrap();
    t.confirm_move(4, 40).unwrap();
    let held: Vec<_> = t
        .state()
        .devices
        .values()
        .filter(|d| d.owner.as_ref().is_some_and(|o| o.instance_uuid == uuid(1)))
        .map(|d| d.address)
        .collect();
    assert_eq!(held, vec![o.claim.assignments[0].address]);
    assert_eq!(t.state().claims[&uuid(1)].assignments.len(), 1);
}

#[test]
fn a_live_move_that_cannot_get_its_devices_changes_nothing() {
    let mut t = tracker();
    let before = t.state().clone();
    let r = req(
        flavor(1, 2, 1024, 1, &[]),
        vec![port(1, "physnet2", NumaPolicy::Legacy)],
    );
    let e = t
        .move_claim(&live_move(1, 3, r, "cmp0", "cmp1"), 10, false)
        .unwrap_err();
    let ClaimError::Refused(refusal) = &e else {
        panic!("{e}")
    };
    assert_eq!(refusal.pci.as_ref().unwrap().request_id, "port-req-1");
    assert_eq!(t.state(), &before);
    // A flavor device that only a non-live-migratable pool could give is refused too.
    let mut vf = pci("vf", 1, NumaPolicy::Legacy);
    vf.specs[0].insert("live_migratable".into(), "true".into());
    let r = req(flavor(1, 2, 1024, 1, &[]), vec![vf]);
    assert!(matches!(
        t.move_claim(&live_move(2, 5, r, "cmp0", "cmp1"), 10, false),
        Err(ClaimError::Refused(_))
    ));
    assert_eq!(t.state(), &before);
}

#[test]
fn the_source_frees_its_port_devices_on_success_and_keeps_them_on_rollback() {
    let mut t = tracker();
    let r = req(
        flavor(1, 2, 1024, 1, &[]),
        vec![port(1, "physnet1", NumaPolicy::Legacy)],
    );
    claim(&mut t, 1, r.clone()).unwrap();
    assert_eq!(count_status(&t, DeviceStatus::Allocated), 1);
    // Rolled back: the instance keeps its VF here.
    t.move_claim(&live_move(1, 3, r.clone(), "cmp1", "cmp2"), 10, false)
        .unwrap();
    assert_eq!(count_status(&t, DeviceStatus::Allocated), 1);
    t.revert_move(3, 20).unwrap();
    assert_eq!(count_status(&t, DeviceStatus::Allocated), 1);
    // Completed: the source frees it.
    t.move_claim(&live_move(1, 4, r, "cmp1", "cmp2"), 30, false)
        .unwrap();
    t.confirm_move(4, 40).unwrap();
    assert_eq!(count_status(&t, DeviceStatus::Allocated), 0);
    assert_eq!(count_status(&t, DeviceStatus::Unavailable), 0);
}
