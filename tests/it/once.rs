//! `rtrackd --once` on every fixture, compared whole with its golden report in
//! `fixtures/expected/<name>.json`.
//!
//! Regenerate after an intended change with `RTRACK_BLESS=1 cargo test --test it once::`, then review
//! `git diff fixtures/expected`.

use std::path::Path;
use std::process::Command;

use rtrack_fixtures::facts::FactsHost;
use rtrack_fixtures::power::PowerHost;
use rtrack_fixtures::real::{scratch_dir, unpack, REAL_FIXTURES};
use rtrack_fixtures::synthetic::SyntheticHost;
use rtrack_fixtures::vdpa::VdpaHost;
use rtrack_fixtures::vgpu::VgpuHost;
use serde_json::Value;

/// Device specs and names for the golden runs: VFs of the E810 tagged physnet1, every other
/// non-bridge function tracked too, so the ComputeNode carries pools.
const CONFIG: &str = r#"
[host]
hypervisor_hostname = "golden-host"
host = "golden-host"

[[pci.device_spec]]
vendor_id = "8086"
product_id = "1889"
physical_network = "physnet1"

[[pci.device_spec]]
"#;

fn run_once(root: &Path, extra: &[&str]) -> std::process::Output {
    run_once_with(root, CONFIG, extra)
}

/// `rtrackd --once` on `root` with the configuration `config`.
fn run_once_with(root: &Path, config: &str, extra: &[&str]) -> std::process::Output {
    let state = scratch_dir();
    std::fs::write(
        state.path().join("compute_id"),
        "11111111-2222-3333-4444-555555555555\n",
    )
    .unwrap();
    std::fs::write(state.path().join("rtrack.toml"), config).unwrap();
    Command::new(env!("CARGO_BIN_EXE_rtrackd"))
        .args(["--once", "--instances-path", "none", "--root"])
        .arg(root)
        .arg("--state-dir")
        .arg(state.path())
        .arg("--config")
        .arg(state.path().join("rtrack.toml"))
        .args(extra)
        .output()
        .expect("run rtrackd")
}

/// The report with what changes from run to run replaced by placeholders.
pub(crate) fn normalized_report(root: &Path) -> serde_json::Value {
    normalized_report_with(root, CONFIG)
}

/// [`normalized_report`] with another configuration.
fn normalized_report_with(root: &Path, config: &str) -> serde_json::Value {
    let out = run_once_with(root, config, &[]);
    assert!(
        out.status.success(),
        "rtrackd failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let text = text.replace(&root.display().to_string(), "$ROOT");
    let mut v: serde_json::Value = serde_json::from_str(&text).expect("one JSON document");
    v["probed_at"] = "<probed_at>".into();
    v["rtrack_version"] = "<version>".into();
    for key in ["created_at", "updated_at"] {
        v["compute_node"]["nova_object.data"][key] = "<time>".into();
    }
    // The uptime text starts with the time of day.
    if let Some(u) = v["compute_node"]["nova_object.data"]["stats"]
        .get_mut("uptime")
        .filter(|u| u.is_string())
    {
        let text = u.as_str().unwrap_or_default().to_string();
        *u = format!("<time>{}", &text[9.min(text.len())..]).into();
    }
    v
}

pub(crate) fn check_golden(name: &str, actual: &serde_json::Value) {
    let path = rtrack_fixtures::fixtures_dir()
        .join("expected")
        .join(format!("{name}.json"));
    let pretty = serde_json::to_string_pretty(actual).unwrap() + "\n";
    if std::env::var_os("RTRACK_BLESS").is_some() {
        std::fs::write(&path, &pretty).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with RTRACK_BLESS=1 to create it)",
            path.display()
        )
    });
    if expected != pretty {
        let diff: Vec<String> = expected
            .lines()
            .zip(pretty.lines())
            .enumerate()
            .filter(|(_, (a, b))| a != b)
            .take(10)
            .map(|(i, (a, b))| format!("line {}:\n  expected: {a}\n  actual:   {b}", i + 1))
            .collect();
        panic!(
            "{name}: report differs from {} ({} vs {} lines)\n{}\nRe-bless with RTRACK_BLESS=1 if the change is intended.",
            path.display(),
            expected.lines().count(),
            pretty.lines().count(),
            diff.join("\n")
        );
    }
}

