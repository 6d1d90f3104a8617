//! Taking a host over from nova-compute, and reconciling local claims with Placement, against a
//! real Placement (`scripts/placement/start.sh`) and the real `rtrackd` and `rtrackctl`.
//!
//! - A tree made as nova-compute makes it (a root under nova's own uuid, a PCI child for a PF's
//!   VFs and one for a GPU, random uuids, allocations of 3 instances, one with a VF and one with
//!   the GPU) is adopted: the compute node's uuid is taken at the first start, the plan lists 3
//!   claims, `--apply` makes them on the same providers, no request deletes or re-creates a
//!   provider or an allocated inventory, and adopting twice changes nothing.
//! - Drift: an unclaimed allocation, a claim with no allocation, an allocation with other
//!   amounts, inventory Placement keeps for a device the host lost; each found by `rtrackctl
//!   reconcile`, left alone by `--fix` without `report_allocations` (and said why), repaired with
//!   it but for the unclaimed ones, which only `--remove-unclaimed` naming them removes, and
//!   only once they were seen unclaimed for `unclaimed_grace_s`.
//! - A SIGKILL between a claim's commit and its allocation's write: after the restart the first
//!   cycle finds it and writes it with `report_allocations`; without, it is reported (metric,
//!   `/healthz`, `rtrackctl reconcile`).
//!
//! `RTRACK_SKIP_PLACEMENT=1` skips these with the other Placement tests.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::eventually;
use crate::support::placement::{runtime as rt, server, Raw, Server};
use rtrack_fixtures::synthetic::{PlainFunction, SyntheticHost};
use serde_json::{json, Value};
use uuid::Uuid;

const RTRACKD: &str = env!("CARGO_BIN_EXE_rtrackd");
const RTRACKCTL: &str = env!("CARGO_BIN_EXE_rtrackctl");
const VF_CLASS: &str = "CUSTOM_PCI_8086_1889";
const GPU_CLASS: &str = "CUSTOM_PCI_10DE_20B5";

/// The small SR-IOV host plus a GPU at af:00.0 for passthrough.
fn host() -> SyntheticHost {
    let mut h = SyntheticHost::small();
    h.plain.push(PlainFunction {
        address: "0000:af:00.0".to_string(),
        vendor_id: 0x10de,
        device_id: 0x20b5,
        class: 0x030200,
        numa_node: 0,
        driver: Some("vfio-pci".to_string()),
    });
    h
}

fn config(root: &Path, dir: &Path, url: &str, extra: &str) -> String {
    support::base_config(root, dir)
        + &format!(
            "[[pci.device_spec]]\nvendor_id = \"10de\"\nproduct_id = \"20b5\"\n\n[pci]\nreport_in_placement = true\n\n[placement]\nendpoint = \"{url}\"\nreport_interval_s = 1\n{extra}"
        )
}

fn ctl(d: &support::Daemon, args: &[&str]) -> (i32, Value, String) {
    let out = Command::new(RTRACKCTL)
        .arg("--socket")
        .arg(&d.socket)
        .arg("--json")
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let v = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    (
        out.status.code().unwrap_or(-1),
        v,
        stdout + &String::from_utf8_lossy(&out.stderr),
    )
}

fn ctl_text(d: &support::Daemon, args: &[&str]) -> (i32, String) {
    let out = Command::new(RTRACKCTL)
        .arg("--socket")
        .arg(&d.socket)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr),
    )
}

async fn must(raw: &Raw, method: reqwest::Method, path: &str, body: Value) -> Value {
    let (s, v) = raw.send(method.clone(), path, Some(body)).await;
    assert!((200..300).contains(&s), "{method} {path}: {s} {v}");
    v
}

/// What nova-compute leaves: its root (its own uuid, named cmp1), a PCI provider for the VFs of
/// each of PFs 3b:00.0 and 5e:00.0 and one for the GPU (random uuids, Nova's names, classes and trait), and the
/// allocations of three instances: a plain one, one with a VF, one with the GPU.
struct NovaTree {
    root: Uuid,
    vf_rp: Uuid,
    vfio_rp: Uuid,
    gpu_rp: Uuid,
    plain: Uuid,
    with_vf: Uuid,
    with_gpu: Uuid,
}

