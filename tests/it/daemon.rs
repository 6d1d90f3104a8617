//! End to end: `rtrackd` on a synthetic fixture root (8 CPUs, 16 GiB, 12 tracked VFs) with a
//! temporary state directory and socket, driven over its API and with `rtrackctl`.

use crate::support;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::{base_config, check_shape, claim, env, poll, request_spec, uuid, Daemon, Env};
use nix::sys::signal::Signal;
use serde_json::{json, Value};

const RTRACKD: &str = env!("CARGO_BIN_EXE_rtrackd");
const RTRACKCTL: &str = env!("CARGO_BIN_EXE_rtrackctl");

fn start(e: &Env, extra: &str) -> Daemon {
    support::start_on(Path::new(RTRACKD), e, extra)
}

fn assert_error(v: &Value, code: &str) {
    assert_eq!(v["error"]["code"], code, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{v}"
    );
    assert!(v["error"].get("details").is_some(), "{v}");
}

#[test]
fn claims_dry_runs_refusals_and_moves_over_the_api() {
    let e = env();
    let d = start(&e, "");
    let (s, u) = d.call("GET", "/v1/usage", None);
    assert_eq!(s, 200);
    let vcpu = &u["resources"]["VCPU"];
    assert_eq!(vcpu["total"], 8);
    assert_eq!(vcpu["capacity"], 32);
    let mem = &u["resources"]["MEMORY_MB"];
    assert_eq!(mem["reserved"], 512);
    assert_eq!(mem["capacity"], mem["total"].as_i64().unwrap() - 512);
    for class in ["VCPU", "MEMORY_MB", "DISK_GB"] {
        for key in ["total", "reserved", "capacity", "used", "free"] {
            assert!(u["resources"][class][key].is_i64(), "{class}.{key} in {u}");
        }
    }
    let vf_free: i64 = u["pci_pools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["free"].as_i64().unwrap())
        .sum();
    assert_eq!(vf_free, 12);

    // Granted, then the same request again is the same claim.
    let a = uuid(1);
    let (s, c) = d.call(
        "POST",
        "/v1/claims",
        Some(&claim(&a, 2, 1024, 1, Some("vf:2"))),
    );
    assert_eq!(s, 201, "{c}");
    assert_eq!(c["resources"]["VCPU"], 2);
    assert_eq!(c["pci_devices"].as_array().unwrap().len(), 2);
    let (s, again) = d.call(
        "POST",
        "/v1/claims",
        Some(&claim(&a, 2, 1024, 1, Some("vf:2"))),
    );
    assert_eq!(s, 200);
    assert_eq!(again["existing"], true);
    assert_eq!(again["pci_devices"], c["pci_devices"]);
    // The same instance asking for something else conflicts.
    let (s, v) = d.call("POST", "/v1/claims", Some(&claim(&a, 4, 1024, 1, None)));
    assert_eq!(s, 409);
    assert_error(&v, "conflict");

    // Dry runs: fits / does not fit, and neither leaves anything.
    let b = uuid(2);
    let (s, v) = d.call(
        "POST",
        "/v1/claims?dry_run=true",
        Some(&claim(&b, 2, 1024, 1, None)),
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["fits"], true);
    let (s, v) = d.call(
        "POST",
        "/v1/claims?dry_run=true",
        Some(&claim(&b, 2, 1 << 20, 1, None)),
    );
    assert_eq!(s, 409);
    assert_error(&v, "claim_refused");
    assert_eq!(v["error"]["details"]["resources"][0]["class"], "MEMORY_MB");
    assert_eq!(v["error"]["details"]["resources"][0]["requested"], 1 << 20);
    assert_eq!(d.call("GET", &format!("/v1/claims/{b}"), None).0, 404);
    assert_eq!(d.usage_of("VCPU").0, 2);

    // Refused for PCI: the reason names the request and the pools.
    let (s, v) = d.call(
        "POST",
        "/v1/claims",
        Some(&claim(&b, 1, 512, 1, Some("vf:20"))),
    );
    assert_eq!(s, 409);
    assert_error(&v, "claim_refused");
    let pci = &v["error"]["details"]["pci"];
    assert_eq!(pci["requested"], 20);
    assert_eq!(pci["usable"], 10);
    assert!(
        v["error"]["message"].as_str().unwrap().contains("alias vf"),
        "{v}"
    );
    assert_eq!(d.call("GET", &format!("/v1/claims/{b}"), None).0, 404);
    assert_eq!(d.usage_of("VCPU").0, 2);

    // Legacy dicts.
    let l = uuid(3);
    let legacy = json!({"legacy": {
        "request_spec": {
            "instance_type": request_spec(&l, 1, 1, 256, 1, None)["nova_object.data"]["flavor"].clone(),
            "instance_properties": {"uuid": l, "project_id": "p2", "user_id": "u2"},
            "num_instances": 1
        },
        "filter_properties": {"scheduler_hints": {}}
    }});
    let (s, v) = d.call("POST", "/v1/claims", Some(&legacy));
    assert_eq!(s, 201, "{v}");
    assert_eq!(d.usage_of("VCPU").0, 3);

    // An incoming resize: claimed at once, reverted, then another confirmed.
    let m = uuid(4);
    let body = json!({
        "instance": {"uuid": m, "host": "cmp9", "node": "cmp9", "vm_state": "active"},
        "request_spec": request_spec(&m, 2, 4, 2048, 1, Some("vf:1")),
        "current": {"request_spec": request_spec(&m, 1, 2, 1024, 1, None)},
    });
    let (s, v) = d.call("POST", "/v1/migrations", Some(&body));
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["migration"]["migration_type"], "resize");
    assert_eq!(v["migration"]["status"], "pre-migrating");
    assert_eq!(v["claim"]["pci_devices"].as_array().unwrap().len(), 1);
    let id = v["migration"]["id"].as_i64().unwrap();
    assert_eq!(d.usage_of("VCPU").0, 7);
    let (s, v) = d.call("POST", &format!("/v1/migrations/{id}/revert"), None);
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["migration"]["status"], "reverted");
    assert_eq!(d.usage_of("VCPU").0, 3);
    assert_eq!(
        d.call("POST", &format!("/v1/migrations/{id}/revert"), None)
            .0,
        409
    );

    let n = uuid(5);
    let body = json!({
        "instance": {"uuid": n, "host": "cmp9", "node": "cmp9", "vm_state": "active"},
        "request_spec": request_spec(&n, 1, 1, 512, 1, None),
        "move_type": "live-migration",
    });
    let (s, v) = d.call("POST", "/v1/migrations", Some(&body));
    assert_eq!(s, 201, "{v}");
    let id2 = v["migration"]["id"].as_i64().unwrap();
    assert_eq!(v["migration"]["migration_type"], "live-migration");
    let (s, v) = d.call("POST", &format!("/v1/migrations/{id2}/confirm"), None);
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["migration"]["status"], "confirmed");
    let (s, v) = d.call("GET", "/v1/migrations", None);
    assert_eq!(s, 200);
    assert_eq!(v.as_array().unwrap().len(), 2);
    assert_eq!(d.call("GET", "/v1/migrations/999", None).0, 404);

    // State changes: a deleted instance stops using resources.
    let (s, v) = d.call(
        "POST",
        &format!("/v1/instances/{a}/state"),
        Some(&json!({"vm_state": "active", "task_state": ""})),
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["instance"]["vm_state"], "active");
    let before = d.usage_of("VCPU").0;
    let (s, _) = d.call(
        "POST",
        &format!("/v1/instances/{l}/state"),
        Some(&json!({"vm_state": "deleted"})),
    );
    assert_eq!(s, 200);
    assert_eq!(d.usage_of("VCPU").0, before - 1);

    // Abort frees the devices; a second abort is 404.
    let (s, v) = d.call("DELETE", &format!("/v1/claims/{a}"), None);
    assert_eq!(s, 200, "{v}");
    let (s, v) = d.call("DELETE", &format!("/v1/claims/{a}"), None);
    assert_eq!(s, 404);
    assert_error(&v, "not_found");
    let (_, u) = d.call("GET", "/v1/usage", None);
    let vf_free: i64 = u["pci_pools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["free"].as_i64().unwrap())
        .sum();
    assert_eq!(vf_free, 12);

    // Inventory and ComputeNode.
    let (s, inv) = d.call("GET", "/v1/inventory", None);
    assert_eq!(s, 200);
    assert_eq!(inv["cpu"]["threads"], 8, "{}", inv["cpu"]);
    assert_eq!(inv["compute_node"]["nova_object.name"], "ComputeNode");
    let (s, cn) = d.call("GET", "/v1/compute-node?version=1.16", None);
    assert_eq!(s, 200);
    assert_eq!(cn["nova_object.version"], "1.16");
    assert!(cn["nova_object.data"].get("uuid").is_some());
    assert_eq!(d.call("GET", "/v1/compute-node?version=2.0", None).0, 400);
}

