//! Differential test of the PCI probe's device types against real Nova 34's libvirt driver,
//! vDPA devices included: `LibvirtDriver._get_pci_passthrough_devices` on Nova's own fake
//! libvirt connection (`tests/interop/pci_devices_diff.py`, in the venv under
//! `target/nova-functional-venv`) describing the same PFs, VFs and vDPA devices as the generated sysfs
//! tree rtrack probes. Per function: `dev_type` (a VF with a vDPA device is `vdpa`; a PF with
//! one on a sub-function stays `type-PF`) and `parent_addr`.
//!
//! Hosts: the `vdpa` and `vdpa-mixed` fixtures (`rtrack_fixtures::vdpa`) and `RTRACK_VDPA_CASES`
//! (default 60) seeded random ones: 1-3 ConnectX-6 Dx PFs with 0-6 VFs each, each VF with a vDPA
//! device one time in two, a PF with one on a sub-function one time in four.
//!
//! `RTRACK_SKIP_NOVA=1` skips it explicitly.

use crate::support::nova::repo;
use std::collections::BTreeMap;
use std::process::Command;

use rtrack::probes::{probe_host, HostRoot, ProbeOptions};
use rtrack_fixtures::synthetic::SyntheticPf;
use rtrack_fixtures::vdpa::{cx6dx, vhost, VdpaHost, VdpaSpec};
use serde_json::{json, Value};

/// `dddd:bb:ss.f` as the numbers the fake libvirt takes.
fn parts(address: &str) -> Value {
    let num = |s: &str| u32::from_str_radix(s, 16).expect("hex");
    json!({"bus": num(&address[5..7]), "slot": num(&address[8..10]), "function": num(&address[11..])})
}

/// The host as Nova's fake libvirt describes it: its PFs, VFs and vDPA devices on PCI functions.
/// The fake libvirt places a PF's VFs right after it (function 0, VFs from function 1 on, eight
/// to a slot), so only such PFs go in (the fixtures' E810, VFs from offset 8, does not).
fn nova_host(id: &str, h: &VdpaHost) -> Value {
    let pfs: Vec<Value> = h
        .base
        .pfs
        .iter()
        .filter(|pf| pf.vf_offset == 1 && pf.vf_stride == 1 && pf.address.ends_with(".0"))
        .map(|pf| {
            let mut v = parts(&pf.address);
            v["vendor_id"] = json!(format!("{:04x}", pf.vendor_id));
            v["product_id"] = json!(format!("{:04x}", pf.pf_device_id));
            v["vf_product_id"] = json!(format!("{:04x}", pf.vf_device_id));
            v["numa_node"] = json!(pf.numa_node);
            v["vfs"] = pf.vf_addresses().iter().map(|a| parts(a)).collect();
            v
        })
        .collect();
    let vdpa: Vec<Value> = h
        .devices
        .iter()
        .filter_map(|d| {
            let idx = d.vhost.unwrap_or(90);
            d.parent
                .as_ref()
                .map(|p| json!({"name": format!("vdpa_{}", d.name), "idx": idx, "parent": p}))
        })
        .collect();
    json!({"id": id, "pfs": pfs, "vdpa": vdpa})
}

/// xorshift64*: the same hosts on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn chance(&mut self, one_in: u64) -> bool {
        self.next() % one_in == 0
    }
}

