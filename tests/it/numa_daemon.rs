//! NUMA claims end to end on a running `rtrackd`: a two-socket, two-node SMT host with CPU sets,
//! hugepages and a PF with VFs on node 1. Claims and dry runs answer the fitted
//! `numa_topology`; usage, `/v1/numa`, the ComputeNode and `rtrackctl numa` show every cell's
//! usage; a refusal explains itself per host cell; bad extra specs are 400 naming them; a
//! SIGKILL and restart keeps every pin; a SIGHUP that would strand pinned CPUs is refused, one
//! that changes a ratio keeps per-cell usage as it was. A host whose dedicated CPUs Nova powers
//! down (`cpu_power_management`) starts, counts them, pins to them, and says which pinned CPUs
//! are offline, warning only for running guests.

use std::process::Command;
use std::time::Duration;

use crate::support::{uuid, Daemon};
use rtrack_fixtures::synthetic::{SyntheticHost, SyntheticPf};
use serde_json::{json, Value};

const RTRACKD: &str = env!("CARGO_BIN_EXE_rtrackd");
const RTRACKCTL: &str = env!("CARGO_BIN_EXE_rtrackctl");

fn host() -> SyntheticHost {
    let mut pf = SyntheticPf::e810("0000:af:00.0", 4, 1, Some("iavf"));
    pf.ifname = Some("ens3f0".to_string());
    SyntheticHost {
        description: "synthetic: 2 sockets x 4 cores x 2 threads, 2 NUMA nodes, PF af:00.0 with 4 VFs on node 1".into(),
        sockets: 2,
        numa_nodes: 2,
        cores_per_socket: 4,
        threads_per_core: 2,
        memory_mb_per_node: 8192,
        hugepages_2m_per_node: 512,
        pfs: vec![pf],
        plain: vec![],
    }
}

/// Node 0: CPUs 0-3 and 8-11 (siblings n, n+8); node 1: 4-7 and 12-15. Core 0 and core 4 (with
/// their siblings) are shared, the rest dedicated.
fn config(root: &std::path::Path, dir: &std::path::Path, dedicated: &str) -> String {
    format!(
        r#"
[host]
root = "{root}"
state_dir = "{dir}/state"
instances_path = "{dir}"
hypervisor_hostname = "cmp1"
host = "cmp1"

[resources]
cpu_allocation_ratio = 4.0
reserved_host_memory_mb = 512
cpu_shared_set = "0,8,4,12"
cpu_dedicated_set = "{dedicated}"
reserved_huge_pages = ["node:1,size:2MB,count:12"]

[[pci.device_spec]]
vendor_id = "8086"
product_id = "1889"

[[pci.alias]]
name = "vf"
vendor_id = "8086"
product_id = "1889"
device_type = "type-VF"

[api]
socket = "{dir}/run/rtrack.sock"
"#,
        root = root.display(),
        dir = dir.display()
    )
}

fn spec(uuid: &str, flavor_id: i64, vcpus: i64, memory_mb: i64, extra: Value) -> Value {
    json!({"request_spec": {
        "nova_object.name": "RequestSpec", "nova_object.namespace": "nova", "nova_object.version": "1.14",
        "nova_object.data": {
            "instance_uuid": uuid, "project_id": "p1", "user_id": "u1", "num_instances": 1, "is_bfv": true,
            "flavor": {"nova_object.name": "Flavor", "nova_object.namespace": "nova", "nova_object.version": "1.2",
                "nova_object.data": {"id": flavor_id, "flavorid": format!("f{flavor_id}"), "name": format!("f{flavor_id}"),
                    "vcpus": vcpus, "memory_mb": memory_mb, "root_gb": 0, "ephemeral_gb": 0, "swap": 0, "extra_specs": extra}}}}})
}

fn cells(v: &Value) -> Vec<Value> {
    v["numa_cells"].as_array().cloned().unwrap_or_default()
}

