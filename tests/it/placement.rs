//! The upstream reporter against a real OpenStack Placement (openstack-placement 16.0.0 under
//! gunicorn on 127.0.0.1, SQLite, noauth2), started by `scripts/placement/start.sh`.
//!
//! Each test runs its own server in its own directory under `target/tmp/placement/`, so request
//! counts read from the server's access log belong to that test alone. A guard stops the server
//! when the test ends, and `start.sh --owner-pid` stops it too if this binary dies first. What
//! Placement holds is checked with plain GETs made here, not through rtrack's client.
//!
//! Needs python3 >= 3.11 with its venv module (the venv is cached in `target/placement-venv`;
//! the first run installs it from PyPI). `RTRACK_SKIP_PLACEMENT=1` skips these tests.
//!
//! Run with `--nocapture` to see the measured figures (lines starting with `MEASURE`).

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rtrack::config::{Config, ValidConfig};
use rtrack::probes::{self, HostInventory, HostRoot};
use rtrack::tracker::host_view::HostView;
use rtrack::upstream::desired::{ReportInputs, CONSUMER_INSTANCE, CONSUMER_MIGRATION};
use rtrack::upstream::{
    Consumer, DesiredState, HttpPlacement, PlacementApi, Reporter, ReporterOptions, ResourceKey,
    UpstreamError,
};
use rtrack_fixtures::synthetic::{PlainFunction, SyntheticHost};
use serde_json::{json, Value};
use uuid::Uuid;

// ------------------------------------------------------------------ server harness

use crate::support::placement::{assert_placement_matches, osc, server, tree_names, Server};

// ------------------------------------------------------------------ test inputs

/// The tracker's view of a probe under `cfg` (what the daemon reports from).
fn view(inv: &HostInventory, cfg: &ValidConfig) -> HostView {
    HostView::of_config(inv.clone(), cfg)
}

fn probe(host: &SyntheticHost, dir: &Path) -> HostInventory {
    if dir.exists() {
        std::fs::remove_dir_all(dir).unwrap();
    }
    host.write(dir);
    probes::probe_host(&HostRoot::under(dir), &probes::ProbeOptions::default()).unwrap()
}

fn config(url: &str, extra: &str) -> ValidConfig {
    let text = format!("[placement]\nendpoint = \"{url}\"\n{extra}");
    let f = Path::new("test.toml");
    // The TOML alone: a developer's OS_* variables must not change what the test reports to.
    Config::parse(&text, f)
        .unwrap()
        .validate_in(f, &rtrack::config::placement_sources::Environment::empty())
        .unwrap()
}

const PCI: &str = r#"
[pci]
report_in_placement = true
[[pci.device_spec]]
address = "0000:3b:*.*"
traits = "fast-path, HW_NIC_SRIOV"
[[pci.device_spec]]
vendor_id = "144d"
resource_class = "nvme"
"#;

fn reporter(cfg: &ValidConfig) -> Reporter<HttpPlacement> {
    let settings = rtrack::upstream::validate_placement(&cfg.placement)
        .unwrap()
        .unwrap();
    let api = HttpPlacement::new(&settings).unwrap();
    Reporter::new(
        api,
        &settings,
        ReporterOptions {
            backoff_base: Duration::from_millis(200),
            backoff_cap: Duration::from_secs(2),
            conflict_tries: 4,
        },
    )
}

// ------------------------------------------------------------------ tests

#[tokio::test(flavor = "current_thread")]
async fn registers_then_sends_nothing_while_unchanged() {
    let Some(srv) = server("unchanged") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let inv = probe(&SyntheticHost::small(), &tmp.path().join("host"));
    let cfg = config(&srv.url, PCI);
    let node = Uuid::new_v4();
    let d =
        DesiredState::build(&view(&inv, &cfg), &cfg, node, "cmp-unchanged", false, &[]).unwrap();
    let mut r = reporter(&cfg);

    let t0 = Instant::now();
    let first = r.report(&d).await.unwrap();
    eprintln!(
        "MEASURE first registration: {} requests in {:?}: {}",
        first.requests.total(),
        t0.elapsed(),
        first.requests
    );
    assert!(first.refreshed);
    assert!(first.requests.get("create_provider") >= 4);
    let raw = srv.client();
    assert_placement_matches(&raw, &d).await;

    let logged = srv.logged_requests();
    let cycles = 5;
    for _ in 0..cycles {
        let o = r.report(&d).await.unwrap();
        assert_eq!(o.requests.total(), 0, "{}", o.requests);
        assert!(!o.refreshed);
    }
    let after = srv.logged_requests();
    eprintln!(
        "MEASURE unchanged: {} requests in Placement's access log over {cycles} cycles",
        after - logged
    );
    assert_eq!(
        after, logged,
        "Placement saw requests while nothing changed"
    );
}