#[test]
fn every_real_fixture_matches_its_golden_report() {
    for fixture in REAL_FIXTURES {
        let unpacked = unpack(fixture);
        let report = normalized_report(&unpacked.root);
        check_golden(fixture.name, &report);
    }
}

#[test]
fn synthetic_sriov_hosts_match_their_golden_reports() {
    for (name, host) in [
        ("synthetic-small", SyntheticHost::small()),
        ("synthetic-bus-crossing", SyntheticHost::bus_crossing()),
    ] {
        let dir = scratch_dir();
        host.write(dir.path());
        check_golden(name, &normalized_report(dir.path()));
    }
}

#[test]
fn synthetic_power_and_vdpa_hosts_match_their_golden_reports() {
    let dir = scratch_dir();
    PowerHost::two_node_smt().write(dir.path());
    let v = normalized_report(dir.path());
    assert_eq!(v["cpu"]["offline_cpus"][2]["numa_node"], 1, "{}", v["cpu"]);
    check_golden("synthetic-pm-two-node-smt", &v);
    for (name, host) in [
        ("synthetic-vdpa", VdpaHost::vdpa()),
        ("synthetic-vdpa-mixed", VdpaHost::vdpa_mixed()),
    ] {
        let dir = scratch_dir();
        host.write(dir.path());
        check_golden(name, &normalized_report(dir.path()));
    }
}

