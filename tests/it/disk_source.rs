//! `[host] disk_source = "caller"`: DISK_GB from the totals `POST /v1/refresh` gives (image
//! backends that are not a local filesystem; nova-compute on rtrack), kept across restarts,
//! bounded field by field, and refused (409) where DISK_GB is measured.

use crate::support;

use std::path::Path;
use std::time::Duration;

use crate::support::Daemon;
use serde_json::{json, Value};

const RTRACKD: &str = env!("CARGO_BIN_EXE_rtrackd");

fn compute_node(d: &Daemon) -> Value {
    let (s, v) = d.call("GET", "/v1/compute-node", None);
    assert_eq!(s, 200, "{v}");
    v["nova_object.data"].clone()
}

fn caller_config(e: &support::Env) -> String {
    let base = support::base_config(&e.root, &e.dir);
    let line = format!("instances_path = \"{}\"\n", e.dir.display());
    assert!(base.contains(&line), "{base}");
    base.replace(&line, &format!("{line}disk_source = \"caller\"\n"))
}

#[test]
fn the_callers_disk_totals_are_reported_kept_and_checked() {
    let e = support::env();
    let mut d = Daemon::start_with(Path::new(RTRACKD), &e.dir, &caller_config(&e), &[]);
    // Nothing given yet: no disk, and the log says why.
    assert_eq!(compute_node(&d)["local_gb"], 0);
    assert!(d.log_text().contains("no DISK_GB totals given yet"));

    let totals = json!({"disk_gb": {"total": 128, "used": 44, "free": 84}});
    let (s, v) = d.call("POST", "/v1/refresh", Some(&totals));
    assert_eq!(s, 200, "{v}");
    let cn = compute_node(&d);
    assert_eq!(cn["local_gb"], 128, "{cn}");
    assert_eq!(cn["disk_available_least"], 84, "{cn}");
    let (s, inv) = d.call("GET", "/v1/inventory", None);
    assert_eq!(s, 200, "{inv}");
    assert_eq!(inv["disks"]["instances"]["total_gb"], 128, "{inv}");

    // Totals past 1 EiB are refused naming the field; nothing changes.
    for field in ["total", "used", "free"] {
        let mut t = json!({"total": 128, "used": 44, "free": 84});
        t[field] = json!(1u64 << 40);
        let (s, v) = d.call("POST", "/v1/refresh", Some(&json!({ "disk_gb": t })));
        assert_eq!(s, 400, "{v}");
        assert_eq!(
            v["error"]["details"]["field"],
            format!("disk_gb.{field}"),
            "{v}"
        );
    }
    let (s, v) = d.call(
        "POST",
        "/v1/refresh",
        Some(&json!({"disk_gb": {"total": 1}})),
    );
    assert_eq!(s, 400, "{v}");
    let (s, v) = d.call("POST", "/v1/refresh", Some(&json!({"disk": 1})));
    assert_eq!(s, 400, "{v}");
    assert_eq!(compute_node(&d)["local_gb"], 128);

    // A restart reports the kept totals before anyone refreshes.
    d.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(d.wait_exit(Duration::from_secs(20)).is_some());
    d.spawn();
    d.wait_ready();
    assert_eq!(compute_node(&d)["local_gb"], 128);
}

#[test]
fn disk_totals_are_refused_where_disk_gb_is_measured() {
    let e = support::env();
    let d = support::start_on(Path::new(RTRACKD), &e, "");
    let before = compute_node(&d)["local_gb"].clone();
    let (s, v) = d.call(
        "POST",
        "/v1/refresh",
        Some(&json!({"disk_gb": {"total": 128, "used": 44, "free": 84}})),
    );
    assert_eq!(s, 409, "{v}");
    assert_eq!(v["error"]["details"]["field"], "disk_gb", "{v}");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("disk_source = \"caller\""));
    assert_eq!(compute_node(&d)["local_gb"], before);
    // An empty body is the plain refresh it always was.
    let (s, v) = d.call("POST", "/v1/refresh", None);
    assert_eq!(s, 200, "{v}");
}
