//! Body parsing: what each body takes, and the errors that name the field.
use super::*;
use serde_json::json;

fn flavor() -> Value {
    json!({
        "nova_object.name": "Flavor", "nova_object.namespace": "nova",
        "nova_object.version": "1.2",
        "nova_object.data": {"id": 7, "flavorid": "m1", "name": "m1", "vcpus": 2,
            "memory_mb": 1024, "root_gb": 10, "ephemeral_gb": 0, "swap": 0,
            "extra_specs": {}}
    })
}

fn spec(uuid: &str) -> Value {
    json!({
        "nova_object.name": "RequestSpec", "nova_object.namespace": "nova",
        "nova_object.version": "1.14",
        "nova_object.data": {"instance_uuid": uuid, "project_id": "p", "user_id": "u",
            "flavor": flavor(), "num_instances": 1}
    })
}

const U: &str = "6f8b1f5e-3c6a-4e0b-9a57-2b1f1d0c0a11";

#[test]
fn a_claim_takes_the_spec_primitive_or_the_legacy_dicts() {
    let body: ClaimBody = parse_body(
        json!({"request_spec": spec(U)}).to_string().as_bytes(),
        "claim",
    )
    .unwrap();
    let p = body.parse(&AliasTable::new()).unwrap();
    assert_eq!(p.info.uuid, U);
    assert_eq!(p.info.project_id.as_deref(), Some("p"));
    assert_eq!(p.request.flavor.vcpus, 2);

    let legacy = json!({"legacy": {
        "request_spec": {"instance_type": flavor(), "instance_properties": {"uuid": U, "project_id": "p"}, "num_instances": 1},
        "filter_properties": {}
    }});
    let body: ClaimBody = parse_body(legacy.to_string().as_bytes(), "claim").unwrap();
    let p = body.parse(&AliasTable::new()).unwrap();
    assert_eq!(p.info.uuid, U);
    assert_eq!(p.request.flavor.memory_mb, 1024);
}

#[test]
fn the_specs_networks_bind_a_numa_guest_only() {
    let mut sp = spec(U);
    sp["nova_object.data"]["network_metadata"] = json!({
        "nova_object.name": "NetworkMetadata", "nova_object.namespace": "nova",
        "nova_object.version": "1.0",
        "nova_object.data": {"physnets": ["foo"], "tunneled": true}});
    let body: ClaimBody = parse_body(
        json!({"request_spec": sp.clone()}).to_string().as_bytes(),
        "claim",
    )
    .unwrap();
    let p = body.parse(&AliasTable::new()).unwrap();
    assert!(
        p.request.numa.is_none(),
        "no NUMA topology: nothing to bind"
    );
    sp["nova_object.data"]["flavor"]["nova_object.data"]["extra_specs"] =
        json!({"hw:numa_nodes": "1"});
    let body: ClaimBody =
        parse_body(json!({"request_spec": sp}).to_string().as_bytes(), "claim").unwrap();
    let n = body
        .parse(&AliasTable::new())
        .unwrap()
        .request
        .numa
        .unwrap();
    assert_eq!(
        n.networks.physnets.iter().collect::<Vec<_>>(),
        [&"foo".to_string()]
    );
    assert!(n.networks.tunneled);
}

#[test]
fn a_placed_claim_names_what_it_lacks() {
    let placed = |extra: Value, numa_guest: bool| {
        let mut s = spec(U);
        if numa_guest {
            s["nova_object.data"]["flavor"]["nova_object.data"]["extra_specs"] =
                json!({"hw:cpu_policy": "dedicated"});
        }
        let mut b = json!({"request_spec": s});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        parse_body::<ClaimBody>(b.to_string().as_bytes(), "claim")
            .unwrap()
            .parse(&AliasTable::new())
    };
    let e = placed(json!({"as_placed": {}}), true).err().unwrap();
    assert_eq!(e.code, "conflict", "{e}");
    assert_eq!(e.details["field"], "instance.numa_topology", "{e}");
    let bad = json!({"as_placed": {"devices": [{"request_id": "r1", "address": "3b:02.x"}]}});
    let e = placed(bad, false).err().unwrap();
    assert_eq!(e.details["field"], "as_placed.devices[0].address", "{e}");
    let ok = json!({"as_placed": {"devices": [{"request_id": "r1", "address": "0000:3b:02.1"}]}});
    let p = placed(ok, false).unwrap();
    assert_eq!(p.info.placed_devices["r1"][0].to_string(), "0000:3b:02.1");
    assert!(p.info.placed_numa.is_none());
}