async fn nova_tree(raw: &Raw) -> NovaTree {
    let t = NovaTree {
        root: Uuid::new_v4(),
        vf_rp: Uuid::new_v4(),
        vfio_rp: Uuid::new_v4(),
        gpu_rp: Uuid::new_v4(),
        plain: Uuid::new_v4(),
        with_vf: Uuid::new_v4(),
        with_gpu: Uuid::new_v4(),
    };
    use reqwest::Method;
    must(
        raw,
        Method::POST,
        "/resource_providers",
        json!({"uuid": t.root, "name": "cmp1"}),
    )
    .await;
    must(
        raw,
        Method::PUT,
        &format!("/resource_providers/{}/inventories", t.root),
        json!({
        "resource_provider_generation": 0,
        "inventories": {
            "VCPU": {"total": 8, "allocation_ratio": 4.0, "max_unit": 8},
            "MEMORY_MB": {"total": 16384, "reserved": 512, "max_unit": 16384},
            "DISK_GB": {"total": 100, "max_unit": 100}}}),
    )
    .await;
    for (rp, name, class, total) in [
        (t.vf_rp, "cmp1_0000:3B:00.0", VF_CLASS, 8),
        (t.vfio_rp, "cmp1_0000:5E:00.0", VF_CLASS, 4),
        (t.gpu_rp, "cmp1_0000:AF:00.0", GPU_CLASS, 1),
    ] {
        must(
            raw,
            Method::POST,
            "/resource_providers",
            json!({"uuid": rp, "name": name, "parent_provider_uuid": t.root}),
        )
        .await;
        let (s, v) = raw
            .put(&format!("/resource_classes/{class}"), json!(null))
            .await;
        assert!(s == 201 || s == 204, "{s} {v}");
        let v = must(
            raw,
            Method::PUT,
            &format!("/resource_providers/{rp}/inventories"),
            json!({
            "resource_provider_generation": 0,
            "inventories": {class: {"total": total, "max_unit": total}}}),
        )
        .await;
        must(
            raw,
            Method::PUT,
            &format!("/resource_providers/{rp}/traits"),
            json!({
            "resource_provider_generation": v["resource_provider_generation"],
            "traits": ["COMPUTE_MANAGED_PCI_DEVICE"]}),
        )
        .await;
    }
    let alloc = |c: Uuid, a: Value| {
        let body = json!({"allocations": a, "project_id": "proj", "user_id": "user",
            "consumer_generation": null, "consumer_type": "INSTANCE"});
        async move { must(raw, Method::PUT, &format!("/allocations/{c}"), body).await }
    };
    alloc(
        t.plain,
        json!({t.root.to_string(): {"resources": {"VCPU": 2, "MEMORY_MB": 1024, "DISK_GB": 1}}}),
    )
    .await;
    alloc(
        t.with_vf,
        json!({
        t.root.to_string(): {"resources": {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}},
        t.vf_rp.to_string(): {"resources": {VF_CLASS: 1}}}),
    )
    .await;
    alloc(
        t.with_gpu,
        json!({
        t.root.to_string(): {"resources": {"VCPU": 4, "MEMORY_MB": 2048, "DISK_GB": 1}},
        t.gpu_rp.to_string(): {"resources": {GPU_CLASS: 1}}}),
    )
    .await;
    t
}

