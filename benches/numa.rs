//! NUMA benchmarks (`cargo bench --bench numa`), figures printed side by side:
//!
//! - the fit of an 8-cell dedicated guest with 2 PCI requests (`required` affinity) on a
//!   16-cell, 512-CPU host (2 sockets x 128 cores x 2 threads, 4 PFs x 32 VFs on nodes 1, 6, 9
//!   and 14) with 3/4 of its dedicated CPUs pinned: median and worst of many dry runs, for a
//!   guest that fits, one whose PCI requests no 8 cells can meet, and one that fits no cell;
//! - a NUMA claim end to end on the large synthetic host (256 CPUs, 8 nodes): a dedicated
//!   2-cell guest through the socket and a durable commit, beside a plain claim, in the same
//!   run.
//!
//! Target (issue 11): at most 10 ms for the worst fit.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test or bench: a panic is its failure

// The benches use part of the tests' harness.
#[allow(dead_code)]
#[path = "../tests/it/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use rtrack::cli::client;
use rtrack::config::Config;
use rtrack::probes::{probe_host, HostRoot, ProbeOptions};
use rtrack::tracker::model::{FlavorUsage, HostNames, InstanceRequest};
use rtrack::tracker::numa::constraints::ImageProps;
use rtrack::tracker::request::{alias_requests, numa_of};
use rtrack::tracker::{InstanceInfo, Tracker, TrackerSettings, TrackerState};
use rtrack_fixtures::synthetic::{SyntheticHost, SyntheticPf};
use serde_json::json;
use support::{uuid, Daemon};

const RTRACKD: &str = env!("CARGO_BIN_EXE_rtrackd");

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

fn big_host() -> SyntheticHost {
    let pfs = [
        ("0000:17:00.0", 1),
        ("0000:3b:00.0", 6),
        ("0000:86:00.0", 9),
        ("0000:af:00.0", 14),
    ]
    .iter()
    .map(|(a, n)| SyntheticPf::e810(a, 32, *n, Some("iavf")))
    .collect();
    SyntheticHost {
        description: "synthetic: 2 sockets x 128 cores x 2 threads, 16 NUMA nodes, 4 PFs x 32 VFs"
            .into(),
        sockets: 2,
        numa_nodes: 16,
        cores_per_socket: 128,
        threads_per_core: 2,
        memory_mb_per_node: 65536,
        hugepages_2m_per_node: 1024,
        pfs,
        plain: vec![],
    }
}

/// The first core of every node shared, the rest dedicated (node n: cores 16n..16n+16, threads
/// c and c + 256).
fn cpu_sets() -> (String, String) {
    let shared: Vec<String> = (0..16)
        .flat_map(|n| [16 * n, 16 * n + 256])
        .map(|c| c.to_string())
        .collect();
    (shared.join(","), "0-511".to_string())
}

fn config(shared: &str, dedicated_all: &str) -> String {
    format!(
        r#"
[resources]
cpu_shared_set = "{shared}"
cpu_dedicated_set = "{dedicated_all},^{}"
cpu_allocation_ratio = 4.0
reserved_host_memory_mb = 0

[[pci.device_spec]]
vendor_id = "8086"
product_id = "1889"

[[pci.alias]]
name = "vf"
vendor_id = "8086"
product_id = "1889"
device_type = "type-VF"
numa_policy = "required"

[[pci.alias]]
name = "vfp"
vendor_id = "8086"
product_id = "1889"
device_type = "type-VF"
numa_policy = "preferred"
"#,
        shared.replace(',', ",^")
    )
}

