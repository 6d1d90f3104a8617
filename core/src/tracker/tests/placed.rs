//! Claims for guests that already run here (`as_placed`): counted where they are, pins and
//! devices included, or refused when that placement would overcommit.

use super::*;
use crate::probes::CpuSet;
use crate::tracker::numa::{CpuPolicy, FittedTopology, GuestCell};

fn dedicated(vcpus: u32) -> InstanceRequest {
    let mut r = req(
        flavor(1, vcpus.into(), 512, 1, &[("hw:cpu_policy", "dedicated")]),
        vec![],
    );
    let mut guest = one_cell_guest(512);
    guest.cells[0] = GuestCell {
        id: 0,
        cpuset: CpuSet::new(),
        pcpuset: CpuSet::from_ids(0..vcpus),
        memory_mb: 512,
    };
    guest.cpu_policy = Some(CpuPolicy::Dedicated);
    r.numa = Some(guest);
    r
}

fn placed_on(template: &FittedTopology, host_cpus: &[u32]) -> FittedTopology {
    let mut t = template.clone();
    t.cells[0].cpu_pinning = host_cpus
        .iter()
        .enumerate()
        .map(|(g, h)| (g as u32, *h))
        .collect();
    t
}

fn claim_placed(
    t: &mut Tracker,
    n: u32,
    r: &InstanceRequest,
    placed: FittedTopology,
) -> Result<ClaimOutcome, ClaimError> {
    let info = InstanceInfo {
        placed_numa: Some(placed),
        ..info(n)
    };
    t.instance_claim(&info, r, 0, false).map(|(o, _)| o)
}

#[test]
fn a_placed_guest_keeps_its_pins_and_an_overlapping_one_is_refused() {
    let mut t = tracker_with(
        SyntheticHost::small(),
        "cpu_dedicated_set = \"4-7\"\ncpu_shared_set = \"0-3\"",
    );
    let r = dedicated(2);
    // A fit, for the shape of a placement on this host.
    let fitted = claim(&mut t, 1, r.clone()).unwrap();
    let template = fitted.claim.numa_topology.as_deref().unwrap().clone();
    let fit_pins: Vec<u32> = template.cells[0].cpu_pinning.values().copied().collect();
    let free: Vec<u32> = (4..8).filter(|c| !fit_pins.contains(c)).rev().collect();

    // Placed on the two CPUs the fit left, in an order a fit would not choose: kept as given.
    let o = claim_placed(&mut t, 2, &r, placed_on(&template, &free)).unwrap();
    let pins: Vec<u32> = o.claim.numa_topology.as_deref().unwrap().cells[0]
        .cpu_pinning
        .values()
        .copied()
        .collect();
    assert_eq!(pins, free);
    assert_eq!(used(&t, ResourceClass::Pcpu), 4);

    // Another guest said to run on a CPU already pinned: refused, nothing recorded.
    let before = t.state().clone();
    let e = claim_placed(&mut t, 3, &r, placed_on(&template, &[free[0], 0])).unwrap_err();
    assert!(
        e.to_string().contains("pinned twice") || e.to_string().contains("not dedicated"),
        "{e}"
    );
    assert_eq!(t.state(), &before);
}

#[test]
fn a_placement_that_does_not_match_the_request_is_refused_naming_why() {
    let mut t = tracker_with(
        SyntheticHost::small(),
        "cpu_dedicated_set = \"4-7\"\ncpu_shared_set = \"0-3\"",
    );
    let two = dedicated(2);
    let fitted = claim(&mut t, 1, two.clone()).unwrap();
    let template = fitted.claim.numa_topology.as_deref().unwrap().clone();
    t.abort(&uuid(1)).unwrap();
    // Three dedicated CPUs asked, the placement pins two.
    let e = claim_placed(&mut t, 2, &dedicated(3), template.clone()).unwrap_err();
    assert!(e.to_string().contains("CPU(s)"), "{e}");
    // On a host cell the host does not have.
    let mut elsewhere = template.clone();
    elsewhere.cells[0].host_cell = 9;
    let e = claim_placed(&mut t, 3, &two, elsewhere).unwrap_err();
    assert!(e.to_string().contains("host cell 9"), "{e}");
    // Pinned to shared CPUs.
    let e = claim_placed(&mut t, 4, &two, placed_on(&template, &[0, 1])).unwrap_err();
    assert!(e.to_string().contains("not dedicated CPUs"), "{e}");
}

#[test]
fn a_placed_guests_devices_are_the_ones_it_has() {
    let mut t = tracker();
    let port = port_req(1, "physnet1", NumaPolicy::Legacy);
    // Nova's order would give the pool's last VF; the guest has the first.
    let first = t
        .state()
        .devices
        .values()
        .find(|d| d.dev_type == crate::probes::pci::PciDevType::Vf && d.parent_ifname.is_some())
        .map(|d| d.address)
        .unwrap();
    let placed = InstanceInfo {
        placed_devices: [(port.request_id.clone(), vec![first])].into(),
        ..info(1)
    };
    let r = req(flavor(1, 1, 512, 1, &[]), vec![port]);
    let (o, _) = t.instance_claim(&placed, &r, 0, false).unwrap();
    assert_eq!(o.claim.assignments[0].address, first);
    // A request id the instance does not have is an error naming the field.
    let unknown = InstanceInfo {
        placed_devices: [("nope".to_string(), vec![first])].into(),
        ..info(2)
    };
    let e = t.instance_claim(&unknown, &r, 0, false).unwrap_err();
    assert!(
        e.to_string()
            .contains("not one of the instance's PCI requests"),
        "{e}"
    );
}