#[test]
fn malformed_requests_get_clear_4xx_answers() {
    let e = env();
    let d = start(&e, "max_body_bytes = 4096\n");
    let (s, v) = d.raw(
        "POST",
        "/v1/claims",
        "application/json",
        b"{\"request_spec\": ",
    );
    assert_eq!(s, 400);
    assert_error(&v, "malformed_json");
    let (s, v) = d.raw(
        "POST",
        "/v1/claims",
        "application/json",
        b"{\"dry_rn\": true}",
    );
    assert_eq!(s, 400);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `dry_rn`"),
        "{v}"
    );
    let (s, v) = d.raw("POST", "/v1/claims", "application/json", b"[1,2]");
    assert_eq!(s, 400);
    assert_error(&v, "invalid_request");
    let (s, v) = d.raw("POST", "/v1/claims", "text/plain", b"{}");
    assert_eq!(s, 415);
    assert_error(&v, "unsupported_media_type");
    let big = format!(
        "{{\"legacy\": {{\"request_spec\": \"{}\"}}}}",
        "x".repeat(10_000)
    );
    let (s, v) = d.raw("POST", "/v1/claims", "application/json", big.as_bytes());
    assert_eq!(s, 413);
    assert_error(&v, "payload_too_large");
    let mut bad = claim(&uuid(1), 1, 1, 1, None);
    bad["request_spec"]["nova_object.data"]["flavor"]["nova_object.data"]["vcpus"] = json!(-3);
    let (s, v) = d.call("POST", "/v1/claims", Some(&bad));
    assert_eq!(s, 400);
    assert!(
        v["error"]["message"].as_str().unwrap().contains("vcpus"),
        "{v}"
    );
    let (s, v) = d.call(
        "POST",
        "/v1/claims?dry_run=maybe",
        Some(&claim(&uuid(1), 1, 1, 1, None)),
    );
    assert_eq!(s, 400);
    assert!(
        v["error"]["message"].as_str().unwrap().contains("dry_run"),
        "{v}"
    );
    // An identifier in the path that cannot name anything names nothing: 404, as Nova and
    // Placement answer it, saying what it has to be.
    for (method, path, field, expected) in [
        (
            "GET",
            "/v1/claims/not-a-uuid",
            "instance_uuid",
            "not a UUID",
        ),
        ("POST", "/v1/instances/None/state", "uuid", "not a UUID"),
        ("POST", "/v1/migrations/abc/confirm", "id", "not an integer"),
        ("GET", "/v1/migrations/None", "id", "not an integer"),
        (
            "POST",
            "/v1/pci-devices/None/release",
            "address",
            "not a PCI address",
        ),
    ] {
        let (s, v) = d.call(method, path, Some(&json!({})));
        assert_eq!(s, 404, "{method} {path}: {v}");
        assert_error(&v, "not_found");
        assert_eq!(v["error"]["details"]["field"], field, "{path}: {v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains(expected), "{path}: {v}");
    }
    let (s, v) = d.call("GET", "/v1/nothing", None);
    assert_eq!(s, 404);
    assert_error(&v, "no_such_route");
    let (s, v) = d.call("PUT", "/v1/claims", None);
    assert_eq!(s, 405);
    assert_error(&v, "method_not_allowed");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("GET or POST"),
        "{v}"
    );
    let (s, v) = d.call(
        "POST",
        &format!("/v1/instances/{}/state", uuid(7)),
        Some(&json!({"vm_state": "active"})),
    );
    assert_eq!(s, 404);
    assert_error(&v, "not_found");
    // Garbage on the socket does not take the daemon down.
    let mut sock = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
    sock.write_all(b"\x00\x01garbage\r\n\r\n").unwrap();
    let mut buf = Vec::new();
    let _ = sock.read_to_end(&mut buf);
    assert_eq!(d.call("GET", "/healthz", None).0, 200);
    assert!(!d.log_text().contains("panicked"), "{}", d.log_text());
}