fn request(
    vcpus: i64,
    memory_mb: i64,
    specs: &[(&str, &str)],
    aliases: &rtrack::tracker::pci::AliasTable,
    uuid: &str,
) -> InstanceRequest {
    let mut flavor = FlavorUsage {
        id: vcpus * 1000 + memory_mb,
        flavorid: "f".into(),
        name: None,
        vcpus,
        memory_mb,
        root_gb: 0,
        ephemeral_gb: 0,
        swap_mb: 0,
        cpus: None,
        extra_resources: Default::default(),
        mem_encryption_model: None,
        extra_specs: specs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    };
    let numa = numa_of(&mut flavor, &ImageProps::default(), None, "flavor").expect("valid");
    let pci_requests = alias_requests(&flavor, aliases, uuid, "flavor").expect("aliases");
    InstanceRequest {
        flavor,
        is_bfv: true,
        pci_requests,
        numa,
    }
}

fn fit_bench() {
    let dir = rtrack_fixtures::real::scratch_dir();
    big_host().write(dir.path());
    let inv = probe_host(&HostRoot::under(dir.path()), &ProbeOptions::default()).expect("probe");
    let (shared, all) = cpu_sets();
    let f = std::path::Path::new("bench.toml");
    let cfg = Config::parse(&config(&shared, &all), f)
        .and_then(|c| c.validate(f))
        .expect("config");
    let aliases = cfg.pci.aliases.clone();
    let settings = TrackerSettings {
        policy: (&cfg).into(),
        names: HostNames {
            host: "h".into(),
            node: "h".into(),
        },
        node_uuid: "11111111-2222-3333-4444-555555555555".into(),
        node_created_at: time::OffsetDateTime::UNIX_EPOCH,
    };
    let mut t = Tracker::new(settings, inv.clone(), TrackerState::default());
    let _ = t.audit(inv, time::OffsetDateTime::UNIX_EPOCH);
    // 3/4 of the 480 dedicated CPUs pinned, by one 16-cell guest: the 4 cells with VFs (1, 6,
    // 9, 14) completely, the 12 others 20 of their 30.
    let pf_cells = [1u32, 6, 9, 14];
    let mut specs: Vec<(String, String)> = vec![
        ("hw:cpu_policy".into(), "dedicated".into()),
        ("hw:numa_nodes".into(), "16".into()),
    ];
    let mut next = 0;
    for cell in 0..16u32 {
        let k = if pf_cells.contains(&cell) { 30 } else { 20 };
        specs.push((
            format!("hw:numa_cpus.{cell}"),
            format!("{}-{}", next, next + k - 1),
        ));
        specs.push((format!("hw:numa_mem.{cell}"), "1024".into()));
        next += k;
    }
    let specs_ref: Vec<(&str, &str)> = specs
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let u = uuid(1);
    let filler = request(i64::from(next), 16 * 1024, &specs_ref, &aliases, &u);
    t.instance_claim(
        &InstanceInfo {
            uuid: u,
            ..Default::default()
        },
        &filler,
        1,
        false,
    )
    .expect("the filler guest fits");
    let pinned = next;
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, i64);
    let cases: [Case; 3] = [
        (
            "fits (8 cells x 2 pinned CPUs, 2 VFs, preferred affinity)",
            vec![
                ("hw:cpu_policy", "dedicated"),
                ("hw:numa_nodes", "8"),
                ("pci_passthrough:alias", "vfp:1,vfp:1"),
            ],
            16,
        ),
        (
            "PCI affinity never met (2 VFs required on the guest's cells; the VF cells are full)",
            vec![
                ("hw:cpu_policy", "dedicated"),
                ("hw:numa_nodes", "8"),
                ("pci_passthrough:alias", "vf:1,vf:1"),
            ],
            16,
        ),
        (
            "no cell fits (8 cells x 14 pinned CPUs)",
            vec![
                ("hw:cpu_policy", "dedicated"),
                ("hw:numa_nodes", "8"),
                ("pci_passthrough:alias", "vf:1,vf:1"),
            ],
            112,
        ),
    ];
    println!("NUMA fit on 16 cells, 512 CPUs, {pinned} of 480 dedicated CPUs pinned (dry runs, in-process):");
    let mut worst_all = Duration::ZERO;
    for (name, specs, vcpus) in cases {
        let u = uuid(9999);
        let r = request(vcpus, 8192, &specs, &aliases, &u);
        let info = InstanceInfo {
            uuid: u,
            ..Default::default()
        };
        let mut times = Vec::new();
        let mut ok = None;
        for _ in 0..200 {
            let s = Instant::now();
            let res = t.instance_claim(&info, &r, 1, true);
            times.push(s.elapsed());
            ok = Some(res.is_ok());
        }
        times.sort();
        let worst = *times.last().unwrap_or(&Duration::ZERO);
        worst_all = worst_all.max(worst);
        println!(
            "  {name}: {} ; median {}, worst {} (200 runs)",
            if ok == Some(true) { "fits" } else { "refused" },
            ms(times[times.len() / 2]),
            ms(worst)
        );
    }
    println!("  worst of all: {} (target: at most 10 ms)", ms(worst_all));
}

