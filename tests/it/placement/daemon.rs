//! `rtrackd` and `rtrackd --once --report` against a real Placement, and `POST /v1/refresh`.

use super::*;

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
        let look = move || {
            let path = path.clone();
            async move {
                let (s, v) = raw.send(reqwest::Method::GET, &path, None).await;
                (s == 200 && check(&v))
                    .then_some(v.clone())
                    .ok_or(format!("{s} {v}"))
            }
        };
        async move {
            poll_async(
                what,
                Duration::from_secs(30),
                Duration::from_millis(100),
                look,
            )
            .await
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