#[test]
fn every_documented_operation_is_routed() {
    let e = env();
    let d = start(&e, "");
    let (s, doc) = d.call("GET", "/v1/openapi.json", None);
    assert_eq!(s, 200);
    assert_eq!(doc["openapi"], "3.1.0");
    let mut ids = BTreeSet::new();
    let mut count = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if method == "parameters" {
                continue;
            }
            count += 1;
            assert!(ids.insert(op["operationId"].as_str().unwrap().to_string()));
            let concrete = path
                .replace("{instance_uuid}", &uuid(999))
                .replace("{uuid}", &uuid(999))
                .replace("{id}", "999")
                .replace("{address}", "0000:99:00.0")
                .replace("{request_id}", "r999");
            let body = (method == "post").then(|| json!({}));
            let (status, v) = d.call(&method.to_uppercase(), &concrete, body.as_ref());
            assert!(
                status != 405 && v["error"]["code"] != "no_such_route",
                "{method} {path} is documented but not routed: {status} {v}"
            );
            for code in op["responses"].as_object().unwrap().keys() {
                assert!(code.parse::<u16>().is_ok(), "{path}: response {code}");
            }
        }
    }
    assert_eq!(count, rtrack::api::openapi::ROUTES.len());
    // And what is not documented is not routed.
    for (m, p) in [
        ("GET", "/v1/claim"),
        ("POST", "/v1/usage"),
        ("GET", "/v2/claims"),
    ] {
        let (s, _) = d.call(m, p, None);
        assert!(s == 404 || s == 405, "{m} {p}: {s}");
    }
}