/// Placement's access log lines (method and path) after `from`.
fn requests_since(srv: &Server, from: usize) -> Vec<String> {
    std::fs::read_to_string(srv.dir.join("logs/placement.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("placement.requestlog"))
        .skip(from)
        .filter_map(|l| {
            let q = l.find('"')?;
            let rest = &l[q + 1..];
            Some(rest[..rest.find('"')?].to_string())
        })
        .collect()
}

struct Setup {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    dir: PathBuf,
}

fn setup() -> Setup {
    let tmp = rtrack_fixtures::real::scratch_dir();
    let root = tmp.path().join("host");
    host().write(&root);
    let dir = tmp.path().join("d");
    std::fs::create_dir_all(&dir).unwrap();
    Setup {
        root,
        dir,
        _tmp: tmp,
    }
}

#[test]
fn a_tree_nova_compute_left_is_taken_over_and_its_instances_adopted_once() {
    let Some(srv) = server("adopt") else { return };
    let rt = rt();
    let raw = srv.client();
    let nova = rt.block_on(nova_tree(&raw));
    let s = setup();
    let before = srv.logged_requests();
    let mut d = support::Daemon::start_with(
        Path::new(RTRACKD),
        &s.dir,
        &config(&s.root, &s.dir, &srv.url, ""),
        &[],
    );
    // The first start took nova's uuid for the compute node.
    let node = std::fs::read_to_string(s.dir.join("state/compute_id")).unwrap();
    assert_eq!(node.trim(), nova.root.to_string());
    assert!(
        d.log_text()
            .contains("taking over the compute node provider"),
        "{}",
        d.log_text()
    );
    // Reported under nova's providers: nothing created, renamed or deleted.
    eventually("a report", Duration::from_secs(30), &mut || {
        requests_since(&srv, before)
            .iter()
            .any(|r| r.starts_with("PUT") && r.contains("/traits"))
    });
    std::thread::sleep(Duration::from_millis(1500));
    let sent = requests_since(&srv, before);
    for r in &sent {
        assert!(
            !r.starts_with("DELETE") && !r.starts_with("POST /resource_providers"),
            "{r} (all: {sent:#?})"
        );
    }
    let tree = rt.block_on(raw.get(&format!("/resource_providers?in_tree={}", nova.root)));
    assert_eq!(
        tree["resource_providers"].as_array().unwrap().len(),
        4,
        "{tree}"
    );
    let inv = rt.block_on(raw.get(&format!("/resource_providers/{}/inventories", nova.vf_rp)));
    assert_eq!(inv["inventories"][VF_CLASS]["total"], 8, "{inv}");

    // The plan: three claims, nothing done yet.
    let (code, plan, text) = ctl(&d, &["adopt"]);
    assert_eq!(code, 0, "{text}");
    assert_eq!(plan["applied"], false);
    assert_eq!(plan["claims"].as_array().unwrap().len(), 3, "{plan}");
    assert!(plan["problems"].as_array().unwrap().is_empty(), "{plan}");
    let (_, claims) = d.call("GET", "/v1/claims", None);
    assert_eq!(
        claims.as_array().unwrap().len(),
        0,
        "a plan changes nothing"
    );
    let (code, human) = ctl_text(&d, &["adopt"]);
    assert_eq!(code, 0);
    assert!(
        human.contains("would make 3 claim(s)") && human.contains("dry run"),
        "{human}"
    );

    // The operator knows the VF instance has VF 3b:02.3 (the 4th VF); the GPU one gets the GPU.
    let vfs = host().pfs[0].vf_addresses();
    let map = s.dir.join("devices.txt");
    std::fs::write(
        &map,
        format!("# instance devices\n{} {}\n", nova.with_vf, vfs[3]),
    )
    .unwrap();
    let (code, applied, text) = ctl(
        &d,
        &["adopt", "--apply", "--devices", map.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{text}");
    assert_eq!(applied["applied"], true, "{applied}");
    let (_, claims) = d.call("GET", "/v1/claims", None);
    let claims = claims.as_array().unwrap().clone();
    assert_eq!(claims.len(), 3);
    let claim = |u: Uuid| {
        claims
            .iter()
            .find(|c| c["instance_uuid"] == u.to_string())
            .unwrap()
            .clone()
    };
    assert_eq!(claim(nova.plain)["resources"]["VCPU"], 2);
    assert_eq!(claim(nova.plain)["resources"]["MEMORY_MB"], 1024);
    assert_eq!(claim(nova.with_vf)["pci_devices"][0]["address"], vfs[3]);
    assert_eq!(
        claim(nova.with_gpu)["pci_devices"][0]["address"],
        "0000:af:00.0"
    );
    let (_, devices) = d.call("GET", "/v1/pci-devices", None);
    let dev = |a: &str| {
        devices["pci_devices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["address"] == a)
            .unwrap()
            .clone()
    };
    assert_eq!(
        dev(&vfs[3])["resource_provider_uuid"],
        nova.vf_rp.to_string()
    );
    assert_eq!(dev(&vfs[3])["status"], "allocated");
    assert_eq!(
        dev("0000:af:00.0")["resource_provider_uuid"],
        nova.gpu_rp.to_string()
    );
    let (_, usage) = d.call("GET", "/v1/usage", None);
    assert_eq!(usage["resources"]["VCPU"]["used"], 7, "{usage}");
    assert_eq!(usage["resources"]["MEMORY_MB"]["used"], 3584, "{usage}");

    // Twice: nothing new.
    let (code, again, text) = ctl(&d, &["adopt", "--apply"]);
    assert_eq!(code, 0, "{text}");
    assert_eq!(again["claims"].as_array().unwrap().len(), 0, "{again}");
    assert_eq!(again["existing"].as_array().unwrap().len(), 3, "{again}");
    // And the local claims agree with Placement.
    let (code, r, text) = ctl(&d, &["reconcile"]);
    assert_eq!(code, 0, "{text}");
    assert_eq!(r["counts"]["unclaimed"], 0, "{r}");
    // Survives a restart.
    d.restart();
    let (_, claims) = d.call("GET", "/v1/claims", None);
    assert_eq!(claims.as_array().unwrap().len(), 3);
    let all = requests_since(&srv, before);
    assert!(
        !all.iter()
            .any(|r| r.starts_with("DELETE") || r.starts_with("POST /resource_providers")),
        "{all:#?}"
    );
}

#[test]
fn drift_is_found_left_alone_without_report_allocations_and_repaired_with_it() {
    let Some(srv) = server("drift") else { return };
    let rt = rt();
    let raw = srv.client();
    let nova = rt.block_on(nova_tree(&raw));
    let s = setup();
    let mut d = support::Daemon::start_with(
        Path::new(RTRACKD),
        &s.dir,
        &config(
            &s.root,
            &s.dir,
            &srv.url,
            "refresh_interval_s = 1\nunclaimed_grace_s = 5\n",
        ),
        &[],
    );
    let (code, _, text) = ctl(&d, &["adopt", "--apply"]);
    assert_eq!(code, 0, "{text}");
    let (code, r, text) = ctl(&d, &["reconcile"]);
    assert_eq!((code, &r["counts"]["missing"]), (0, &json!(0)), "{text}");

    use reqwest::Method;
    // An orphan: Placement holds an allocation for an instance this host does not run.
    let orphan = Uuid::new_v4();
    rt.block_on(must(&raw, Method::PUT, &format!("/allocations/{orphan}"), json!({
        "allocations": {nova.root.to_string(): {"resources": {"VCPU": 1, "MEMORY_MB": 256}}},
        "project_id": "p", "user_id": "u", "consumer_generation": null, "consumer_type": "INSTANCE"})));
    // Other amounts: the plain instance's allocation says 3 VCPU, the host holds 2.
    let cur = rt.block_on(raw.get(&format!("/allocations/{}", nova.plain)));
    rt.block_on(must(&raw, Method::PUT, &format!("/allocations/{}", nova.plain), json!({
        "allocations": {nova.root.to_string(): {"resources": {"VCPU": 3, "MEMORY_MB": 1024, "DISK_GB": 1}}},
        "project_id": "proj", "user_id": "user", "consumer_generation": cur["consumer_generation"], "consumer_type": "INSTANCE"})));
    // Missing: a claim made here with no allocation in Placement.
    let missing = support::uuid(501);
    let (st, v) = d.call(
        "POST",
        "/v1/claims",
        Some(&support::claim(&missing, 1, 512, 1, None)),
    );
    assert_eq!(st, 201, "{v}");
    // Inventory the host no longer has: nova's provider of a PF that is gone, still allocated.
    let gone_rp = Uuid::new_v4();
    rt.block_on(must(
        &raw,
        Method::POST,
        "/resource_providers",
        json!({"uuid": gone_rp, "name": "cmp1_0000:99:00.0", "parent_provider_uuid": nova.root}),
    ));
    let v = rt.block_on(must(
        &raw,
        Method::PUT,
        &format!("/resource_providers/{gone_rp}/inventories"),
        json!({
        "resource_provider_generation": 0, "inventories": {VF_CLASS: {"total": 2, "max_unit": 2}}}),
    ));
    rt.block_on(must(&raw, Method::PUT, &format!("/resource_providers/{gone_rp}/traits"), json!({
        "resource_provider_generation": v["resource_provider_generation"], "traits": ["COMPUTE_MANAGED_PCI_DEVICE"]})));
    let holder = Uuid::new_v4();
    rt.block_on(must(&raw, Method::PUT, &format!("/allocations/{holder}"), json!({
        "allocations": {gone_rp.to_string(): {"resources": {VF_CLASS: 1}}},
        "project_id": "p", "user_id": "u", "consumer_generation": null, "consumer_type": "INSTANCE"})));

    let (code, r, text) = ctl(&d, &["reconcile"]);
    assert_eq!(code, 3, "drift: exit 3\n{text}");
    let kinds: Vec<(String, String)> = r["drift"]["consumers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["consumer"].as_str().unwrap().to_string(),
                c["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for (c, k) in [
        (orphan.to_string(), "unclaimed"),
        (nova.plain.to_string(), "different"),
        (missing.clone(), "missing"),
        (holder.to_string(), "unclaimed"),
    ] {
        assert!(
            kinds.contains(&(c.clone(), k.to_string())),
            "{c} {k}: {kinds:?}"
        );
    }
    let inv = &r["drift"]["inventories"][0];
    assert_eq!(
        (
            inv["provider"].as_str().unwrap(),
            inv["class"].as_str().unwrap(),
            &inv["host_total"],
            &inv["used"]
        ),
        (gone_rp.to_string().as_str(), VF_CLASS, &json!(0), &json!(1)),
        "{r}"
    );
    let (_, human) = ctl_text(&d, &["reconcile"]);
    assert!(
        human.contains("unclaimed") && human.contains("inventory  cmp1_0000:99:00.0"),
        "{human}"
    );

    // Periodic: seen at two refreshes, then a metric, /healthz and one log line each.
    eventually("the drift metric", Duration::from_secs(30), &mut || {
        let (_, h) = d.call("GET", "/healthz", None);
        h["placement_drift"]["unclaimed"] == 2 && h["placement_drift"]["missing"] == 1
    });
    let metrics = String::from_utf8(
        rtrack::cli::client::request(&d.socket, "GET", "/metrics", None, Duration::from_secs(5))
            .unwrap()
            .body,
    )
    .unwrap();
    assert!(
        metrics.contains("rtrack_placement_drift{kind=\"different\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("rtrack_placement_drift{kind=\"inventory_gone\"} 1"),
        "{metrics}"
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        d.log_text().matches(&format!("consumer={orphan}")).count(),
        1,
        "logged once:\n{}",
        d.log_text()
    );

    // --fix without report_allocations: allocations are the scheduler's; said so, untouched.
    let (code, r, text) = ctl(&d, &["reconcile", "--fix"]);
    assert_eq!(code, 3, "{text}");
    assert_eq!(r["report_allocations"], false);
    assert!(
        r["not_touched"].as_array().unwrap().iter().any(|n| n["why"]
            .as_str()
            .unwrap()
            .contains("report_allocations = false")),
        "{r}"
    );
    let a = rt.block_on(raw.get(&format!("/allocations/{orphan}")));
    assert!(
        !a["allocations"].as_object().unwrap().is_empty(),
        "untouched: {a}"
    );

    // With report_allocations (SIGHUP): --fix writes what the claims hold; unclaimed consumers
    // are not rtrack's to remove and stay, with the reason.
    let cfg = std::fs::read_to_string(&d.config).unwrap().replace(
        "refresh_interval_s = 1\n",
        "refresh_interval_s = 1\nreport_allocations = true\n",
    );
    std::fs::write(&d.config, cfg).unwrap();
    d.signal(nix::sys::signal::Signal::SIGHUP);
    eventually("reloaded", Duration::from_secs(30), &mut || {
        d.log_text().contains("starts over")
    });
    let (code, r, text) = ctl(&d, &["reconcile", "--fix"]);
    assert_eq!(r["report_allocations"], true, "{text}");
    assert_eq!(code, 3, "unclaimed consumers remain: {text}");
    let mut left: Vec<(String, String)> = r["drift"]["consumers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["consumer"].as_str().unwrap().to_string(),
                c["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    left.sort();
    let mut expected = vec![
        (orphan.to_string(), "unclaimed".to_string()),
        (holder.to_string(), "unclaimed".to_string()),
    ];
    expected.sort();
    assert_eq!(left, expected, "{text}");
    assert!(
        r["not_touched"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["why"].as_str().unwrap().contains("--remove-unclaimed")),
        "{r}"
    );
    let a = rt.block_on(raw.get(&format!("/allocations/{orphan}")));
    assert_eq!(a["project_id"], "p", "untouched: {a}");
    assert!(!a["allocations"].as_object().unwrap().is_empty(), "{a}");
    let a = rt.block_on(raw.get(&format!("/allocations/{missing}")));
    assert_eq!(
        a["allocations"][nova.root.to_string()]["resources"]["VCPU"],
        1,
        "{a}"
    );
    let a = rt.block_on(raw.get(&format!("/allocations/{}", nova.plain)));
    assert_eq!(
        a["allocations"][nova.root.to_string()]["resources"]["VCPU"],
        2,
        "{a}"
    );
    assert_eq!(a["project_id"], "proj", "{a}");

    // The operator names them: a consumer first seen a moment ago is refused (its build may be
    // on its way), the others' part on this host goes once seen for unclaimed_grace_s (5 s).
    let fresh = Uuid::new_v4();
    rt.block_on(must(&raw, Method::PUT, &format!("/allocations/{fresh}"), json!({
        "allocations": {nova.root.to_string(): {"resources": {"VCPU": 1, "MEMORY_MB": 128}}},
        "project_id": "p", "user_id": "u", "consumer_generation": null, "consumer_type": "INSTANCE"})));
    let (code, r, text) = ctl(
        &d,
        &[
            "reconcile",
            "--remove-unclaimed",
            &fresh.to_string(),
            "--remove-unclaimed",
            &missing,
        ],
    );
    assert_eq!(code, 3, "{text}");
    let refused: Vec<(String, String)> = r["refused"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["consumer"].as_str().unwrap().to_string(),
                x["why"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(refused.len(), 2, "{r}");
    assert!(
        refused
            .iter()
            .any(|(c, why)| *c == fresh.to_string() && why.contains("unclaimed_grace_s")),
        "{refused:?}"
    );
    assert!(
        refused
            .iter()
            .any(|(c, why)| *c == missing && why.contains("local claim")),
        "{refused:?}"
    );
    // The reload started a new reporter: the grace runs from its first refresh.
    std::thread::sleep(Duration::from_secs(6));
    let (code, r, text) = ctl(
        &d,
        &[
            "reconcile",
            "--remove-unclaimed",
            &orphan.to_string(),
            "--remove-unclaimed",
            &holder.to_string(),
        ],
    );
    assert_eq!(r["removed"].as_array().unwrap().len(), 2, "{text}");
    assert_eq!(code, 3, "the fresh one is left: {text}");
    let a = rt.block_on(raw.get(&format!("/allocations/{orphan}")));
    assert!(a["allocations"].as_object().unwrap().is_empty(), "{a}");
    let a = rt.block_on(raw.get(&format!("/allocations/{fresh}")));
    assert!(!a["allocations"].as_object().unwrap().is_empty(), "{a}");
    // The gone PF's provider goes once its allocation did.
    eventually(
        "the gone PF's provider deleted",
        Duration::from_secs(30),
        &mut || {
            rt.block_on(raw.send(Method::GET, &format!("/resource_providers/{gone_rp}"), None))
                .0
                == 404
        },
    );

    // Someone deletes a running instance's allocation (DELETE bumps no provider's generation):
    // the next refresh still sees it gone, and rtrack writes it again.
    let (st, v) = rt.block_on(raw.send(Method::DELETE, &format!("/allocations/{missing}"), None));
    assert_eq!(st, 204, "{v}");
    eventually(
        "the deleted allocation written again",
        Duration::from_secs(30),
        &mut || {
            let a = rt.block_on(raw.get(&format!("/allocations/{missing}")));
            a["allocations"][nova.root.to_string()]["resources"]["VCPU"] == 1
        },
    );
    d.kill();
}

#[test]
fn a_claim_killed_before_its_allocation_is_written_is_found_after_the_restart() {
    let Some(srv) = server("killed") else { return };
    let rt = rt();
    let raw = srv.client();
    let s = setup();
    // Reports at start, then not for an hour: a claim is committed and never written.
    let slow = config(&s.root, &s.dir, &srv.url, "report_allocations = true\n")
        .replace("report_interval_s = 1", "report_interval_s = 3600");
    let mut d = support::Daemon::start_with(Path::new(RTRACKD), &s.dir, &slow, &[]);
    let node = std::fs::read_to_string(s.dir.join("state/compute_id"))
        .unwrap()
        .trim()
        .to_string();
    eventually("registered", Duration::from_secs(30), &mut || {
        rt.block_on(raw.send(
            reqwest::Method::GET,
            &format!("/resource_providers/{node}"),
            None,
        ))
        .0 == 200
    });
    let a = support::uuid(77);
    let (st, v) = d.call(
        "POST",
        "/v1/claims",
        Some(&support::claim(&a, 2, 1024, 1, None)),
    );
    assert_eq!(st, 201, "{v}");
    d.kill();
    let none = rt.block_on(raw.get(&format!("/allocations/{a}")));
    assert!(
        none["allocations"].as_object().unwrap().is_empty(),
        "{none}"
    );

    // Without report_allocations: found and reported, not written.
    let plain = slow
        .replace("report_allocations = true\n", "refresh_interval_s = 1\n")
        .replace("report_interval_s = 3600", "report_interval_s = 1");
    std::fs::write(&d.config, &plain).unwrap();
    d.spawn();
    d.wait_ready();
    let (code, r, text) = ctl(&d, &["reconcile"]);
    assert_eq!(code, 3, "{text}");
    assert_eq!(r["drift"]["consumers"][0]["consumer"], a);
    assert_eq!(r["drift"]["consumers"][0]["kind"], "missing");
    eventually(
        "reported by the periodic reconciliation",
        Duration::from_secs(30),
        &mut || {
            let (_, h) = d.call("GET", "/healthz", None);
            h["placement_drift"]["missing"] == 1
        },
    );
    assert!(
        d.log_text()
            .contains("drift between the local claims and Placement"),
        "{}",
        d.log_text()
    );
    let none = rt.block_on(raw.get(&format!("/allocations/{a}")));
    assert!(
        none["allocations"].as_object().unwrap().is_empty(),
        "not written: {none}"
    );
    d.kill();

    // With it: the first cycle after the restart finds it and writes it.
    std::fs::write(&d.config, &slow).unwrap();
    let started = Instant::now();
    d.spawn();
    d.wait_ready();
    eventually(
        "written within the first cycle",
        Duration::from_secs(30),
        &mut || {
            let v = rt.block_on(raw.get(&format!("/allocations/{a}")));
            v["allocations"][&node]["resources"]["VCPU"] == 2
        },
    );
    println!(
        "MEASURE killed claim: allocation written {:.1} s after the restart",
        started.elapsed().as_secs_f64()
    );
    // Logged once the cycle that wrote it ends.
    eventually("the fix logged", Duration::from_secs(30), &mut || {
        d.log_text().contains("drift found and fixed")
    });
    d.kill();
}

/// The first start takes over only the provider named exactly `hypervisor_hostname` (or the
/// configured uuid): a provider named after the service's short host name is another machine's
/// and stays as it is; a provider of the node's name that is not a root stops the start, naming
/// it; a provider taken by its configured uuid keeps its name.
#[test]
fn the_compute_node_is_taken_over_only_by_its_exact_name_or_uuid() {
    let Some(srv) = server("identity") else {
        return;
    };
    let rt = rt();
    let raw = srv.client();
    use reqwest::Method;
    // Another machine's compute node, named h1 by its nova-compute, with an instance.
    let other = Uuid::new_v4();
    rt.block_on(must(
        &raw,
        Method::POST,
        "/resource_providers",
        json!({"uuid": other, "name": "h1"}),
    ));
    rt.block_on(must(
        &raw,
        Method::PUT,
        &format!("/resource_providers/{other}/inventories"),
        json!({"resource_provider_generation": 0, "inventories": {
            "VCPU": {"total": 4}, "MEMORY_MB": {"total": 8192}, "DISK_GB": {"total": 40}}}),
    ));
    let theirs = Uuid::new_v4();
    rt.block_on(must(&raw, Method::PUT, &format!("/allocations/{theirs}"), json!({
        "allocations": {other.to_string(): {"resources": {"VCPU": 1, "MEMORY_MB": 512}}},
        "project_id": "p", "user_id": "u", "consumer_generation": null, "consumer_type": "INSTANCE"})));
    let before = rt.block_on(raw.get(&format!("/resource_providers/{other}/inventories")));
    let s = setup();
    let cfg = config(&s.root, &s.dir, &srv.url, "report_allocations = true\n")
        .replace(
            "hypervisor_hostname = \"cmp1\"",
            "hypervisor_hostname = \"h1.long.example\"",
        )
        .replace("host = \"cmp1\"\n", "host = \"h1\"\n");
    assert!(cfg.contains("\nhost = \"h1\""), "{cfg}");
    let mut d = support::Daemon::start_with(Path::new(RTRACKD), &s.dir, &cfg, &[]);
    let node = std::fs::read_to_string(s.dir.join("state/compute_id")).unwrap();
    assert_ne!(node.trim(), other.to_string(), "not another machine's");
    eventually(
        "registered under its own name",
        Duration::from_secs(30),
        &mut || {
            let v = rt.block_on(raw.get("/resource_providers?name=h1.long.example"));
            v["resource_providers"][0]["uuid"] == node.trim()
        },
    );
    std::thread::sleep(Duration::from_secs(2));
    let p = rt.block_on(raw.get(&format!("/resource_providers/{other}")));
    assert_eq!(p["name"], "h1", "{p}");
    let after = rt.block_on(raw.get(&format!("/resource_providers/{other}/inventories")));
    assert_eq!(before, after);
    let a = rt.block_on(raw.get(&format!("/allocations/{theirs}")));
    assert_eq!(
        a["allocations"][other.to_string()]["resources"]["VCPU"],
        1,
        "{a}"
    );
    d.kill();

    // A provider of the node's name that is a child elsewhere: not a compute node.
    let s = setup();
    let a = Uuid::new_v4();
    rt.block_on(must(
        &raw,
        Method::POST,
        "/resource_providers",
        json!({"uuid": a, "name": "cmp1", "parent_provider_uuid": other}),
    ));
    let path = s.dir.join("rtrack.toml");
    let cfg = config(&s.root, &s.dir, &srv.url, "");
    std::fs::write(&path, &cfg).unwrap();
    let out = Command::new(RTRACKD)
        .arg("--config")
        .arg(&path)
        .env_remove("NOTIFY_SOCKET")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("is not a compute node") && err.contains(&other.to_string()),
        "{err}"
    );
    assert!(!s.dir.join("state/compute_id").exists());

    // Told which one: [host] compute_node_uuid is taken as it is, and keeps its name.
    let b = Uuid::new_v4();
    rt.block_on(must(
        &raw,
        Method::POST,
        "/resource_providers",
        json!({"uuid": b, "name": "svc1"}),
    ));
    let mut d = support::Daemon::start_with(
        Path::new(RTRACKD),
        &s.dir,
        &cfg.replace(
            "[host]\n",
            &format!("[host]\ncompute_node_uuid = \"{b}\"\n"),
        ),
        &[],
    );
    let node = std::fs::read_to_string(s.dir.join("state/compute_id")).unwrap();
    assert_eq!(node.trim(), b.to_string());
    eventually("reported", Duration::from_secs(30), &mut || {
        let v = rt.block_on(raw.get(&format!("/resource_providers/{b}/inventories")));
        v["inventories"]["VCPU"]["total"].as_i64().is_some()
    });
    let p = rt.block_on(raw.get(&format!("/resource_providers/{b}")));
    assert_eq!(p["name"], "svc1", "never renamed: {p}");
    eventually(
        "the name is warned about",
        Duration::from_secs(30),
        &mut || d.log_text().contains("rtrack does not rename it"),
    );
    d.kill();
}

/// nova-compute reserved a one-time-use GPU's provider whole after its instance went (Nova's
/// mark of a used device, which only an operator lowers), and an operator reserved two VFs of
/// 5e:00.0's provider. Taking the host over keeps both: rtrack finds the GPU available, keeps
/// Placement's reservation and reserves the device itself until it is cleaned, and leaves the
/// operator's `reserved` as it is (Nova never writes it). `rtrackctl pci release` lowers the
/// GPU's reservation, once.
#[test]
fn reservations_nova_and_the_operator_left_survive_the_takeover() {
    let Some(srv) = server("adopt-reserved") else {
        return;
    };
    let rt = rt();
    let raw = srv.client();
    let nova = rt.block_on(nova_tree(&raw));
    let reserve = |rp: Uuid, class: &str, total: i64, reserved: i64| {
        let inv = rt.block_on(raw.get(&format!("/resource_providers/{rp}/inventories")));
        rt.block_on(must(
            &raw,
            reqwest::Method::PUT,
            &format!("/resource_providers/{rp}/inventories"),
            json!({
            "resource_provider_generation": inv["resource_provider_generation"],
            "inventories": {class: {"total": total, "max_unit": total, "reserved": reserved}}}),
        ));
    };
    // The GPU's instance is gone; Nova reserved its one-time-use provider.
    let (s, v) = rt.block_on(raw.send(
        reqwest::Method::DELETE,
        &format!("/allocations/{}", nova.with_gpu),
        None,
    ));
    assert_eq!(s, 204, "{v}");
    reserve(nova.gpu_rp, GPU_CLASS, 1, 1);
    reserve(nova.vfio_rp, VF_CLASS, 4, 2);
    let s = setup();
    let text = config(&s.root, &s.dir, &srv.url, "").replace(
        "product_id = \"20b5\"\n",
        "product_id = \"20b5\"\none_time_use = true\n",
    );
    let d = support::Daemon::start_with(Path::new(RTRACKD), &s.dir, &text, &[]);
    let gpu = || {
        let (_, devices) = d.call("GET", "/v1/pci-devices", None);
        devices["pci_devices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["address"] == "0000:af:00.0")
            .unwrap()
            .clone()
    };
    eventually(
        "the GPU reserved after the first reports",
        Duration::from_secs(30),
        &mut || gpu()["status"] == "reserved",
    );
    assert!(
        d.log_text().contains("used before rtrack tracked it"),
        "{}",
        d.log_text()
    );
    // Several report cycles later Placement still holds both reservations.
    std::thread::sleep(Duration::from_millis(2500));
    let reserved = |rp: Uuid, class: &str| {
        let inv = rt.block_on(raw.get(&format!("/resource_providers/{rp}/inventories")));
        inv["inventories"][class]["reserved"].as_i64().unwrap()
    };
    assert_eq!(reserved(nova.gpu_rp, GPU_CLASS), 1);
    assert_eq!(reserved(nova.vfio_rp, VF_CLASS), 2);
    // Released by the operator through rtrack: rtrack lowers it, and it stays lowered.
    let (code, _, out) = ctl(&d, &["pci", "release", "0000:af:00.0"]);
    assert_eq!(code, 0, "{out}");
    eventually(
        "the GPU's reservation lowered",
        Duration::from_secs(30),
        &mut || reserved(nova.gpu_rp, GPU_CLASS) == 0,
    );
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(gpu()["status"], "available");
    assert_eq!(reserved(nova.gpu_rp, GPU_CLASS), 0);
    assert_eq!(reserved(nova.vfio_rp, VF_CLASS), 2);
}
