//! PCI in Placement (`[pci] report_in_placement`): claims held to the providers Placement
//! allocated from, the providers' uuids (derived, stored, adopted), and one-time-use devices.
//! Expected outcomes follow Nova 34's `PciDeviceStats` with `rp_uuids` and its PCI Placement
//! translator (`nova/compute/pci_placement_translator.py`).

use super::*;
use crate::probes::pci::PciAddress;
use crate::tracker::pci::devices::OneTimeUseReading;

const PLACEMENT: &str = r#"
[pci]
report_in_placement = true

[[pci.device_spec]]
vendor_id = "8086"
product_id = "1889"

[[pci.device_spec]]
vendor_id = "144d"
product_id = "a808"
one_time_use = "yes"

[[pci.alias]]
name = "vf"
vendor_id = "8086"
product_id = "1889"
device_type = "type-VF"

[[pci.alias]]
name = "nvme"
vendor_id = "144d"
product_id = "a808"
"#;

fn placement_tracker() -> Tracker {
    let f = std::path::Path::new("test.toml");
    let cfg = Config::parse(PLACEMENT, f).unwrap().validate(f).unwrap();
    let settings = settings_for(cfg);
    let inv = host(SyntheticHost::small());
    let mut t = Tracker::new(settings, inv.clone(), TrackerState::default());
    t.audit(inv, time::OffsetDateTime::UNIX_EPOCH);
    t
}

fn addr(s: &str) -> PciAddress {
    PciAddress::parse(s).unwrap()
}

fn provider(t: &Tracker, pf: &str) -> uuid::Uuid {
    t.pci_provider_uuids()[&addr(pf)]
}

/// `count` VFs, allocated in Placement from `providers` (one per device).
fn vfs_from(count: u32, providers: &[uuid::Uuid]) -> PciRequest {
    let mut r = pci("vf", count, NumaPolicy::Legacy);
    r.rp_uuids = providers.to_vec();
    r
}

