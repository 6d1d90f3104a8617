//! End to end, the PCI routes on a live `rtrackd` (the small synthetic host, with PCI in
//! Placement and a one-time-use NVMe drive): the tracked devices, a port attached to and detached
//! from a running instance, a claim held to the providers Placement allocated from, and a
//! one-time-use device reserved after use until released, over the API and with `rtrackctl`.
//! Every answer is checked against the OpenAPI document.

use crate::support;

use std::path::Path;
use std::process::{Command, Output};

use crate::support::{check_shape, env, request_spec, uuid, Daemon, Env};
use serde_json::{json, Value};

const RTRACKD: &str = env!("CARGO_BIN_EXE_rtrackd");
const RTRACKCTL: &str = env!("CARGO_BIN_EXE_rtrackctl");

const PCI: &str = r#"
[[pci.device_spec]]
vendor_id = "144d"
product_id = "a808"
one_time_use = true

[[pci.alias]]
name = "nvme"
vendor_id = "144d"
product_id = "a808"

[pci]
report_in_placement = true
"#;

fn start(e: &Env) -> Daemon {
    support::start_on(Path::new(RTRACKD), e, PCI)
}

fn ctl(socket: &Path, args: &[&str]) -> Output {
    Command::new(RTRACKCTL)
        .arg("--socket")
        .arg(socket)
        .args(args)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn schema(doc: &Value, path: &str, method: &str, status: &str) -> Value {
    doc["paths"][path][method]["responses"][status]["content"]["application/json"]["schema"].clone()
}

fn devices(d: &Daemon) -> Vec<Value> {
    let (s, v) = d.call("GET", "/v1/pci-devices", None);
    assert_eq!(s, 200, "{v}");
    v["pci_devices"].as_array().unwrap().clone()
}

fn device(d: &Daemon, address: &str) -> Value {
    devices(d)
        .into_iter()
        .find(|x| x["address"] == address)
        .unwrap_or_else(|| panic!("{address} is not tracked"))
}

fn port_requests(instance: &str, request_id: &str) -> Value {
    json!({"pci_requests": {
        "nova_object.name": "InstancePCIRequests", "nova_object.namespace": "nova",
        "nova_object.version": "1.1",
        "nova_object.data": {"instance_uuid": instance, "requests": [{
            "nova_object.name": "InstancePCIRequest", "nova_object.namespace": "nova",
            "nova_object.version": "1.4", "nova_object.data": {
                "count": 1, "spec": [{"vendor_id": "8086", "product_id": "1889"}],
                "alias_name": null, "is_new": false, "request_id": request_id,
                "requester_id": "port-1"}}]}}})
}

#[test]
fn ports_attach_and_detach_over_the_api_and_rtrackctl() {
    let e = env();
    let d = start(&e);
    let (_, doc) = d.call("GET", "/v1/openapi.json", None);
    let (s, v) = d.call("GET", "/v1/pci-devices", None);
    assert_eq!(s, 200);
    check_shape(
        &doc,
        &schema(&doc, "/v1/pci-devices", "get", "200"),
        &v,
        "devices",
    );
    let a = uuid(1);
    let (s, v) = d.call(
        "POST",
        "/v1/claims",
        Some(&json!({"request_spec": request_spec(&a, 1, 1, 512, 1, None)})),
    );
    assert_eq!(s, 201, "{v}");
    let req_id = "4d5e7d1c-0000-4000-8000-000000000001";
    let (s, v) = d.call(
        "POST",
        &format!("/v1/instances/{a}/pci-requests"),
        Some(&port_requests(&a, req_id)),
    );
    assert_eq!(s, 201, "{v}");
    check_shape(
        &doc,
        &schema(&doc, "/v1/instances/{uuid}/pci-requests", "post", "201"),
        &v,
        "attach",
    );
    let vf = v["pci_devices"][0]["address"].as_str().unwrap().to_string();
    assert_eq!(device(&d, &vf)["status"], "allocated");
    assert_eq!(device(&d, &vf)["instance_uuid"], a.as_str());
    // Retried: the same device, 200.
    let (s, again) = d.call(
        "POST",
        &format!("/v1/instances/{a}/pci-requests"),
        Some(&port_requests(&a, req_id)),
    );
    assert_eq!(s, 200, "{again}");
    assert_eq!(again["pci_devices"], v["pci_devices"]);
    // The claim shows the device; the instance's request holds the port's.
    let (_, c) = d.call("GET", &format!("/v1/claims/{a}"), None);
    assert_eq!(c["pci_devices"][0]["address"], vf.as_str());
    // Another instance's requests, or junk, are refused naming the field.
    let (s, v) = d.call(
        "POST",
        &format!("/v1/instances/{a}/pci-requests"),
        Some(&port_requests(&uuid(2), req_id)),
    );
    assert_eq!(s, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("pci_requests.instance_uuid"),
        "{v}"
    );
    let (s, v) = d.call(
        "POST",
        &format!("/v1/instances/{a}/pci-requests"),
        Some(&json!({"pci_requests": 7})),
    );
    assert_eq!(s, 400, "{v}");
    // Detach frees it.
    let (s, v) = d.call(
        "DELETE",
        &format!("/v1/instances/{a}/pci-requests/{req_id}"),
        None,
    );
    assert_eq!(s, 200, "{v}");
    check_shape(
        &doc,
        &schema(
            &doc,
            "/v1/instances/{uuid}/pci-requests/{request_id}",
            "delete",
            "200",
        ),
        &v,
        "detach",
    );
    assert_eq!(device(&d, &vf)["status"], "available");
    let (s, v) = d.call(
        "DELETE",
        &format!("/v1/instances/{a}/pci-requests/{req_id}"),
        None,
    );
    assert_eq!(s, 404, "{v}");

    // The same through rtrackctl.
    let sock = d.socket.clone();
    let o = ctl(
        &sock,
        &[
            "pci",
            "attach",
            &a,
            "--port",
            "port-9",
            "--physical-network",
            "physnet1",
        ],
    );
    // No device spec tags physnet1 here: refused (exit 3), nothing attached.
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    let o = ctl(&sock, &["pci", "list"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(
        out.contains("ADDRESS") && out.contains("0000:5e:01.0") && out.contains("one-time-use"),
        "{out}"
    );
    let o = ctl(&sock, &["pci", "detach", &a, "nope"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
}

#[test]
fn claims_follow_placement_and_one_time_use_devices_wait_for_release() {
    let e = env();
    let d = start(&e);
    let (_, doc) = d.call("GET", "/v1/openapi.json", None);
    let providers: std::collections::BTreeMap<String, String> = devices(&d)
        .iter()
        .filter_map(|x| {
            Some((
                x["address"].as_str()?.to_string(),
                x["resource_provider_uuid"].as_str()?.to_string(),
            ))
        })
        .collect();
    // PF 3b:00.0's VFs and PF 5e:00.0's VFs are two providers; the NVMe drive is a third.
    let pf_a = providers["0000:3b:01.0"].clone();
    let pf_b = providers["0000:5e:01.0"].clone();
    assert_ne!(pf_a, pf_b);
    assert!(providers.contains_key("0000:01:00.0"));
    // Placement allocated both VFs from 3b:00.0: rtrack takes those, not 5e:00.0's (first
    // without a mapping).
    let a = uuid(1);
    let rid = "aaaaaaaa-1111-4000-8000-000000000001";
    let (s, v) = d.call(
        "POST",
        "/v1/claims",
        Some(&support::mapped_claim(&a, "vf", rid, &[&pf_a, &pf_a])),
    );
    assert_eq!(s, 201, "{v}");
    for dev in v["pci_devices"].as_array().unwrap() {
        assert!(
            dev["address"].as_str().unwrap().starts_with("0000:3b:"),
            "{v}"
        );
    }
    // A provider rtrack does not have: 409 naming it, nothing claimed.
    let b = uuid(2);
    let stranger = "cccccccc-0000-4000-8000-000000000000";
    let (s, v) = d.call(
        "POST",
        "/v1/claims",
        Some(&support::mapped_claim(
            &b,
            "vf",
            "bbbbbbbb-1111-4000-8000-000000000001",
            &[stranger],
        )),
    );
    assert_eq!(s, 409, "{v}");
    assert_eq!(v["error"]["code"], "conflict");
    assert!(
        v["error"]["message"].as_str().unwrap().contains(stranger),
        "{v}"
    );
    assert_eq!(d.call("GET", &format!("/v1/claims/{b}"), None).0, 404);

    // One-time use: used, then reserved after the abort until released.
    let c = uuid(3);
    let (s, v) = d.call(
        "POST",
        "/v1/claims",
        Some(&json!({"request_spec": request_spec(&c, 1, 1, 512, 1, Some("nvme:1"))})),
    );
    assert_eq!(s, 201, "{v}");
    let (s, v) = d.call("POST", "/v1/pci-devices/0000:01:00.0/release", None);
    assert_eq!(s, 409, "in use: {v}");
    assert_eq!(d.call("DELETE", &format!("/v1/claims/{c}"), None).0, 200);
    assert_eq!(device(&d, "0000:01:00.0")["status"], "reserved");
    let metric = |d: &Daemon| -> String {
        let r = rtrack::cli::client::request(
            &d.socket,
            "GET",
            "/metrics",
            None,
            std::time::Duration::from_secs(10),
        )
        .unwrap();
        String::from_utf8_lossy(&r.body).into_owned()
    };
    assert!(metric(&d).contains("rtrack_pci_devices_reserved 1"));
    let (s, v) = d.call(
        "POST",
        "/v1/claims",
        Some(&json!({"request_spec": request_spec(&uuid(4), 1, 1, 512, 1, Some("nvme:1"))})),
    );
    assert_eq!(s, 409, "a reserved device is not given: {v}");
    let o = ctl(&d.socket, &["pci", "list", "--one-time-use"]);
    let out = text(&o.stdout);
    assert!(
        out.contains("0000:01:00.0") && out.contains("reserved") && !out.contains("0000:3b:"),
        "{out}"
    );
    let o = ctl(&d.socket, &["pci", "release", "0000:01:00.0"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(device(&d, "0000:01:00.0")["status"], "available");
    assert!(metric(&d).contains("rtrack_pci_devices_reserved 0"));
    let (s, v) = d.call("POST", "/v1/pci-devices/0000:01:00.0/release", None);
    assert_eq!(s, 409, "{v}");
    // An address that cannot name a device names none.
    let (s, v) = d.call("POST", "/v1/pci-devices/zz/release", None);
    assert_eq!(s, 404, "{v}");
    let (s, v) = d.call("POST", "/v1/pci-devices/0000:99:00.0/release", None);
    assert_eq!(s, 404, "{v}");
    check_shape(
        &doc,
        &json!({"$ref": "#/components/schemas/Error"}),
        &v,
        "error",
    );
    // The ComputeNode's pools name their providers.
    let (_, node) = d.call("GET", "/v1/compute-node", None);
    let pools = node["nova_object.data"]["pci_device_pools"]["nova_object.data"]["objects"]
        .as_array()
        .unwrap()
        .clone();
    assert!(
        pools
            .iter()
            .all(|p| p["nova_object.data"]["tags"]["rp_uuid"].is_string()),
        "{pools:?}"
    );
}

#[test]
fn provider_uuids_are_kept_across_restarts_and_a_host_rename() {
    let e = env();
    let before: Vec<Value> = {
        let d = start(&e);
        devices(&d)
    };
    // Renamed, the providers' names change but not their uuids (Placement's allocations and
    // the scheduler's mapping refer to the uuids).
    let config = support::base_config(&e.root, &e.dir).replace(
        "hypervisor_hostname = \"cmp1\"",
        "hypervisor_hostname = \"cmp1-renamed\"",
    ) + PCI;
    let d = Daemon::start_with(Path::new(RTRACKD), &e.dir, &config, &[]);
    let after = devices(&d);
    let key = |v: &[Value]| -> Vec<(String, String)> {
        v.iter()
            .map(|x| {
                (
                    x["address"].to_string(),
                    x["resource_provider_uuid"].to_string(),
                )
            })
            .collect()
    };
    assert!(before
        .iter()
        .any(|x| x["resource_provider_uuid"].is_string()));
    assert_eq!(key(&before), key(&after));
}
