//! PCI in Placement with a live rtrackd: claims that follow the scheduler's allocations, and a
//! PCI provider nova-compute left adopted.

use super::*;

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
        let look = move || async move {
            let (local, providers) = held().await;
            let mut theirs: BTreeMap<String, i64> = BTreeMap::new();
            for rp in &providers {
                let path = format!("/resource_providers/{rp}/usages");
                let (s, u) = raw.send(reqwest::Method::GET, &path, None).await;
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
            if theirs != local {
                return Err(format!(
                    "the host holds {local:?}, Placement's usages are {theirs:?}"
                ));
            }
            println!("MEASURE pci-live {step}: host and Placement agree: {local:?}");
            Ok(local)
        };
        poll_async(
            step,
            Duration::from_secs(30),
            Duration::from_millis(200),
            look,
        )
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
    let registered = || async {
        let (_, providers) = held().await;
        let mut missing = Vec::new();
        for rp in std::iter::once(&node).chain(&providers) {
            let path = format!("/resource_providers/{rp}");
            if raw.send(reqwest::Method::GET, &path, None).await.0 != 200 {
                missing.push(rp.clone());
            }
        }
        match (providers.len(), missing.is_empty()) {
            (3, true) => Ok(()),
            (n, _) => Err(format!("{n} PCI providers of 3, not found: {missing:?}")),
        }
    };
    let every = Duration::from_millis(200);
    poll_async(
        "the providers registered",
        Duration::from_secs(30),
        every,
        registered,
    )
    .await;
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
        let look = move || {
            let nvme_rp = nvme_rp.clone();
            async move {
                let path = format!("/resource_providers/{nvme_rp}/inventories");
                let v = raw.get(&path).await;
                let got = v["inventories"]["CUSTOM_PCI_144D_A808"]["reserved"]
                    .as_i64()
                    .unwrap_or(-1);
                (got == want)
                    .then_some(())
                    .ok_or(format!("reserved {got}: {v}"))
            }
        };
        let what = format!("the drive's provider reserving {want}");
        async move {
            poll_async(
                &what,
                Duration::from_secs(30),
                Duration::from_millis(200),
                look,
            )
            .await
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
    agree("one-time-use device used and freed again").await;
    // The operator's write may race the daemon's own (a report cycle or claim 5's release
    // bumps the provider's generation; CI saw a 409 here once): on a 409 they read the
    // inventory again and retry, as any Placement client must. Bounded, so a daemon that kept
    // writing the provider would still fail the test.
    let path = format!("/resource_providers/{nvme_rp}/inventories");
    let mut last = (0, json!(null));
    for _ in 0..5 {
        let inv = raw.get(&path).await;
        let mut body = inv["inventories"]["CUSTOM_PCI_144D_A808"].clone();
        body["reserved"] = json!(0);
        body["resource_provider_generation"] = inv["resource_provider_generation"].clone();
        last = raw.put(&format!("{path}/CUSTOM_PCI_144D_A808"), body).await;
        if last.0 != 409 {
            break;
        }
        println!("MEASURE pci-live the operator's inventory write retried after a 409");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(last.0, 200, "{}", last.1);
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
        let look = move || {
            let path = path.clone();
            async move {
                let (s, v) = raw.send(reqwest::Method::GET, &path, None).await;
                (s == 200 && check(&v))
                    .then_some(v.clone())
                    .ok_or(format!("{path}: {s} {v}"))
            }
        };
        async move {
            poll_async(
                "an answer",
                Duration::from_secs(30),
                Duration::from_millis(100),
                look,
            )
            .await
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
    let adopted = || async {
        let v: Value = devices().await;
        let adopted = v["pci_devices"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["parent_addr"] == "0000:3b:00.0")
            .all(|d| d["resource_provider_uuid"] == novas.to_string());
        adopted.then_some(()).ok_or(v.to_string())
    };
    let every = Duration::from_millis(200);
    poll_async("the VFs adopted", Duration::from_secs(30), every, adopted).await;
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
