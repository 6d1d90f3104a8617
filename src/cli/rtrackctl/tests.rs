//! Flags to bodies, bodies to the tracker's requests, and the tables.
use super::body::{address_segment, instance_segment, path_segment};
use super::*;

fn args(extra: &[&str]) -> ClaimArgs {
    let mut argv = vec!["rtrackctl", "claim"];
    argv.extend_from_slice(extra);
    match Cli::try_parse_from(argv).unwrap().command {
        Command::Claim(a) => a,
        other => panic!("{other:?}"),
    }
}

#[test]
fn flags_become_a_request_spec_the_tracker_reads() {
    let a = args(&[
        "--instance",
        "6f8b1f5e-3c6a-4e0b-9a57-2b1f1d0c0a11",
        "--vcpus",
        "4",
        "--memory-mb",
        "8192",
        "--disk-gb",
        "40",
        "--pci-alias",
        "vf:2",
    ]);
    let body = claim_body(&a.request).unwrap();
    let parsed: crate::api::bodies::ClaimBody = serde_json::from_value(body).unwrap();
    let mut aliases = crate::tracker::pci::AliasTable::new();
    crate::tracker::pci::alias::add_alias(
        &mut aliases,
        [
            ("name", "vf"),
            ("vendor_id", "8086"),
            ("product_id", "1889"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
    )
    .unwrap();
    let p = parsed.parse(&aliases).map_err(|e| e.to_string()).unwrap();
    assert_eq!(p.request.flavor.vcpus, 4);
    assert_eq!(p.request.flavor.memory_mb, 8192);
    assert_eq!(p.request.flavor.root_gb, 40);
    assert_eq!(p.request.pci_requests.len(), 1);
    assert_eq!(p.request.pci_requests[0].count, 2);
    // Same flags, same flavor id (a retry is the same claim); other sizes, another.
    let again = claim_body(&a.request).unwrap();
    assert_eq!(
        again["request_spec"]["nova_object.data"]["flavor"]["nova_object.data"]["id"],
        claim_body(&a.request).unwrap()["request_spec"]["nova_object.data"]["flavor"]
            ["nova_object.data"]["id"]
    );
}

#[test]
fn bad_flags_are_usage_errors() {
    let e = claim_body(&args(&["--vcpus", "1", "--memory-mb", "1"]).request).unwrap_err();
    assert_eq!(e.code, EXIT_USAGE);
    let e = claim_body(
        &args(&[
            "--instance",
            "6f8b1f5e-3c6a-4e0b-9a57-2b1f1d0c0a11",
            "--vcpus",
            "1",
            "--memory-mb",
            "1",
            "--pci-alias",
            "vf",
        ])
        .request,
    )
    .unwrap_err();
    assert!(e.message.contains("NAME:COUNT"), "{}", e.message);
    assert!(path_segment("a/b").is_err());
    // Ids the daemon would answer 404 for are usage errors here.
    for bad in [instance_segment("None"), address_segment("zz")] {
        assert_eq!(bad.unwrap_err().code, EXIT_USAGE);
    }
    let uuid = "6F8B1F5E-3C6A-4E0B-9A57-2B1F1D0C0A11";
    assert_eq!(instance_segment(uuid).unwrap(), uuid);
    assert_eq!(address_segment("0000:3b:00.1").unwrap(), "0000%3A3b%3A00.1");
    assert!(Cli::try_parse_from(["rtrackctl", "claim", "--vcpus", "x"]).is_err());
}

#[test]
fn tables_align() {
    let t = table(
        &["A", "NUM"],
        &[
            vec!["x".into(), "1".into()],
            vec!["long".into(), "100".into()],
        ],
    );
    assert_eq!(t, "A     NUM\nx       1\nlong  100\n");
}