#[test]
fn numa_claims_end_to_end() {
    let tmp = rtrack_fixtures::real::scratch_dir();
    let root = tmp.path().join("host");
    host().write(&root);
    let dir = tmp.path().join("d");
    let dedicated = "1-3,9-11,5-7,13-15";
    let mut d = Daemon::start_with(
        std::path::Path::new(RTRACKD),
        &dir,
        &config(&root, &dir, dedicated),
        &[],
    );

    // A dry run answers the placement it would make and holds nothing.
    let a = uuid(1);
    let body = spec(
        &a,
        1,
        4,
        2048,
        json!({"hw:cpu_policy": "dedicated", "hw:numa_nodes": "2"}),
    );
    let (s, v) = d.call("POST", "/v1/claims?dry_run=true", Some(&body));
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v["claim"]["numa_topology"]["nova_object.name"], "InstanceNUMATopology",
        "{v}"
    );
    let (_, u) = d.call("GET", "/v1/usage", None);
    assert!(cells(&u).iter().all(|c| c["pinned_cpus"] == ""), "{u}");

    // The claim: two guest cells, one per node, two pinned CPUs each, sibling threads first.
    let (s, v) = d.call("POST", "/v1/claims", Some(&body));
    assert_eq!(s, 201, "{v}");
    let t = &v["numa_topology"]["nova_object.data"]["cells"];
    assert_eq!(t.as_array().map(Vec::len), Some(2), "{v}");
    assert_eq!(v["numa_cells"], json!([0, 1]));
    let pins = &t[0]["nova_object.data"]["cpu_pinning_raw"];
    assert_eq!(pins, &json!({"0": 1, "1": 9}), "{v}");
    assert_eq!(
        t[1]["nova_object.data"]["cpu_pinning_raw"],
        json!({"2": 5, "3": 13}),
        "{v}"
    );
    assert_eq!(v["resources"]["PCPU"], 4);
    assert!(v["resources"].get("VCPU").is_none(), "{v}");

    // A hugepage guest with a VF: the VF is on node 1, required affinity puts the guest there.
    let b = uuid(2);
    let body_b = spec(
        &b,
        2,
        2,
        512,
        json!({"hw:cpu_policy": "dedicated", "hw:mem_page_size": "2MB",
        "pci_passthrough:alias": "vf:1", "hw:pci_numa_affinity_policy": "required"}),
    );
    let (s, v) = d.call("POST", "/v1/claims", Some(&body_b));
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["numa_cells"], json!([1]), "{v}");
    assert_eq!(
        v["numa_topology"]["nova_object.data"]["cells"][0]["nova_object.data"]["pagesize"],
        2048
    );

    let (_, u) = d.call("GET", "/v1/usage", None);
    let c = cells(&u);
    assert_eq!(c[0]["pinned_cpus"], "1,9", "{u}");
    assert_eq!(c[1]["pinned_cpus"], "5-6,13-14", "{u}");
    assert_eq!(c[1]["memory_usage_mb"], 1536);
    let pages_2m = c[1]["mempages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["size_kb"] == 2048)
        .cloned()
        .unwrap();
    assert_eq!(
        pages_2m,
        json!({"size_kb": 2048, "total": 512, "used": 256, "reserved": 12, "kernel_free": 512}),
        "{u}"
    );

    // The ComputeNode Nova's scheduler reads carries the same usage.
    let (_, node) = d.call("GET", "/v1/compute-node", None);
    let topo: Value =
        serde_json::from_str(node["nova_object.data"]["numa_topology"].as_str().unwrap()).unwrap();
    let cell1 = &topo["nova_object.data"]["cells"][1]["nova_object.data"];
    assert_eq!(cell1["pinned_cpus"], json!([5, 6, 13, 14]), "{cell1}");
    assert_eq!(cell1["memory_usage"], 1536);

    // A refusal says per host cell why: 8 pinned CPUs in one cell, 6 dedicated per cell.
    let c3 = uuid(3);
    let (s, v) = d.call(
        "POST",
        "/v1/claims?dry_run=true",
        Some(&spec(
            &c3,
            3,
            8,
            1024,
            json!({"hw:cpu_policy": "dedicated"}),
        )),
    );
    assert_eq!(s, 409, "{v}");
    let numa = &v["error"]["details"]["numa"];
    assert_eq!(numa["reason"], "guest cell 0 fits no host cell", "{v}");
    assert_eq!(
        numa["cells"][0]["verdicts"][0]["reason"], "dedicated CPUs in the cell: have 6, need 8",
        "{v}"
    );
    assert_eq!(numa["cells"][1]["id"], 1);

    // Bad extra specs are 400 naming them, with Nova's meaning.
    let (s, v) = d.call(
        "POST",
        "/v1/claims",
        Some(&spec(&c3, 3, 3, 1024, json!({"hw:numa_nodes": "2"}))),
    );
    assert_eq!(s, 400, "{v}");
    assert_eq!(
        v["error"]["details"]["field"], "request_spec.flavor.extra_specs.hw:numa_nodes",
        "{v}"
    );
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cannot be evenly distributed"),
        "{v}"
    );

    // /v1/numa and rtrackctl numa show who holds which CPU.
    let (s, n) = d.call("GET", "/v1/numa", None);
    assert_eq!(s, 200);
    let core = &n["cells"][0]["cores"][1];
    assert_eq!(
        core,
        &json!([{"cpu": 1, "state": "pinned", "instance": a, "online": true}, {"cpu": 9, "state": "pinned", "instance": a, "online": true}]),
        "{n}"
    );
    assert_eq!(n["cells"][0]["cores"][0][0]["state"], "shared");
    // Each cell's caches, L3 domains and core types (issue 24): the synthetic host has one L3
    // per socket and one kind of core.
    assert!(
        n["cells"][0]["caches"]
            .as_array()
            .is_some_and(|c| c.iter().any(|k| k["level"] == 3)),
        "{n}"
    );
    assert_eq!(
        n["cells"][0]["l3_domains"].as_array().map(Vec::len),
        Some(1),
        "{n}"
    );
    assert_eq!(n["cells"][0]["core_types"], json!([]), "{n}");
    let out = Command::new(RTRACKCTL)
        .args(["--socket"])
        .arg(&d.socket)
        .arg("numa")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("[1a 9a]") && text.contains(&format!("a = {a}")) && text.contains("  L3 #0 "),
        "{text}"
    );

    // SIGKILL and restart: every pin is still held.
    let (_, before) = d.call("GET", "/v1/usage", None);
    d.restart();
    let (_, after) = d.call("GET", "/v1/usage", None);
    assert_eq!(cells(&before), cells(&after));

    // A SIGHUP whose dedicated set would leave pinned CPU 13 out is refused; the old set stays.
    std::fs::write(&d.config, config(&root, &dir, "1-3,9-11,5-7,14-15")).unwrap();
    d.signal(nix::sys::signal::Signal::SIGHUP);
    std::thread::sleep(Duration::from_millis(800));
    let log = d.log_text();
    assert!(
        log.contains("configuration reload rejected") && log.contains("pinned CPUs 13"),
        "{log}"
    );
    let (s, _) = d.call(
        "POST",
        "/v1/claims?dry_run=true",
        Some(&spec(
            &c3,
            3,
            2,
            1024,
            json!({"hw:cpu_policy": "dedicated"}),
        )),
    );
    assert_eq!(s, 200);

    // A ratio change is applied; the audit it runs keeps per-cell usage as it was.
    std::fs::write(
        &d.config,
        config(&root, &dir, dedicated)
            .replace("cpu_allocation_ratio = 4.0", "cpu_allocation_ratio = 2.0"),
    )
    .unwrap();
    d.signal(nix::sys::signal::Signal::SIGHUP);
    std::thread::sleep(Duration::from_millis(800));
    assert!(d.log_text().contains("configuration reloaded"));
    let (_, after) = d.call("GET", "/v1/usage", None);
    assert_eq!(cells(&before), cells(&after));
    assert_eq!(after["resources"]["VCPU"]["allocation_ratio"], 2.0);
}