/// A periodic refresh of an unchanged tree costs `GET /` and `GET ?in_tree`; a provider
/// someone else changed (its generation moved) is read again, and only that one. The
/// allocations are read every time (removing them bumps no generation).
#[tokio::test(flavor = "current_thread")]
async fn a_refresh_reads_only_the_providers_whose_generation_moved() {
    let Some(srv) = server("light-refresh") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let inv = probe(&SyntheticHost::small(), &tmp.path().join("host"));
    let cfg = config(&srv.url, &format!("refresh_interval_s = 1\n{PCI}"));
    let node = Uuid::new_v4();
    let d = DesiredState::build(&view(&inv, &cfg), &cfg, node, "cmp-light", false, &[]).unwrap();
    let mut r = reporter(&cfg);
    r.report(&d).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let o = r.report(&d).await.unwrap();
    assert!(o.refreshed);
    let providers = d.providers.len() as u64;
    assert_eq!(
        (
            o.requests.total(),
            o.requests.get("get_versions"),
            o.requests.get("get_tree"),
            o.requests.get("get_provider_allocations")
        ),
        (2 + providers, 1, 1, providers),
        "{}",
        o.requests
    );
    // Someone adds a trait to the compute node: its generation moves; rtrack reads it again
    // (and keeps the foreign trait), the children are not read.
    let raw = srv.client();
    let t = raw.get(&format!("/resource_providers/{node}/traits")).await;
    let mut traits: Vec<Value> = t["traits"].as_array().unwrap().clone();
    traits.push(json!("CUSTOM_SOMEONE_ELSES"));
    let (s, v) = raw.put("/traits/CUSTOM_SOMEONE_ELSES", json!(null)).await;
    assert!(s == 201 || s == 204, "{s} {v}");
    let (s, v) = raw
        .put(
            &format!("/resource_providers/{node}/traits"),
            json!({"resource_provider_generation": t["resource_provider_generation"], "traits": traits}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let o = r.report(&d).await.unwrap();
    assert_eq!(o.requests.get("get_inventories"), 1, "{}", o.requests);
    assert_eq!(o.requests.get("get_traits"), 1, "{}", o.requests);
    assert_eq!(
        o.requests.total(),
        2 + providers + 3,
        "tree, the allocations, then the node's inventories, traits and aggregates: {}",
        o.requests
    );
    assert!(r.cache().providers[&node]
        .traits
        .contains("CUSTOM_SOMEONE_ELSES"));
    assert_placement_matches(&raw, &d).await;
}

#[tokio::test(flavor = "current_thread")]
async fn inventory_follows_memory_and_hot_plugged_pci() {
    let Some(srv) = server("changes") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let mut host = SyntheticHost::small();
    let cfg = config(&srv.url, PCI);
    let node = Uuid::new_v4();
    let raw = srv.client();
    let mut r = reporter(&cfg);
    let inv = probe(&host, &tmp.path().join("h1"));
    let d = DesiredState::build(&view(&inv, &cfg), &cfg, node, "cmp-changes", false, &[]).unwrap();
    r.report(&d).await.unwrap();

    // More memory.
    host.memory_mb_per_node = 32768;
    let inv = probe(&host, &tmp.path().join("h2"));
    let d = DesiredState::build(&view(&inv, &cfg), &cfg, node, "cmp-changes", false, &[]).unwrap();
    let before = srv.logged_requests();
    let o = r.report(&d).await.unwrap();
    let seen = srv.logged_requests() - before;
    eprintln!(
        "MEASURE one change (memory): {} requests ({}); access log {seen}",
        o.requests.total(),
        o.requests
    );
    assert_eq!(o.requests.total(), 1);
    assert_eq!(o.requests.get("put_inventories"), 1);
    assert_eq!(seen, 1);
    let held = raw
        .get(&format!("/resource_providers/{node}/inventories"))
        .await;
    assert_eq!(held["inventories"]["MEMORY_MB"]["total"], json!(32768));
    assert_placement_matches(&raw, &d).await;

    // A hot-plugged NVMe drive (matches the second device spec).
    host.plain.push(PlainFunction {
        address: "0000:02:00.0".into(),
        vendor_id: 0x144d,
        device_id: 0xa808,
        class: 0x010802,
        numa_node: 0,
        driver: Some("nvme".into()),
    });
    let inv = probe(&host, &tmp.path().join("h3"));
    let d = DesiredState::build(&view(&inv, &cfg), &cfg, node, "cmp-changes", false, &[]).unwrap();
    let o = r.report(&d).await.unwrap();
    eprintln!(
        "MEASURE one change (hot-plugged PCI device): {} requests ({})",
        o.requests.total(),
        o.requests
    );
    assert_eq!(o.requests.get("create_provider"), 1);
    assert!(tree_names(&raw, node)
        .await
        .contains("cmp-changes_0000:02:00.0"));
    assert_placement_matches(&raw, &d).await;

    // Unplugged again: its provider goes, the others stay.
    host.plain.pop();
    let inv = probe(&host, &tmp.path().join("h4"));
    let d = DesiredState::build(&view(&inv, &cfg), &cfg, node, "cmp-changes", false, &[]).unwrap();
    let o = r.report(&d).await.unwrap();
    assert_eq!(o.requests.total(), 1, "{}", o.requests);
    assert_eq!(o.requests.get("delete_provider"), 1);
    assert!(!tree_names(&raw, node)
        .await
        .contains("cmp-changes_0000:02:00.0"));
    assert_placement_matches(&raw, &d).await;
}

#[tokio::test(flavor = "current_thread")]
async fn traits_sync_and_foreign_traits_survive_a_concurrent_writer() {
    let Some(srv) = server("traits") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let inv = probe(&SyntheticHost::small(), &tmp.path().join("host"));
    let cfg = config(&srv.url, "");
    let node = Uuid::new_v4();
    let raw = srv.client();
    let mut r = reporter(&cfg);
    let d = DesiredState::build(&view(&inv, &cfg), &cfg, node, "cmp-traits", false, &[]).unwrap();
    r.report(&d).await.unwrap();
    let traits = raw.get(&format!("/resource_providers/{node}/traits")).await;
    let set: BTreeSet<String> = serde_json::from_value(traits["traits"].clone()).unwrap();
    for t in [
        "COMPUTE_NODE",
        "HW_ARCH_X86_64",
        "HW_CPU_X86_AVX2",
        "HW_CPU_X86_SSE41",
        "HW_CPU_X86_AESNI",
        "HW_CPU_X86_VMX",
        "HW_CPU_HYPERTHREADING",
    ] {
        assert!(set.contains(t), "{t} missing: {set:?}");
    }
    assert!(!set.contains("COMPUTE_STATUS_DISABLED"));

    // An operator adds a trait of their own behind rtrack's back: the generation moves on.
    let (s, _) = raw.put("/traits/CUSTOM_OPERATOR_RACK_7", json!(null)).await;
    assert!(s == 201 || s == 204);
    let mut with_foreign: Vec<String> = set.iter().cloned().collect();
    with_foreign.push("CUSTOM_OPERATOR_RACK_7".into());
    let (s, v) = raw
        .put(
            &format!("/resource_providers/{node}/traits"),
            json!({"resource_provider_generation": traits["resource_provider_generation"], "traits": with_foreign}),
        )
        .await;
    assert_eq!(s, 200, "{v}");

    // The service is disabled: rtrack's cached generation is stale, so its first write gets
    // 409 placement.concurrent_update; it re-reads the provider and retries.
    let d = DesiredState::build(&view(&inv, &cfg), &cfg, node, "cmp-traits", true, &[]).unwrap();
    let o = r.report(&d).await.unwrap();
    eprintln!(
        "MEASURE trait change after a concurrent writer: {} requests ({}), {} conflict(s)",
        o.requests.total(),
        o.requests,
        o.conflicts
    );
    assert_eq!(o.conflicts, 1);
    let set: BTreeSet<String> = serde_json::from_value(
        raw.get(&format!("/resource_providers/{node}/traits")).await["traits"].clone(),
    )
    .unwrap();
    assert!(set.contains("COMPUTE_STATUS_DISABLED"));
    assert!(set.contains("CUSTOM_OPERATOR_RACK_7"), "foreign trait lost");
    assert_placement_matches(&raw, &d).await;

    // Enabled again: only rtrack's trait goes.
    let d = DesiredState::build(&view(&inv, &cfg), &cfg, node, "cmp-traits", false, &[]).unwrap();
    let o = r.report(&d).await.unwrap();
    assert_eq!(o.requests.total(), 1);
    let set: BTreeSet<String> = serde_json::from_value(
        raw.get(&format!("/resource_providers/{node}/traits")).await["traits"].clone(),
    )
    .unwrap();
    assert!(!set.contains("COMPUTE_STATUS_DISABLED"));
    assert!(set.contains("CUSTOM_OPERATOR_RACK_7"));
}

#[tokio::test(flavor = "current_thread")]
async fn inventory_conflict_from_a_concurrent_writer_is_retried() {
    let Some(srv) = server("conflict") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let mut host = SyntheticHost::small();
    let cfg = config(&srv.url, "");
    let node = Uuid::new_v4();
    let raw = srv.client();
    let mut r = reporter(&cfg);
    let d = DesiredState::build(
        &view(&probe(&host, &tmp.path().join("a")), &cfg),
        &cfg,
        node,
        "cmp-conflict",
        false,
        &[],
    )
    .unwrap();
    r.report(&d).await.unwrap();
    // Someone else changes the VCPU ratio (rtrack keeps it: no ratio is configured) and so
    // bumps the generation.
    let held = raw
        .get(&format!("/resource_providers/{node}/inventories"))
        .await;
    let mut inv = held["inventories"].clone();
    inv["VCPU"]["allocation_ratio"] = json!(8.0);
    let (s, v) = raw
        .put(
            &format!("/resource_providers/{node}/inventories"),
            json!({"resource_provider_generation": held["resource_provider_generation"], "inventories": inv}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    host.memory_mb_per_node = 20480;
    let d = DesiredState::build(
        &view(&probe(&host, &tmp.path().join("b")), &cfg),
        &cfg,
        node,
        "cmp-conflict",
        false,
        &[],
    )
    .unwrap();
    let o = r.report(&d).await.unwrap();
    eprintln!(
        "MEASURE inventory change with a stale generation: {} requests ({}), {} conflict(s)",
        o.requests.total(),
        o.requests,
        o.conflicts
    );
    assert_eq!(o.conflicts, 1);
    let held = raw
        .get(&format!("/resource_providers/{node}/inventories"))
        .await;
    assert_eq!(held["inventories"]["MEMORY_MB"]["total"], json!(20480));
    assert_eq!(
        held["inventories"]["VCPU"]["allocation_ratio"],
        json!(8.0),
        "the operator's ratio is kept when none is configured"
    );
    assert_placement_matches(&raw, &d).await;
}

#[tokio::test(flavor = "current_thread")]
async fn pci_children_name_class_traits() {
    let Some(srv) = server("pci") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let inv = probe(&SyntheticHost::small(), &tmp.path().join("host"));
    let cfg = config(&srv.url, PCI);
    let node = Uuid::new_v4();
    let raw = srv.client();
    let mut r = reporter(&cfg);
    let d = DesiredState::build(&view(&inv, &cfg), &cfg, node, "cmp-pci", false, &[]).unwrap();
    r.report(&d).await.unwrap();
    let names = tree_names(&raw, node).await;
    let want: BTreeSet<String> = [
        "cmp-pci",
        "cmp-pci_0000:01:00.0",
        "cmp-pci_0000:3B:00.0",
        "cmp-pci_0000:3B:00.1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(names, want);
    let want_names = want;
    let by_name = |n: &str| d.providers.iter().find(|p| p.name == n).unwrap().uuid;
    let vfs = raw
        .get(&format!(
            "/resource_providers/{}/inventories",
            by_name("cmp-pci_0000:3B:00.0")
        ))
        .await;
    // PF 3b:00.0 has 8 tracked VFs: the PF itself is not reported, its VFs are (class from ids).
    assert_eq!(
        vfs["inventories"]["CUSTOM_PCI_8086_1889"]["total"],
        json!(8)
    );
    let nvme = raw
        .get(&format!(
            "/resource_providers/{}/inventories",
            by_name("cmp-pci_0000:01:00.0")
        ))
        .await;
    assert_eq!(nvme["inventories"]["CUSTOM_NVME"]["total"], json!(1));
    let t = raw
        .get(&format!(
            "/resource_providers/{}/traits",
            by_name("cmp-pci_0000:3B:00.1")
        ))
        .await;
    let t: BTreeSet<String> = serde_json::from_value(t["traits"].clone()).unwrap();
    // Exactly Nova 34's set: the spec's traits, COMPUTE_MANAGED_PCI_DEVICE and OWNER_NOVA.
    let want: BTreeSet<String> = [
        "COMPUTE_MANAGED_PCI_DEVICE",
        "CUSTOM_FAST_PATH",
        "HW_NIC_SRIOV",
        "OWNER_NOVA",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(t, want);
    assert_placement_matches(&raw, &d).await;
    // As an operator sees it with osc-placement: the host, its PCI children, a child's class,
    // traits and (no) usage.
    let listed = osc(
        &srv,
        &[
            "resource",
            "provider",
            "list",
            "--in-tree",
            &node.to_string(),
        ],
    );
    let names: BTreeSet<String> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, want_names);
    let pf = by_name("cmp-pci_0000:3B:00.0").to_string();
    let inventory = osc(&srv, &["resource", "provider", "inventory", "list", &pf]);
    assert_eq!(inventory[0]["resource_class"], "CUSTOM_PCI_8086_1889");
    assert_eq!(inventory[0]["total"], 8);
    let traits = osc(
        &srv,
        &[
            "resource",
            "provider",
            "trait",
            "list",
            &by_name("cmp-pci_0000:3B:00.1").to_string(),
        ],
    );
    let traits: BTreeSet<String> = traits
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(traits, want);
    let usages = osc(&srv, &["resource", "provider", "usage", "show", &pf]);
    assert_eq!(usages[0]["usage"], 0, "{usages}");
}

#[tokio::test(flavor = "current_thread")]
async fn reconverges_after_placement_restarts_with_same_or_empty_database() {
    let Some(srv) = server("restart") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let inv = probe(&SyntheticHost::small(), &tmp.path().join("host"));
    let cfg = config(&srv.url, &format!("refresh_interval_s = 2\n{PCI}"));
    let node = Uuid::new_v4();
    let raw = srv.client();
    let mut r = reporter(&cfg);
    let d = DesiredState::build(&view(&inv, &cfg), &cfg, node, "cmp-restart", false, &[]).unwrap();
    r.report(&d).await.unwrap();

    let mut disabled = false;
    let mut d = d;
    for fresh in [false, true] {
        srv.stop();
        // While Placement is away the service gets disabled (or enabled): there is something
        // to send, so reports fail fast and then back off. (With nothing to send, nothing is
        // sent and the outage goes unnoticed until the next refresh.)
        disabled = !disabled;
        d = DesiredState::build(&view(&inv, &cfg), &cfg, node, "cmp-restart", disabled, &[])
            .unwrap();
        let e = r.report(&d).await;
        match &e {
            Err(e @ UpstreamError::Transport { .. }) => assert!(e.is_outage()),
            other => panic!("expected a transport error, got {other:?}"),
        }
        let o = r.report(&d).await.unwrap();
        assert!(
            o.backing_off.is_some(),
            "a report right after a failure waits"
        );
        assert_eq!(o.requests.total(), 0);
        // Away for a while: a few failed attempts.
        let away_until = Instant::now() + Duration::from_secs(2);
        while Instant::now() < away_until {
            let _ = r.report(&d).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        srv.start_again(fresh);
        let t0 = Instant::now();
        let pending = r.backoff_remaining();
        let mut requests = 0;
        loop {
            match r.report(&d).await {
                Ok(o) if o.backing_off.is_none() => {
                    requests += o.requests.total();
                    break;
                }
                Ok(_) => {}
                Err(e) => eprintln!("still failing: {e}"),
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "did not reconverge");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let took = t0.elapsed();
        eprintln!(
            "MEASURE reconvergence after a Placement restart ({} database): {took:?} from the server answering (backoff left then: {pending:?}; base 200 ms, cap 2 s), {requests} requests",
            if fresh { "empty" } else { "same" }
        );
        assert_placement_matches(&raw, &d).await;
        assert_eq!(tree_names(&raw, node).await.len(), 4);
        let o = r.report(&d).await.unwrap();
        assert_eq!(o.requests.total(), 0, "settled again: {}", o.requests);
    }

    // Placement loses its database between two reports and nothing changes here: the next
    // periodic refresh (refresh_interval_s = 2) notices and registers everything again.
    srv.stop();
    srv.start_again(true);
    assert_eq!(tree_names(&raw, node).await.len(), 0);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let o = r.report(&d).await.unwrap();
    assert!(o.refreshed);
    eprintln!(
        "MEASURE re-registration found by the periodic refresh: {} requests ({})",
        o.requests.total(),
        o.requests
    );
    assert_placement_matches(&raw, &d).await;
}

#[tokio::test(flavor = "current_thread")]
async fn allocations_mode_mirrors_claims_and_moves() {
    let Some(srv) = server("allocations") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let inv = probe(&SyntheticHost::small(), &tmp.path().join("host"));
    let cfg = config(&srv.url, &format!("report_allocations = true\n{PCI}"));
    let node = Uuid::new_v4();
    let raw = srv.client();
    let mut r = reporter(&cfg);
    let vf = inv
        .pci_devices
        .iter()
        .find(|d| d.parent_addr.is_some())
        .unwrap()
        .address;
    let instance = Uuid::new_v4();
    let project = Uuid::new_v4().simple().to_string();
    let user = Uuid::new_v4().simple().to_string();
    let claim = Consumer {
        uuid: instance,
        project_id: Some(project.clone()),
        user_id: Some(user.clone()),
        consumer_type: CONSUMER_INSTANCE.into(),
        resources: BTreeMap::from([
            (ResourceKey::Host("VCPU".into()), 2),
            (ResourceKey::Host("MEMORY_MB".into()), 1024),
            (ResourceKey::PciDevice(vf), 1),
        ]),
    };
    let d = DesiredState::build(
        &view(&inv, &cfg),
        &cfg,
        node,
        "cmp-alloc",
        false,
        std::slice::from_ref(&claim),
    )
    .unwrap();
    let o = r.report(&d).await.unwrap();
    assert_eq!(o.requests.get("put_allocation"), 1, "{}", o.requests);
    assert_placement_matches(&raw, &d).await;
    for _ in 0..3 {
        assert_eq!(r.report(&d).await.unwrap().requests.total(), 0);
    }

    // A resize on the same host: the migration holds the old flavor, the instance the new one.
    let migration = Uuid::new_v4();
    let source = Consumer {
        uuid: migration,
        consumer_type: CONSUMER_MIGRATION.into(),
        ..claim.clone()
    };
    let mut bigger = claim.clone();
    bigger.resources.insert(ResourceKey::Host("VCPU".into()), 4);
    let d = DesiredState::build(
        &view(&inv, &cfg),
        &cfg,
        node,
        "cmp-alloc",
        false,
        &[bigger.clone(), source],
    )
    .unwrap();
    let o = r.report(&d).await.unwrap();
    eprintln!(
        "MEASURE move (instance grows, migration holds the source): {} requests ({}), {} conflict(s)",
        o.requests.total(),
        o.requests,
        o.conflicts
    );
    assert_placement_matches(&raw, &d).await;
    let usages = raw.get(&format!("/resource_providers/{node}/usages")).await;
    assert_eq!(usages["usages"]["VCPU"], json!(6));

    // Confirmed: the migration is released, its allocation goes. Then the instance is deleted.
    let released = |uuids: &[Uuid]| ReportInputs {
        released: uuids.iter().map(|u| (*u, 1)).collect(),
        ..Default::default()
    };
    let d = DesiredState::build_with(
        &view(&inv, &cfg),
        &cfg,
        node,
        "cmp-alloc",
        false,
        &[bigger],
        &released(&[migration]),
    )
    .unwrap();
    r.report(&d).await.unwrap();
    assert_eq!(r.take_released_done(), vec![(migration, 1)]);
    assert_placement_matches(&raw, &d).await;
    let gone = raw.get(&format!("/allocations/{migration}")).await;
    assert_eq!(gone["allocations"], json!({}));
    // An inventory change right after allocation writes needs no conflict round trip.
    let d = DesiredState::build_with(
        &view(&inv, &cfg),
        &cfg,
        node,
        "cmp-alloc",
        true,
        &[],
        &released(&[instance]),
    )
    .unwrap();
    let o = r.report(&d).await.unwrap();
    assert_eq!(o.conflicts, 0, "{}", o.requests);
    let gone = raw.get(&format!("/allocations/{instance}")).await;
    assert_eq!(gone["allocations"], json!({}));
    let usages = raw.get(&format!("/resource_providers/{node}/usages")).await;
    assert_eq!(usages["usages"]["VCPU"], json!(0));

    // A fresh reporter (a restarted daemon) reads the allocations back and sends nothing.
    let claim2 = Consumer {
        uuid: Uuid::new_v4(),
        ..claim
    };
    let d =
        DesiredState::build(&view(&inv, &cfg), &cfg, node, "cmp-alloc", false, &[claim2]).unwrap();
    r.report(&d).await.unwrap();
    let mut again = reporter(&cfg);
    let o = again.report(&d).await.unwrap();
    assert!(o.refreshed);
    assert_eq!(o.changes, 0, "{}", o.requests);
}

#[tokio::test(flavor = "current_thread")]
async fn shared_storage_goes_to_the_sharing_provider() {
    let Some(srv) = server("shared") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("host");
    SyntheticHost::small().write(&dir);
    let instances = tmp.path().join("instances");
    std::fs::create_dir_all(&instances).unwrap();
    let inv = probes::probe_host(
        &HostRoot::under(&dir),
        &probes::ProbeOptions {
            disk: probes::disk::DiskOptions {
                instances_path: Some(instances),
                include_virtual: false,
            },
            pci_vpd: false,
            ..Default::default()
        },
    )
    .unwrap();
    let shared = Uuid::new_v4();
    let cfg = config(
        &srv.url,
        &format!(
            "[resources]\nshared_storage_provider = \"{shared}\"\nreserved_host_disk_mb = 1500\n"
        ),
    );
    let node = Uuid::new_v4();
    let raw = srv.client();
    let mut r = reporter(&cfg);
    let d = DesiredState::build(&view(&inv, &cfg), &cfg, node, "cmp-shared", false, &[]).unwrap();
    r.report(&d).await.unwrap();
    assert_placement_matches(&raw, &d).await;
    let root = raw
        .get(&format!("/resource_providers/{node}/inventories"))
        .await;
    assert!(root["inventories"].get("DISK_GB").is_none());
    let sp = raw
        .get(&format!("/resource_providers/{shared}/inventories"))
        .await;
    assert_eq!(sp["inventories"]["DISK_GB"]["reserved"], json!(2));
    let aggs = raw
        .get(&format!("/resource_providers/{node}/aggregates"))
        .await;
    assert_eq!(aggs["aggregates"], json!([shared.to_string()]));
    let sharing = raw
        .get(&format!(
            "/resource_providers?member_of={shared}&required=MISC_SHARES_VIA_AGGREGATE"
        ))
        .await;
    assert_eq!(
        sharing["resource_providers"][0]["uuid"],
        json!(shared.to_string())
    );
    assert_eq!(r.report(&d).await.unwrap().requests.total(), 0);
}

#[tokio::test(flavor = "current_thread")]
async fn name_clash_names_both_uuids() {
    let Some(srv) = server("clash") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let inv = probe(&SyntheticHost::small(), &tmp.path().join("host"));
    let cfg = config(&srv.url, "");
    let raw = srv.client();
    let theirs = Uuid::new_v4();
    let (s, v) = raw
        .send(
            reqwest::Method::POST,
            "/resource_providers",
            Some(json!({"name": "cmp-clash", "uuid": theirs})),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let ours = Uuid::new_v4();
    let d = DesiredState::build(&view(&inv, &cfg), &cfg, ours, "cmp-clash", false, &[]).unwrap();
    let e = reporter(&cfg).report(&d).await.unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, UpstreamError::NameClash { .. }), "{msg}");
    assert!(
        msg.contains(&ours.to_string()) && msg.contains(&theirs.to_string()),
        "{msg}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn every_cpu_trait_in_the_table_exists_in_placement() {
    let Some(srv) = server("traitlist") else {
        return;
    };
    let mut api = HttpPlacement::new(
        &rtrack::upstream::validate_placement(&config(&srv.url, "").placement)
            .unwrap()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(api.negotiate().await.unwrap(), (1, 39));
    let raw = srv.client();
    let v = raw.get("/traits").await;
    let served: BTreeSet<String> = serde_json::from_value(v["traits"].clone()).unwrap();
    for row in rtrack::upstream::traits::cpu_flag_table() {
        assert!(served.contains(&row.trait_name), "{}", row.trait_name);
    }
    assert_eq!(&served, rtrack::upstream::traits::standard_traits());
}

/// A stand-in for Keystone's `POST /v3/auth/tokens`: issues the token "admin" (which Placement's
/// noauth2 accepts) valid for `lifetime_s`, or refuses every request with 401 when `refuse`.
/// Returns the URL and a counter of token requests.
async fn fake_keystone(
    lifetime_s: i64,
    refuse: bool,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v3", listener.local_addr().unwrap());
    let count = std::sync::Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            // Read the head, then as many body bytes as Content-Length says.
            loop {
                let n = sock.read(&mut chunk).await.unwrap_or(0);
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&buf).to_string();
                if let Some(end) = text.find("\r\n\r\n") {
                    let len = text[..end]
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                        })
                        .unwrap_or(0);
                    if buf.len() >= end + 4 + len {
                        break;
                    }
                }
            }
            let text = String::from_utf8_lossy(&buf).to_string();
            assert!(text.starts_with("POST /v3/auth/tokens "), "{text}");
            c.fetch_add(1, Ordering::SeqCst);
            let resp = if refuse {
                let body = r#"{"error": {"code": 401, "title": "Unauthorized", "message": "The request you have made requires authentication."}}"#;
                format!("HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len())
            } else {
                let expires = (time::OffsetDateTime::now_utc()
                    + time::Duration::seconds(lifetime_s))
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap();
                let body = format!(
                    r#"{{"token": {{"expires_at": "{expires}", "methods": ["password"]}}}}"#
                );
                format!("HTTP/1.1 201 Created\r\nx-subject-token: admin\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len())
            };
            let _ = sock.write_all(resp.as_bytes()).await;
            let _ = sock.shutdown().await;
        }
    });
    (url, count)
}

#[tokio::test(flavor = "current_thread")]
async fn keystone_token_is_cached_renewed_and_never_shown() {
    use std::sync::atomic::Ordering;
    let Some(srv) = server("keystone") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let mut host = SyntheticHost::small();
    let node = Uuid::new_v4();
    let secret = "Pa55-w0rd-never-shown";
    let auth = |url: &str| {
        format!("auth = \"password\"\nauth_url = \"{url}\"\nusername = \"rtrack\"\npassword = \"{secret}\"\nproject_name = \"service\"\n")
    };

    // A token valid for 66 s is renewed 60 s before it expires, i.e. after about 6 s: long
    // enough for the first two reports on a loaded machine (with 1 s, CI's load once made the
    // second report ask for a new token), short enough to wait for.
    let (url, issued) = fake_keystone(66, false).await;
    let cfg = config(&srv.url, &auth(&url));
    let mut r = reporter(&cfg);
    let d = DesiredState::build(
        &view(&probe(&host, &tmp.path().join("a")), &cfg),
        &cfg,
        node,
        "cmp-ks",
        false,
        &[],
    )
    .unwrap();
    r.report(&d).await.unwrap();
    assert_eq!(
        issued.load(Ordering::SeqCst),
        1,
        "one token for the whole first report"
    );
    host.memory_mb_per_node = 12288;
    let d = DesiredState::build(
        &view(&probe(&host, &tmp.path().join("b")), &cfg),
        &cfg,
        node,
        "cmp-ks",
        false,
        &[],
    )
    .unwrap();
    r.report(&d).await.unwrap();
    assert_eq!(issued.load(Ordering::SeqCst), 1, "cached");
    tokio::time::sleep(Duration::from_millis(6200)).await;
    host.memory_mb_per_node = 14336;
    let d = DesiredState::build(
        &view(&probe(&host, &tmp.path().join("c")), &cfg),
        &cfg,
        node,
        "cmp-ks",
        false,
        &[],
    )
    .unwrap();
    r.report(&d).await.unwrap();
    assert_eq!(issued.load(Ordering::SeqCst), 2, "renewed before expiry");
    assert_eq!(r.api().keystone_requests(), 2);
    assert_placement_matches(&srv.client(), &d).await;

    // Keystone refuses: the error says so and names the user, never the password.
    let (url, _) = fake_keystone(3600, true).await;
    let cfg = config(&srv.url, &auth(&url));
    let e = reporter(&cfg).report(&d).await.unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, UpstreamError::Auth { .. }), "{msg}");
    assert!(msg.contains("401") && msg.contains("rtrack"), "{msg}");
    assert!(
        !msg.contains(secret) && !format!("{e:?}").contains(secret),
        "{msg}"
    );
    // A logged configuration does not show it either.
    assert!(!format!("{cfg:?}").contains(secret), "{cfg:?}");
    let settings = rtrack::upstream::validate_placement(&cfg.placement);
    assert!(!format!("{settings:?}").contains(secret));
}

#[tokio::test(flavor = "current_thread")]
async fn report_once_registers_the_host() {
    let Some(srv) = server("once") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let inv = probe(&SyntheticHost::small(), &tmp.path().join("host"));
    let cfg = config(&srv.url, PCI);
    let node = Uuid::new_v4();
    let o =
        rtrack::upstream::report_once(&cfg, &view(&inv, &cfg), node, "cmp-once", false, &[], None)
            .await
            .unwrap();
    assert!(o.changes > 0);
    let d = DesiredState::build(&view(&inv, &cfg), &cfg, node, "cmp-once", false, &[]).unwrap();
    assert_placement_matches(&srv.client(), &d).await;
    // Reporting off: a clear error naming the key.
    let off = {
        let f = Path::new("test.toml");
        Config::parse("", f).unwrap().validate(f).unwrap()
    };
    let e =
        rtrack::upstream::report_once(&off, &view(&inv, &off), node, "cmp-once", false, &[], None)
            .await
            .unwrap_err();
    assert!(
        e.to_string().starts_with("placement.endpoint = (unset)"),
        "{e}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn in_use_class_is_kept_and_retried_next_cycle() {
    let Some(srv) = server("inuse") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let inv = probe(&SyntheticHost::small(), &tmp.path().join("host"));
    let cfg = config(&srv.url, "");
    let node = Uuid::new_v4();
    let raw = srv.client();
    let mut r = reporter(&cfg);
    let d = DesiredState::build(&view(&inv, &cfg), &cfg, node, "cmp-inuse", false, &[]).unwrap();
    r.report(&d).await.unwrap();
    // The scheduler places an instance on 2 VCPUs.
    let (s, v) = raw
        .put(
            &format!("/allocations/{}", Uuid::new_v4()),
            json!({"allocations": {node.to_string(): {"resources": {"VCPU": 2}}},
                   "project_id": "p", "user_id": "u", "consumer_generation": null,
                   "consumer_type": "INSTANCE"}),
        )
        .await;
    assert_eq!(s, 204, "{v}");
    // Every CPU becomes dedicated: VCPU would go, PCPU comes. VCPU is in use.
    let pinned = config(&srv.url, "[resources]\ncpu_dedicated_set = \"0-7\"\n");
    let d =
        DesiredState::build(&view(&inv, &pinned), &pinned, node, "cmp-inuse", false, &[]).unwrap();
    assert!(!d.providers[0].inventories.contains_key("VCPU"));
    let o = r.report(&d).await.unwrap();
    eprintln!(
        "MEASURE removal of an in-use class: {} requests ({}), in use {}",
        o.requests.total(),
        o.requests,
        o.inventory_in_use
    );
    assert_eq!(o.inventory_in_use, 1);
    // Placement's words come with it (POST /v1/refresh passes them on: nova-compute stops at
    // start on a PCI provider's, as Nova does).
    assert_eq!(o.inventory_in_use_details.len(), 1);
    assert_eq!(o.inventory_in_use_details[0].0, node);
    assert!(
        o.inventory_in_use_details[0].1.contains("in use"),
        "{:?}",
        o.inventory_in_use_details
    );
    let held = raw
        .get(&format!("/resource_providers/{node}/inventories"))
        .await;
    assert_eq!(
        held["inventories"]["VCPU"]["total"],
        json!(8),
        "old VCPU kept"
    );
    assert_eq!(
        held["inventories"]["PCPU"]["total"],
        json!(8),
        "PCPU written"
    );
    // Next cycle tries again (and keeps it again while the allocation lasts).
    let o = r.report(&d).await.unwrap();
    assert_eq!(o.inventory_in_use, 1);
    assert_eq!(o.requests.get("put_inventories"), 2, "{}", o.requests);
}

/// A host moved from "no CPU sets" to `cpu_dedicated_set` (as Nova's Train upgrade does): the
/// pinned guests booted before hold VCPU; the reshape turns exactly what their claims count as
/// PCPU into PCPU, in one transaction, keeping every other part and the owner. A consumer
/// rtrack holds no claim for keeps its VCPU, and the old VCPU record stays until it is gone.
#[tokio::test(flavor = "current_thread")]
async fn pinned_guests_vcpu_becomes_pcpu_when_the_host_gets_cpu_dedicated_set() {
    let Some(srv) = server("pcpu") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let inv = probe(&SyntheticHost::small(), &tmp.path().join("host"));
    let raw = srv.client();
    let node = Uuid::new_v4();
    let mut legacy = config(&srv.url, "");
    legacy.placement.roles = Some("admin,service".into());
    let mut r = reporter(&legacy);
    let d =
        DesiredState::build(&view(&inv, &legacy), &legacy, node, "cmp-pcpu", false, &[]).unwrap();
    r.report(&d).await.unwrap();
    // A Neutron bandwidth provider outside rtrack's tree.
    let bw = Uuid::new_v4();
    let (s, v) = raw
        .send(
            reqwest::Method::POST,
            "/resource_providers",
            Some(json!({"uuid": bw.to_string(), "name": "agent-bw"})),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let (s, v) = raw
        .put(
            &format!("/resource_providers/{bw}/inventories"),
            json!({"resource_provider_generation": 0, "inventories": {
                "NET_BW_EGR_KILOBIT_PER_SEC": {"total": 10000}}}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let (pinned, migration, stranger) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let before = [
        (
            pinned,
            "INSTANCE",
            json!({node.to_string(): {"resources": {"VCPU": 2, "MEMORY_MB": 512}},
                                     bw.to_string(): {"resources": {"NET_BW_EGR_KILOBIT_PER_SEC": 1000}}}),
        ),
        (
            migration,
            "MIGRATION",
            json!({node.to_string(): {"resources": {"VCPU": 2, "MEMORY_MB": 512}}}),
        ),
        (
            stranger,
            "INSTANCE",
            json!({node.to_string(): {"resources": {"VCPU": 1}}}),
        ),
    ];
    for (c, kind, a) in &before {
        let (s, v) = raw
            .put(
                &format!("/allocations/{c}"),
                json!({"allocations": a, "project_id": "p1", "user_id": "u1",
                       "consumer_generation": null, "consumer_type": kind}),
            )
            .await;
        assert_eq!(s, 204, "{v}");
    }
    // The pinned guest was written by an older Nova, without a type: Placement says "unknown",
    // which a write cannot send; it must stay so.
    let (s, v) = raw
        .send_at(
            "1.36",
            reqwest::Method::PUT,
            &format!("/allocations/{pinned}"),
            Some(
                json!({"allocations": before[0].2, "project_id": "p1", "user_id": "u1",
                        "consumer_generation": 1}),
            ),
        )
        .await;
    assert_eq!(s, 204, "{v}");
    let untyped = raw.get(&format!("/allocations/{pinned}")).await["consumer_type"].clone();
    // Restarted with every CPU dedicated: the claims of the instance and of the outgoing
    // move count PCPU now.
    let mut pinned_cfg = config(&srv.url, "[resources]\ncpu_dedicated_set = \"0-7\"\n");
    pinned_cfg.placement.roles = Some("admin,service".into());
    let claim = |uuid: Uuid, kind: &str| Consumer {
        uuid,
        project_id: Some("p1".into()),
        user_id: Some("u1".into()),
        consumer_type: kind.into(),
        resources: BTreeMap::from([
            (ResourceKey::Host("PCPU".into()), 2),
            (ResourceKey::Host("MEMORY_MB".into()), 512),
        ]),
    };
    let claims = [
        claim(pinned, CONSUMER_INSTANCE),
        claim(migration, CONSUMER_MIGRATION),
    ];
    let d = DesiredState::build(
        &view(&inv, &pinned_cfg),
        &pinned_cfg,
        node,
        "cmp-pcpu",
        false,
        &claims,
    )
    .unwrap();
    let mut r = reporter(&pinned_cfg);
    let o = r.report(&d).await.unwrap();
    eprintln!(
        "MEASURE VCPU->PCPU reshape: {} ({:?})",
        o.requests, o.reshaped
    );
    assert_eq!(o.requests.get("reshape"), 1, "{}", o.requests);
    assert_eq!(o.reshaped, ["VCPU->PCPU"]);
    let a = raw.get(&format!("/allocations/{pinned}")).await;
    assert_eq!(
        a["allocations"][node.to_string()]["resources"],
        json!({"PCPU": 2, "MEMORY_MB": 512})
    );
    assert_eq!(
        a["allocations"][bw.to_string()]["resources"],
        json!({"NET_BW_EGR_KILOBIT_PER_SEC": 1000})
    );
    assert_eq!(
        (a["project_id"].clone(), a["user_id"].clone()),
        (json!("p1"), json!("u1"))
    );
    assert_eq!(a["consumer_type"], untyped);
    let a = raw.get(&format!("/allocations/{migration}")).await;
    assert_eq!(
        a["allocations"][node.to_string()]["resources"],
        json!({"PCPU": 2, "MEMORY_MB": 512})
    );
    assert_eq!(a["consumer_type"], "MIGRATION");
    let a = raw.get(&format!("/allocations/{stranger}")).await;
    assert_eq!(
        a["allocations"][node.to_string()]["resources"],
        json!({"VCPU": 1})
    );
    let held = raw
        .get(&format!("/resource_providers/{node}/inventories"))
        .await;
    assert_eq!(held["inventories"]["PCPU"]["total"], 8);
    assert!(
        held["inventories"]["VCPU"].is_object(),
        "kept while the stranger uses it: {held}"
    );
    // Nothing more to move: the next cycles do not read the consumers again.
    let o = r.report(&d).await.unwrap();
    assert_eq!(
        o.requests.get("reshape") + o.requests.get("get_consumer"),
        0,
        "{}",
        o.requests
    );
    // Once the stranger is gone, VCPU goes.
    let (s, v) = raw
        .send(
            reqwest::Method::DELETE,
            &format!("/allocations/{stranger}"),
            None,
        )
        .await;
    assert_eq!(s, 204, "{v}");
    r.report(&d).await.unwrap();
    let held = raw
        .get(&format!("/resource_providers/{node}/inventories"))
        .await;
    assert!(held["inventories"].get("VCPU").is_none(), "{held}");
    let usage = raw.get(&format!("/resource_providers/{node}/usages")).await;
    assert_eq!(usage["usages"]["PCPU"], 4);
}

// ------------------------------------------------------------------ the daemon and the CLI

/// `rtrackd` reports from its own loop: claims made over its socket become allocations
/// (`report_allocations`), an abort removes them, and unchanged cycles send nothing.
#[tokio::test(flavor = "current_thread")]
async fn daemon_reports_claims_as_allocations_and_nothing_when_unchanged() {
    let Some(srv) = server("daemon") else { return };
    let raw = srv.client();
    let tmp = rtrack_fixtures::real::scratch_dir();
    let root = tmp.path().join("host");
    SyntheticHost::small().write(&root);
    let dir = tmp.path().join("d");
    let config = support::base_config(&root, &dir)
        + &format!(
            "[placement]\nendpoint = \"{}\"\nreport_interval_s = 1\nreport_allocations = true\n",
            srv.url
        );
    let d = tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || {
            support::Daemon::start_with(
                Path::new(env!("CARGO_BIN_EXE_rtrackd")),
                &dir,
                &config,
                &[],
            )
        }
    })
    .await
    .unwrap();
    let node = std::fs::read_to_string(dir.join("state/compute_id"))
        .unwrap()
        .trim()
        .to_string();
    let wait_for = |what: &'static str, path: String, check: fn(&Value) -> bool| {
        let raw = &raw;
        async move {
            let start = Instant::now();
            loop {
                let (s, v) = raw.send(reqwest::Method::GET, &path, None).await;
                if s == 200 && check(&v) {
                    return v;
                }
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "{what}: still {s} {v}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    // Registered by the daemon's first cycle.
    let rp = wait_for(
        "the compute node provider",
        format!("/resource_providers/{node}"),
        |_| true,
    )
    .await;
    assert_eq!(rp["name"], "cmp1");

    // A claim over the socket becomes an allocation of the instance.
    let a = support::uuid(42);
    let body = support::claim(&a, 2, 1024, 1, None);
    let (s, v) = tokio::task::spawn_blocking({
        let socket = d.socket.clone();
        move || {
            let r = rtrack::cli::client::request(
                &socket,
                "POST",
                "/v1/claims",
                Some(body.to_string().as_bytes()),
                Duration::from_secs(30),
            )
            .unwrap();
            (r.status, r.json())
        }
    })
    .await
    .unwrap();
    assert_eq!(s, 201, "{v:?}");
    let alloc = wait_for(
        "the instance's allocation",
        format!("/allocations/{a}"),
        |v| v["allocations"].as_object().is_some_and(|m| !m.is_empty()),
    )
    .await;
    let res = &alloc["allocations"][&node]["resources"];
    assert_eq!(res["VCPU"], 2, "{alloc}");
    assert_eq!(res["MEMORY_MB"], 1024, "{alloc}");
    assert_eq!(res["DISK_GB"], 1, "{alloc}");
    assert_eq!(alloc["project_id"], "p1");

    // Abort: the allocation goes.
    let socket = d.socket.clone();
    let a2 = a.clone();
    let status = tokio::task::spawn_blocking(move || {
        rtrack::cli::client::request(
            &socket,
            "DELETE",
            &format!("/v1/claims/{a2}"),
            None,
            Duration::from_secs(30),
        )
        .unwrap()
        .status
    })
    .await
    .unwrap();
    assert_eq!(status, 200);
    wait_for("no allocation", format!("/allocations/{a}"), |v| {
        v["allocations"].as_object().is_some_and(|m| m.is_empty())
    })
    .await;

    // Nothing changes: several 1 s cycles send no request at all.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before = srv.logged_requests();
    tokio::time::sleep(Duration::from_millis(4500)).await;
    let after = srv.logged_requests();
    println!(
        "MEASURE daemon: {} requests in 4.5 s of unchanged 1 s cycles",
        after - before
    );
    assert_eq!(after, before, "requests sent while nothing changed");
    drop(d);
}

/// `rtrackd --once --report` registers the host and exits 0; with Placement down it exits 1.
#[tokio::test(flavor = "current_thread")]
async fn once_report_registers_and_fails_when_placement_is_down() {
    let Some(srv) = server("once-cli") else {
        return;
    };
    let tmp = rtrack_fixtures::real::scratch_dir();
    let root = tmp.path().join("host");
    SyntheticHost::small().write(&root);
    let cfg = tmp.path().join("rtrack.toml");
    std::fs::write(
        &cfg,
        format!(
            "[host]\nroot = \"{}\"\nstate_dir = \"{}\"\nhypervisor_hostname = \"cmp-cli\"\n[placement]\nendpoint = \"{}\"\ntimeout_s = 5\n",
            root.display(),
            tmp.path().join("state").display(),
            srv.url
        ),
    )
    .unwrap();
    let run = |cfg: PathBuf| {
        tokio::task::spawn_blocking(move || {
            Command::new(env!("CARGO_BIN_EXE_rtrackd"))
                .args([
                    "--once",
                    "--report",
                    "--format",
                    "nova",
                    "--instances-path",
                    "none",
                    "--config",
                ])
                .arg(cfg)
                .output()
                .unwrap()
        })
    };
    let out = run(cfg.clone()).await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let node: Value = serde_json::from_slice(&out.stdout).unwrap();
    let uuid = node["nova_object.data"]["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    let rp = srv
        .client()
        .get(&format!("/resource_providers/{uuid}"))
        .await;
    assert_eq!(rp["name"], "cmp-cli");
    srv.stop();
    let out = run(cfg).await.unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no answer from the server"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

// ------------------------------------------------------------------ PCI in Placement, live

/// A live rtrackd with `[pci] report_in_placement` and allocations: a claim follows the
/// allocation the scheduler made in Placement (PF A's provider, though PF B's VFs come first),
/// and after every step of a scripted sequence (claims, an incoming live migration reverted then
/// confirmed, an outgoing one reverted then confirmed, aborts, a one-time-use device used,
/// reserved and released) the devices the host holds per provider equal Placement's usages.
#[tokio::test(flavor = "current_thread")]
async fn pci_claims_follow_placement_and_usages_agree_at_every_step() {
    let Some(srv) = server("pci-live") else {
        return;
    };
    let raw = srv.client();
    let tmp = rtrack_fixtures::real::scratch_dir();
    let root = tmp.path().join("host");
    // Two PFs whose VF pools tie (same tags): B's (3b:00.0) come first without a mapping.
    let mut host = SyntheticHost::small();
    let mut b = rtrack_fixtures::synthetic::SyntheticPf::e810("0000:3b:00.0", 4, 0, Some("iavf"));
    b.ifname = Some("ens1f0".into());
    let mut a = rtrack_fixtures::synthetic::SyntheticPf::e810("0000:5e:00.0", 4, 0, Some("iavf"));
    a.ifname = Some("ens2f0".into());
    host.pfs = vec![b, a];
    host.write(&root);
    let dir = tmp.path().join("d");
    let config = support::base_config(&root, &dir)
        + &format!(
            r#"
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

[placement]
endpoint = "{}"
report_interval_s = 1
report_allocations = true
"#,
            srv.url
        );
    let d = tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || {
            support::Daemon::start_with(
                Path::new(env!("CARGO_BIN_EXE_rtrackd")),
                &dir,
                &config,
                &[],
            )
        }
    })
    .await
    .unwrap();
    let node = std::fs::read_to_string(dir.join("state/compute_id"))
        .unwrap()
        .trim()
        .to_string();
    let socket = d.socket.clone();
    let call = |method: &'static str, path: String, body: Option<Value>| {
        let socket = socket.clone();
        async move {
            tokio::task::spawn_blocking(move || {
                let r = rtrack::cli::client::request(
                    &socket,
                    method,
                    &path,
                    body.map(|b| b.to_string().into_bytes()).as_deref(),
                    Duration::from_secs(30),
                )
                .unwrap();
                (r.status, r.json().unwrap_or(Value::Null))
            })
            .await
            .unwrap()
        }
    };
    // Devices in use per provider, on the host.
    let held = || async {
        let (_, v) = call("GET", "/v1/pci-devices".into(), None).await;
        let mut by: BTreeMap<String, i64> = BTreeMap::new();
        let mut providers = BTreeSet::new();
        for dev in v["pci_devices"].as_array().unwrap() {
            let Some(rp) = dev["resource_provider_uuid"].as_str() else {
                continue;
            };
            providers.insert(rp.to_string());
            if matches!(dev["status"].as_str(), Some("allocated" | "claimed")) {
                *by.entry(rp.to_string()).or_default() += 1;
            }
        }
        (by, providers)
    };
    // Waits until Placement's usages per PCI provider are the host's (the 1 s report cycle).
    let agree = |step: &'static str| {
        let raw = &raw;
        let held = &held;
        async move {
            let start = Instant::now();
            loop {
                let (local, providers) = held().await;
                let mut theirs: BTreeMap<String, i64> = BTreeMap::new();
                for rp in &providers {
                    let (s, u) = raw
                        .send(
                            reqwest::Method::GET,
                            &format!("/resource_providers/{rp}/usages"),
                            None,
                        )
                        .await;
                    if s != 200 {
                        continue;
                    }
                    let n: i64 = u["usages"]
                        .as_object()
                        .map(|m| m.values().filter_map(Value::as_i64).sum())
                        .unwrap_or(0);
                    if n > 0 {
                        theirs.insert(rp.clone(), n);
                    }
                }
                if theirs == local {
                    println!("MEASURE pci-live {step}: host and Placement agree: {local:?}");
                    return local;
                }
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "{step}: the host holds {local:?}, Placement's usages are {theirs:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let provider_of = |pf: &'static str| {
        let raw = &raw;
        async move {
            let v = raw
                .get(&format!("/resource_providers?name=cmp1_{}", pf))
                .await;
            v["resource_providers"][0]["uuid"]
                .as_str()
                .unwrap_or_else(|| panic!("no provider for {pf}: {v}"))
                .to_string()
        }
    };
    // Registered: one provider per PF, one for the drive.
    let start = Instant::now();
    loop {
        let (_, providers) = held().await;
        let (s, _) = raw
            .send(
                reqwest::Method::GET,
                &format!("/resource_providers/{node}"),
                None,
            )
            .await;
        let mut all = true;
        for rp in &providers {
            all &=
                raw.send(
                    reqwest::Method::GET,
                    &format!("/resource_providers/{rp}"),
                    None,
                )
                .await
                .0 == 200;
        }
        if s == 200 && providers.len() == 3 && all {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "not registered");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let pf_a = provider_of("0000:5E:00.0").await;
    let pf_b = provider_of("0000:3B:00.0").await;
    agree("registered").await;

    // The scheduler allocates X's two VFs from A, then the claim comes.
    let x = support::uuid(1);
    let (s, v) = raw
        .put(
            &format!("/allocations/{x}"),
            json!({"allocations": {
                node.clone(): {"resources": {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}},
                pf_a.clone(): {"resources": {"CUSTOM_PCI_8086_1889": 2}}},
                "project_id": "p1", "user_id": "u1", "consumer_generation": null,
                "consumer_type": "INSTANCE"}),
        )
        .await;
    assert_eq!(s, 204, "{v}");
    let rid = "aaaaaaaa-1111-4000-8000-000000000001";
    let (s, v) = call(
        "POST",
        "/v1/claims".into(),
        Some(support::mapped_claim(&x, "vf", rid, &[&pf_a, &pf_a])),
    )
    .await;
    assert_eq!(s, 201, "{v}");
    for dev in v["pci_devices"].as_array().unwrap() {
        assert!(
            dev["address"].as_str().unwrap().starts_with("0000:5e:"),
            "{v}"
        );
    }
    let used = agree("claim on A").await;
    assert_eq!(used.get(&pf_a), Some(&2));
    // Without a mapping, B's come first.
    let y = support::uuid(2);
    let (s, v) = call(
        "POST",
        "/v1/claims".into(),
        Some(support::claim(&y, 1, 512, 1, Some("vf:1"))),
    )
    .await;
    assert_eq!(s, 201, "{v}");
    assert!(
        v["pci_devices"][0]["address"]
            .as_str()
            .unwrap()
            .starts_with("0000:3b:"),
        "{v}"
    );
    let used = agree("claim without mapping").await;
    assert_eq!(used.get(&pf_b), Some(&1));

    // An incoming live migration: the destination claims, a rollback frees, a success keeps.
    let w = support::uuid(3);
    let incoming = |id: i64| {
        json!({"instance": {"uuid": w, "host": "cmp9", "node": "cmp9", "vm_state": "active",
                            "task_state": "migrating", "project_id": "p1", "user_id": "u1"},
               "request_spec": support::request_spec(&w, 1, 1, 512, 1, Some("vf:1")),
               "move_type": "live-migration", "migration_id": id})
    };
    let (s, v) = call("POST", "/v1/migrations".into(), Some(incoming(50))).await;
    assert_eq!(s, 201, "{v}");
    agree("incoming live migration claimed").await;
    let (s, v) = call("POST", "/v1/migrations/50/revert".into(), None).await;
    assert_eq!(s, 200, "{v}");
    let before = agree("incoming live migration rolled back").await;
    assert_eq!(before.values().sum::<i64>(), 3);
    let (s, v) = call("POST", "/v1/migrations".into(), Some(incoming(51))).await;
    assert_eq!(s, 201, "{v}");
    let (s, v) = call("POST", "/v1/migrations/51/confirm".into(), None).await;
    assert_eq!(s, 200, "{v}");
    let after = agree("incoming live migration completed").await;
    assert_eq!(after.values().sum::<i64>(), 4);

    // An outgoing live migration of X: rolled back it keeps A's VFs; completed they are freed.
    let outgoing = |id: i64| {
        json!({"instance": {"uuid": x, "host": "cmp1", "node": "cmp1", "vm_state": "active",
                            "task_state": "migrating"},
               "request_spec": support::mapped_claim(&x, "vf", rid, &[&pf_a, &pf_a])["request_spec"],
               "move_type": "live-migration", "migration_id": id,
               "dest_compute": "cmp2", "dest_node": "cmp2"})
    };
    let (s, v) = call("POST", "/v1/migrations".into(), Some(outgoing(60))).await;
    assert_eq!(s, 201, "{v}");
    agree("outgoing live migration started").await;
    let (s, v) = call("POST", "/v1/migrations/60/revert".into(), None).await;
    assert_eq!(s, 200, "{v}");
    let kept = agree("outgoing live migration rolled back").await;
    assert_eq!(kept.get(&pf_a), Some(&2));
    let (s, v) = call("POST", "/v1/migrations".into(), Some(outgoing(61))).await;
    assert_eq!(s, 201, "{v}");
    let (s, v) = call("POST", "/v1/migrations/61/confirm".into(), None).await;
    assert_eq!(s, 200, "{v}");
    let gone = agree("outgoing live migration completed").await;
    // X's two VFs on A are freed; Y's and W's (B's come first) stay.
    assert_eq!(gone.get(&pf_a), None, "{gone:?}");
    assert_eq!(gone.get(&pf_b), Some(&2), "{gone:?}");

    // Aborts.
    let (s, _) = call("DELETE", format!("/v1/claims/{y}"), None).await;
    assert_eq!(s, 200);
    agree("abort").await;

    // One-time use: the drive's provider is reserved from its first use until released.
    let nvme_rp = provider_of("0000:01:00.0").await;
    let reserved = |want: i64| {
        let raw = &raw;
        let nvme_rp = nvme_rp.clone();
        async move {
            let start = Instant::now();
            loop {
                let v = raw
                    .get(&format!("/resource_providers/{nvme_rp}/inventories"))
                    .await;
                let got = v["inventories"]["CUSTOM_PCI_144D_A808"]["reserved"]
                    .as_i64()
                    .unwrap_or(-1);
                if got == want {
                    return;
                }
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "the drive's provider has reserved {got}, expected {want}: {v}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    reserved(0).await;
    let z = support::uuid(4);
    let (s, v) = call(
        "POST",
        "/v1/claims".into(),
        Some(support::claim(&z, 1, 512, 1, Some("nvme:1"))),
    )
    .await;
    assert_eq!(s, 201, "{v}");
    // Reserved with the claim, as Nova's tracker does: before the answer, not at the next cycle.
    let now = raw
        .get(&format!("/resource_providers/{nvme_rp}/inventories"))
        .await;
    assert_eq!(
        now["inventories"]["CUSTOM_PCI_144D_A808"]["reserved"], 1,
        "not reserved when the claim was answered: {now}"
    );
    agree("one-time-use device in use").await;
    let (s, _) = call("DELETE", format!("/v1/claims/{z}"), None).await;
    assert_eq!(s, 200);
    agree("one-time-use device freed").await;
    reserved(1).await;
    let (s, v) = call("POST", "/v1/pci-devices/0000:01:00.0/release".into(), None).await;
    assert_eq!(s, 200, "{v}");
    reserved(0).await;

    // Nova's way of cleaning it: the operator lowers reserved in Placement. rtrackd does not
    // write it back, and takes it as a release once it reads it.
    let used_and_freed = |n: u64| {
        let call = &call;
        async move {
            let c = support::uuid(n);
            let (s, v) = call(
                "POST",
                "/v1/claims".into(),
                Some(support::claim(&c, 1, 512, 1, Some("nvme:1"))),
            )
            .await;
            assert_eq!(s, 201, "{v}");
            let (s, _) = call("DELETE", format!("/v1/claims/{c}"), None).await;
            assert_eq!(s, 200);
        }
    };
    used_and_freed(5).await;
    reserved(1).await;
    let inv = raw
        .get(&format!("/resource_providers/{nvme_rp}/inventories"))
        .await;
    let mut cleaned = inv["inventories"]["CUSTOM_PCI_144D_A808"].clone();
    cleaned["reserved"] = json!(0);
    let (s, v) = raw
        .put(
            &format!("/resource_providers/{nvme_rp}/inventories/CUSTOM_PCI_144D_A808"),
            json!({"resource_provider_generation": inv["resource_provider_generation"],
                   "total": cleaned["total"], "reserved": 0, "min_unit": cleaned["min_unit"],
                   "max_unit": cleaned["max_unit"], "step_size": cleaned["step_size"],
                   "allocation_ratio": cleaned["allocation_ratio"]}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let (s, v) = call("POST", "/v1/refresh".into(), Some(json!({}))).await;
    assert_eq!(s, 200, "{v}");
    let (_, v) = call("GET", "/v1/pci-devices".into(), None).await;
    let drive = v["pci_devices"]
        .as_array()
        .and_then(|a| a.iter().find(|d| d["address"] == "0000:01:00.0"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(drive["status"], "available", "{v}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    reserved(0).await;
    // Used again: reserved again.
    used_and_freed(6).await;
    reserved(1).await;
    drop(d);
}

/// A PCI provider nova-compute left under the compute node (its name, a random uuid, the
/// scheduler's allocation against it) is taken over: no second provider, claims follow
/// allocations against its uuid, and the uuid is kept across a restart.
#[tokio::test(flavor = "current_thread")]
async fn a_pci_provider_nova_compute_left_is_adopted_and_kept() {
    let Some(srv) = server("pci-adopt") else {
        return;
    };
    let raw = srv.client();
    let tmp = rtrack_fixtures::real::scratch_dir();
    let root = tmp.path().join("host");
    SyntheticHost::small().write(&root);
    let dir = tmp.path().join("d");
    let base = support::base_config(&root, &dir)
        + &format!(
            "[placement]\nendpoint = \"{}\"\nreport_interval_s = 1\n",
            srv.url
        );
    let start = |config: String| {
        let dir = dir.clone();
        tokio::task::spawn_blocking(move || {
            support::Daemon::start_with(
                Path::new(env!("CARGO_BIN_EXE_rtrackd")),
                &dir,
                &config,
                &[],
            )
        })
    };
    let wait_for = |path: String, check: fn(&Value) -> bool| {
        let raw = &raw;
        async move {
            let t = Instant::now();
            loop {
                let (s, v) = raw.send(reqwest::Method::GET, &path, None).await;
                if s == 200 && check(&v) {
                    return v;
                }
                assert!(
                    t.elapsed() < Duration::from_secs(30),
                    "{path}: still {s} {v}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    // First without PCI in Placement: the compute node provider only.
    let d = start(base.clone()).await.unwrap();
    let node = std::fs::read_to_string(dir.join("state/compute_id"))
        .unwrap()
        .trim()
        .to_string();
    wait_for(format!("/resource_providers/{node}"), |_| true).await;
    drop(d);
    // nova-compute's provider for PF 3b:00.0's VFs, with an allocation the scheduler made.
    let novas = Uuid::new_v4();
    let (s, v) = raw
        .send(
            reqwest::Method::POST,
            "/resource_providers",
            Some(json!({"name": "cmp1_0000:3B:00.0", "uuid": novas, "parent_provider_uuid": node})),
        )
        .await;
    assert!(s == 200 || s == 201, "{s} {v}");
    let (s, v0) = raw
        .put("/resource_classes/CUSTOM_PCI_8086_1889", json!(null))
        .await;
    assert!(s == 201 || s == 204, "{s} {v0}");
    let (s, v) = raw
        .put(
            &format!("/resource_providers/{novas}/inventories"),
            json!({"resource_provider_generation": v["generation"].as_u64().unwrap_or(0),
                   "inventories": {"CUSTOM_PCI_8086_1889": {"total": 8, "max_unit": 8}}}),
        )
        .await;
    assert!(s == 200, "{s} {v}");
    let x = support::uuid(7);
    let (s, v) = raw
        .put(
            &format!("/allocations/{x}"),
            json!({"allocations": {
                node.clone(): {"resources": {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}},
                novas.to_string(): {"resources": {"CUSTOM_PCI_8086_1889": 1}}},
                "project_id": "p1", "user_id": "u1", "consumer_generation": null,
                "consumer_type": "INSTANCE"}),
        )
        .await;
    assert_eq!(s, 204, "{v}");
    // With PCI in Placement now: rtrack reports under nova's uuid.
    let config = base.replace(
        "[placement]",
        "[pci]\nreport_in_placement = true\n\n[placement]",
    );
    let d = start(config.clone()).await.unwrap();
    let socket = d.socket.clone();
    let devices = || {
        let socket = socket.clone();
        async move {
            tokio::task::spawn_blocking(move || {
                rtrack::cli::client::request(
                    &socket,
                    "GET",
                    "/v1/pci-devices",
                    None,
                    Duration::from_secs(30),
                )
                .unwrap()
                .json()
                .unwrap()
            })
            .await
            .unwrap()
        }
    };
    let t = Instant::now();
    loop {
        let v: Value = devices().await;
        let adopted = v["pci_devices"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["parent_addr"] == "0000:3b:00.0")
            .all(|d| d["resource_provider_uuid"] == novas.to_string());
        if adopted {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "not adopted: {v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let tree = raw
        .get(&format!("/resource_providers?in_tree={node}"))
        .await;
    let names: Vec<&str> = tree["resource_providers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names.iter().filter(|n| **n == "cmp1_0000:3B:00.0").count(),
        1,
        "{names:?}"
    );
    // The scheduler's allocation against nova's provider: the claim takes 3b:00.0's VF (5e's
    // come first without it).
    let socket = d.socket.clone();
    let body = support::mapped_claim(
        &x,
        "vf",
        "aaaaaaaa-2222-4000-8000-000000000001",
        &[&novas.to_string()],
    );
    let (s, v) = tokio::task::spawn_blocking(move || {
        let r = rtrack::cli::client::request(
            &socket,
            "POST",
            "/v1/claims",
            Some(body.to_string().as_bytes()),
            Duration::from_secs(30),
        )
        .unwrap();
        (r.status, r.json().unwrap_or(Value::Null))
    })
    .await
    .unwrap();
    assert_eq!(s, 201, "{v}");
    assert!(
        v["pci_devices"][0]["address"]
            .as_str()
            .unwrap()
            .starts_with("0000:3b:"),
        "{v}"
    );
    // Kept across a restart (stored, not looked up again).
    drop(d);
    let d = start(config).await.unwrap();
    let socket = d.socket.clone();
    let v: Value = tokio::task::spawn_blocking(move || {
        rtrack::cli::client::request(
            &socket,
            "GET",
            "/v1/pci-devices",
            None,
            Duration::from_secs(30),
        )
        .unwrap()
        .json()
        .unwrap()
    })
    .await
    .unwrap();
    assert!(
        v["pci_devices"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["parent_addr"] == "0000:3b:00.0")
            .all(|d| d["resource_provider_uuid"] == novas.to_string()),
        "{v}"
    );
    drop(d);
}

/// The view the daemon of node `name` (uuid `node`) derives: provider.yaml names its providers.
fn named_view(inv: &HostInventory, cfg: &ValidConfig, name: &str, node: Uuid) -> HostView {
    let settings = rtrack::tracker::TrackerSettings {
        policy: cfg.into(),
        names: rtrack::tracker::model::HostNames {
            host: name.into(),
            node: name.into(),
        },
        node_uuid: node.to_string(),
        node_created_at: time::OffsetDateTime::UNIX_EPOCH,
    };
    HostView::build(std::sync::Arc::new(inv.clone()), &settings, 0)
}

/// The mdev-gpu host's tree as Placement should hold it: what nova-compute makes (a child per
/// vGPU parent, per encryption model) and what provider.yaml adds.
fn vgpu_tree(srv: &Server, dir: &Path) -> (ValidConfig, HostInventory) {
    if dir.exists() {
        std::fs::remove_dir_all(dir).unwrap();
    }
    rtrack_fixtures::vgpu::VgpuHost::mdev_gpu().write(dir);
    let inv = probes::probe_host(&HostRoot::under(dir), &probes::ProbeOptions::default()).unwrap();
    let mut cfg = config(
        &srv.url,
        "report_allocations = true\n[devices]\nenabled_mdev_types = [\"nvidia-35\"]\n",
    );
    cfg.provider_configs = rtrack::config::provider_yaml::parse(
        "meta:\n  schema_version: '1.0'\nproviders:\n  - identification:\n      uuid: $COMPUTE_NODE\n    inventories:\n      additional:\n        - CUSTOM_LICENCE: {total: 4, max_unit: 2}\n    traits:\n      additional: [CUSTOM_GOLD]\n  - identification:\n      name: cmp-v_pci_0000_85_00_0\n    traits:\n      additional: [CUSTOM_NVLINK]\n",
        Path::new("nova.yaml"),
    )
    .unwrap();
    (cfg, inv)
}

#[tokio::test(flavor = "current_thread")]
async fn vgpu_sev_and_provider_yaml_providers_are_what_nova_makes() {
    let Some(srv) = server("vgpu-tree") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let (cfg, inv) = vgpu_tree(&srv, &tmp.path().join("host"));
    let node = Uuid::new_v4();
    let v = named_view(&inv, &cfg, "cmp-v", node);
    use rtrack::tracker::nested::{EncryptionModel, NestedKey};
    let gpu = NestedKey::Mdev("0000:85:00.0".into());
    let consumer = Consumer {
        uuid: Uuid::new_v4(),
        project_id: Some("p".into()),
        user_id: Some("u".into()),
        consumer_type: CONSUMER_INSTANCE.into(),
        resources: BTreeMap::from([
            (ResourceKey::Host("VCPU".into()), 2),
            (ResourceKey::Host("MEMORY_MB".into()), 1024),
            (ResourceKey::Nested(gpu, "VGPU".into()), 2),
            (
                ResourceKey::Nested(
                    NestedKey::MemEncryption(EncryptionModel::AmdSev),
                    "MEM_ENCRYPTION_CONTEXT".into(),
                ),
                1,
            ),
            (
                ResourceKey::Nested(
                    NestedKey::Operator {
                        provider: "cmp-v".into(),
                        class: "CUSTOM_LICENCE".into(),
                    },
                    "CUSTOM_LICENCE".into(),
                ),
                1,
            ),
        ]),
    };
    let d = DesiredState::build(
        &v,
        &cfg,
        node,
        "cmp-v",
        false,
        std::slice::from_ref(&consumer),
    )
    .unwrap();
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    let mut r = reporter(&cfg);
    let first = r.report(&d).await.unwrap();
    eprintln!("MEASURE vGPU tree registration: {}", first.requests);
    let raw = srv.client();
    assert_placement_matches(&raw, &d).await;
    assert_eq!(
        tree_names(&raw, node).await,
        [
            "cmp-v",
            "cmp-v_amd_sev",
            "cmp-v_amd_sev_es",
            "cmp-v_pci_0000_84_00_0",
            "cmp-v_pci_0000_85_00_0"
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    );
    // As Placement shows them: VGPU 16 on each GPU, contexts with max_unit 1 and the model's
    // trait on each model's child, the operator's class and traits where the file put them.
    let by_name = |name: &str| d.providers.iter().find(|p| p.name == name).unwrap().uuid;
    let inv_of = |uuid: Uuid| {
        let raw = &raw;
        async move {
            raw.get(&format!("/resource_providers/{uuid}/inventories"))
                .await["inventories"]
                .clone()
        }
    };
    let traits_of = |uuid: Uuid| {
        let raw = &raw;
        async move { raw.get(&format!("/resource_providers/{uuid}/traits")).await["traits"].clone() }
    };
    let gpu1 = inv_of(by_name("cmp-v_pci_0000_85_00_0")).await;
    assert_eq!(gpu1["VGPU"]["total"], 16);
    assert_eq!(gpu1["VGPU"]["max_unit"], 16);
    let sev = inv_of(by_name("cmp-v_amd_sev")).await;
    assert_eq!(sev["MEM_ENCRYPTION_CONTEXT"]["total"], 410);
    assert_eq!(sev["MEM_ENCRYPTION_CONTEXT"]["max_unit"], 1);
    assert!(traits_of(by_name("cmp-v_amd_sev"))
        .await
        .as_array()
        .unwrap()
        .contains(&json!("HW_CPU_X86_AMD_SEV")));
    assert!(traits_of(by_name("cmp-v_amd_sev_es"))
        .await
        .as_array()
        .unwrap()
        .contains(&json!("HW_CPU_X86_AMD_SEV_ES")));
    let root = inv_of(node).await;
    assert_eq!(root["CUSTOM_LICENCE"]["total"], 4);
    assert_eq!(root["CUSTOM_LICENCE"]["max_unit"], 2);
    assert!(root.get("VGPU").is_none() && root.get("MEM_ENCRYPTION_CONTEXT").is_none());
    assert!(traits_of(node)
        .await
        .as_array()
        .unwrap()
        .contains(&json!("CUSTOM_GOLD")));
    assert!(traits_of(by_name("cmp-v_pci_0000_85_00_0"))
        .await
        .as_array()
        .unwrap()
        .contains(&json!("CUSTOM_NVLINK")));
    // As an operator sees it with `openstack resource provider ...` (osc-placement).
    let listed = osc(
        &srv,
        &[
            "resource",
            "provider",
            "list",
            "--in-tree",
            &node.to_string(),
        ],
    );
    let mut names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "cmp-v",
            "cmp-v_amd_sev",
            "cmp-v_amd_sev_es",
            "cmp-v_pci_0000_84_00_0",
            "cmp-v_pci_0000_85_00_0"
        ]
    );
    let gpu1_uuid = by_name("cmp-v_pci_0000_85_00_0").to_string();
    let inventory = osc(
        &srv,
        &["resource", "provider", "inventory", "list", &gpu1_uuid],
    );
    let vgpu = inventory
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resource_class"] == "VGPU")
        .unwrap();
    assert_eq!(
        (vgpu["total"].as_i64(), vgpu["max_unit"].as_i64()),
        (Some(16), Some(16))
    );
    let traits = osc(
        &srv,
        &[
            "resource",
            "provider",
            "trait",
            "list",
            &by_name("cmp-v_amd_sev").to_string(),
        ],
    );
    assert!(traits
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["name"] == "HW_CPU_X86_AMD_SEV"));
    let usages = osc(&srv, &["resource", "provider", "usage", "show", &gpu1_uuid]);
    assert!(usages
        .as_array()
        .unwrap()
        .iter()
        .any(|u| u["resource_class"] == "VGPU" && u["usage"] == 2));
    let root_traits = osc(
        &srv,
        &["resource", "provider", "trait", "list", &node.to_string()],
    );
    for t in ["COMPUTE_NODE", "OWNER_NOVA", "CUSTOM_GOLD"] {
        assert!(
            root_traits
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x["name"] == t),
            "{t} in {root_traits}"
        );
    }
    // The usages Placement counts are where the claim holds them.
    let usage = raw
        .get(&format!(
            "/resource_providers/{}/usages",
            by_name("cmp-v_pci_0000_85_00_0")
        ))
        .await;
    assert_eq!(usage["usages"]["VGPU"], 2);
    let usage = raw.get(&format!("/resource_providers/{node}/usages")).await;
    assert_eq!(usage["usages"]["CUSTOM_LICENCE"], 1);
    // Unchanged: nothing sent.
    let logged = srv.logged_requests();
    for _ in 0..3 {
        let o = r.report(&d).await.unwrap();
        assert_eq!(o.requests.total(), 0, "{}", o.requests);
    }
    assert_eq!(srv.logged_requests(), logged);
    // A GPU whose parent vanished: its child is deleted (nothing allocated there).
    let mut gone = inv.clone();
    gone.mediated_devices
        .parents
        .retain(|p| p.address != "0000:84:00.0");
    gone.mediated_devices.devices.clear();
    let d2 = DesiredState::build(
        &named_view(&gone, &cfg, "cmp-v", node),
        &cfg,
        node,
        "cmp-v",
        false,
        std::slice::from_ref(&consumer),
    )
    .unwrap();
    r.report(&d2).await.unwrap();
    assert!(!tree_names(&raw, node)
        .await
        .contains("cmp-v_pci_0000_84_00_0"));
    assert_placement_matches(&raw, &d2).await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_root_an_older_nova_compute_left_with_vgpu_and_sev_is_reshaped_keeping_allocations() {
    let Some(srv) = server("reshape") else {
        return;
    };
    let raw = srv.client();
    let tmp = tempfile::tempdir().unwrap();
    let (mut cfg, inv) = vgpu_tree(&srv, &tmp.path().join("host"));
    cfg.placement.report_allocations = Some(false);
    cfg.provider_configs = Default::default();
    let node = Uuid::new_v4();
    // What a pre-Stein nova-compute left: VGPU (and an old SEV count) on the compute node, with
    // three instances allocated against it.
    let (s, v) = raw
        .send(
            reqwest::Method::POST,
            "/resource_providers",
            Some(json!({"uuid": node.to_string(), "name": "cmp-r"})),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let (s, v) = raw
        .put(
            &format!("/resource_providers/{node}/inventories"),
            json!({"resource_provider_generation": 0, "inventories": {
                "VCPU": {"total": 32}, "MEMORY_MB": {"total": 131072},
                "VGPU": {"total": 32}, "MEM_ENCRYPTION_CONTEXT": {"total": 15}}}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let consumers: Vec<(Uuid, Value)> = vec![
        (
            Uuid::new_v4(),
            json!({"VCPU": 1, "MEMORY_MB": 512, "VGPU": 1}),
        ),
        (
            Uuid::new_v4(),
            json!({"VCPU": 2, "MEMORY_MB": 1024, "VGPU": 2}),
        ),
        (
            Uuid::new_v4(),
            json!({"VCPU": 1, "MEMORY_MB": 2048, "MEM_ENCRYPTION_CONTEXT": 1}),
        ),
    ];
    for (c, r) in &consumers {
        let (s, v) = raw
            .put(
                &format!("/allocations/{c}"),
                json!({"allocations": {node.to_string(): {"resources": r}},
                       "project_id": "p", "user_id": "u", "consumer_generation": null,
                       "consumer_type": "INSTANCE"}),
            )
            .await;
        assert_eq!(s, 204, "{v}");
    }
    let d = DesiredState::build(
        &named_view(&inv, &cfg, "cmp-r", node),
        &cfg,
        node,
        "cmp-r",
        false,
        &[],
    )
    .unwrap();
    // Without the service role (noauth2 gives the admin token the admin role only), Placement
    // refuses the reshaper: warned about, the root keeps the class, and reporting goes on.
    let mut r = reporter(&cfg);
    let o = r.report(&d).await.unwrap();
    assert!(o.reshaped.is_empty());
    assert_eq!(o.inventory_in_use, 1, "{}", o.requests);
    let root = raw
        .get(&format!("/resource_providers/{node}/inventories"))
        .await;
    assert!(root["inventories"]["VGPU"].is_object());
    // With it (as nova-compute's Placement user has it), the reshape is done.
    cfg.placement.roles = Some("admin,service".into());
    let mut r = reporter(&cfg);
    let o = r.report(&d).await.unwrap();
    eprintln!("MEASURE reshape: {} ({:?})", o.requests, o.reshaped);
    assert_eq!(o.requests.get("reshape"), 1, "{}", o.requests);
    let mut moved = o.reshaped.clone();
    moved.sort();
    assert_eq!(moved, ["MEM_ENCRYPTION_CONTEXT", "VGPU"]);
    // The compute node holds neither class any more; every allocation is still there, its
    // VGPU and context on the children, the rest on the compute node.
    let root = raw
        .get(&format!("/resource_providers/{node}/inventories"))
        .await;
    let root = root["inventories"].as_object().unwrap();
    assert!(!root.contains_key("VGPU") && !root.contains_key("MEM_ENCRYPTION_CONTEXT"));
    let child_of = |name: &str| d.providers.iter().find(|p| p.name == name).unwrap().uuid;
    let mut vgpus = 0;
    for (c, before) in &consumers {
        let a = raw.get(&format!("/allocations/{c}")).await;
        let a = a["allocations"].as_object().unwrap();
        assert_eq!(
            a[&node.to_string()]["resources"]["VCPU"],
            before["VCPU"],
            "{c}"
        );
        assert!(a[&node.to_string()]["resources"].get("VGPU").is_none());
        for (rp, e) in a {
            if let Some(n) = e["resources"].get("VGPU") {
                let gpus = [
                    child_of("cmp-r_pci_0000_84_00_0").to_string(),
                    child_of("cmp-r_pci_0000_85_00_0").to_string(),
                ];
                assert!(gpus.contains(rp), "VGPU of {c} on {rp}");
                vgpus += n.as_u64().unwrap();
            }
        }
        if before.get("MEM_ENCRYPTION_CONTEXT").is_some() {
            let sev = child_of("cmp-r_amd_sev").to_string();
            assert_eq!(a[&sev]["resources"]["MEM_ENCRYPTION_CONTEXT"], 1, "{c}");
        }
    }
    assert_eq!(vgpus, 3);
    // Then the tree is as rtrack describes it, and nothing more is sent.
    r.report(&d).await.unwrap();
    assert_placement_matches(&raw, &d).await;
    let o = r.report(&d).await.unwrap();
    assert_eq!(o.requests.total(), 0, "{}", o.requests);
}

/// `POST /v1/refresh`: the host probed again and Placement written before the answer, whatever
/// the intervals say (nova-compute's periodic task asks for this, and reads Placement at once).
#[test]
fn a_refresh_audits_and_reports_before_it_answers() {
    let Some(srv) = server("refresh") else { return };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let raw = srv.client();
    let tmp = rtrack_fixtures::real::scratch_dir();
    let root = tmp.path().join("host");
    SyntheticHost::small().write(&root);
    let dir = tmp.path().join("d");
    let config = support::base_config(&root, &dir)
        + &format!(
            "[audit]\ninterval_s = 3600\n[placement]\nendpoint = \"{}\"\nreport_interval_s = 3600\n",
            srv.url
        );
    let d =
        support::Daemon::start_with(Path::new(env!("CARGO_BIN_EXE_rtrackd")), &dir, &config, &[]);
    let node = std::fs::read_to_string(dir.join("state/compute_id")).unwrap();
    let (s, v) = d.call("POST", "/v1/refresh", None);
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["audited"], true, "{v}");
    let inv = rt.block_on(raw.get(&format!("/resource_providers/{}/inventories", node.trim())));
    let before = inv["inventories"]["MEMORY_MB"]["total"].as_i64().unwrap();
    // The host's memory changes; the next refresh carries it to Placement before answering.
    let meminfo = root.join("proc/meminfo");
    let text = std::fs::read_to_string(&meminfo).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .unwrap()
        .to_string();
    let kb: i64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    std::fs::write(
        &meminfo,
        text.replace(&line, &format!("MemTotal:       {} kB", kb + 1024 * 1024)),
    )
    .unwrap();
    let (s, v) = d.call("POST", "/v1/refresh", None);
    assert_eq!(s, 200, "{v}");
    assert!(v["placement"]["changes"].as_u64().unwrap() >= 1, "{v}");
    let inv = rt.block_on(raw.get(&format!("/resource_providers/{}/inventories", node.trim())));
    assert_eq!(
        inv["inventories"]["MEMORY_MB"]["total"].as_i64().unwrap(),
        before + 1024,
        "{inv}"
    );
    // Placement down: the refresh says so (503), the audit still happened.
    srv.stop();
    let (s, v) = d.call("POST", "/v1/refresh", None);
    assert_eq!(s, 503, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("placement"),
        "{v}"
    );
}
