//! Crash safety: a child process claims as fast as it can from several threads (group commits),
//! printing `ACK <uuid>` after each claim is acknowledged; the parent SIGKILLs it at a random
//! moment, reopens the store and checks that every acknowledged claim is there, whole (claim,
//! instance and devices together), and that nothing is half-written. Ten rounds on the same
//! database.
//!
//! The child is this same test binary, re-run with `RTRACK_CRASH_CHILD` set.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rtrack::config::Config;
use rtrack::probes::{probe_host, HostRoot, ProbeOptions};
use rtrack::service::TrackerService;
use rtrack::store::Store;
use rtrack::tracker::model::{FlavorUsage, HostNames, InstanceRequest, PciRequest};
use rtrack::tracker::pci::{DeviceStatus, NumaPolicy};
use rtrack::tracker::{InstanceInfo, TrackerSettings};
use rtrack_fixtures::real::scratch_dir;
use rtrack_fixtures::synthetic::SyntheticHost;

const CONFIG: &str = r#"
[resources]
cpu_allocation_ratio = 100000.0
ram_allocation_ratio = 100000.0
disk_allocation_ratio = 100000.0

[[pci.device_spec]]
vendor_id = "8086"
product_id = "1889"
"#;

fn uuid(round: u32, thread: u32, n: u32) -> String {
    format!("00000000-0000-4000-8{round:03}-{thread:04}{n:08}")
}

