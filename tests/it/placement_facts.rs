//! Intel TDX and vPMEM against a real OpenStack Placement (`scripts/placement/start.sh`): the
//! tree rtrack reports for the TDX and PMEM hosts of `fixtures/kit/src/facts.rs` is the one Nova
//! 34's libvirt driver makes (`_ensure_memory_encryption_providers`,
//! `_update_provider_tree_for_vpmems`), Nova's scheduler finds it with the requests it makes of
//! such flavors (`_translate_mem_encryption_request`, `_translate_vpmems_request`), allocations
//! land where the claims hold them, and an operator sees it so with the `openstack` client.
//!
//! Needs python3 >= 3.11 with its venv module (the venv is cached in `target/placement-venv`).
//! `RTRACK_SKIP_PLACEMENT=1` skips these tests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rtrack::config::{Config, ValidConfig};
use rtrack::probes::{self, HostInventory, HostRoot};
use rtrack::tracker::host_view::HostView;
use rtrack::tracker::nested::{EncryptionModel, NestedKey};
use rtrack::upstream::desired::{ReportInputs, CONSUMER_INSTANCE};
use rtrack::upstream::{
    Consumer, DesiredState, HttpPlacement, Reporter, ReporterOptions, ResourceKey,
};
use rtrack_fixtures::facts::FactsHost;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::support::placement::{assert_placement_matches, osc, server, tree_names, Raw};

fn config(url: &str, devices: &str) -> ValidConfig {
    let text = format!("[placement]\nendpoint = \"{url}\"\nreport_allocations = true\n{devices}");
    let f = Path::new("test.toml");
    Config::parse(&text, f)
        .unwrap()
        .validate_in(f, &rtrack::config::placement_sources::Environment::empty())
        .unwrap()
}

fn probe(host: &FactsHost, dir: &Path) -> HostInventory {
    if dir.exists() {
        std::fs::remove_dir_all(dir).unwrap();
    }
    host.write(dir);
    probes::probe_host(&HostRoot::under(dir), &probes::ProbeOptions::default()).unwrap()
}