fn random_host(r: &mut Rng, n: usize) -> VdpaHost {
    let mut h = VdpaHost::vdpa();
    h.base.description = format!("synthetic: vDPA differential host {n}");
    h.base.pfs.clear();
    h.devices.clear();
    let mut next = 0u32;
    for (i, bus) in [0x06u8, 0x41, 0x86].iter().enumerate() {
        if i > 0 && r.chance(2) {
            continue;
        }
        let vfs = (r.next() % 7) as u32;
        let pf: SyntheticPf = cx6dx(&format!("0000:{bus:02x}:00.0"), vfs);
        for vf in pf.vf_addresses() {
            if r.chance(2) {
                h.devices.push(vhost(&format!("vdpa{next}"), &vf, next));
                next += 1;
            }
        }
        if r.chance(4) {
            h.devices.push(VdpaSpec {
                name: format!("sf{next}"),
                parent: Some(pf.address.clone()),
                aux: vec![
                    format!("mlx5_core.sf.{next}"),
                    format!("mlx5_core.vnet.{next}"),
                ],
                driver: Some("vhost_vdpa".into()),
                vhost: Some(next),
            });
            next += 1;
        }
        h.base.pfs.push(pf);
    }
    h
}

#[test]
fn device_types_agree_with_novas_libvirt_driver() {
    let Some(venv) = crate::support::nova::venv("the vDPA differential test") else {
        return;
    };
    let count: usize = std::env::var("RTRACK_VDPA_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let mut hosts = vec![
        ("vdpa".to_string(), VdpaHost::vdpa()),
        ("vdpa-mixed".to_string(), VdpaHost::vdpa_mixed()),
    ];
    let mut r = Rng(0x7664_7061_6469_6666);
    for n in 0..count {
        hosts.push((format!("random-{n}"), random_host(&mut r, n)));
    }
    let mut ours: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for (id, h) in &hosts {
        let dir = rtrack_fixtures::real::scratch_dir();
        h.write(dir.path());
        let inv =
            probe_host(&HostRoot::under(dir.path()), &ProbeOptions::default()).expect("a probe");
        let devs = inv
            .pci_devices
            .iter()
            .map(|d| {
                json!({"address": d.address.to_string(), "dev_type": d.dev_type.as_str(),
                       "parent_addr": d.parent_addr.map(|a| a.to_string())})
            })
            .collect();
        ours.insert(id.clone(), devs);
    }
    let input = tempfile::NamedTempFile::new().expect("a temp file");
    let doc = json!({"hosts": hosts.iter().map(|(id, h)| nova_host(id, h)).collect::<Vec<_>>()});
    std::fs::write(input.path(), doc.to_string()).expect("write hosts");
    let out = Command::new(venv.join("bin/python"))
        .arg("-W")
        .arg("ignore")
        .arg(repo().join("tests/interop/pci_devices_diff.py"))
        .arg(input.path())
        .output()
        .expect("run pci_devices_diff.py");
    assert!(
        out.status.success(),
        "pci_devices_diff.py failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut failures = Vec::new();
    let mut vdpa = 0;
    let mut compared = 0;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let nova: Value = serde_json::from_str(line).expect("a JSON line");
        let id = nova["id"].as_str().unwrap_or("?").to_string();
        if let Some(e) = nova.get("crash") {
            failures.push(format!("{id}: the Nova harness failed: {e}"));
            continue;
        }
        let mut theirs: Vec<Value> = nova["devices"].as_array().cloned().unwrap_or_default();
        theirs.sort_by_key(|d| d["address"].as_str().unwrap_or("").to_string());
        // The fake libvirt knows the CX6 functions; the fixture's other functions are not in it.
        let known: Vec<&str> = theirs
            .iter()
            .filter_map(|d| d["address"].as_str())
            .collect();
        let mine: Vec<Value> = ours[&id]
            .iter()
            .filter(|d| known.contains(&d["address"].as_str().unwrap_or("")))
            .cloned()
            .collect();
        compared += mine.len();
        vdpa += mine.iter().filter(|d| d["dev_type"] == "vdpa").count();
        if mine != theirs {
            failures.push(format!("{id}:\n  nova:   {theirs:?}\n  rtrack: {mine:?}"));
        }
    }
    eprintln!(
        "vDPA differential: {} hosts, {compared} functions compared ({vdpa} vdpa)",
        hosts.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(vdpa > count, "the hosts have vDPA devices: {vdpa}");
}
