//! Interop with a real client no one here wrote: every ComputeNode primitive `rtrackd --once`
//! emits for every fixture, at the newest version and backported to 1.10-1.18, goes through real
//! Nova 34.0.0 (`tests/interop/nova_interop.py` in a venv under `target/nova-functional-venv`):
//! `obj_from_primitive`, re-serialization to the same JSON, Nova's own backport of the newest
//! primitive equal to rtrack's, and the scheduler's `HostState.update`.
//!
//! Needs python3 >= 3.11 with venv and PyPI access the first time (about a minute); the venv is
//! reused afterwards. `RTRACK_SKIP_NOVA=1` skips the test explicitly; without it, a missing
//! python3 is a failure that says what to install.

use crate::support::nova::repo;
use std::path::{Path, PathBuf};
use std::process::Command;

use rtrack::config::Config;
use rtrack::objects::compute_node::ComputeNode;
use rtrack::objects::{current_manifest, ObjVersion, Versioned};
use rtrack::probes::{probe_host, HostRoot, ProbeOptions};
use rtrack::tracker::pci::devices::select_tracked;
use rtrack::tracker::pci::pools::{build_pools, pools_object};
use rtrack_fixtures::real::{scratch_dir, unpack, REAL_FIXTURES};
use rtrack_fixtures::synthetic::SyntheticHost;
use serde_json::{json, Value};

const CONFIG: &str = r#"
[[pci.device_spec]]
vendor_id = "8086"
product_id = "1889"
physical_network = "physnet1"
trusted = true

[[pci.device_spec]]
# everything else that is not a bridge
"#;

fn emit(root: &Path, state: &Path, config: &Path, version: Option<&str>) -> Value {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rtrackd"));
    cmd.args(["--once", "--format", "nova", "--instances-path", "/"])
        .arg("--root")
        .arg(root)
        .arg("--state-dir")
        .arg(state)
        .arg("--config")
        .arg(config);
    if let Some(v) = version {
        cmd.args(["--object-version", v]);
    }
    let out = cmd.output().expect("run rtrackd");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("a JSON primitive")
}

#[test]
fn every_primitive_loads_round_trips_and_feeds_novas_scheduler() {
    let Some(venv) = crate::support::nova::venv("the Nova interop test") else {
        return;
    };
    let work = scratch_dir();
    let config = work.path().join("rtrack.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let state = work.path().join("state");

    let mut roots: Vec<(String, PathBuf, Option<rtrack_fixtures::real::Unpacked>)> = Vec::new();
    for f in REAL_FIXTURES {
        let u = unpack(f);
        roots.push((f.name.to_string(), u.root.clone(), Some(u)));
    }
    for (name, host) in [
        ("synthetic-small", SyntheticHost::small()),
        ("synthetic-bus-crossing", SyntheticHost::bus_crossing()),
        ("synthetic-large", SyntheticHost::large()),
    ] {
        let dir = work.path().join(name);
        host.write(&dir);
        roots.push((name.to_string(), dir, None));
    }
    // vDPA devices: pools of dev_type vdpa in the ComputeNode.
    for (name, host) in [
        ("synthetic-vdpa", rtrack_fixtures::vdpa::VdpaHost::vdpa()),
        (
            "synthetic-vdpa-mixed",
            rtrack_fixtures::vdpa::VdpaHost::vdpa_mixed(),
        ),
    ] {
        let dir = work.path().join(name);
        host.write(&dir);
        roots.push((name.to_string(), dir, None));
    }

    let mut cases = Vec::new();
    let mut pools_seen = 0;
    for (name, root, _keep) in &roots {
        let newest = emit(root, &state, &config, None);
        pools_seen += newest["nova_object.data"]["pci_device_pools"]["nova_object.data"]["objects"]
            .as_array()
            .map_or(0, Vec::len);
        cases.push(json!({"name": format!("{name} ComputeNode 1.19"), "primitive": newest}));
        // Backports of this very primitive (a second run would differ in updated_at); the CLI's
        // --object-version goes through the same function and is checked once below.
        let node = Versioned::<ComputeNode>::from_primitive(&newest)
            .expect("rtrack decodes its own primitive");
        for minor in 10..=18 {
            let v = ObjVersion::new(1, minor);
            let prim = node
                .to_primitive_at(v, Some(&current_manifest()))
                .expect("backport");
            cases.push(json!({"name": format!("{name} ComputeNode {v}"), "primitive": prim, "newest": newest}));
        }
    }
    assert!(
        pools_seen > 20,
        "the fixtures should give PCI pools to check ({pools_seen})"
    );
    let (name, root, _) = &roots[0];
    let via_cli = emit(root, &state, &config, Some("1.14"));
    assert_eq!(via_cli["nova_object.version"], "1.14");
    cases.push(json!({"name": format!("{name} ComputeNode 1.14 from rtrackd --object-version"), "primitive": via_cli}));
    // Pools: Nova's PciDeviceStats on the same devices and specs.
    let file = Path::new("rtrack.toml");
    let cfg = Config::parse(CONFIG, file).unwrap().validate(file).unwrap();
    let spec_json = json!([
        {"vendor_id": "8086", "product_id": "1889", "physical_network": "physnet1", "trusted": "true"},
        {}
    ]);
    let mut pool_cases = 0;
    for (name, root, _keep) in &roots {
        let inv = probe_host(&HostRoot::under(root), &ProbeOptions::default()).unwrap();
        // Nova cannot parse addresses in domains above ffff; rtrack tracks them, Nova skips them.
        let probed: Vec<_> = inv
            .pci_devices
            .into_iter()
            .filter(|d| d.address.domain <= 0xffff)
            .collect();
        let devices = select_tracked(&probed, &cfg.pci.device_specs);
        if devices.is_empty() {
            continue;
        }
        let pools = pools_object(&build_pools(&devices, &cfg.pci.device_specs)).to_primitive();
        let devs: Vec<Value> = devices
            .iter()
            .map(|d| json!({"address": d.address.to_string(), "vendor_id": d.vendor_id, "product_id": d.product_id,
                            "dev_type": d.dev_type.as_str(), "numa_node": d.numa_node,
                            "parent_addr": d.parent_addr.map(|a| a.to_string()), "parent_ifname": d.parent_ifname}))
            .collect();
        cases.push(json!({"name": format!("{name} PCI pools"), "device_spec": spec_json, "devices": devs, "pools": pools}));
        pool_cases += 1;
    }
    assert!(pool_cases >= 10, "{pool_cases}");
    let cases_file = work.path().join("cases.json");
    std::fs::write(&cases_file, serde_json::to_vec(&cases).unwrap()).unwrap();

    let out = Command::new(venv.join("bin/python"))
        .arg("-W")
        .arg("ignore")
        .arg(repo().join("tests/interop/nova_interop.py"))
        .arg(&cases_file)
        .output()
        .expect("run the interop checker");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "real Nova disagrees with rtrack:\n{}\n{}",
        stdout
            .lines()
            .filter(|l| !l.starts_with("ok"))
            .collect::<Vec<_>>()
            .join("\n"),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!(
            "{} case(s) checked against nova 34.0.0: 0 failed",
            cases.len()
        )),
        "{stdout}"
    );
}