fn socket_claims(d: &Daemon, first: u64, n: u64, numa: bool) -> Vec<Duration> {
    let mut lat = Vec::with_capacity(n as usize);
    for i in 0..n {
        let u = uuid(first + i);
        let extra = if numa {
            json!({"hw:cpu_policy": "dedicated", "hw:numa_nodes": "2"})
        } else {
            json!({})
        };
        let body = json!({"request_spec": {
            "nova_object.name": "RequestSpec", "nova_object.namespace": "nova", "nova_object.version": "1.14",
            "nova_object.data": {"instance_uuid": u, "num_instances": 1, "is_bfv": true,
                "flavor": {"nova_object.name": "Flavor", "nova_object.namespace": "nova", "nova_object.version": "1.2",
                    "nova_object.data": {"id": if numa { 2 } else { 1 }, "flavorid": "f", "name": "f", "vcpus": if numa { 2 } else { 1 },
                        "memory_mb": 256, "root_gb": 0, "ephemeral_gb": 0, "swap": 0, "extra_specs": extra}}}}})
        .to_string();
        let s = Instant::now();
        let r = client::request(
            &d.socket,
            "POST",
            "/v1/claims",
            Some(body.as_bytes()),
            Duration::from_secs(30),
        )
        .expect("request");
        lat.push(s.elapsed());
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    }
    lat.sort();
    lat
}

fn end_to_end_bench() {
    let dir = rtrack_fixtures::real::scratch_dir();
    let root = dir.path().join("host");
    SyntheticHost::large().write(&root);
    let d_dir = dir.path().join("d");
    let config = format!(
        r#"
[host]
root = "{root}"
state_dir = "{dir}/state"
instances_path = "{dir}"
[resources]
cpu_shared_set = "0-63,128-191"
cpu_dedicated_set = "64-127,192-255"
[api]
socket = "{dir}/run/rtrack.sock"
"#,
        root = root.display(),
        dir = d_dir.display()
    );
    let d = Daemon::start_with(std::path::Path::new(RTRACKD), &d_dir, &config, &[]);
    println!("claims over the socket on the large host (256 CPUs, 8 nodes), one client, alternating batches:");
    let (mut plain, mut numa) = (Vec::new(), Vec::new());
    for round in 0..3u64 {
        plain.extend(socket_claims(&d, 10_000 + round * 100, 100, false));
        numa.extend(socket_claims(&d, 20_000 + round * 100, 20, true));
    }
    plain.sort();
    numa.sort();
    let p = |v: &[Duration], q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
    println!(
        "  plain 1-VCPU claim:            p50 {}, p99 {} ({} claims)",
        ms(p(&plain, 0.5)),
        ms(p(&plain, 0.99)),
        plain.len()
    );
    println!(
        "  dedicated 2-cell NUMA claim:   p50 {}, p99 {} ({} claims, 2 CPUs pinned each)",
        ms(p(&numa, 0.5)),
        ms(p(&numa, 0.99)),
        numa.len()
    );
    println!(
        "  ratio NUMA/plain p50: {:.2}",
        p(&numa, 0.5).as_secs_f64() / p(&plain, 0.5).as_secs_f64()
    );
}

fn main() {
    fit_bench();
    end_to_end_bench();
}