/// The child: claims until killed.
fn child(db: &str, host_dir: &str, round: u32) {
    let f = std::path::Path::new("crash.toml");
    let settings = TrackerSettings {
        policy: Config::parse(CONFIG, f)
            .unwrap()
            .validate(f)
            .unwrap()
            .into(),
        names: HostNames {
            host: "cmp1".into(),
            node: "cmp1".into(),
        },
        node_uuid: "11111111-2222-3333-4444-555555555555".into(),
        node_created_at: time::OffsetDateTime::UNIX_EPOCH,
    };
    let host = probe_host(
        &HostRoot::under(std::path::Path::new(host_dir)),
        &ProbeOptions::default(),
    )
    .unwrap();
    let svc =
        Arc::new(TrackerService::open(settings, host.clone(), std::path::Path::new(db)).unwrap());
    svc.audit(host).unwrap();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let svc = svc.clone();
            std::thread::spawn(move || {
                for n in 0.. {
                    let u = uuid(round, t, n);
                    // Every fifth claim takes a VF, then gives it back at once, so device rows
                    // are written and deleted all the time.
                    let with_vf = n % 5 == 0;
                    let req = InstanceRequest {
                        flavor: FlavorUsage {
                            id: 1,
                            flavorid: "tiny".into(),
                            name: None,
                            vcpus: 1,
                            memory_mb: 64,
                            root_gb: 0,
                            ephemeral_gb: 0,
                            swap_mb: 0,
                            cpus: None,
                            extra_resources: Default::default(),
                            mem_encryption_model: None,
                            extra_specs: Default::default(),
                        },
                        is_bfv: false,
                        pci_requests: if with_vf {
                            vec![PciRequest {
                                request_id: format!("{u}-vf"),
                                count: 1,
                                specs: vec![[
                                    ("vendor_id".to_string(), "8086".to_string()),
                                    ("product_id".to_string(), "1889".to_string()),
                                ]
                                .into()],
                                alias_name: Some("vf".into()),
                                numa_policy: NumaPolicy::Legacy,
                                requester_id: None,
                                rp_uuids: Vec::new(),
                                devices: Vec::new(),
                            }]
                        } else {
                            vec![]
                        },
                        numa: None,
                    };
                    let info = InstanceInfo {
                        uuid: u.clone(),
                        vm_state: Some("active".into()),
                        ..Default::default()
                    };
                    match svc.instance_claim(&info, &req, false) {
                        Ok(_) => {
                            println!("ACK {u}");
                            if with_vf {
                                // Said before, since the kill may come between the abort's
                                // commit and any line after it.
                                println!("ABORTING {u}");
                                svc.abort(&u).unwrap();
                            }
                        }
                        Err(e) => println!("REFUSED {u} {e}"),
                    }
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
}

#[test]
fn acknowledged_claims_survive_sigkill() {
    if let Ok(args) = std::env::var("RTRACK_CRASH_CHILD") {
        let parts: Vec<&str> = args.split('|').collect();
        child(parts[0], parts[1], parts[2].parse().unwrap());
        return;
    }
    let dir = scratch_dir();
    // The database on a real disk filesystem when possible: fsync must mean something.
    let db_dir = tempfile::tempdir().unwrap();
    let db = db_dir.path().join("rtrack.sqlite");
    let host_dir = dir.path().join("host");
    SyntheticHost::small().write(&host_dir);
    let mut acked_total = 0;
    for round in 0..10u32 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                // Its name in the one test binary (module path included).
                concat!(module_path!(), "::acknowledged_claims_survive_sigkill")
                    .trim_start_matches("it::"),
                "--nocapture",
                "--test-threads=1",
            ])
            .env(
                "RTRACK_CRASH_CHILD",
                format!("{}|{}|{round}", db.display(), host_dir.display()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        // The kill comes at a random moment after the first acknowledgement (a loaded machine
        // may take long to start the child).
        let deadline = Duration::from_millis(fastrand::u64(0..600));
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut acked = Vec::new();
        let mut aborted = std::collections::BTreeSet::new();
        let started = Instant::now();
        while acked.is_empty() && started.elapsed() < Duration::from_secs(60) {
            match rx.recv_timeout(Duration::from_millis(20)) {
                Ok(line) => {
                    if let Some(u) = line.strip_prefix("ACK ") {
                        acked.push(u.to_string());
                    } else if let Some(u) = line.strip_prefix("ABORTING ") {
                        aborted.insert(u.to_string());
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                Err(_) => {}
            }
        }
        let start = Instant::now();
        while start.elapsed() < deadline + Duration::from_millis(500) {
            match rx.recv_timeout(Duration::from_millis(20)) {
                Ok(line) => {
                    if let Some(u) = line.strip_prefix("ACK ") {
                        acked.push(u.to_string());
                    } else if let Some(u) = line.strip_prefix("ABORTING ") {
                        aborted.insert(u.to_string());
                    }
                }
                Err(_) if start.elapsed() >= deadline => break,
                Err(_) => {}
            }
            if start.elapsed() >= deadline {
                break;
            }
        }
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        let _ = child.wait();
        // Lines already printed before the kill are acknowledgements too.
        while let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
            if let Some(u) = line.strip_prefix("ACK ") {
                acked.push(u.to_string());
            } else if let Some(u) = line.strip_prefix("ABORTING ") {
                aborted.insert(u.to_string());
            }
        }
        assert!(
            !acked.is_empty(),
            "round {round}: the child acknowledged nothing"
        );
        acked_total += acked.len();

        let state = Store::open(&db).unwrap().load().unwrap();
        for u in &acked {
            if aborted.contains(u) {
                continue;
            }
            assert!(
                state.claims.contains_key(u),
                "round {round}: acknowledged claim {u} lost"
            );
            assert!(
                state.instances.contains_key(u),
                "round {round}: instance of claim {u} lost"
            );
        }
        // Nothing half-written: every claim has its instance and its devices, every busy device
        // its claim.
        for (u, c) in &state.claims {
            assert!(
                state.instances.contains_key(u),
                "claim {u} without its instance"
            );
            for a in &c.assignments {
                let d = &state.devices[&a.address];
                assert_eq!(
                    d.status,
                    DeviceStatus::Allocated,
                    "claim {u}: device {} not allocated",
                    a.address
                );
                assert_eq!(
                    d.owner.as_ref().map(|o| o.instance_uuid.as_str()),
                    Some(u.as_str())
                );
            }
        }
        for d in state.devices.values() {
            if let Some(o) = &d.owner {
                assert!(
                    state.claims.contains_key(&o.instance_uuid),
                    "device {} held by {} without a claim",
                    d.address,
                    o.instance_uuid
                );
            }
        }
        for u in state.instances.keys() {
            assert!(
                state.claims.contains_key(u),
                "instance {u} without its claim"
            );
        }
    }
    assert!(
        acked_total > 100,
        "too few claims to mean anything: {acked_total}"
    );
}

#[test]
fn a_dropped_guard_aborts_its_claim() {
    if std::env::var("RTRACK_CRASH_CHILD").is_ok() {
        return;
    }
    let dir = scratch_dir();
    SyntheticHost::small().write(&dir.path().join("host"));
    let f = std::path::Path::new("crash.toml");
    let settings = TrackerSettings {
        policy: Config::parse(CONFIG, f)
            .unwrap()
            .validate(f)
            .unwrap()
            .into(),
        names: HostNames {
            host: "cmp1".into(),
            node: "cmp1".into(),
        },
        node_uuid: "11111111-2222-3333-4444-555555555555".into(),
        node_created_at: time::OffsetDateTime::UNIX_EPOCH,
    };
    let host = probe_host(
        &HostRoot::under(&dir.path().join("host")),
        &ProbeOptions::default(),
    )
    .unwrap();
    let svc = TrackerService::open(settings, host, &dir.path().join("db.sqlite")).unwrap();
    let req = InstanceRequest {
        flavor: FlavorUsage {
            id: 1,
            flavorid: "t".into(),
            name: None,
            vcpus: 1,
            memory_mb: 64,
            root_gb: 0,
            ephemeral_gb: 0,
            swap_mb: 0,
            cpus: None,
            extra_resources: Default::default(),
            mem_encryption_model: None,
            extra_specs: Default::default(),
        },
        is_bfv: true,
        pci_requests: vec![],
        numa: None,
    };
    let info = |n| InstanceInfo {
        uuid: uuid(0, 0, n),
        ..Default::default()
    };
    {
        let _g = svc.guarded_claim(&info(1), &req).unwrap();
        assert!(svc.state().claims.contains_key(&uuid(0, 0, 1)));
    }
    assert!(
        !svc.state().claims.contains_key(&uuid(0, 0, 1)),
        "dropped guard must abort"
    );
    svc.guarded_claim(&info(2), &req).unwrap().answered();
    assert!(svc.state().claims.contains_key(&uuid(0, 0, 2)));
}