#[test]
fn answers_have_the_documented_shape() {
    let e = env();
    let d = start(&e, "");
    let (_, doc) = d.call("GET", "/v1/openapi.json", None);
    let ok = |path: &str, method: &str, status: &str| -> Value {
        doc["paths"][path][method]["responses"][status]["content"]["application/json"]["schema"]
            .clone()
    };
    let (s, v) = d.call("GET", "/healthz", None);
    assert_eq!(s, 200);
    check_shape(&doc, &ok("/healthz", "get", "200"), &v, "healthz");
    let a = uuid(31);
    let (s, v) = d.call(
        "POST",
        "/v1/claims?dry_run=true",
        Some(&claim(&a, 1, 512, 1, Some("vf:1"))),
    );
    assert_eq!(s, 200, "{v}");
    check_shape(&doc, &ok("/v1/claims", "post", "200"), &v, "dry run");
    let (s, v) = d.call(
        "POST",
        "/v1/claims",
        Some(&claim(&a, 1, 512, 1, Some("vf:1"))),
    );
    assert_eq!(s, 201, "{v}");
    check_shape(&doc, &ok("/v1/claims", "post", "201"), &v, "claim");
    let (_, v) = d.call("GET", &format!("/v1/claims/{a}"), None);
    check_shape(
        &doc,
        &ok("/v1/claims/{instance_uuid}", "get", "200"),
        &v,
        "show claim",
    );
    let (_, v) = d.call("GET", "/v1/claims", None);
    check_shape(&doc, &ok("/v1/claims", "get", "200"), &v, "claims");
    let m = uuid(32);
    let body = json!({
        "instance": {"uuid": m, "host": "cmp9", "node": "cmp9", "vm_state": "active"},
        "request_spec": request_spec(&m, 2, 2, 1024, 1, None),
        "current": {"request_spec": request_spec(&m, 1, 1, 512, 1, None)},
    });
    let (s, v) = d.call("POST", "/v1/migrations?dry_run=true", Some(&body));
    assert_eq!(s, 200, "{v}");
    check_shape(
        &doc,
        &ok("/v1/migrations", "post", "200"),
        &v,
        "move dry run",
    );
    let (s, v) = d.call("POST", "/v1/migrations", Some(&body));
    assert_eq!(s, 201, "{v}");
    check_shape(&doc, &ok("/v1/migrations", "post", "201"), &v, "move claim");
    let id = v["migration"]["id"].as_i64().unwrap();
    let (_, v) = d.call("GET", &format!("/v1/migrations/{id}"), None);
    check_shape(
        &doc,
        &ok("/v1/migrations/{id}", "get", "200"),
        &v,
        "migration",
    );
    let (_, v) = d.call("GET", "/v1/migrations", None);
    check_shape(&doc, &ok("/v1/migrations", "get", "200"), &v, "migrations");
    let (s, v) = d.call("POST", &format!("/v1/migrations/{id}/confirm"), None);
    assert_eq!(s, 200, "{v}");
    check_shape(
        &doc,
        &ok("/v1/migrations/{id}/confirm", "post", "200"),
        &v,
        "confirm",
    );
    let (_, v) = d.call("GET", "/v1/usage", None);
    check_shape(&doc, &ok("/v1/usage", "get", "200"), &v, "usage");
    let (s, v) = d.call("DELETE", &format!("/v1/claims/{a}"), None);
    assert_eq!(s, 200, "{v}");
    check_shape(
        &doc,
        &ok("/v1/claims/{instance_uuid}", "delete", "200"),
        &v,
        "abort",
    );
    // Errors have the documented shape too.
    let (s, v) = d.call("GET", &format!("/v1/claims/{a}"), None);
    assert_eq!(s, 404);
    check_shape(
        &doc,
        &json!({"$ref": "#/components/schemas/Error"}),
        &v,
        "error",
    );
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

#[test]
fn rtrackctl_claims_migrates_and_exits_with_documented_codes() {
    let e = env();
    let d = start(&e, "");
    let s = d.socket.clone();
    let a = uuid(11);
    let o = ctl(
        &s,
        &[
            "claim",
            "--instance",
            &a,
            "--vcpus",
            "2",
            "--memory-mb",
            "1024",
            "--disk-gb",
            "1",
            "--pci-alias",
            "vf:1",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).starts_with(&format!("claimed: {a} ")),
        "{}",
        text(&o.stdout)
    );
    let o = ctl(
        &s,
        &[
            "claim",
            "--dry-run",
            "--instance",
            &uuid(12),
            "--vcpus",
            "2",
            "--memory-mb",
            "1024",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stdout).starts_with("fits: "));

    // Refused: 3, reason on stderr; with --json, the error document on stdout.
    let o = ctl(
        &s,
        &[
            "claim",
            "--instance",
            &uuid(12),
            "--vcpus",
            "2",
            "--memory-mb",
            "99999999",
        ],
    );
    assert_eq!(o.status.code(), Some(3));
    assert!(
        text(&o.stderr).contains("MEMORY_MB requested 99999999"),
        "{}",
        text(&o.stderr)
    );
    let o = ctl(
        &s,
        &[
            "claim",
            "--json",
            "--dry-run",
            "--instance",
            &uuid(12),
            "--vcpus",
            "99",
            "--memory-mb",
            "1",
        ],
    );
    assert_eq!(o.status.code(), Some(3));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["error"]["code"], "claim_refused");
    assert_eq!(v["error"]["details"]["resources"][0]["class"], "VCPU");

    // Usage errors: 2.
    for args in [
        vec!["claim", "--vcpus", "x"],
        vec![
            "claim",
            "--instance",
            "nope",
            "--vcpus",
            "1",
            "--memory-mb",
            "1",
        ],
        vec!["claim", "--instance", &a, "--vcpus", "1"],
        vec!["frobnicate"],
    ] {
        let o = ctl(&s, &args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
    }
    // The server finding the request malformed is a usage error too.
    let o = ctl(
        &s,
        &[
            "claim",
            "--instance",
            &uuid(13),
            "--vcpus",
            "1",
            "--memory-mb",
            "1",
            "--pci-alias",
            "gpu:1",
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("alias \"gpu\" is not defined"),
        "{}",
        text(&o.stderr)
    );

    // Lists for scripts.
    let o = ctl(&s, &["claims", "--json"]);
    assert_eq!(o.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let uuids: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["instance_uuid"].as_str().unwrap())
        .collect();
    assert_eq!(uuids, vec![a.as_str()]);
    let o = ctl(&s, &["usage", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["resources"]["VCPU"]["used"], 2);
    assert_eq!(v["resources"]["VCPU"]["free"], 30);
    let o = ctl(&s, &["usage"]);
    assert!(text(&o.stdout).contains("VCPU"), "{}", text(&o.stdout));
    let o = ctl(&s, &["claims"]);
    assert!(text(&o.stdout).contains(&a));

    // Migrate in, confirm; migrate another in, revert.
    let m = uuid(14);
    let o = ctl(
        &s,
        &[
            "migrate",
            "--instance",
            &m,
            "--vcpus",
            "1",
            "--memory-mb",
            "256",
            "--source-host",
            "cmp9",
            "--source-node",
            "cmp9",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let o = ctl(&s, &["migrations", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let id = v[0]["id"].as_i64().unwrap().to_string();
    let o = ctl(&s, &["confirm", &id]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), format!("migration {id}: confirmed\n"));
    let r = uuid(15);
    let o = ctl(
        &s,
        &[
            "migrate",
            "--json",
            "--type",
            "resize",
            "--instance",
            &r,
            "--vcpus",
            "1",
            "--memory-mb",
            "256",
            "--source-host",
            "cmp9",
            "--source-node",
            "cmp9",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let id = v["migration"]["id"].as_i64().unwrap().to_string();
    let o = ctl(&s, &["revert", &id]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let o = ctl(&s, &["revert", &id]);
    assert_eq!(o.status.code(), Some(1));

    // Abort; not found is 1.
    assert_eq!(ctl(&s, &["abort", &a]).status.code(), Some(0));
    let o = ctl(&s, &["abort", &a]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("not known"), "{}", text(&o.stderr));

    // Other reads, RTRACK_SOCKET, and an unreachable daemon (1).
    let o = ctl(&s, &["compute-node", "--version", "1.16"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["nova_object.version"], "1.16");
    let o = Command::new(RTRACKCTL)
        .args(["inventory"])
        .env("RTRACK_SOCKET", &s)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("8086"), "{}", text(&o.stdout));
    let o = ctl(&s, &["health"]);
    assert!(text(&o.stdout).starts_with("ok "), "{}", text(&o.stdout));
    let o = ctl(Path::new("/nonexistent/rtrack.sock"), &["claims"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("is rtrackd running"),
        "{}",
        text(&o.stderr)
    );
}

/// Claims from 8 threads, some refused, some aborted; SIGKILL in the middle; after a restart
/// every acknowledged claim is there and nothing refused or acknowledged-aborted is.
#[test]
fn acknowledged_claims_survive_sigkill_of_the_daemon() {
    let e = env();
    let mut d = start(&e, "");
    let socket = d.socket.clone();
    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    let refused = Arc::new(Mutex::new(BTreeSet::new()));
    let aborted = Arc::new(Mutex::new(BTreeSet::new()));
    let aborting = Arc::new(Mutex::new(BTreeSet::new()));
    let ops = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let (socket, acked, refused, aborted, aborting, ops) = (
                socket.clone(),
                acked.clone(),
                refused.clone(),
                aborted.clone(),
                aborting.clone(),
                ops.clone(),
            );
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                for n in 0.. {
                    let u = uuid(t * 100_000 + n);
                    let body = claim(&u, 1, 512, 0, Some("vf:1")).to_string();
                    let Ok(r) = rtrack::cli::client::request(
                        &socket,
                        "POST",
                        "/v1/claims",
                        Some(body.as_bytes()),
                        Duration::from_secs(30),
                    ) else {
                        return;
                    };
                    match r.status {
                        201 => {
                            acked.lock().unwrap().insert(u.clone());
                            mine.push(u);
                        }
                        409 => {
                            refused.lock().unwrap().insert(u);
                        }
                        s => panic!("unexpected {s}"),
                    }
                    ops.fetch_add(1, Ordering::SeqCst);
                    if n % 3 == 2 {
                        if let Some(v) = mine.pop() {
                            // Until answered, the abort may or may not have happened.
                            aborting.lock().unwrap().insert(v.clone());
                            let Ok(r) = rtrack::cli::client::request(
                                &socket,
                                "DELETE",
                                &format!("/v1/claims/{v}"),
                                None,
                                Duration::from_secs(30),
                            ) else {
                                return;
                            };
                            assert_eq!(r.status, 200);
                            aborted.lock().unwrap().insert(v);
                        }
                    }
                }
            })
        })
        .collect();
    let start = Instant::now();
    while ops.load(Ordering::SeqCst) < 300 && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(5));
    }
    d.signal(Signal::SIGKILL);
    for t in threads {
        t.join().unwrap();
    }
    let _ = d.wait_exit(Duration::from_secs(5));
    d.spawn();
    d.wait_ready();
    let (_, claims) = d.call("GET", "/v1/claims", None);
    let present: BTreeSet<String> = claims
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["instance_uuid"].as_str().unwrap().to_string())
        .collect();
    let acked = acked.lock().unwrap();
    let refused = refused.lock().unwrap();
    let aborted = aborted.lock().unwrap();
    assert!(
        refused.len() > 10,
        "the burst should run out of VFs: {} refused",
        refused.len()
    );
    assert!(acked.len() > 20, "{} acknowledged", acked.len());
    // An abort in flight at the kill may or may not have happened.
    let aborting = aborting.lock().unwrap();
    for u in acked.difference(&aborting) {
        assert!(
            present.contains(u),
            "acknowledged claim {u} lost after SIGKILL; the log says:\n{}",
            d.log_text()
                .lines()
                .filter(|l| l.contains(u.as_str()))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    for u in refused.iter().chain(aborted.iter()) {
        assert!(
            !present.contains(u),
            "refused or aborted claim {u} present after SIGKILL"
        );
    }
    // What is there adds up: usage is derived from exactly these claims, each holding one VF.
    let (_, u) = d.call("GET", "/v1/usage", None);
    assert_eq!(
        u["resources"]["VCPU"]["used"].as_u64().unwrap(),
        present.len() as u64
    );
    let free: u64 = u["pci_pools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["free"].as_u64().unwrap())
        .sum();
    assert_eq!(free + present.len() as u64, 12);
}

#[test]
fn sighup_applies_a_new_ratio_and_rejects_a_bad_file() {
    let e = env();
    let d = start(&e, "");
    let cap = |d: &Daemon| {
        d.call("GET", "/v1/usage", None).1["resources"]["VCPU"]["capacity"]
            .as_i64()
            .unwrap()
    };
    assert_eq!(cap(&d), 32);
    let text = std::fs::read_to_string(&d.config).unwrap();
    std::fs::write(
        &d.config,
        text.replace("cpu_allocation_ratio = 4.0", "cpu_allocation_ratio = 8.0")
            .replace("[host]\n", "[host]\nhypervisor_type = \"changed\"\n"),
    )
    .unwrap();
    let hypervisor_type = |d: &Daemon| {
        let (_, v) = d.call("GET", "/v1/compute-node", None);
        v["nova_object.data"]["hypervisor_type"].clone()
    };
    let before = hypervisor_type(&d);
    d.signal(Signal::SIGHUP);
    let every = Duration::from_millis(20);
    poll("the reloaded ratio", Duration::from_secs(10), every, || {
        let c = cap(&d);
        (c == 64)
            .then_some(())
            .ok_or_else(|| format!("capacity {c}:\n{}", d.log_text()))
    });
    assert!(
        d.log_text()
            .contains("resources.cpu_allocation_ratio: 4.0 -> 8.0"),
        "{}",
        d.log_text()
    );
    // A key that needs a restart is named, and what runs keeps the old value.
    assert!(
        d.log_text().contains("host.hypervisor_type"),
        "{}",
        d.log_text()
    );
    assert_eq!(hypervisor_type(&d), before);
    assert_ne!(before, "changed");
    std::fs::write(
        &d.config,
        text.replace("cpu_allocation_ratio = 4.0", "cpu_allocation_ratio = -1.0"),
    )
    .unwrap();
    d.signal(Signal::SIGHUP);
    d.wait_log("reload rejected", Duration::from_secs(10));
    assert!(
        d.log_text().contains("resources.cpu_allocation_ratio = -1"),
        "{}",
        d.log_text()
    );
    assert_eq!(cap(&d), 64);
}

#[test]
fn a_peer_outside_the_socket_group_gets_403() {
    if !nix::unistd::Uid::effective().is_root() {
        panic!("this test forks and setuids a client: run the tests as root (CI does)");
    }
    let e = env();
    // The socket must be reachable for the credential check to be what refuses.
    for p in [e.dir.parent().unwrap(), e.dir.as_path()] {
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let d = start(&e, "socket_mode = \"0666\"\nsocket_group = \"nogroup\"\n");
    let as_user = |uid: u32, gid: u32| {
        Command::new(RTRACKCTL)
            .args(["--socket"])
            .arg(&d.socket)
            .args(["claims", "--json"])
            .uid(uid)
            .gid(gid)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    // nobody:nogroup is in the group (primary gid): allowed.
    let o = as_user(65534, 65534);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    // nobody with another group: refused with 403, logged and counted.
    let o = as_user(65534, 1);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["error"]["code"], "forbidden");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("uid 65534"),
        "{v}"
    );
    assert!(
        d.log_text().contains("API request refused"),
        "{}",
        d.log_text()
    );
    let (_, _) = d.call("GET", "/healthz", None);
    let r =
        rtrack::cli::client::request(&d.socket, "GET", "/metrics", None, Duration::from_secs(10))
            .unwrap();
    assert!(
        text(&r.body).contains("rtrack_api_forbidden_peers_total 1"),
        "{}",
        text(&r.body)
    );
}

#[test]
fn sigterm_drains_and_exits_zero_promptly() {
    let e = env();
    let mut d = start(&e, "");
    let socket = d.socket.clone();
    let acked = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let (socket, acked) = (socket.clone(), acked.clone());
            std::thread::spawn(move || {
                for n in 0..10_000 {
                    let u = uuid(t * 100_000 + n);
                    let body = claim(&u, 1, 1, 0, None).to_string();
                    match rtrack::cli::client::request(
                        &socket,
                        "POST",
                        "/v1/claims",
                        Some(body.as_bytes()),
                        Duration::from_secs(30),
                    ) {
                        Ok(r) if r.status == 201 => acked.lock().unwrap().push(u),
                        _ => return,
                    }
                }
            })
        })
        .collect();
    while acked.lock().unwrap().len() < 20 {
        std::thread::sleep(Duration::from_millis(2));
    }
    let sent = Instant::now();
    d.signal(Signal::SIGTERM);
    let status = d
        .wait_exit(Duration::from_secs(10))
        .expect("rtrackd still running 10 s after SIGTERM");
    let took = sent.elapsed();
    for t in threads {
        t.join().unwrap();
    }
    assert!(status.success(), "{status}\n{}", d.log_text());
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert!(!d.socket.exists(), "the socket file is left behind");
    assert!(d.log_text().contains("store is flushed"));
    // Every claim answered before or during the drain is kept.
    d.spawn();
    d.wait_ready();
    let (_, claims) = d.call("GET", "/v1/claims", None);
    let present: BTreeSet<String> = claims
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["instance_uuid"].as_str().unwrap().to_string())
        .collect();
    for u in acked.lock().unwrap().iter() {
        assert!(
            present.contains(u),
            "{u} acknowledged during the drain, lost"
        );
    }
}

#[test]
fn systemd_hears_ready_status_watchdog_reloading_and_stopping() {
    let e = env();
    let notify = e.dir.join("notify.sock");
    let listener = std::os::unix::net::UnixDatagram::bind(&notify).unwrap();
    listener
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let config = base_config(&e.root, &e.dir);
    std::fs::write(e.dir.join("rtrack.toml"), &config).unwrap();
    let messages = Arc::new(Mutex::new(Vec::<(Instant, String)>::new()));
    let m2 = messages.clone();
    let sock_path = e.dir.join("run/rtrack.sock");
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u8; 4096];
        while let Ok(n) = listener.recv(&mut buf) {
            let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
            // When READY arrives, the socket must already answer.
            if msg.contains("READY=1") {
                assert!(sock_path.exists(), "READY=1 before the socket exists");
            }
            let stop = msg.contains("STOPPING=1");
            m2.lock().unwrap().push((Instant::now(), msg));
            if stop {
                return;
            }
        }
    });
    let mut d = Daemon::start_with(
        Path::new(RTRACKD),
        &e.dir,
        &config,
        &[
            ("NOTIFY_SOCKET", notify.to_str().unwrap()),
            ("WATCHDOG_USEC", "200000"),
        ],
    );
    std::thread::sleep(Duration::from_millis(700));
    d.signal(Signal::SIGHUP);
    std::thread::sleep(Duration::from_millis(300));
    d.signal(Signal::SIGTERM);
    assert!(d
        .wait_exit(Duration::from_secs(10))
        .is_some_and(|s| s.success()));
    reader.join().unwrap();
    let msgs: Vec<String> = messages
        .lock()
        .unwrap()
        .iter()
        .map(|(_, m)| m.clone())
        .collect();
    let first_ready = msgs
        .iter()
        .position(|m| m.contains("READY=1"))
        .expect("READY=1");
    assert!(msgs[first_ready].contains("STATUS=serving on "), "{msgs:?}");
    let pings = msgs.iter().filter(|m| m.contains("WATCHDOG=1")).count();
    assert!(
        pings >= 4,
        "{pings} watchdog pings in ~1 s at 100 ms: {msgs:?}"
    );
    let reloading = msgs
        .iter()
        .position(|m| m.contains("RELOADING=1"))
        .expect("RELOADING=1");
    assert!(
        msgs[reloading..].iter().any(|m| m.contains("READY=1")),
        "{msgs:?}"
    );
    assert!(msgs.last().unwrap().contains("STOPPING=1"), "{msgs:?}");
}

