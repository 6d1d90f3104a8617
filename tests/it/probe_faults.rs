//! Hostile probed trees against the real binary: a FIFO where a file belongs, links that lead
//! out of the tree, values sysfs never writes, and huge values. Nothing hangs, nothing from
//! outside the tree reaches the report, and every warning names its path and stays short.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{base_config, Daemon};
use rtrack_fixtures::real::scratch_dir;
use rtrack_fixtures::synthetic::SyntheticHost;
use serde_json::Value;

const RTRACKD: &str = env!("CARGO_BIN_EXE_rtrackd");

/// `rtrackd --once --root tree`: its report, within a bound.
fn once(tree: &Path, state: &Path) -> Value {
    let mut child = Command::new(RTRACKD)
        .args(["--once", "--format", "json", "--instances-path", "none"])
        .arg("--root")
        .arg(tree)
        .arg("--state-dir")
        .arg(state)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("rtrackd --once did not exit within 20 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn warning<'a>(report: &'a Value, path: &Path) -> Option<&'a str> {
    report["warnings"]
        .as_array()?
        .iter()
        .find(|w| w["path"].as_str() == path.to_str())
        .and_then(|w| w["message"].as_str())
}

/// The PCI devices' directories as the probe names them (`sys/bus/pci/devices/<address>`).
fn pci_devices(tree: &Path) -> Vec<std::path::PathBuf> {
    let mut devs: Vec<_> = std::fs::read_dir(tree.join("sys/bus/pci/devices"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    devs.sort();
    devs
}

#[test]
fn a_hostile_tree_neither_hangs_nor_leaks_and_every_warning_is_short() {
    let tmp = scratch_dir();
    let tree = tmp.path().join("host");
    SyntheticHost::small().write(&tree);
    // A FIFO where a node's meminfo belongs: opening it for reading would wait for a writer.
    let meminfo = tree.join("sys/devices/system/node/node0/meminfo");
    std::fs::remove_file(&meminfo).unwrap();
    nix::unistd::mkfifo(&meminfo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    // A link out of the tree, to a file holding a secret.
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("passwd"), "root:x:0:0:SECRET-FROM-OUTSIDE\n").unwrap();
    let devs = pci_devices(&tree);
    let real_vendor = std::fs::canonicalize(devs[0].join("vendor")).unwrap();
    std::fs::remove_file(&real_vendor).unwrap();
    std::os::unix::fs::symlink(outside.join("passwd"), &real_vendor).unwrap();
    for d in &devs[0..3] {
        let _ = std::fs::remove_file(std::fs::canonicalize(d.join("uevent")).unwrap());
    }
    // A class sysfs never writes, and a huge value.
    std::fs::write(
        std::fs::canonicalize(devs[1].join("class")).unwrap(),
        "65536\n",
    )
    .unwrap();
    std::fs::write(
        std::fs::canonicalize(devs[2].join("numa_node")).unwrap(),
        "9".repeat(20_000),
    )
    .unwrap();

    let report = once(&tree, &tmp.path().join("state"));
    let text = report.to_string();
    assert!(
        !text.contains("SECRET-FROM-OUTSIDE"),
        "a file from outside the tree reached the report"
    );
    let m = warning(&report, &meminfo).unwrap_or_else(|| panic!("{}", report["warnings"]));
    assert!(m.contains("a FIFO, not a regular file"), "{m}");
    let m = warning(&report, &devs[1].join("class"))
        .unwrap_or_else(|| panic!("{}", report["warnings"]));
    assert!(m.contains("\"65536\""), "{m}");
    let m = warning(&report, &devs[2].join("numa_node"))
        .unwrap_or_else(|| panic!("{}", report["warnings"]));
    assert!(m.contains("…(20000 bytes)"), "{m}");
    for w in report["warnings"].as_array().unwrap() {
        let m = w["message"].as_str().unwrap();
        assert!(m.len() <= 1_000, "a warning of {} bytes", m.len());
    }
    // The device whose vendor link leads out of the tree is not reported with the outside
    // file's content: it lacks its vendor, and is skipped with a warning naming it.
    let m = warning(&report, &devs[0]).unwrap_or_else(|| panic!("{}", report["warnings"]));
    assert!(m.contains("vendor"), "{m}");

    // The daemon starts on the same tree (its first probe is bounded, and does not block).
    let dir = tmp.path().join("d");
    let d = Daemon::start_with(Path::new(RTRACKD), &dir, &base_config(&tree, &dir), &[]);
    let (s, h) = d.call("GET", "/healthz", None);
    assert_eq!(s, 200, "{h}");
}
