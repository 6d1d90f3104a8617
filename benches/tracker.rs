//! Tracker benchmarks (`cargo bench --bench tracker`), figures printed side by side:
//!
//! - durable claim throughput in-process: claim + commit (SQLite WAL, synchronous=FULL, on the
//!   system temp filesystem), with 1, 8 and 32 claiming threads (group commit);
//! - one audit of the large synthetic host (8 NUMA nodes, 256 CPUs, 1,024 VFs all tracked) with
//!   500 instances holding 1,000 VFs: the probe, the view derived from it before the lock
//!   (inventory, device selection, the ComputeNode's host facts), and the locked in-memory part
//!   (device sync, usage rebuild, ComputeNode), in CPU time.
//!
//! Targets (issue 4): durable claims at least 2,000/s; the audit under 5 ms of CPU.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test or bench: a panic is its failure

use std::sync::Arc;
use std::time::{Duration, Instant};

use rtrack::config::Config;
use rtrack::probes::{probe_host, HostInventory, HostRoot, ProbeOptions};
use rtrack::service::TrackerService;
use rtrack::tracker::model::{FlavorUsage, HostNames, InstanceRequest, PciRequest};
use rtrack::tracker::pci::NumaPolicy;
use rtrack::tracker::{InstanceInfo, Tracker, TrackerSettings, TrackerState};
use rtrack_fixtures::synthetic::SyntheticHost;

const CONFIG: &str = r#"
[resources]
cpu_allocation_ratio = 100000.0
ram_allocation_ratio = 100000.0

[[pci.device_spec]]
vendor_id = "8086"
product_id = "1889"
physical_network = "physnet1"
"#;

fn settings() -> TrackerSettings {
    let f = std::path::Path::new("bench.toml");
    TrackerSettings {
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
    }
}

fn request(vfs: u32, id: &str) -> InstanceRequest {
    InstanceRequest {
        flavor: FlavorUsage {
            id: 1,
            flavorid: "small".into(),
            name: None,
            vcpus: 2,
            memory_mb: 2048,
            root_gb: 0,
            ephemeral_gb: 0,
            swap_mb: 0,
            cpus: None,
            extra_resources: Default::default(),
            mem_encryption_model: None,
            extra_specs: Default::default(),
        },
        is_bfv: true,
        pci_requests: if vfs == 0 {
            vec![]
        } else {
            vec![PciRequest {
                request_id: format!("{id}-vf"),
                count: vfs,
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
        },
        numa: None,
    }
}

fn uuid(t: u32, n: u32) -> String {
    format!("00000000-0000-4000-8000-{t:04}{n:08}")
}

fn thread_cpu() -> Duration {
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).unwrap();
    Duration::new(ts.tv_sec() as u64, ts.tv_nsec() as u32)
}

fn large_host() -> (tempfile::TempDir, HostInventory) {
    let dir = tempfile::tempdir().unwrap();
    SyntheticHost::large().write(dir.path());
    let inv = probe_host(&HostRoot::under(dir.path()), &ProbeOptions::default()).unwrap();
    (dir, inv)
}

fn claims_per_second(host: &HostInventory, threads: u32, duration: Duration) -> (f64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let svc = Arc::new(
        TrackerService::open(settings(), host.clone(), &dir.path().join("rtrack.sqlite")).unwrap(),
    );
    svc.audit(host.clone()).unwrap();
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let svc = svc.clone();
            std::thread::spawn(move || {
                let mut n = 0;
                while start.elapsed() < duration {
                    let u = uuid(t, n);
                    let info = InstanceInfo {
                        uuid: u.clone(),
                        ..Default::default()
                    };
                    svc.instance_claim(&info, &request(0, &u), false).unwrap();
                    n += 1;
                }
                n
            })
        })
        .collect();
    let total: u32 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    let elapsed = start.elapsed().as_secs_f64();
    (total as f64 / elapsed, svc.commit_stats().transactions)
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` passes nothing useful: run quickly.
    let quick = !std::env::args().any(|a| a == "--bench");
    let (_dir, host) = large_host();
    let secs = if quick { 0.3 } else { 3.0 };

    println!("durable claims (claim + commit, SQLite WAL synchronous=FULL, {secs} s each):");
    for threads in [1, 8, 32] {
        let (rate, tx) = claims_per_second(&host, threads, Duration::from_secs_f64(secs));
        println!("  {threads:>2} thread(s): {rate:>8.0} claims/s ({tx} transactions)");
    }

    // Audit: 500 instances, 2 VFs each = 1,000 VFs of the 1,024.
    let mut t = Tracker::new(settings(), host.clone(), TrackerState::default());
    t.audit(host.clone(), time::OffsetDateTime::UNIX_EPOCH);
    for i in 0..500 {
        let u = uuid(9, i);
        let info = InstanceInfo {
            uuid: u.clone(),
            vm_state: Some("active".into()),
            ..Default::default()
        };
        t.instance_claim(&info, &request(2, &u), 0, false).unwrap();
    }
    let rounds = if quick { 3 } else { 50 };
    let mut cpu = Vec::new();
    let mut wall = Vec::new();
    let mut view_cpu = Vec::new();
    for _ in 0..rounds {
        let h = Arc::new(host.clone());
        // As the service does: the view is derived before the lock, the audit runs under it.
        let c0 = thread_cpu();
        let view = Arc::new(t.view_of(h));
        view_cpu.push((thread_cpu() - c0).as_secs_f64() * 1000.0);
        // The service's committed view holds the previous probe until the writer swaps it
        // (and frees it, outside every lock): hold it here too.
        let previous = t.view();
        let (c0, w0) = (thread_cpu(), Instant::now());
        let (out, _) = t.audit_view(view, time::OffsetDateTime::UNIX_EPOCH);
        cpu.push((thread_cpu() - c0).as_secs_f64() * 1000.0);
        wall.push(w0.elapsed().as_secs_f64() * 1000.0);
        drop(previous);
        assert!(out.devices_added.is_empty());
    }
    let mut probe_ms = Vec::new();
    for _ in 0..rounds.min(10) {
        let w0 = Instant::now();
        probe_host(&HostRoot::under(_dir.path()), &ProbeOptions::default()).unwrap();
        probe_ms.push(w0.elapsed().as_secs_f64() * 1000.0);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "audit of the large host with 500 instances / 1,000 VFs allocated: locked part {:.2} ms CPU ({:.2} ms wall), median of {rounds}; view derived before the lock {:.2} ms CPU; probe before it {:.1} ms wall",
        median(&mut cpu),
        median(&mut wall),
        median(&mut view_cpu),
        median(&mut probe_ms)
    );
}