#[test]
fn table_format_shows_dedicated_cpus_and_vdpa_devices() {
    let dir = scratch_dir();
    PowerHost::cpu_state().write(dir.path());
    let config = format!(
        "{CONFIG}\n[resources]\ncpu_dedicated_set = \"1-3,5-9\"\ncpu_shared_set = \"4\"\ncpu_power_management = true\n"
    );
    let out = run_once_with(dir.path(), &config, &["--format", "table"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(
            "Dedicated CPUs: 1-3,5-9 (8 count as PCPU, 6 not online); power management: cpu_state"
        ),
        "{text}"
    );
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip_while(|l| !l.starts_with("Dedicated CPUs"))
        .skip(2)
        .take(2)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            vec!["0", "1-3,5-7", "offline", "-", "yes"],
            vec!["0", "8-9", "online", "powersave", "yes"]
        ],
        "{text}"
    );

    let dir = scratch_dir();
    VdpaHost::vdpa_mixed().write(dir.path());
    let out = run_once(dir.path(), &["--format", "table"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("vDPA devices:  4"), "{text}");
    let row = |name: &str| -> Vec<String> {
        text.lines()
            .find(|l| l.trim_start().starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no row for {name}: {text}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        row("blue"),
        [
            "blue",
            "0000:06:00.1",
            "vdpa",
            "0000:06:00.0",
            "vhost_vdpa",
            "/dev/vhost-vdpa-3"
        ]
    );
    assert_eq!(row("vdpa-sf")[2], "type-PF");
    assert_eq!(row("vdpa-sim")[1..3], ["-", "-"]);
    assert_eq!(row("vdpa1")[5], "-");
    // The PCI groups name the vdpa functions apart from the plain VFs.
    let vdpa_group = text
        .lines()
        .find(|l| l.contains("15b3:101e") && l.contains(" vdpa "))
        .unwrap();
    assert!(vdpa_group.trim_start().starts_with("2 "), "{vdpa_group}");
}

#[test]
fn synthetic_vgpu_hosts_match_their_golden_reports() {
    for (name, host) in [
        ("synthetic-mdev-gpu", VgpuHost::mdev_gpu()),
        ("synthetic-sriov-vgpu", VgpuHost::sriov_vgpu()),
        ("synthetic-mdev-broken", VgpuHost::mdev_broken()),
    ] {
        let dir = scratch_dir();
        host.write(dir.path());
        check_golden(name, &normalized_report(dir.path()));
    }
}

/// `[devices]` for the TDX and PMEM goldens: TDX as Nova offers it, Nova's vPMEM test labels.
const FACTS: &str = "[devices]\ncpu_mode = \"host-passthrough\"\npmem_namespaces = [\"4GB:ns_0\", \"SMALL:ns_1|ns_2\"]\n";

#[test]
fn synthetic_tdx_and_pmem_hosts_match_their_golden_reports() {
    let tdx = scratch_dir();
    FactsHost::tdx_host().write(tdx.path());
    let config = format!("{CONFIG}\n[devices]\ncpu_mode = \"host-passthrough\"\n");
    let v = normalized_report_with(tdx.path(), &config);
    check_golden("synthetic-tdx", &v);
    assert_eq!(
        v["offered"]["memory_encryption"],
        serde_json::json!({"intel-tdx": 63})
    );
    let pmem = scratch_dir();
    FactsHost::pmem_host().write(pmem.path());
    let config = format!("{CONFIG}\n{FACTS}");
    let v = normalized_report_with(pmem.path(), &config);
    check_golden("synthetic-pmem", &v);
    let offered: Vec<(&str, &str, &str)> = v["offered"]["pmem_namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["name"].as_str().unwrap(),
                n["resource_class"].as_str().unwrap(),
                n["devpath"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        offered,
        [
            ("ns_0", "CUSTOM_PMEM_NAMESPACE_4GB", "/dev/dax0.0"),
            ("ns_1", "CUSTOM_PMEM_NAMESPACE_SMALL", "/dev/dax0.1"),
            ("ns_2", "CUSTOM_PMEM_NAMESPACE_SMALL", "/dev/dax0.2")
        ]
    );
}

/// `[devices]` keys, kvm parameter, misc.capacity -> supported, guests offered, warned.
type TdxCase = (
    &'static str,
    &'static str,
    Option<&'static str>,
    bool,
    u64,
    bool,
);

/// Nova's `_get_tdx_capacity` and `supports_intel_tdx` on the TDX host: (configuration, kvm
/// parameter, misc.capacity) -> (supported, TDX guests offered, a warning expected).
#[test]
fn tdx_is_offered_as_novas_code_offers_it() {
    let cases: [TdxCase; 6] = [
        ("", "Y", Some("tdx 63\n"), false, 0, true),
        (
            "cpu_mode = \"host-passthrough\"\n",
            "Y",
            Some("tdx 63\n"),
            true,
            63,
            false,
        ),
        (
            "cpu_mode = \"host-passthrough\"\nnum_intel_tdx_guests = 100\n",
            "Y",
            Some("tdx 63\n"),
            true,
            100,
            true,
        ),
        (
            "cpu_mode = \"host-passthrough\"\n",
            "Y",
            Some("sev 0\n"),
            true,
            0,
            true,
        ),
        (
            "cpu_mode = \"host-passthrough\"\nnum_intel_tdx_guests = 5\n",
            "Y",
            None,
            true,
            5,
            false,
        ),
        (
            "cpu_mode = \"host-passthrough\"\n",
            "N",
            Some("tdx 63\n"),
            false,
            0,
            false,
        ),
    ];
    for (devices, param, misc, supported, slots, warned) in cases {
        let mut host = FactsHost::tdx_host();
        if let Some(t) = &mut host.tdx {
            t.param = Some(param.to_string());
            t.misc_capacity = misc.map(str::to_string);
        }
        let dir = scratch_dir();
        host.write(dir.path());
        let config = format!("{CONFIG}\n[devices]\n{devices}");
        let v = normalized_report_with(dir.path(), &config);
        let tdx = &v["offered"]["intel_tdx"];
        let case = format!("{devices:?} {param} {misc:?}: {}", v["offered"]);
        assert_eq!(tdx["supported"], supported, "{case}");
        assert_eq!(tdx["slots"], slots, "{case}");
        let warnings = v["offered"]["warnings"].as_array().unwrap();
        assert_eq!(
            warnings
                .iter()
                .any(|w| w.as_str().unwrap().contains("Intel TDX")),
            warned,
            "{case}"
        );
        let offered = &v["offered"]["memory_encryption"]["intel-tdx"];
        assert_eq!(offered.as_u64(), (slots > 0).then_some(slots), "{case}");
    }
}

#[test]
fn table_format_shows_tdx_and_pmem_namespaces() {
    let dir = scratch_dir();
    FactsHost::pmem_host().write(dir.path());
    let config = format!("{CONFIG}\n{FACTS}");
    let out = run_once_with(dir.path(), &config, &["--format", "table"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("PMEM namespaces:   4"), "{text}");
    let row = |dev: &str| -> Vec<String> {
        text.lines()
            .find(|l| l.trim_start().starts_with(dev))
            .unwrap_or_else(|| panic!("no {dev} row in {text}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        row("namespace0.1"),
        [
            "namespace0.1",
            "ns_1",
            "devdax",
            "4292870144",
            "2097152",
            "/dev/dax0.1",
            "0",
            "SMALL",
            "CUSTOM_PMEM_NAMESPACE_SMALL"
        ]
    );
    assert_eq!(row("namespace1.0")[..3], ["namespace1.0", "fs_0", "fsdax"]);
    assert_eq!(row("namespace1.0")[7..], ["-", "-"]);
    let tdx = scratch_dir();
    FactsHost::tdx_host().write(tdx.path());
    let out = run_once_with(tdx.path(), &config, &["--format", "table"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("Intel TDX:         KVM 1, platform flag 1; guests misc cgroup 63, configured -; offered 63 guest(s)"),
        "{text}"
    );
    let out = run_once_with(tdx.path(), CONFIG, &["--format", "table"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("; not offered: devices.cpu_mode is not host-passthrough"),
        "{text}"
    );
}

#[test]
fn vgpu_and_sev_keep_their_fixed_names() {
    let dir = scratch_dir();
    VgpuHost::mdev_gpu().write(dir.path());
    let v = normalized_report(dir.path());
    let parents = v["mediated_devices"]["parents"].as_array().unwrap();
    assert_eq!(parents.len(), 2);
    assert_eq!(parents[0]["address"], "0000:84:00.0");
    let t = &parents[0]["types"][0];
    assert_eq!(t["type"], "nvidia-35");
    assert_eq!(t["name"], "GRID M60-0B");
    assert_eq!(t["device_api"], "vfio-pci");
    assert_eq!(t["available_instances"], 14);
    let devices = v["mediated_devices"]["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2);
    assert_eq!(devices[0]["uuid"], "4b20d080-1b54-4048-85b3-a6a62d165c01");
    assert_eq!(devices[0]["parent"], "0000:84:00.0");
    assert_eq!(devices[0]["type"], "nvidia-35");
    assert_eq!(v["memory_encryption"]["sev"], true);
    assert_eq!(v["memory_encryption"]["sev_es"], true);
    assert_eq!(v["memory_encryption"]["sev_snp"], false);
    assert_eq!(v["memory_encryption"]["sev_guests"], 410);
    assert_eq!(v["warnings"].as_array().unwrap().len(), 0);
    // A tree that says nothing about SEV: null, not false.
    let plain = scratch_dir();
    SyntheticHost::small().write(plain.path());
    let v = normalized_report(plain.path());
    assert_eq!(v["memory_encryption"]["sev"], Value::Null);
    assert_eq!(v["mediated_devices"]["parents"], serde_json::json!([]));
}

#[test]
fn table_format_shows_mdev_types_and_sev() {
    let dir = scratch_dir();
    VgpuHost::sriov_vgpu().write(dir.path());
    let out = run_once(dir.path(), &["--format", "table"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("Mediated devices: 16 parent(s), 1 device(s)"),
        "{text}"
    );
    // 15 VFs have one nvidia-471 left, the first has its one in use.
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("nvidia-471"))
        .unwrap();
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&cols[..4], ["nvidia-471", "16", "15", "1"], "{row}");
    assert!(
        text.contains("Memory encryption: SEV -, SEV-ES -, SEV-SNP -"),
        "{text}"
    );
}

#[test]
fn report_has_the_fixed_top_level_keys() {
    let dir = scratch_dir();
    SyntheticHost::small().write(dir.path());
    let v = normalized_report(dir.path());
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    for k in [
        "rtrack_version",
        "probed_at",
        "host",
        "cpu",
        "numa_nodes",
        "memory",
        "disks",
        "pci_devices",
        "mediated_devices",
        "memory_encryption",
        "pmem_namespaces",
        "offered",
        "warnings",
    ] {
        assert!(keys.contains(&k), "missing {k} in {keys:?}");
    }
    assert_eq!(v["cpu"]["online"], "0-7");
    assert_eq!(v["cpu"]["sockets"], 1);
    assert_eq!(v["cpu"]["cores"], 4);
    assert_eq!(v["cpu"]["threads"], 8);
    assert_eq!(v["numa_nodes"][0]["hugepages"][0]["size_kb"], 2048);
    assert_eq!(v["memory"]["total_mb"], 16384);
    let vf = v["pci_devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["address"] == "0000:3b:01.2")
        .unwrap();
    assert_eq!(vf["dev_type"], "type-VF");
    assert_eq!(vf["parent_addr"], "0000:3b:00.0");
    assert_eq!(vf["vendor_name"], "Intel Corporation");
    let node = &v["compute_node"]["nova_object.data"];
    assert_eq!(node["uuid"], "11111111-2222-3333-4444-555555555555");
    assert_eq!(node["vcpus"], 8);
    assert_eq!(node["memory_mb"], 16384);
    assert_eq!(node["memory_mb_used"], 512);
    let pools = node["pci_device_pools"]["nova_object.data"]["objects"]
        .as_array()
        .unwrap();
    // NVMe, two PFs with no VFs in use... every PF and VF pool split per PF address.
    let vf_pools: Vec<&Value> = pools
        .iter()
        .filter(|p| p["nova_object.data"]["tags"]["dev_type"] == "type-VF")
        .collect();
    assert_eq!(vf_pools.len(), 2);
    let counts: Vec<i64> = vf_pools
        .iter()
        .map(|p| p["nova_object.data"]["count"].as_i64().unwrap())
        .collect();
    assert_eq!(counts.iter().sum::<i64>(), 12);
    let tags = &vf_pools[0]["nova_object.data"]["tags"];
    assert_eq!(tags["physical_network"], "physnet1");
    assert_eq!(tags["remote_managed"], "false");
}

#[test]
fn format_nova_prints_the_primitive_and_object_version_backports_it() {
    let dir = scratch_dir();
    SyntheticHost::small().write(dir.path());
    let out = run_once(
        dir.path(),
        &["--format", "nova", "--object-version", "1.10"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["nova_object.name"], "ComputeNode");
    assert_eq!(v["nova_object.version"], "1.10");
    assert!(v["nova_object.data"].get("uuid").is_none());
    assert_eq!(v["nova_object.data"]["service_id"], -1);
    let out = run_once(
        dir.path(),
        &["--format", "nova", "--object-version", "1.99"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--object-version 1.99"));
}

#[test]
fn table_format_summarises_pci_groups() {
    let dir = scratch_dir();
    SyntheticHost::small().write(dir.path());
    let out = run_once(dir.path(), &["--format", "table"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("1 socket(s), 4 core(s), 8 thread(s) online; SMT on"),
        "{text}"
    );
    // 8 iavf VFs + 4 vfio-pci VFs of the same ids form one group of 12.
    let vf_row = text.lines().find(|l| l.contains("8086:1889")).unwrap();
    assert!(vf_row.trim_start().starts_with("12 "), "{vf_row}");
    assert!(
        vf_row.contains("type-VF") && vf_row.contains("iavf,vfio-pci"),
        "{vf_row}"
    );
}

#[test]
fn unusable_root_fails_with_a_message_naming_it() {
    let dir = scratch_dir();
    let out = run_once(&dir.path().join("nope"), &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("nope/sys") && err.contains("nope/proc"),
        "{err}"
    );
}

#[test]
fn sysfs_and_procfs_flags_override_root() {
    let dir = scratch_dir();
    SyntheticHost::small().write(&dir.path().join("host"));
    std::fs::rename(dir.path().join("host/sys"), dir.path().join("host-sys")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rtrackd"))
        .args(["--once", "--instances-path", "none", "--root"])
        .arg(dir.path().join("host"))
        .arg("--sysfs")
        .arg(dir.path().join("host-sys"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["cpu"]["threads"], 8);
    assert_eq!(v["host"]["hostname"], "synthetic-host");
}