/// The view the daemon of node `name` (uuid `node`) derives.
fn view(inv: &HostInventory, cfg: &ValidConfig, name: &str, node: Uuid) -> HostView {
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

fn reporter(cfg: &ValidConfig) -> Reporter<HttpPlacement> {
    let settings = rtrack::upstream::validate_placement(&cfg.placement)
        .unwrap()
        .unwrap();
    Reporter::new(
        HttpPlacement::new(&settings).unwrap(),
        &settings,
        ReporterOptions {
            backoff_base: Duration::from_millis(200),
            backoff_cap: Duration::from_secs(2),
            conflict_tries: 4,
        },
    )
}

fn instance(resources: &[(ResourceKey, u64)]) -> Consumer {
    Consumer {
        uuid: Uuid::new_v4(),
        project_id: Some("p".into()),
        user_id: Some("u".into()),
        consumer_type: CONSUMER_INSTANCE.into(),
        resources: resources
            .iter()
            .cloned()
            .chain([
                (ResourceKey::Host("VCPU".into()), 1),
                (ResourceKey::Host("MEMORY_MB".into()), 512),
            ])
            .collect(),
    }
}

/// Allocation candidates for Nova's request of a flavor (the root providers that can serve it).
async fn candidates(raw: &Raw, query: &str) -> Vec<String> {
    let v = raw.get(&format!("/allocation_candidates?{query}")).await;
    v["provider_summaries"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

fn names(list: &Value) -> BTreeSet<String> {
    list.as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect()
}

fn tmp(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(name)
}

#[tokio::test(flavor = "current_thread")]
async fn the_tdx_child_is_what_nova_34_makes_and_nova_finds_it() {
    let Some(srv) = server("facts-tdx") else {
        return;
    };
    let inv = probe(&FactsHost::tdx_host(), &tmp("facts-tdx-host"));
    let cfg = config(&srv.url, "[devices]\ncpu_mode = \"host-passthrough\"\n");
    let node = Uuid::new_v4();
    let tdx = NestedKey::MemEncryption(EncryptionModel::IntelTdx);
    let guest = instance(&[(
        ResourceKey::Nested(tdx.clone(), "MEM_ENCRYPTION_CONTEXT".into()),
        1,
    )]);
    let d = DesiredState::build(
        &view(&inv, &cfg, "cmp-t", node),
        &cfg,
        node,
        "cmp-t",
        false,
        std::slice::from_ref(&guest),
    )
    .unwrap();
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    let mut r = reporter(&cfg);
    r.report(&d).await.unwrap();
    let raw = srv.client();
    assert_placement_matches(&raw, &d).await;
    assert_eq!(
        tree_names(&raw, node).await,
        BTreeSet::from(["cmp-t".to_string(), "cmp-t_intel_tdx".to_string()])
    );
    // The child as Nova makes it: MEM_ENCRYPTION_CONTEXT 63, one per guest, exactly its traits.
    let child = d
        .providers
        .iter()
        .find(|p| p.name == "cmp-t_intel_tdx")
        .unwrap()
        .uuid;
    let held = raw
        .get(&format!("/resource_providers/{child}/inventories"))
        .await;
    assert_eq!(
        held["inventories"],
        json!({"MEM_ENCRYPTION_CONTEXT": {"total": 63, "reserved": 0, "min_unit": 1, "max_unit": 1,
               "step_size": 1, "allocation_ratio": 1.0}})
    );
    let traits = raw
        .get(&format!("/resource_providers/{child}/traits"))
        .await;
    let traits: BTreeSet<String> = serde_json::from_value(traits["traits"].clone()).unwrap();
    assert_eq!(
        traits,
        BTreeSet::from(["HW_CPU_X86_INTEL_TDX".to_string(), "OWNER_NOVA".to_string()])
    );
    let root = raw.get(&format!("/resource_providers/{node}/traits")).await;
    assert!(!root["traits"]
        .as_array()
        .unwrap()
        .contains(&json!("HW_CPU_X86_INTEL_TDX")));
    let usages = raw
        .get(&format!("/resource_providers/{child}/usages"))
        .await;
    assert_eq!(usages["usages"]["MEM_ENCRYPTION_CONTEXT"], 1);

    // Nova's scheduler request for a TDX flavor (one unsuffixed group): the host is a candidate;
    // an SEV one is not.
    let tdx_query = "resources=VCPU:1,MEMORY_MB:512,MEM_ENCRYPTION_CONTEXT:1&required=HW_CPU_X86_INTEL_TDX,OWNER_NOVA";
    assert_eq!(candidates(&raw, tdx_query).await.len(), 2, "root and child");
    let sev_query =
        "resources=VCPU:1,MEMORY_MB:512,MEM_ENCRYPTION_CONTEXT:1&required=HW_CPU_X86_AMD_SEV";
    assert!(candidates(&raw, sev_query).await.is_empty());

    // As an operator sees it.
    let listed = osc(
        &srv,
        &["resource", "provider", "trait", "list", &child.to_string()],
    );
    assert_eq!(
        names(&listed),
        BTreeSet::from(["HW_CPU_X86_INTEL_TDX".to_string(), "OWNER_NOVA".to_string()])
    );
    let listed = osc(
        &srv,
        &[
            "resource",
            "provider",
            "inventory",
            "list",
            &child.to_string(),
        ],
    );
    assert_eq!(listed[0]["resource_class"], "MEM_ENCRYPTION_CONTEXT");
    assert_eq!(
        (listed[0]["total"].as_i64(), listed[0]["max_unit"].as_i64()),
        (Some(63), Some(1))
    );

    // TDX turned off (cpu_mode changed) while the guest holds its context: the child stays with
    // what is allocated; once released, it goes, as Nova removes a child with total 0.
    let off = config(&srv.url, "");
    let d = DesiredState::build(
        &view(&inv, &off, "cmp-t", node),
        &off,
        node,
        "cmp-t",
        false,
        std::slice::from_ref(&guest),
    )
    .unwrap();
    r.report(&d).await.unwrap();
    let held = raw
        .get(&format!("/resource_providers/{child}/inventories"))
        .await;
    assert_eq!(held["inventories"]["MEM_ENCRYPTION_CONTEXT"]["total"], 1);
    let released = ReportInputs {
        released: BTreeMap::from([(guest.uuid, 1)]),
        ..Default::default()
    };
    let d = DesiredState::build_with(
        &view(&inv, &off, "cmp-t", node),
        &off,
        node,
        "cmp-t",
        false,
        &[],
        &released,
    )
    .unwrap();
    r.report(&d).await.unwrap();
    assert_eq!(
        tree_names(&raw, node).await,
        BTreeSet::from(["cmp-t".to_string()])
    );
    assert_placement_matches(&raw, &d).await;
}

#[tokio::test(flavor = "current_thread")]
async fn vpmem_classes_are_on_the_compute_node_as_nova_reports_them() {
    let Some(srv) = server("facts-pmem") else {
        return;
    };
    let inv = probe(&FactsHost::pmem_host(), &tmp("facts-pmem-host"));
    let cfg = config(
        &srv.url,
        "[devices]\npmem_namespaces = [\"4GB:ns_0\", \"SMALL:ns_1|ns_2\"]\n",
    );
    let node = Uuid::new_v4();
    let small = |n: u64| {
        (
            ResourceKey::Nested(
                NestedKey::Pmem("CUSTOM_PMEM_NAMESPACE_SMALL".into()),
                "CUSTOM_PMEM_NAMESPACE_SMALL".into(),
            ),
            n,
        )
    };
    let guest = instance(&[small(1)]);
    let d = DesiredState::build(
        &view(&inv, &cfg, "cmp-p", node),
        &cfg,
        node,
        "cmp-p",
        false,
        std::slice::from_ref(&guest),
    )
    .unwrap();
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    let mut r = reporter(&cfg);
    r.report(&d).await.unwrap();
    let raw = srv.client();
    assert_placement_matches(&raw, &d).await;
    // No child: the classes are the compute node's (test_vpmem.py's inventory).
    assert_eq!(
        tree_names(&raw, node).await,
        BTreeSet::from(["cmp-p".to_string()])
    );
    let held = raw
        .get(&format!("/resource_providers/{node}/inventories"))
        .await;
    let unit = |n: i64| {
        json!({"total": n, "reserved": 0, "min_unit": 1, "max_unit": n, "step_size": 1,
               "allocation_ratio": 1.0})
    };
    assert_eq!(held["inventories"]["CUSTOM_PMEM_NAMESPACE_4GB"], unit(1));
    assert_eq!(held["inventories"]["CUSTOM_PMEM_NAMESPACE_SMALL"], unit(2));
    let usages = raw.get(&format!("/resource_providers/{node}/usages")).await;
    assert_eq!(usages["usages"]["CUSTOM_PMEM_NAMESPACE_SMALL"], 1);
    // Nova's scheduler request for hw:pmem=SMALL: one SMALL left, then none for two.
    let q = |n: u32| format!("resources=VCPU:1,MEMORY_MB:512,CUSTOM_PMEM_NAMESPACE_SMALL:{n}");
    assert_eq!(candidates(&raw, &q(1)).await, [node.to_string()]);
    assert!(candidates(&raw, &q(2)).await.is_empty());
    let listed = osc(
        &srv,
        &[
            "resource",
            "provider",
            "inventory",
            "list",
            &node.to_string(),
        ],
    );
    let small_row = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resource_class"] == "CUSTOM_PMEM_NAMESPACE_SMALL")
        .unwrap_or_else(|| panic!("{listed}"));
    assert_eq!(small_row["total"], 2);

    // A namespace gone from the configuration while held: the class keeps what is allocated.
    let fewer = config(&srv.url, "[devices]\npmem_namespaces = [\"4GB:ns_0\"]\n");
    let d = DesiredState::build(
        &view(&inv, &fewer, "cmp-p", node),
        &fewer,
        node,
        "cmp-p",
        false,
        std::slice::from_ref(&guest),
    )
    .unwrap();
    r.report(&d).await.unwrap();
    let held = raw
        .get(&format!("/resource_providers/{node}/inventories"))
        .await;
    assert_eq!(
        held["inventories"]["CUSTOM_PMEM_NAMESPACE_SMALL"]["total"],
        1
    );
    assert_placement_matches(&raw, &d).await;
}
