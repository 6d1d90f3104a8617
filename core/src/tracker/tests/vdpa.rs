//! vDPA devices in the tracker (Nova's `vdpa` type): pooled apart from plain VFs of the same
//! product, given only to requests that ask for `dev_type: vdpa`, and making their PF
//! unavailable as a VF does.

use super::*;
use rtrack_fixtures::vdpa::VdpaHost;

/// The vdpa-mixed host: PF 06:00.0, VFs 06:00.1-2 with vDPA devices, 06:00.3-4 plain; every
/// function of the card tracked on physnet4 (as Nova's VDPAServersTest configures it).
fn vdpa_tracker() -> Tracker {
    let dir = scratch_dir();
    VdpaHost::vdpa_mixed().write(dir.path());
    let mut opts = ProbeOptions::default();
    opts.disk.instances_path = Some(dir.path().to_path_buf());
    let inv = probe_host(&HostRoot::under(dir.path()), &opts).unwrap();
    let text = "[[pci.device_spec]]\nvendor_id = \"15b3\"\nproduct_id = \"101e\"\nphysical_network = \"physnet4\"\n\n[[pci.device_spec]]\nvendor_id = \"15b3\"\nproduct_id = \"101d\"\nphysical_network = \"physnet4\"\n";
    let f = std::path::Path::new("vdpa.toml");
    let cfg = Config::parse(text, f).unwrap().validate(f).unwrap();
    let mut t = Tracker::new(settings_for(cfg), inv.clone(), TrackerState::default());
    t.audit(inv, time::OffsetDateTime::UNIX_EPOCH);
    t
}

/// A neutron port on physnet4; `vdpa`: of vnic_type vdpa (Nova adds dev_type vdpa).
fn port(n: u32, vdpa: bool) -> PciRequest {
    let mut r = port_req(n, "physnet4", NumaPolicy::Legacy);
    if vdpa {
        r.specs[0].insert("dev_type".into(), "vdpa".into());
        r.specs[0].insert("remote_managed".into(), "False".into());
    }
    r
}

fn status(t: &Tracker, addr: &str) -> DeviceStatus {
    t.state().devices[&crate::probes::pci::PciAddress::parse(addr).unwrap()].status
}

#[test]
fn vdpa_devices_are_pooled_apart_and_only_for_vdpa_requests() {
    let mut t = vdpa_tracker();
    // Discovery order: the vDPA VFs come first (06:00.1-2).
    let pools: Vec<(String, usize)> = t
        .pools()
        .iter()
        .map(|p| (p.key.tags["dev_type"].clone(), p.count()))
        .collect();
    assert_eq!(
        pools,
        [
            ("type-PF".to_string(), 1),
            ("vdpa".to_string(), 2),
            ("type-VF".to_string(), 2)
        ]
    );
    assert!(t
        .pools()
        .iter()
        .all(|p| p.key.tags.get("remote_managed").map(String::as_str) == Some("false")));
    // Plain ports take the plain VFs, and nothing more once they are gone.
    let o = claim(
        &mut t,
        1,
        req(flavor(1, 1, 256, 0, &[]), vec![port(1, false)]),
    )
    .unwrap();
    // Nova's order: the pool's last device first.
    assert_eq!(o.claim.assignments[0].address.to_string(), "0000:06:00.4");
    claim(
        &mut t,
        2,
        req(flavor(1, 1, 256, 0, &[]), vec![port(2, false)]),
    )
    .unwrap();
    let e = claim(
        &mut t,
        3,
        req(flavor(1, 1, 256, 0, &[]), vec![port(3, false)]),
    )
    .unwrap_err();
    let ClaimError::Refused(r) = &e else {
        panic!("{e}")
    };
    let pci = r.pci.as_ref().unwrap();
    assert!(
        pci.pools
            .iter()
            .any(|p| p.pool["dev_type"].as_deref() == Some("vdpa")
                && p.rejected == Some(crate::tracker::refusals::PoolRejection::UnrequestedVdpa)),
        "{pci:?}"
    );
    // A vdpa port takes a vDPA VF; the PF was already unavailable (its VFs are in use).
    let o = claim(
        &mut t,
        4,
        req(flavor(1, 1, 256, 0, &[]), vec![port(4, true)]),
    )
    .unwrap();
    assert_eq!(o.claim.assignments[0].address.to_string(), "0000:06:00.2");
    assert_eq!(status(&t, "0000:06:00.2"), DeviceStatus::Allocated);
    assert_eq!(status(&t, "0000:06:00.0"), DeviceStatus::Unavailable);
    // Freed, every VF: the PF is available again.
    for n in [1, 2, 4] {
        t.update_instance(
            &uuid(n),
            &InstanceUpdate {
                vm_state: Some("deleted".into()),
                ..Default::default()
            },
        )
        .unwrap();
    }
    assert_eq!(status(&t, "0000:06:00.0"), DeviceStatus::Available);
}

#[test]
fn a_vdpa_device_makes_its_pf_unavailable_and_a_used_pf_its_vdpa_devices() {
    let mut t = vdpa_tracker();
    claim(
        &mut t,
        1,
        req(flavor(1, 1, 256, 0, &[]), vec![port(1, true)]),
    )
    .unwrap();
    assert_eq!(status(&t, "0000:06:00.0"), DeviceStatus::Unavailable);
    t.update_instance(
        &uuid(1),
        &InstanceUpdate {
            vm_state: Some("deleted".into()),
            ..Default::default()
        },
    )
    .unwrap();
    let mut pf = port_req(5, "physnet4", NumaPolicy::Legacy);
    pf.specs[0].insert("dev_type".into(), "type-PF".into());
    claim(&mut t, 5, req(flavor(1, 1, 256, 0, &[]), vec![pf])).unwrap();
    for vf in ["0000:06:00.1", "0000:06:00.2", "0000:06:00.3"] {
        assert_eq!(status(&t, vf), DeviceStatus::Unavailable, "{vf}");
    }
    assert!(claim(
        &mut t,
        6,
        req(flavor(1, 1, 256, 0, &[]), vec![port(6, true)])
    )
    .is_err());
}

#[test]
fn in_placement_vdpa_devices_are_children_of_their_pf_provider() {
    // Nova's pci_placement_translator: vdpa is a child type, like type-VF (a spec without a
    // network puts the devices in Placement).
    let dir = scratch_dir();
    VdpaHost::vdpa_mixed().write(dir.path());
    let inv = probe_host(&HostRoot::under(dir.path()), &ProbeOptions::default()).unwrap();
    let text = "[pci]\nreport_in_placement = true\n\n[[pci.device_spec]]\nvendor_id = \"15b3\"\nproduct_id = \"101e\"\n";
    let f = std::path::Path::new("vdpa.toml");
    let cfg = Config::parse(text, f).unwrap().validate(f).unwrap();
    let mut t = Tracker::new(settings_for(cfg), inv.clone(), TrackerState::default());
    t.audit(inv, time::OffsetDateTime::UNIX_EPOCH);
    let view = t.view();
    let pf = crate::probes::pci::PciAddress::parse("0000:06:00.0").unwrap();
    let group = &view.pci_providers[&pf];
    let members: Vec<String> = group.members.iter().map(|a| a.to_string()).collect();
    assert_eq!(
        members,
        [
            "0000:06:00.1",
            "0000:06:00.2",
            "0000:06:00.3",
            "0000:06:00.4"
        ]
    );
    assert_eq!(view.pci_providers.len(), 1);
}