fn metrics_text(d: &Daemon) -> String {
    let r =
        rtrack::cli::client::request(&d.socket, "GET", "/metrics", None, Duration::from_secs(10))
            .unwrap();
    String::from_utf8_lossy(&r.body).to_string()
}

/// Nova's PowerManagementMixedInstances host after nova-compute powered the dedicated CPUs
/// down: 10 CPUs, dedicated 1-3,5-7 offline, shared 4,8-9.
fn power_config(root: &std::path::Path, dir: &std::path::Path, managed: bool) -> String {
    format!(
        r#"
[host]
root = "{root}"
state_dir = "{dir}/state"
instances_path = "{dir}"
hypervisor_hostname = "cmp1"
host = "cmp1"

[resources]
reserved_host_memory_mb = 512
cpu_shared_set = "4,8-9"
cpu_dedicated_set = "1-3,5-7"
cpu_power_management = {managed}

[api]
socket = "{dir}/run/rtrack.sock"
"#,
        root = root.display(),
        dir = dir.display()
    )
}

#[test]
fn power_managed_dedicated_cpus_end_to_end() {
    let tmp = rtrack_fixtures::real::scratch_dir();
    let root = tmp.path().join("host");
    rtrack_fixtures::power::PowerHost::cpu_state().write(&root);
    let dir = tmp.path().join("d");
    std::fs::create_dir_all(&dir).unwrap();

    // Without the option the offline dedicated CPUs are refused, as before.
    let off = dir.join("off.toml");
    std::fs::write(&off, power_config(&root, &dir, false)).unwrap();
    let out = Command::new(RTRACKD)
        .arg("--config")
        .arg(&off)
        .arg("--check-config")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("resources.cpu_dedicated_set: names CPUs 1-3,5-7 that are not online"),
        "{err}"
    );
    let on = dir.join("on.toml");
    std::fs::write(&on, power_config(&root, &dir, true)).unwrap();
    let out = Command::new(RTRACKD)
        .arg("--config")
        .arg(&on)
        .arg("--check-config")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("CPU power management: cpu_state; dedicated CPUs offline now: 1-3,5-7"),
        "{text}"
    );

    let d = Daemon::start_with(
        std::path::Path::new(RTRACKD),
        &dir,
        &power_config(&root, &dir, true),
        &[],
    );
    let (_, u) = d.call("GET", "/v1/usage", None);
    assert_eq!(u["resources"]["PCPU"]["total"], 6, "{u}");
    assert_eq!(u["resources"]["VCPU"]["total"], 3, "{u}");
    let (_, inv) = d.call("GET", "/v1/inventory", None);
    let ded = &inv["dedicated_cpus"];
    assert_eq!(ded["power_management"]["strategy"], "cpu_state", "{ded}");
    assert_eq!(
        ded["cpus"][0],
        json!({"cpu": 1, "numa_node": 0, "state": "offline", "governor": null, "counted": true})
    );

    // A pinned guest lands on offline CPUs; building, it is not running yet.
    let a = uuid(1);
    let (s, v) = d.call(
        "POST",
        "/v1/claims",
        Some(&spec(&a, 1, 2, 512, json!({"hw:cpu_policy": "dedicated"}))),
    );
    assert_eq!(s, 201, "{v}");
    let (_, n) = d.call("GET", "/v1/numa", None);
    assert_eq!(n["cpu_power_management"]["strategy"], "cpu_state", "{n}");
    assert_eq!(
        n["cells"][0]["cores"][0],
        json!([{"cpu": 1, "state": "pinned", "instance": a, "online": false}]),
        "{n}"
    );
    let pins = n["offline_pinned"].as_array().cloned().unwrap_or_default();
    assert_eq!(pins.len(), 2, "{n}");
    assert!(pins.iter().all(|p| p["powered_down"] == true), "{n}");
    let metrics = metrics_text(&d);
    assert!(
        metrics.contains("rtrack_pinned_cpus_offline 0"),
        "{metrics}"
    );

    // Running on CPUs still offline: a warning at the next audit and the metric.
    let (s, v) = d.call(
        "POST",
        &format!("/v1/instances/{a}/state"),
        Some(&json!({"vm_state": "active"})),
    );
    assert_eq!(s, 200, "{v}");
    let (s, v) = d.call("POST", "/v1/refresh", None);
    assert_eq!(s, 200, "{v}");
    let log = d.log_text();
    assert!(
        log.contains("a host CPU pinned by this running instance is offline"),
        "{log}"
    );
    let metrics = metrics_text(&d);
    assert!(
        metrics.contains("rtrack_pinned_cpus_offline 2"),
        "{metrics}"
    );
    let out = Command::new(RTRACKCTL)
        .args(["--socket"])
        .arg(&d.socket)
        .arg("numa")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("[1a!]") && text.contains("(GUEST RUNNING)"),
        "{text}"
    );
}
