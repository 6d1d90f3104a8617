//! Nested providers against a real Placement: vGPU, SEV and provider.yaml trees as Nova makes
//! them, and an older nova-compute's root reshaped keeping its allocations.

use super::*;

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