#[test]
fn metrics_are_valid_and_count_claims() {
    let e = env();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let d = start(&e, &format!("[metrics]\nlisten = \"127.0.0.1:{port}\"\n"));
    assert_eq!(
        d.call(
            "POST",
            "/v1/claims",
            Some(&claim(&uuid(1), 2, 256, 0, Some("vf:1")))
        )
        .0,
        201
    );
    assert_eq!(
        d.call(
            "POST",
            "/v1/claims",
            Some(&claim(&uuid(2), 2, 1 << 30, 0, None))
        )
        .0,
        409
    );
    let r =
        rtrack::cli::client::request(&d.socket, "GET", "/metrics", None, Duration::from_secs(10))
            .unwrap();
    assert_eq!(r.status, 200);
    let body = text(&r.body);
    for line in [
        "rtrack_resource_inventory{resource_class=\"VCPU\"} 8",
        "rtrack_resource_capacity{resource_class=\"VCPU\"} 32",
        "rtrack_resource_used{resource_class=\"VCPU\"} 2",
        "rtrack_claims_total{operation=\"instance_claim\",outcome=\"granted\",reason=\"\"} 1",
        "rtrack_claims_total{operation=\"instance_claim\",outcome=\"claim_refused\",reason=\"MEMORY_MB\"} 1",
        // The VF came from PF 5e:00.0's vfio-pci VFs: with no netdev they have no
        // parent_ifname, so theirs is the plainer pool, used first (as in Nova).
        "rtrack_pci_pool_free{vendor_id=\"8086\",product_id=\"1889\",numa_node=\"0\",dev_type=\"type-VF\",address=\"0000:5e:00.0\"} 3",
        "rtrack_pci_pool_free{vendor_id=\"8086\",product_id=\"1889\",numa_node=\"0\",dev_type=\"type-VF\",address=\"0000:3b:00.0\"} 8",
        "rtrack_probe_warnings 0",
        // The small host: one cell of 8 shared CPUs and 16 GiB.
        "rtrack_numa_cell_cpus{cell=\"0\",kind=\"shared\"} 8",
        "rtrack_numa_cell_memory_bytes{cell=\"0\",kind=\"total\"} 17179869184",
        "rtrack_store_unavailable 0",
        "rtrack_pci_devices_missing 0",
        "rtrack_pinned_cpus_offline 0",
    ] {
        assert!(body.contains(line), "missing {line:?} in:\n{body}");
    }
    assert!(
        body.contains("rtrack_api_request_seconds_count{method=\"POST\",route=\"/v1/claims\"}"),
        "{body}"
    );
    // Every stage of a change was timed; each claim passed the API's two.
    let stage_count = |stage: &str| -> u64 {
        let prefix = format!("rtrack_change_stage_seconds_count{{stage=\"{stage}\"}} ");
        body.lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .unwrap_or_else(|| panic!("{prefix} in {body}"))
            .parse()
            .unwrap()
    };
    for stage in ["queue", "lock", "decide", "commit", "answer"] {
        assert!(stage_count(stage) >= 1, "{stage}: {body}");
    }
    assert!(stage_count("queue") >= 2, "{body}");
    assert_eq!(stage_count("queue"), stage_count("answer"), "{body}");
    for prefix in [
        "rtrack_audit_duration_seconds_count ",
        "rtrack_store_commit_seconds_count ",
    ] {
        let n: u64 = body
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("{prefix} in {body}"))
            .parse()
            .unwrap();
        assert!(n >= 1, "{prefix}{n}");
    }
    // The TCP listener serves the same metrics and nothing else.
    let get = |path: &str| {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        rtrack::cli::client::read_response(std::io::BufReader::new(s), Path::new("tcp")).unwrap()
    };
    let tcp = get("/metrics");
    assert_eq!(tcp.status, 200);
    assert!(text(&tcp.body).contains("rtrack_resource_inventory{resource_class=\"VCPU\"} 8"));
    assert_eq!(get("/v1/claims").status, 404);
    promtool_check(&body);
}

