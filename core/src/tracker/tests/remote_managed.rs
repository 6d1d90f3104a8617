//! Remote-managed devices (SmartNIC DPUs) follow Nova's rules: a remote-managed spec tracks only
//! VFs whose card has a serial number in its VPD; such devices go only to requests that ask for
//! `remote_managed`; a spec that would make a PF remote-managed is refused against the host.

use super::*;
use crate::pci_policy::spec::remote_managed_problems;
use crate::tracker::refusals::PoolRejection;

fn rm_tracker(spec: &str) -> (Tracker, HostInventory) {
    let text = format!(
        "[[pci.device_spec]]\n{spec}\n[[pci.device_spec]]\nvendor_id = \"8086\"\nproduct_id = \"1889\"\nphysical_network = \"physnet1\"\n"
    );
    let f = std::path::Path::new("test.toml");
    let cfg = Config::parse(&text, f).unwrap().validate(f).unwrap();
    let mut h = SyntheticHost::small();
    // The card of 3b:00.0 has a serial number; 5e:00.0's has no VPD.
    h.pfs[0].card_serial = Some("MT2034X00001".into());
    let dir = scratch_dir();
    h.write(dir.path());
    let opts = ProbeOptions {
        pci_vpd: true,
        ..ProbeOptions::default()
    };
    let inv = probe_host(&HostRoot::under(dir.path()), &opts).unwrap();
    let settings = settings_for(cfg);
    let mut t = Tracker::new(settings, inv.clone(), TrackerState::default());
    t.audit(inv.clone(), time::OffsetDateTime::UNIX_EPOCH);
    (t, inv)
}

fn port(n: u32, remote_managed: Option<&str>) -> PciRequest {
    let mut spec: std::collections::BTreeMap<String, String> =
        [("physical_network".to_string(), "physnet1".to_string())].into();
    if let Some(v) = remote_managed {
        spec.insert("remote_managed".into(), v.into());
    }
    PciRequest {
        request_id: format!("port-req-{n}"),
        count: 1,
        specs: vec![spec],
        alias_name: None,
        numa_policy: NumaPolicy::Legacy,
        requester_id: Some(format!("port-{n}")),
        rp_uuids: Vec::new(),
        devices: Vec::new(),
    }
}

#[test]
fn remote_managed_vfs_need_a_card_serial_and_a_request_that_asks_for_them() {
    let (mut t, _) = rm_tracker(
        "vendor_id = \"8086\"\nproduct_id = \"1889\"\nphysical_network = \"physnet1\"\nremote_managed = \"true\"\naddress = \"0000:3b:*.*\"",
    );
    // 3b:00.0's VFs are remote-managed; 5e:00.0's (no serial number) fall to the second spec.
    let remote: Vec<_> = t
        .state()
        .devices
        .values()
        .filter(|d| d.tags.get("remote_managed").map(String::as_str) == Some("true"))
        .map(|d| d.address.to_string())
        .collect();
    assert_eq!(remote.len(), 8, "{remote:?}");
    assert!(remote.iter().all(|a| a.starts_with("0000:3b:")));
    // A port without remote_managed never gets one of them.
    let o = claim(
        &mut t,
        1,
        req(flavor(1, 1, 512, 0, &[]), vec![port(1, None)]),
    )
    .unwrap();
    assert!(o.claim.assignments[0]
        .address
        .to_string()
        .starts_with("0000:5e:"));
    // A remote-managed port gets one (Nova's tag values, compared as strings, any case).
    let o = claim(
        &mut t,
        2,
        req(flavor(1, 1, 512, 0, &[]), vec![port(2, Some("True"))]),
    )
    .unwrap();
    assert!(o.claim.assignments[0]
        .address
        .to_string()
        .starts_with("0000:3b:"));
    // Once 5e:00.0's VFs are gone, a plain port is refused, naming why the others were left.
    let mut n = 10;
    while claim(
        &mut t,
        n,
        req(flavor(1, 1, 512, 0, &[]), vec![port(n, None)]),
    )
    .is_ok()
    {
        n += 1;
    }
    let e = claim(
        &mut t,
        n,
        req(flavor(1, 1, 512, 0, &[]), vec![port(n, None)]),
    )
    .unwrap_err();
    let ClaimError::Refused(r) = &e else {
        panic!("{e}")
    };
    assert!(r
        .pci
        .as_ref()
        .unwrap()
        .pools
        .iter()
        .any(|p| p.rejected == Some(PoolRejection::UnrequestedRemoteManaged)));
}

#[test]
fn a_remote_managed_pf_or_a_missing_interface_is_refused_against_the_host() {
    let (t, inv) =
        rm_tracker("vendor_id = \"8086\"\nproduct_id = \"1592\"\nremote_managed = \"yes\"");
    let problems = remote_managed_problems(&t.settings().policy.device_specs, &inv.pci_devices);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].0, "pci.device_spec[0].remote_managed");
    assert!(problems[0].1.contains("only VFs"), "{problems:?}");
    let (t, inv) = rm_tracker("devname = \"ens9f9\"\nremote_managed = \"true\"");
    let problems = remote_managed_problems(&t.settings().policy.device_specs, &inv.pci_devices);
    assert_eq!(problems[0].0, "pci.device_spec[0].devname");
    // The VFs' product id is fine.
    let (t, inv) =
        rm_tracker("vendor_id = \"8086\"\nproduct_id = \"1889\"\nremote_managed = \"true\"");
    assert!(
        remote_managed_problems(&t.settings().policy.device_specs, &inv.pci_devices).is_empty()
    );
}