#[test]
fn bad_bodies_name_what_is_wrong() {
    let e = parse_body::<ClaimBody>(b"{\"request_spec\": ", "claim").unwrap_err();
    assert_eq!(e.code, "malformed_json");
    let e = parse_body::<ClaimBody>(b"[]", "claim").unwrap_err();
    assert!(e.message.contains("expected a JSON object"), "{e}");
    let e = parse_body::<ClaimBody>(b"{\"dry_rn\": true}", "claim").unwrap_err();
    assert!(e.message.contains("unknown field `dry_rn`"), "{e}");
    let e = parse_body::<ClaimBody>(b"", "claim").unwrap_err();
    assert!(e.message.contains("empty"), "{e}");

    let body: ClaimBody = parse_body(b"{}", "claim").unwrap();
    let e = body.parse(&AliasTable::new()).err().unwrap();
    assert!(e.message.starts_with("request_spec: is missing"), "{e}");

    let mut s = spec(U);
    s["nova_object.data"]["flavor"]["nova_object.data"]["vcpus"] = json!("two");
    let body = ClaimBody {
        request_spec: Some(s),
        ..ClaimBody::default()
    };
    let e = body.parse(&AliasTable::new()).err().unwrap();
    assert!(
        e.message
            .starts_with("request_spec: RequestSpec.data.flavor"),
        "{e}"
    );
    assert!(e.message.contains("vcpus"), "{e}");

    let body = ClaimBody {
        request_spec: Some(spec(U)),
        instance: Some(InstanceBody {
            uuid: Some("11111111-1111-1111-1111-111111111111".into()),
            ..InstanceBody::default()
        }),
        ..ClaimBody::default()
    };
    let e = body.parse(&AliasTable::new()).err().unwrap();
    assert!(e.message.contains("differs"), "{e}");
}

#[test]
fn dry_run_flags_are_checked() {
    let q = |s: Option<&str>| DryRunQuery {
        dry_run: s.map(str::to_string),
    };
    assert!(!q(None).flag().unwrap());
    assert!(q(Some("true")).flag().unwrap());
    assert!(!q(Some("false")).flag().unwrap());
    assert!(q(Some("yes please")).flag().is_err());
}

/// JSON and the document's JSON Schema do not tell 2 from 2.0: an integral number written
/// with a fraction is the integer wherever one is expected; any other fraction is refused.
#[test]
fn integral_numbers_are_integers_however_written() {
    let mut s = spec(U);
    s["nova_object.data"]["flavor"]["nova_object.data"]["vcpus"] = json!(2.0);
    s["nova_object.data"]["num_instances"] = json!(1.0);
    let written = json!({"request_spec": s, "migration_id": 7.0,
        "allocations": {U: {"resources": {"VCPU": 2.0}}}});
    let body: MigrationBody = parse_body(written.to_string().as_bytes(), "move").unwrap();
    assert_eq!(body.migration_id, Some(7));
    let allocations = body.allocations.clone().unwrap();
    assert_eq!(allocations[U].resources["VCPU"], 2);
    let as_integers: MigrationBody = parse_body(
        json!({"request_spec": spec(U), "migration_id": 7,
            "allocations": {U: {"resources": {"VCPU": 2}}}})
        .to_string()
        .as_bytes(),
        "move",
    )
    .unwrap();
    assert_eq!(
        serde_json::to_value(&body).unwrap(),
        serde_json::to_value(&as_integers).unwrap()
    );
    let totals: crate::api::disk_facts::DiskTotals =
        parse_body(br#"{"total": 229, "used": 484.0, "free": 1e6}"#, "refresh").unwrap();
    assert_eq!((totals.used, totals.free), (484, 1_000_000));
    // Not integers: still refused, naming the field.
    let e = parse_body::<MigrationBody>(br#"{"migration_id": 7.5}"#, "move").unwrap_err();
    assert_eq!(e.details["field"], "migration_id", "{e}");
    for used in [
        "1e300",
        "9007199254740992.0",
        "-9223372036854775809",
        "18446744073709551616",
    ] {
        let e = parse_body::<crate::api::disk_facts::DiskTotals>(
            format!(r#"{{"total": 229, "used": {used}, "free": 0}}"#).as_bytes(),
            "refresh",
        )
        .unwrap_err();
        assert_eq!(e.details["field"], "used", "{used}: {e}");
    }
    // An integer past i64's range (parsed as a float that rounds to i64::MIN) is not i64::MIN.
    let mut s = spec(U);
    s["nova_object.data"]["num_instances"] = json!(1);
    let text = json!({"request_spec": s}).to_string().replace(
        r#""num_instances":1"#,
        r#""num_instances":-9223372036854775809"#,
    );
    let body: ClaimBody = parse_body(text.as_bytes(), "claim").unwrap();
    let e = body.parse(&AliasTable::new()).err().unwrap();
    assert!(e.message.contains("num_instances"), "{e}");
    let mut s = spec(U);
    s["nova_object.data"]["flavor"]["nova_object.data"]["vcpus"] = json!(2.5);
    let body = ClaimBody {
        request_spec: Some(s),
        ..ClaimBody::default()
    };
    let e = body.parse(&AliasTable::new()).err().unwrap();
    assert!(
        e.message.contains("expected integer, got number 2.5"),
        "{e}"
    );
}