/// `promtool check metrics` must accept the output (Debian package `prometheus`).
fn promtool_check(body: &str) {
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(_) if std::env::var_os("RTRACK_SKIP_PROMTOOL").is_some() => {
            eprintln!("promtool not installed; skipped because RTRACK_SKIP_PROMTOOL is set");
            return;
        }
        Err(e) => panic!(
            "promtool is needed to check the metrics ({e}): apt-get install prometheus (or set RTRACK_SKIP_PROMTOOL=1 to skip)"
        ),
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{}{}\n--- metrics:\n{body}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

#[test]
fn a_failing_probe_is_retried_while_claims_are_served() {
    let e = env();
    let d = start(&e, "[audit]\ninterval_s = 1\n");
    let sys = e.root.join("sys");
    let away = e.root.join("sys.away");
    std::fs::rename(&sys, &away).unwrap();
    let every = Duration::from_millis(50);
    let h = poll("a degraded health", Duration::from_secs(15), every, || {
        let (_, h) = d.call("GET", "/healthz", None);
        (h["status"] == "degraded")
            .then_some(h.clone())
            .ok_or_else(|| format!("{h}\n{}", d.log_text()))
    });
    assert!(
        h["last_audit_error"].as_str().unwrap().contains("sys"),
        "{h}"
    );
    // Claims go on against the last good probe.
    let (s, v) = d.call(
        "POST",
        "/v1/claims",
        Some(&claim(&uuid(1), 1, 256, 0, Some("vf:1"))),
    );
    assert_eq!(s, 201, "{v}");
    std::fs::rename(&away, &sys).unwrap();
    poll("health ok again", Duration::from_secs(15), every, || {
        let (_, h) = d.call("GET", "/healthz", None);
        (h["status"] == "ok").then_some(()).ok_or(h.to_string())
    });
    assert!(d.log_text().contains("audit failed"), "{}", d.log_text());
    assert_eq!(
        d.call("GET", &format!("/v1/claims/{}", uuid(1)), None).0,
        200
    );
}

#[test]
fn check_config_names_the_key_and_value() {
    let e = env();
    let cfg = e.dir.join("bad.toml");
    std::fs::write(&cfg, "[resources]\nram_allocation_ratio = 0.0\n").unwrap();
    let o = Command::new(RTRACKD)
        .args(["--check-config", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert!(
        err.contains("bad.toml")
            && err.contains("resources.ram_allocation_ratio = 0")
            && err.contains("greater than 0"),
        "{err}"
    );
    std::fs::write(&cfg, "[audit]\nintervall_s = 5\n").unwrap();
    let o = Command::new(RTRACKD)
        .args(["--check-config", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("unknown field `intervall_s`"),
        "{}",
        text(&o.stderr)
    );
    std::fs::write(&cfg, base_config(&e.root, &e.dir)).unwrap();
    let o = Command::new(RTRACKD)
        .args(["--check-config", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("valid"));
}

/// A one-thread HTTP server on 127.0.0.1 recording the bodies POSTed to it.
fn recording_server() -> (String, Arc<Mutex<Vec<Value>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/nodes", listener.local_addr().unwrap());
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let b = bodies.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            let mut reader = std::io::BufReader::new(conn);
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if std::io::BufRead::read_line(&mut reader, &mut line).unwrap_or(0) == 0 {
                    break;
                }
                let l = line.trim_end().to_ascii_lowercase();
                if l.is_empty() {
                    break;
                }
                if let Some(v) = l.strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0u8; length];
            if reader.read_exact(&mut body).is_ok() {
                if let Ok(v) = serde_json::from_slice(&body) {
                    b.lock().unwrap().push(v);
                }
            }
            let mut conn = reader.into_inner();
            let _ = conn.write_all(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n");
        }
    });
    (url, bodies)
}

#[test]
fn the_compute_node_is_posted_upstream_when_it_changes() {
    let e = env();
    let (url, bodies) = recording_server();
    let d = start(
        &e,
        &format!("[audit]\ninterval_s = 1\n[upstream.http]\nurl = \"{url}\"\nobject_version = \"1.16\"\n"),
    );
    let wait_for = |n: usize| {
        poll(
            "the pushes",
            Duration::from_secs(20),
            Duration::from_millis(50),
            || {
                let got = bodies.lock().unwrap().len();
                (got >= n)
                    .then_some(())
                    .ok_or_else(|| format!("{got} POSTs:\n{}", d.log_text()))
            },
        );
    };
    wait_for(1);
    let first = bodies.lock().unwrap()[0].clone();
    assert_eq!(first["nova_object.name"], "ComputeNode");
    assert_eq!(first["nova_object.version"], "1.16");
    assert_eq!(first["nova_object.data"]["vcpus_used"], 0);
    // Audits every second, nothing changes: nothing more is sent.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(bodies.lock().unwrap().len(), 1);
    // A claim changes the node: it is sent again.
    assert_eq!(
        d.call(
            "POST",
            "/v1/claims",
            Some(&claim(&uuid(1), 2, 512, 0, None))
        )
        .0,
        201
    );
    wait_for(2);
    assert_eq!(
        bodies.lock().unwrap()[1]["nova_object.data"]["vcpus_used"],
        2
    );
}

/// Without `[placement]`, what asks Placement is a conflict (409) naming it: the report loop
/// (which runs in every daemon: a reload may configure Placement) answers with the kind
/// `NotConfigured`, with or without `[upstream.http]`.
#[test]
fn placement_commands_without_placement_are_conflicts() {
    let e = env();
    let (url, _bodies) = recording_server();
    for extra in [
        String::new(),
        format!("[upstream.http]\nurl = \"{url}\"\nobject_version = \"1.16\"\n"),
    ] {
        let d = start(&e, &extra);
        let (status, v) = d.call("POST", "/v1/reconcile", Some(&serde_json::json!({})));
        assert_eq!(status, 409, "{extra}: {v}");
        assert_eq!(v["error"]["code"], "conflict", "{extra}: {v}");
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("Placement is not configured"),
            "{extra}: {v}"
        );
    }
}

/// A probe that hangs (a FIFO standing in for a stuck filesystem) is reported after 10 s, is not
/// started twice, and claims are served all along; when it ends, audits go on.
#[test]
fn a_fifo_in_the_tree_neither_hangs_the_probe_nor_stops_claims() {
    // A FIFO once hung the probe (open and read block without a writer); now it is refused
    // as "not a regular file" at once, and audits and claims go on.
    let e = env();
    let d = start(&e, "[audit]\ninterval_s = 1\n");
    let meminfo = e.root.join("sys/devices/system/node/node0/meminfo");
    std::fs::remove_file(&meminfo).unwrap();
    nix::unistd::mkfifo(&meminfo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    let (_, before) = d.call("GET", "/healthz", None);
    let audits_before = before["audits_succeeded"].as_u64().unwrap();
    let start = Instant::now();
    let mut claimed = 0;
    loop {
        // Claims keep being answered quickly.
        let t = Instant::now();
        let (s, v) = d.call(
            "POST",
            "/v1/claims",
            Some(&claim(&uuid(100 + claimed), 1, 64, 0, None)),
        );
        assert_eq!(s, 201, "{v}");
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "a claim took {:?}",
            t.elapsed()
        );
        let (s, _) = d.call(
            "DELETE",
            &format!("/v1/claims/{}", uuid(100 + claimed)),
            None,
        );
        assert_eq!(s, 200);
        claimed += 1;
        let (_, h) = d.call("GET", "/healthz", None);
        if h["audits_succeeded"].as_u64().unwrap() >= audits_before + 2 {
            assert_eq!(h["status"], "ok", "{h}");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{h}\n{}",
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let (s, inv) = d.call("GET", "/v1/inventory", None);
    assert_eq!(s, 200);
    let warned = inv["warnings"].as_array().unwrap().iter().any(|w| {
        w["path"].as_str() == Some(meminfo.to_str().unwrap())
            && w["message"]
                .as_str()
                .is_some_and(|m| m.contains("a FIFO, not a regular file"))
    });
    assert!(warned, "{}", inv["warnings"]);
    assert!(claimed >= 2, "{claimed} claims");
    let (s, v) = d.call(
        "POST",
        "/v1/claims",
        Some(&claim(&uuid(99), 3, 64, 0, None)),
    );
    assert_eq!(s, 201, "{v}");
    let (_, u) = d.call("GET", "/v1/usage", None);
    assert_eq!(u["resources"]["VCPU"]["used"], 3);
}
