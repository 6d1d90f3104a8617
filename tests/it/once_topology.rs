//! `rtrackd --once` on the synthetic hosts of issue 24 against their golden reports: the cache
//! instances of an EPYC-like host and the core types of an Intel-hybrid-like one, as tools
//! read them (`docs/inventory.md`).

use rtrack_fixtures::real::scratch_dir;
use rtrack_fixtures::topology::TopologyHost;
use serde_json::{json, Value};

use super::once::{check_golden, normalized_report};

fn report(host: &TopologyHost) -> Value {
    let dir = scratch_dir();
    host.write(dir.path());
    normalized_report(dir.path())
}

fn caches_of_level(v: &Value, level: u64) -> Vec<&Value> {
    let caches = v["caches"].as_array().expect("caches is a list");
    caches.iter().filter(|c| c["level"] == level).collect()
}

#[test]
fn an_epyc_like_host_reports_one_l3_per_eight_cores_and_no_core_types() {
    let v = report(&TopologyHost::epyc());
    check_golden("synthetic-epyc", &v);
    let l3 = caches_of_level(&v, 3);
    // 2 sockets x 4 cells x 2 CCX; each CCX is 8 cores with both threads, 32 MiB.
    assert_eq!(l3.len(), 16, "{l3:?}");
    assert_eq!(
        l3[0],
        &json!({"level": 3, "type": "Unified", "size_kb": 32768, "cpus": "0-7,128-135"})
    );
    // One L2 per core (shared by its two threads).
    assert_eq!(caches_of_level(&v, 2).len(), 128);
    assert_eq!(v["core_types"], json!([]));
}

#[test]
fn an_intel_hybrid_like_host_names_its_core_types_as_hwloc_does() {
    let v = report(&TopologyHost::hybrid());
    check_golden("synthetic-hybrid", &v);
    assert_eq!(
        v["core_types"],
        json!([
            {"name": "IntelCore", "cpus": "0-15,32-47"},
            {"name": "IntelAtom", "cpus": "16-31,48-63"},
        ])
    );
    // One L3 per socket, over both kinds of core.
    let l3: Vec<&Value> = caches_of_level(&v, 3);
    assert_eq!(l3.len(), 2, "{l3:?}");
    assert_eq!(l3[0]["cpus"], "0-31");
}
