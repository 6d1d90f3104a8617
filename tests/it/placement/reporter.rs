//! The reporter against a real Placement: registration, refreshes, inventory, traits,
//! conflicts, PCI children, restarts, allocations, sharing providers, name clashes.

use super::*;

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

/// A periodic refresh of an unchanged tree costs `GET ?in_tree` (the microversion is asked
/// again only at a full read or after a failure); a provider someone else changed (its
/// generation moved) is read again, and only that one. The allocations are read every time
/// (removing them bumps no generation).
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
        (1 + providers, 0, 1, providers),
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
        1 + providers + 3,
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

/// After rtrack writes an allocation, it knows the provider's generation moved but not to what.
/// An operator's trait added then must survive rtrack's next change of its own traits: a
/// generation read alone would vouch for the cached traits, which lack the operator's.
#[tokio::test(flavor = "current_thread")]
async fn a_foreign_trait_added_after_an_allocation_write_survives_the_next_trait_change() {
    let Some(srv) = server("traits-after-alloc") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let inv = probe(&SyntheticHost::small(), &tmp.path().join("host"));
    let cfg = config(&srv.url, "report_allocations = true\n");
    let node = Uuid::new_v4();
    let raw = srv.client();
    let mut r = reporter(&cfg);
    let d = DesiredState::build(&view(&inv, &cfg), &cfg, node, "cmp-ta", false, &[]).unwrap();
    r.report(&d).await.unwrap();

    // A claim: rtrack writes its allocation, which moves the root's generation.
    let claim = Consumer {
        uuid: Uuid::new_v4(),
        project_id: Some(Uuid::new_v4().simple().to_string()),
        user_id: Some(Uuid::new_v4().simple().to_string()),
        consumer_type: CONSUMER_INSTANCE.into(),
        resources: BTreeMap::from([
            (ResourceKey::Host("VCPU".into()), 1),
            (ResourceKey::Host("MEMORY_MB".into()), 512),
        ]),
    };
    let claims = std::slice::from_ref(&claim);
    let d = DesiredState::build(&view(&inv, &cfg), &cfg, node, "cmp-ta", false, claims).unwrap();
    let o = r.report(&d).await.unwrap();
    assert_eq!(o.requests.get("put_allocation"), 1, "{}", o.requests);

    // The operator adds a trait of their own.
    let (s, _) = raw.put("/traits/CUSTOM_OPERATOR_RACK_9", json!(null)).await;
    assert!(s == 201 || s == 204);
    let now = raw.get(&format!("/resource_providers/{node}/traits")).await;
    let mut traits: Vec<String> = serde_json::from_value(now["traits"].clone()).unwrap();
    traits.push("CUSTOM_OPERATOR_RACK_9".into());
    let (s, v) = raw
        .put(
            &format!("/resource_providers/{node}/traits"),
            json!({"resource_provider_generation": now["resource_provider_generation"], "traits": traits}),
        )
        .await;
    assert_eq!(s, 200, "{v}");

    // rtrack changes one of its own traits (the service is disabled): it sees the traits it
    // planned from are not Placement's, reads the provider again and keeps the operator's.
    let d = DesiredState::build(&view(&inv, &cfg), &cfg, node, "cmp-ta", true, claims).unwrap();
    let o = r.report(&d).await.unwrap();
    let set: BTreeSet<String> = serde_json::from_value(
        raw.get(&format!("/resource_providers/{node}/traits")).await["traits"].clone(),
    )
    .unwrap();
    assert!(set.contains("COMPUTE_STATUS_DISABLED"), "{set:?}");
    assert!(
        set.contains("CUSTOM_OPERATOR_RACK_9"),
        "the operator's trait was removed: {set:?}"
    );
    assert_eq!(o.conflicts, 1, "{}", o.requests);
    assert_placement_matches(&raw, &d).await;
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
    let cfg = config(&srv.url, &format!("refresh_interval_s = 4\n{PCI}"));
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
                    // An outage alone does not ask the microversion again (a 406 would).
                    assert_eq!(o.requests.get("get_versions"), 0, "{}", o.requests);
                    break;
                }
                Ok(_) => {}
                Err(e) => eprintln!("still failing: {e}"),
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "did not reconverge");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let took = t0.elapsed();
        // Settled: the next report sends nothing. Asked at once, well inside the refresh
        // interval (the reconverging report re-read Placement first; on a loaded machine the
        // checks below can outlast a short interval, and then a periodic refresh is due).
        let o = r.report(&d).await.unwrap();
        assert!(!o.refreshed, "re-read Placement {took:?} after it answered");
        assert_eq!(o.requests.total(), 0, "settled again: {}", o.requests);
        eprintln!(
            "MEASURE reconvergence after a Placement restart ({} database): {took:?} from the server answering (backoff left then: {pending:?}; base 200 ms, cap 2 s), {requests} requests",
            if fresh { "empty" } else { "same" }
        );
        assert_placement_matches(&raw, &d).await;
        assert_eq!(tree_names(&raw, node).await.len(), 4);
    }

    // Placement loses its database between two reports and nothing changes here: the next
    // periodic refresh (refresh_interval_s = 4) notices and registers everything again.
    srv.stop();
    srv.start_again(true);
    assert_eq!(tree_names(&raw, node).await.len(), 0);
    tokio::time::sleep(Duration::from_millis(4100)).await;
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
