//! A port attached to a running instance gets a device, on the instance's NUMA cells as the
//! request's policy says; detaching frees it and removes the request (Nova's interface attach
//! and detach).

use super::*;

fn port_req(n: u32, policy: NumaPolicy) -> PciRequest {
    super::port_req(n, "physnet1", policy)
}

#[test]
fn attach_claims_a_device_for_the_port_and_detach_frees_it() {
    let mut t = tracker();
    claim(&mut t, 1, req(flavor(1, 1, 512, 1, &[]), vec![])).unwrap();
    let (o, changes) = t
        .attach_pci(&uuid(1), &[port_req(1, NumaPolicy::Legacy)])
        .unwrap();
    assert!(!o.existing);
    assert_eq!(o.assignments.len(), 1);
    let vf = o.assignments[0].address;
    assert_eq!(t.state().devices[&vf].status, DeviceStatus::Allocated);
    assert!(changes.claims.contains_key(&uuid(1)) && changes.instances.contains_key(&uuid(1)));
    let inst = &t.state().instances[&uuid(1)];
    assert_eq!(inst.request.pci_requests.len(), 1);
    assert_eq!(t.state().claims[&uuid(1)].assignments, o.assignments);
    // The same request again: the same device, nothing changed.
    let (again, changes) = t
        .attach_pci(&uuid(1), &[port_req(1, NumaPolicy::Legacy)])
        .unwrap();
    assert!(again.existing && changes.is_empty());
    assert_eq!(again.assignments, o.assignments);
    // The same request id with another spec is a conflict.
    let mut other = port_req(1, NumaPolicy::Legacy);
    other.specs[0].insert("trusted".into(), "true".into());
    assert!(matches!(
        t.attach_pci(&uuid(1), &[other]),
        Err(ClaimError::Conflict { .. })
    ));
    // Detach: the device is free again, the request gone.
    t.detach_pci(&uuid(1), "port-req-1").unwrap();
    assert_eq!(count_status(&t, DeviceStatus::Allocated), 0);
    assert_eq!(count_status(&t, DeviceStatus::Unavailable), 0);
    assert!(t.state().instances[&uuid(1)]
        .request
        .pci_requests
        .is_empty());
    assert!(t.state().claims[&uuid(1)].assignments.is_empty());
    assert!(matches!(
        t.detach_pci(&uuid(1), "port-req-1"),
        Err(ClaimError::NotFound { .. })
    ));
}

#[test]
fn attach_refuses_what_it_cannot_serve_and_what_is_not_a_port() {
    let mut t = tracker();
    claim(
        &mut t,
        1,
        req(
            flavor(1, 1, 512, 1, &[]),
            vec![pci("pf", 1, NumaPolicy::Legacy)],
        ),
    )
    .unwrap();
    let before = t.state().clone();
    // A flavor's request is neither attached nor detached.
    assert!(matches!(
        t.attach_pci(&uuid(1), &[pci("vf", 1, NumaPolicy::Legacy)]),
        Err(ClaimError::Invalid { .. })
    ));
    assert!(matches!(
        t.detach_pci(&uuid(1), "req-pf-1"),
        Err(ClaimError::Conflict { .. })
    ));
    // No VF on physnet2: refused, nothing changed.
    let mut p = port_req(2, NumaPolicy::Legacy);
    p.specs[0].insert("physical_network".into(), "physnet2".into());
    assert!(matches!(
        t.attach_pci(&uuid(1), &[p]),
        Err(ClaimError::Refused(_))
    ));
    // An instance this host does not hold.
    assert!(matches!(
        t.attach_pci(&uuid(9), &[port_req(3, NumaPolicy::Legacy)]),
        Err(ClaimError::NotFound { .. })
    ));
    assert_eq!(t.state(), &before);
}

#[test]
fn an_attached_port_follows_the_instances_numa_cells() {
    // Two cells; the VFs are on cell 1. A guest placed on cell 0 cannot have a `required` one.
    let mut t = tracker_with(SyntheticHost::bus_crossing(), "");
    let mut r = req(flavor(1, 1, 512, 1, &[]), vec![]);
    r.numa = Some(one_cell_guest(512));
    let o = claim(&mut t, 1, r).unwrap();
    // A guest without devices goes to the cell without them (Nova keeps PCI cells free).
    assert_eq!(
        o.claim.numa_topology.as_ref().unwrap().cells[0].host_cell,
        0
    );
    let before = t.state().clone();
    let result = t.attach_pci(&uuid(1), &[port_req(1, NumaPolicy::Required)]);
    assert!(matches!(result, Err(ClaimError::Refused(_))), "{result:?}");
    assert_eq!(t.state(), &before);
    // `preferred` takes a remote one.
    let (o, _) = t
        .attach_pci(&uuid(1), &[port_req(1, NumaPolicy::Preferred)])
        .unwrap();
    assert_eq!(
        t.state().devices[&o.assignments[0].address].numa_node,
        Some(1)
    );
}