fn nvme() -> PciRequest {
    PciRequest {
        request_id: "req-nvme".into(),
        count: 1,
        specs: vec![[("vendor_id", "144d"), ("product_id", "a808")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()],
        alias_name: Some("nvme".into()),
        numa_policy: NumaPolicy::Legacy,
        requester_id: None,
        rp_uuids: Vec::new(),
        devices: Vec::new(),
    }
}

fn taken(o: &ClaimOutcome) -> Vec<String> {
    o.claim
        .assignments
        .iter()
        .map(|a| a.address.to_string())
        .collect()
}

#[test]
fn providers_are_the_pfs_and_the_nvme_with_stored_derived_uuids() {
    let t = placement_tracker();
    let uuids = t.pci_provider_uuids();
    let names: Vec<String> = uuids.keys().map(|a| a.to_string()).collect();
    assert_eq!(names, ["0000:01:00.0", "0000:3b:00.0", "0000:5e:00.0"]);
    // Derived from the node uuid and Nova's provider name, and stored by the first audit.
    let node = uuid::Uuid::parse_str("11111111-2222-3333-4444-555555555555").unwrap();
    assert_eq!(
        uuids[&addr("0000:3b:00.0")],
        uuid::Uuid::new_v5(&node, b"cmp1_0000:3B:00.0")
    );
    for (a, u) in &uuids {
        assert_eq!(t.state().pci_providers[a].uuid, *u);
        assert_eq!(
            t.state().pci_providers[a].origin,
            PciProviderOrigin::Derived
        );
    }
    // The ComputeNode's pools carry the provider as Nova's pool metadata does.
    let node_obj = t.compute_node(&t.usage(), time::OffsetDateTime::UNIX_EPOCH);
    let pools = node_obj.to_primitive()["nova_object.data"]["pci_device_pools"]["nova_object.data"]
        ["objects"]
        .clone();
    let rp_tags: Vec<String> = pools
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            p["nova_object.data"]["tags"]["rp_uuid"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(rp_tags.len(), 3);
    assert!(rp_tags.contains(&uuids[&addr("0000:5e:00.0")].to_string()));
}

#[test]
fn a_claim_takes_the_devices_of_the_providers_placement_allocated_from() {
    let mut t = placement_tracker();
    // Without a mapping the plainest pool goes first: 5e:00.0's VFs (no parent_ifname).
    let o = claim(
        &mut t,
        1,
        req(
            flavor(1, 1, 512, 1, &[]),
            vec![pci("vf", 2, NumaPolicy::Legacy)],
        ),
    )
    .unwrap();
    assert!(
        taken(&o).iter().all(|a| a.starts_with("0000:5e:")),
        "{:?}",
        taken(&o)
    );
    // Placement allocated both from 3b:00.0: rtrack takes 3b:00.0's, though 5e's come first.
    let a = provider(&t, "0000:3b:00.0");
    let o = claim(
        &mut t,
        2,
        req(flavor(1, 1, 512, 1, &[]), vec![vfs_from(2, &[a, a])]),
    )
    .unwrap();
    assert!(
        taken(&o).iter().all(|x| x.starts_with("0000:3b:")),
        "{:?}",
        taken(&o)
    );
    // One from each provider.
    let b = provider(&t, "0000:5e:00.0");
    let o = claim(
        &mut t,
        3,
        req(flavor(1, 1, 512, 1, &[]), vec![vfs_from(2, &[b, a])]),
    )
    .unwrap();
    let mut got = taken(&o);
    got.sort();
    assert!(
        got[0].starts_with("0000:3b:") && got[1].starts_with("0000:5e:"),
        "{got:?}"
    );
    // 5e:00.0 has one VF left: two from it are refused, naming Placement's allocation.
    let e = claim(
        &mut t,
        4,
        req(flavor(1, 1, 512, 1, &[]), vec![vfs_from(2, &[b, b])]),
    )
    .unwrap_err();
    let ClaimError::Refused(r) = &e else {
        panic!("{e}")
    };
    let pci = r.pci.as_ref().unwrap();
    assert!(pci
        .pools
        .iter()
        .any(|p| p.rejected == Some(crate::tracker::refusals::PoolRejection::PlacementAllocation)));
}

#[test]
fn a_port_request_is_not_held_to_providers() {
    // Nova does not put ports' devices in Placement: their rp_uuids are ignored.
    let mut t = placement_tracker();
    let mut port = vfs_from(1, &[uuid::Uuid::from_u128(9)]);
    port.alias_name = None;
    port.requester_id = Some("port-1".into());
    // Unknown providers are refused for alias requests only.
    let o = claim(&mut t, 1, req(flavor(1, 1, 512, 1, &[]), vec![port])).unwrap();
    assert_eq!(o.claim.assignments.len(), 1);
}

#[test]
fn unknown_and_vanished_providers_and_miscounted_mappings_are_refused_before_anything() {
    let mut t = placement_tracker();
    let before = t.state().clone();
    let e = claim(
        &mut t,
        1,
        req(
            flavor(1, 1, 512, 1, &[]),
            vec![vfs_from(1, &[uuid::Uuid::from_u128(77)])],
        ),
    )
    .unwrap_err();
    assert!(
        matches!(&e, ClaimError::Conflict { .. })
            && e.to_string()
                .contains("not one of this host's PCI providers"),
        "{e}"
    );
    let a = provider(&t, "0000:3b:00.0");
    let e = claim(
        &mut t,
        1,
        req(flavor(1, 1, 512, 1, &[]), vec![vfs_from(2, &[a])]),
    )
    .unwrap_err();
    assert!(
        matches!(&e, ClaimError::Invalid { .. }) && e.to_string().contains("asks for 2"),
        "{e}"
    );
    assert_eq!(t.state(), &before);
    // 5e:00.0 loses its VFs: its provider stands for nothing any more.
    let b = provider(&t, "0000:5e:00.0");
    let mut h = SyntheticHost::small();
    h.pfs[2].num_vfs = 0;
    t.audit(host(h), time::OffsetDateTime::UNIX_EPOCH);
    let e = claim(
        &mut t,
        1,
        req(flavor(1, 1, 512, 1, &[]), vec![vfs_from(1, &[b])]),
    )
    .unwrap_err();
    assert!(
        matches!(&e, ClaimError::Conflict { .. })
            && e.to_string().contains("0000:5e:00.0")
            && e.to_string().contains("no longer on this host"),
        "{e}"
    );
}

#[test]
fn adopted_providers_replace_the_derived_uuids_for_claims() {
    let mut t = placement_tracker();
    let derived = provider(&t, "0000:3b:00.0");
    let novas = uuid::Uuid::from_u128(0xabc);
    let changes = t.adopt_pci_providers(&[(addr("0000:3b:00.0"), novas)].into());
    assert_eq!(
        changes.pci_providers[&addr("0000:3b:00.0")]
            .as_ref()
            .unwrap()
            .origin,
        PciProviderOrigin::Adopted
    );
    assert_eq!(provider(&t, "0000:3b:00.0"), novas);
    // Adopting again changes nothing.
    assert!(t
        .adopt_pci_providers(&[(addr("0000:3b:00.0"), novas)].into())
        .is_empty());
    let o = claim(
        &mut t,
        1,
        req(flavor(1, 1, 512, 1, &[]), vec![vfs_from(1, &[novas])]),
    )
    .unwrap();
    assert!(taken(&o)[0].starts_with("0000:3b:"));
    let e = claim(
        &mut t,
        2,
        req(flavor(1, 1, 512, 1, &[]), vec![vfs_from(1, &[derived])]),
    )
    .unwrap_err();
    assert!(matches!(e, ClaimError::Conflict { .. }), "{e}");
    // A later audit keeps the adopted uuid.
    let host = t.host().clone();
    t.audit(host, time::OffsetDateTime::UNIX_EPOCH);
    assert_eq!(provider(&t, "0000:3b:00.0"), novas);
}

#[test]
fn a_one_time_use_device_stays_reserved_after_use_until_released() {
    let mut t = placement_tracker();
    let nvme_addr = addr("0000:01:00.0");
    assert!(t.one_time_used().is_empty());
    claim(&mut t, 1, req(flavor(1, 1, 512, 1, &[]), vec![nvme()])).unwrap();
    assert_eq!(t.one_time_used(), [nvme_addr].into());
    // Releasing a device in use is refused.
    let e = t.release_device(&nvme_addr).unwrap_err();
    assert!(e.to_string().contains("allocated"), "{e}");
    t.abort(&uuid(1)).unwrap();
    assert_eq!(t.state().devices[&nvme_addr].status, DeviceStatus::Reserved);
    assert_eq!(t.one_time_used(), [nvme_addr].into());
    assert!(
        t.pools().iter().all(|p| p.key.vendor_id != "144d"),
        "a reserved device is in no pool"
    );
    assert!(matches!(
        claim(&mut t, 2, req(flavor(1, 1, 512, 1, &[]), vec![nvme()])),
        Err(ClaimError::Refused(_))
    ));
    let changes = t.release_device(&nvme_addr).unwrap();
    assert_eq!(
        changes.devices[&nvme_addr].as_ref().unwrap().status,
        DeviceStatus::Available
    );
    assert!(t.one_time_used().is_empty());
    // Released by rtrack: its provider's reservation is lowered by rtrack, once.
    assert_eq!(t.one_time_unreserve(), [nvme_addr].into());
    claim(&mut t, 2, req(flavor(1, 1, 512, 1, &[]), vec![nvme()])).unwrap();
    assert!(t.one_time_unreserve().is_empty());
    assert!(matches!(
        t.release_device(&addr("0000:99:00.0")),
        Err(ClaimError::NotFound { .. })
    ));
}

/// Nova's way of cleaning a used one-time-use device: an operator lowers its provider's
/// `reserved` in Placement. rtrackd takes it as a release only once it has seen the
/// reservation there: from a report that finds it lowered, or from a claim Placement allocated
/// on that provider (which Placement refuses while the provider is reserved whole).
#[test]
fn a_one_time_use_device_is_cleaned_by_lowering_its_reservation_once_seen() {
    let mut t = placement_tracker();
    let nvme_addr = addr("0000:01:00.0");
    let nvme_rp = provider(&t, "0000:01:00.0");
    let from_placement = || {
        let mut r = nvme();
        r.rp_uuids = vec![nvme_rp];
        r
    };
    claim(&mut t, 1, req(flavor(1, 1, 512, 1, &[]), vec![nvme()])).unwrap();
    t.abort(&uuid(1)).unwrap();
    // Reserved after use, its reservation never seen in Placement: a lowered (never raised)
    // reservation is not a clean, and an allocation there is not one either.
    let reading = |whole: bool, read: bool, used: u64| {
        std::collections::BTreeMap::from([(nvme_addr, OneTimeUseReading { whole, read, used })])
    };
    let whole = |w: bool| reading(w, true, 0);
    let (_, noted) = t.note_one_time_use_reservations(&whole(false));
    assert!(noted.cleaned.is_empty());
    assert_eq!(t.state().devices[&nvme_addr].status, DeviceStatus::Reserved);
    assert!(matches!(
        claim(
            &mut t,
            2,
            req(flavor(1, 1, 512, 1, &[]), vec![from_placement()])
        ),
        Err(ClaimError::Refused(_))
    ));
    assert_eq!(t.one_time_used(), [nvme_addr].into());
    // Seen reserved whole: from now on Placement's reserved is the operator's.
    let in_pools = |t: &Tracker| t.pools().iter().any(|p| p.key.vendor_id == "144d");
    assert!(!in_pools(&t));
    // A whole reservation only written this cycle (Placement's usages not read), or read with
    // an allocation on the provider (made before the reservation landed): not taken as seen.
    for r in [reading(true, false, 0), reading(true, true, 1)] {
        let (changes, _) = t.note_one_time_use_reservations(&r);
        assert!(changes.is_empty());
    }
    let (changes, _) = t.note_one_time_use_reservations(&whole(true));
    assert!(
        changes.devices[&nvme_addr]
            .as_ref()
            .unwrap()
            .reservation_seen
    );
    assert!(t.one_time_used().is_empty());
    assert_eq!(t.one_time_kept(), [nvme_addr].into());
    // Placement holds the reservation now: the pools show the device, as Nova's do.
    assert!(in_pools(&t));
    // A claim not allocated from its provider is still refused...
    assert!(matches!(
        claim(&mut t, 2, req(flavor(1, 1, 512, 1, &[]), vec![nvme()])),
        Err(ClaimError::Refused(_))
    ));
    // ... one Placement allocated there proves the reservation was lowered: it is cleaned and
    // claimed in one commit, its new reservation not yet seen.
    let o = claim(
        &mut t,
        2,
        req(flavor(1, 1, 512, 1, &[]), vec![from_placement()]),
    )
    .unwrap();
    assert_eq!(taken(&o), ["0000:01:00.0"]);
    let d = &t.state().devices[&nvme_addr];
    assert_eq!(d.status, DeviceStatus::Allocated);
    assert!(!d.reservation_seen);
    assert_eq!(t.one_time_used(), [nvme_addr].into());
    // Used again and freed; a report finds the reservation, then finds it lowered: cleaned.
    t.note_one_time_use_reservations(&whole(true));
    t.abort(&uuid(2)).unwrap();
    assert_eq!(t.state().devices[&nvme_addr].status, DeviceStatus::Reserved);
    // A lowered value the cycle did not read (its cache may be old) is no clean.
    let (_, noted) = t.note_one_time_use_reservations(&reading(false, false, 0));
    assert!(noted.cleaned.is_empty());
    let (changes, noted) = t.note_one_time_use_reservations(&whole(false));
    assert_eq!(noted.cleaned, [nvme_addr]);
    assert_eq!(
        changes.devices[&nvme_addr].as_ref().unwrap().status,
        DeviceStatus::Available
    );
    assert!(t.one_time_used().is_empty() && t.one_time_kept().is_empty());
    claim(&mut t, 3, req(flavor(1, 1, 512, 1, &[]), vec![nvme()])).unwrap();
    // In use, a lowered reservation is no release.
    t.note_one_time_use_reservations(&whole(true));
    let (_, noted) = t.note_one_time_use_reservations(&whole(false));
    assert!(noted.cleaned.is_empty());
    assert_eq!(
        t.state().devices[&nvme_addr].status,
        DeviceStatus::Allocated
    );
}

/// Taking over a host from nova-compute: Nova reserved a used one-time-use device's provider
/// whole and forgot the device. rtrack, which finds it available, keeps Placement's
/// reservation, and once a report reads it with nothing allocated there the device is reserved
/// here too, until cleaned. After `rtrackctl pci release` the reservation is lowered once.
#[test]
fn a_one_time_use_device_nova_reserved_before_rtrack_stays_reserved() {
    let mut t = placement_tracker();
    let nvme_addr = addr("0000:01:00.0");
    let reading = |whole: bool, read: bool, used: u64| {
        std::collections::BTreeMap::from([(nvme_addr, OneTimeUseReading { whole, read, used })])
    };
    assert_eq!(
        t.state().devices[&nvme_addr].status,
        DeviceStatus::Available
    );
    assert!(t.one_time_used().is_empty() && t.one_time_unreserve().is_empty());
    // Only written, or with an allocation there (an instance not yet adopted): no conclusion.
    for r in [reading(true, false, 0), reading(true, true, 1)] {
        let (changes, noted) = t.note_one_time_use_reservations(&r);
        assert!(changes.is_empty() && noted.found_reserved.is_empty());
    }
    let (changes, noted) = t.note_one_time_use_reservations(&reading(true, true, 0));
    assert_eq!(noted.found_reserved, [nvme_addr]);
    let d = changes.devices[&nvme_addr].as_ref().unwrap();
    assert_eq!(d.status, DeviceStatus::Reserved);
    assert!(d.reservation_seen);
    assert_eq!(t.one_time_kept(), [nvme_addr].into());
    assert!(matches!(
        claim(&mut t, 1, req(flavor(1, 1, 512, 1, &[]), vec![nvme()])),
        Err(ClaimError::Refused(_))
    ));
    // Released by rtrack: lowered by rtrack, and a stale whole reading before that write is
    // not taken as Nova's reservation again.
    t.release_device(&nvme_addr).unwrap();
    assert_eq!(t.one_time_unreserve(), [nvme_addr].into());
    let (changes, _) = t.note_one_time_use_reservations(&reading(true, true, 0));
    assert!(changes.is_empty());
    let (changes, noted) = t.note_one_time_use_reservations(&reading(false, false, 0));
    assert!(noted.cleaned.is_empty() && noted.found_reserved.is_empty());
    assert!(
        !changes.devices[&nvme_addr]
            .as_ref()
            .unwrap()
            .unreserve_pending
    );
    assert!(t.one_time_unreserve().is_empty());
    assert_eq!(
        t.state().devices[&nvme_addr].status,
        DeviceStatus::Available
    );
}

#[test]
fn one_time_use_needs_pci_in_placement() {
    let text = PLACEMENT.replace("report_in_placement = true", "report_in_placement = false");
    let f = std::path::Path::new("test.toml");
    let e = Config::parse(&text, f)
        .unwrap()
        .validate(f)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("pci.device_spec[1].one_time_use") && e.contains("report_in_placement"),
        "{e}"
    );
}

/// Nova refuses a Placement-mapped request when one provider's devices sit in two pools (VFs of
/// one PF with and without a network interface: `_assert_one_pool_per_rp_uuid`); rtrack counts
/// them per provider (docs/differences.md).
#[test]
fn a_providers_devices_in_two_pools_serve_one_mapped_request() {
    let mut t = placement_tracker();
    // Half of 3b:00.0's VFs lose their network interface (bound to vfio-pci): two pools.
    let mut state = t.state().clone();
    for d in state.devices.values_mut().filter(|d| {
        d.address.to_string().as_str() >= "0000:3b:01.4"
            && d.parent_addr == Some(addr("0000:3b:00.0"))
    }) {
        std::sync::Arc::make_mut(d).parent_ifname = None;
    }
    t.replace_state(state);
    let a = provider(&t, "0000:3b:00.0");
    let pools: Vec<_> = t
        .pools()
        .into_iter()
        .filter(|p| p.rp_uuid == Some(a))
        .collect();
    assert_eq!(pools.len(), 2, "{pools:?}");
    assert!(pools.iter().all(|p| p.count() == 4));
    let o = claim(
        &mut t,
        1,
        req(flavor(1, 1, 512, 1, &[]), vec![vfs_from(6, &[a; 6])]),
    )
    .unwrap();
    assert_eq!(o.claim.assignments.len(), 6);
    assert!(taken(&o).iter().all(|x| x.starts_with("0000:3b:")));
}

/// Within a pool rtrack gives devices in Nova's order: the highest address first (Nova's pool
/// pops the device it appended last, and appends in discovery order), and a device given back
/// before any other (it goes to the end of Nova's list). Nova's functional tests assert which
/// VF a port gets, so this is not left to chance.
#[test]
fn devices_of_a_pool_are_given_in_novas_order() {
    let mut t = placement_tracker();
    let a = provider(&t, "0000:3b:00.0");
    let one_vf = |t: &mut Tracker, n: u32| {
        let o = claim(
            t,
            n,
            req(flavor(1, 1, 512, 1, &[]), vec![vfs_from(1, &[a])]),
        )
        .unwrap();
        taken(&o)
    };
    let o = claim(
        &mut t,
        1,
        req(flavor(1, 1, 512, 1, &[]), vec![vfs_from(2, &[a, a])]),
    )
    .unwrap();
    assert_eq!(taken(&o), ["0000:3b:01.7", "0000:3b:01.6"]);
    assert_eq!(one_vf(&mut t, 2), ["0000:3b:01.5"]);
    // Given back: instance 2's VF, then instance 1's two (in address order, as Nova re-adds).
    t.abort(&uuid(2)).unwrap();
    t.abort(&uuid(1)).unwrap();
    assert_eq!(one_vf(&mut t, 3), ["0000:3b:01.7"]);
    assert_eq!(one_vf(&mut t, 4), ["0000:3b:01.6"]);
    assert_eq!(one_vf(&mut t, 5), ["0000:3b:01.5"]);
    assert_eq!(one_vf(&mut t, 6), ["0000:3b:01.4"]);
}
