//! Daemon benchmarks (`cargo bench --bench daemon [-- --base PATH] [--rounds N]
//! [--claims-only]`): the release `rtrackd` on the large synthetic host (256 CPUs, 8 NUMA nodes,
//! 1,024 tracked VFs), state on the build directory's filesystem (real fsyncs), driven over its
//! Unix socket.
//!
//! - claim latency over the socket (connect, POST /v1/claims, durable commit, answer), p50 /
//!   p99 / max, with 1 and with 32 concurrent clients, the two runs side by side;
//! - where a claim's time goes: CPU per claim in the runtime thread, the blocking pool, the
//!   store's writer and the clients, claims per store transaction (group commit), and the mean
//!   time a claim spent in the API (the daemon's own histogram) beside what the client saw;
//! - footprint after 500 claims holding 1,000 VFs: resident memory (VmRSS, VmHWM) and the CPU
//!   time used while idle between audits;
//! - a claim of 2 VFs against a claim without PCI, p50 and p99, at 1 and 8 clients, on the large
//!   host (1,024 VFs) and on the same host with 4 PFs of 1,024 VFs (4,096 VFs).
//!
//! `--base PATH` measures another `rtrackd` (an earlier build) in turn with this one, each on a
//! fresh state, `--rounds` times (3 by default with a base), and the summary puts the medians
//! side by side with their ratio, beside the goals and the figures before issue 25.
//!
//! Targets: idle RSS at most 16 MB, no CPU between audits, at least 12,000 claims/s at 32
//! clients with p99 no worse, 1 client p50 at most 0.3 ms (issues 5 and 25); a 2-VF claim at
//! most twice a plain one at p99, at 1 and 8 clients, with 1,024 and with 4,096 VFs (issue 12).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test or bench: a panic is its failure

// The benches use part of the tests' harness.
#[allow(dead_code)]
#[path = "../tests/it/support/mod.rs"]
mod support;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rtrack::api::metrics::CHANGE_STAGES;
use rtrack::cli::client;
use rtrack_fixtures::synthetic::SyntheticHost;
use support::{base_config, claim, uuid, Daemon};

const RTRACKD: &str = env!("CARGO_BIN_EXE_rtrackd");

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// `n` claims from `clients` threads; latency of each, and the wall time.
fn run_claims(
    d: &Daemon,
    clients: u64,
    per_client: u64,
    first: u64,
    vf_every: u64,
) -> (Vec<Duration>, Duration) {
    let lat = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|c| {
            let socket = d.socket.clone();
            let lat = lat.clone();
            std::thread::spawn(move || {
                let mut mine = Vec::with_capacity(per_client as usize);
                for i in 0..per_client {
                    let n = first + c * per_client + i;
                    let alias = (vf_every > 0 && n % vf_every == 0).then_some("vf:2");
                    let body = claim(&uuid(n), 1, 256, 1, alias).to_string();
                    let t = Instant::now();
                    let r = client::request(
                        &socket,
                        "POST",
                        "/v1/claims",
                        Some(body.as_bytes()),
                        Duration::from_secs(60),
                    )
                    .expect("claim");
                    mine.push(t.elapsed());
                    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
                }
                lat.lock().unwrap().extend(mine);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let wall = start.elapsed();
    let mut v = lat.lock().unwrap().clone();
    v.sort();
    (v, wall)
}

fn proc_status(pid: i32, key: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn cpu_ticks(pid: i32) -> u64 {
    stat_ticks(&format!("/proc/{pid}/stat")).1
}

/// The command name and the CPU ticks (utime + stime) of a `/proc/.../stat` file (a process's
/// or a thread's); empty and 0 when it cannot be read.
fn stat_ticks(path: &str) -> (String, u64) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    // The name may hold spaces and parentheses: it ends at the last ')'.
    let Some((head, rest)) = text.rsplit_once(')') else {
        return (String::new(), 0);
    };
    let comm = head.split_once('(').map(|(_, c)| c.to_string());
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after the name.
    let field = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    (comm.unwrap_or_default(), field(11) + field(12))
}

/// CPU ticks of the daemon's threads and of the whole machine, and the store's transactions,
/// at one moment: the difference of two says where the claims between them spent their time.
struct CpuSplit {
    /// The process (every thread, exited ones included).
    process: u64,
    /// The main thread: the runtime (HTTP, JSON, routing).
    runtime: u64,
    /// The store's writer thread (SQLite, fsync).
    writer: u64,
    /// This bench's process: the clients.
    clients: u64,
    /// The machine (/proc/stat): busy, stolen by the hypervisor, and all ticks.
    machine_busy: u64,
    machine_steal: u64,
    machine_all: u64,
    transactions: u64,
    /// Seconds the API spent in `POST /v1/claims` (from reading the request to the answer).
    server_seconds: f64,
    /// Each stage's seconds and count (`rtrack_change_stage_seconds`), in `CHANGE_STAGES` order.
    stages: [(f64, f64); 5],
}

impl CpuSplit {
    fn read(d: &Daemon) -> CpuSplit {
        let pid = d.pid();
        let writer = std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| stat_ticks(&format!("{}/stat", e.path().display())))
            .filter(|(comm, _)| comm == "rtrack-store")
            .map(|(_, t)| t)
            .sum();
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let cpu: Vec<u64> = stat
            .lines()
            .next()
            .unwrap_or("")
            .split_whitespace()
            .skip(1)
            .filter_map(|v| v.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal (guest time is within user).
        let field = |i: usize| cpu.get(i).copied().unwrap_or(0);
        let all: u64 = (0..8).map(field).sum();
        let r = client::request(&d.socket, "GET", "/metrics", None, Duration::from_secs(10));
        let body = r
            .map(|r| String::from_utf8_lossy(&r.body).into_owned())
            .unwrap_or_default();
        let transactions = body
            .lines()
            .find_map(|l| l.strip_prefix("rtrack_store_commit_seconds_count "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        let claims_metric = |name: &str| -> f64 {
            body.lines()
                .filter(|l| l.starts_with(name) && l.contains("/v1/claims") && l.contains("POST"))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        };
        let stage = |name: &str, what: &str| -> f64 {
            let prefix = format!("rtrack_change_stage_seconds_{what}{{stage=\"{name}\"}} ");
            body.lines()
                .find_map(|l| l.strip_prefix(prefix.as_str()))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0.0)
        };
        CpuSplit {
            stages: CHANGE_STAGES.map(|n| (stage(n, "sum"), stage(n, "count"))),
            server_seconds: claims_metric("rtrack_api_request_seconds_sum{"),
            process: cpu_ticks(pid),
            runtime: stat_ticks(&format!("/proc/{pid}/task/{pid}/stat")).1,
            writer,
            clients: stat_ticks("/proc/self/stat").1,
            machine_busy: all - field(3) - field(4) - field(7),
            machine_steal: field(7),
            machine_all: all,
            transactions,
        }
    }

    /// One line: microseconds of CPU per claim in each thread group since `before`.
    fn print_since(&self, before: &CpuSplit, label: &str, claims: usize) {
        // A tick is 10 ms (USER_HZ 100): per claim in microseconds.
        let us = |t: u64| t as f64 * 10_000.0 / claims.max(1) as f64;
        let runtime = self.runtime - before.runtime;
        let writer = self.writer - before.writer;
        let pool = (self.process - before.process).saturating_sub(runtime + writer);
        let commits = (self.transactions - before.transactions).max(1);
        let all = (self.machine_all - before.machine_all).max(1) as f64;
        let server_ms =
            (self.server_seconds - before.server_seconds) * 1000.0 / claims.max(1) as f64;
        println!(
            "{label:>12}: runtime thread {:.0} us, blocking pool {:.0} us, store writer {:.0} us, \
             clients {:.0} us; {:.2} claims per transaction; machine busy {:.0} % (any \
             process), stolen {:.0} %; mean time in the API {:.2} ms",
            us(runtime),
            us(pool),
            us(writer),
            us(self.clients - before.clients),
            claims as f64 / commits as f64,
            (self.machine_busy - before.machine_busy) as f64 * 100.0 / all,
            (self.machine_steal - before.machine_steal) as f64 * 100.0 / all,
            server_ms
        );
        // Mean time of each stage over the changes that passed it (the service's stages count
        // every change, the audits' too, which are few here).
        let means: Vec<String> = CHANGE_STAGES
            .iter()
            .zip(self.stages.iter().zip(before.stages.iter()))
            .map(|(name, ((sum, n), (sum0, n0)))| {
                let mean_us = (sum - sum0) * 1e6 / (n - n0).max(1.0);
                format!("{name} {mean_us:.0} us")
            })
            .collect();
        println!("{:>12}  mean of each stage: {}", "", means.join(", "));
    }
}

/// A 2-VF claim against a plain one on `host` (`vfs` tracked VFs), at 1 and at 8 clients,
/// alternating, on a fresh daemon.
fn pci_against_plain(host: SyntheticHost, vfs: usize) {
    let scratch = rtrack_fixtures::real::scratch_dir();
    let root = scratch.path().join("host");
    host.write(&root);
    let state = tempfile::Builder::new()
        .prefix("rtrack-bench-")
        .tempdir_in(Path::new(env!("CARGO_TARGET_TMPDIR")))
        .unwrap();
    let config = config_for(&root, state.path());
    let d = Daemon::start_with(Path::new(RTRACKD), state.path(), &config, &[]);
    run_claims(&d, 1, 20, 9_000_000, 0);
    let mut rows = Vec::new();
    let mut next = 10_000_000;
    for clients in [1u64, 8] {
        // 480 2-VF claims in all: 960 of the 1,024 VFs of the smaller host.
        let per = if clients == 1 { 240 } else { 30 };
        let (mut plain, mut pci) = (Vec::new(), Vec::new());
        for _ in 0..2 {
            let (p, _) = run_claims(&d, clients, per / 2, next, 0);
            next += 1_000_000;
            let (v, _) = run_claims(&d, clients, per / 2, next, 1);
            next += 1_000_000;
            plain.extend(p);
            pci.extend(v);
        }
        plain.sort();
        pci.sort();
        rows.push((clients, plain, pci));
    }
    println!();
    println!("2-VF claims against plain claims, {vfs} tracked VFs, alternating batches:");
    println!(
        "{:>8} {:>12} {:>12} {:>12} {:>12} {:>10} {:>10}",
        "clients", "plain p50", "plain p99", "2-VF p50", "2-VF p99", "p50 ratio", "p99 ratio"
    );
    for (c, plain, pci) in rows {
        println!(
            "{:>8} {:>12} {:>12} {:>12} {:>12} {:>10.2} {:>10.2}",
            c,
            ms(percentile(&plain, 0.5)),
            ms(percentile(&plain, 0.99)),
            ms(percentile(&pci, 0.5)),
            ms(percentile(&pci, 0.99)),
            percentile(&pci, 0.5).as_secs_f64() / percentile(&plain, 0.5).as_secs_f64(),
            percentile(&pci, 0.99).as_secs_f64() / percentile(&plain, 0.99).as_secs_f64()
        );
    }
}

/// What one binary measured: claims at 1 and at 32 clients, and the idle footprint after a
/// restart with 500 claims holding 1,000 VFs.
#[derive(Clone, Copy, Default)]
struct Figures {
    one_p50_ms: f64,
    one_p99_ms: f64,
    many_p50_ms: f64,
    many_p99_ms: f64,
    many_per_s: f64,
    rss_kb: u64,
    anon_kb: u64,
    file_kb: u64,
    idle_ticks: u64,
}

fn config_for(root: &Path, state: &Path) -> String {
    base_config(root, state)
        .replace(
            "cpu_allocation_ratio = 4.0",
            "cpu_allocation_ratio = 1000.0",
        )
        .replace(
            "ram_allocation_ratio = 1.0",
            "ram_allocation_ratio = 100.0\ndisk_allocation_ratio = 1000.0",
        )
        + "[audit]\ninterval_s = 3600\n"
}

/// Claims at 1 and 32 clients, then the footprint, for `rtrackd` on a fresh state directory.
fn daemon_figures(rtrackd: &Path, label: &str) -> Figures {
    let scratch = rtrack_fixtures::real::scratch_dir();
    let root = scratch.path().join("host");
    SyntheticHost::large().write(&root);
    // The state on a real filesystem: fsync costs what it costs on the host.
    let state = tempfile::Builder::new()
        .prefix("rtrack-bench-")
        .tempdir_in(Path::new(env!("CARGO_TARGET_TMPDIR")))
        .unwrap();
    let config = config_for(&root, state.path());
    let mut d = Daemon::start_with(rtrackd, state.path(), &config, &[]);
    let pid = d.pid();
    println!();
    println!(
        "{label}: {} on the large synthetic host, state in {}",
        rtrackd.display(),
        state.path().display()
    );
    println!("rss after start: {} kB", proc_status(pid, "VmRSS:"));

    // Warm up, then 1 client and 32 clients, side by side.
    run_claims(&d, 1, 50, 1_000_000, 0);
    let before = CpuSplit::read(&d);
    let (one, wall1) = run_claims(&d, 1, 2000, 2_000_000, 0);
    let middle = CpuSplit::read(&d);
    let (many, wall32) = run_claims(&d, 32, 125, 3_000_000, 0);
    let after = CpuSplit::read(&d);
    print_claims(&one, wall1, &many, wall32);
    println!(
        "where a claim's time goes (CPU per claim by thread, from /proc; commits from /metrics):"
    );
    middle.print_since(&before, "1 client", one.len());
    after.print_since(&middle, "32 clients", many.len());
    let mut f = Figures {
        one_p50_ms: ms_f(percentile(&one, 0.5)),
        one_p99_ms: ms_f(percentile(&one, 0.99)),
        many_p50_ms: ms_f(percentile(&many, 0.5)),
        many_p99_ms: ms_f(percentile(&many, 0.99)),
        many_per_s: many.len() as f64 / wall32.as_secs_f64(),
        ..Figures::default()
    };
    footprint(&mut d, &mut f);
    f
}

fn ms_f(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn print_claims(one: &[Duration], wall1: Duration, many: &[Duration], wall32: Duration) {
    println!(
        "claim latency over the socket (no PCI), {} and {} claims:",
        one.len(),
        many.len()
    );
    println!(
        "{:>10} {:>10} {:>10} {:>10} {:>12}",
        "clients", "p50", "p99", "max", "claims/s"
    );
    for (c, v, wall) in [(1, one, wall1), (32, many, wall32)] {
        println!(
            "{:>10} {:>10} {:>10} {:>10} {:>12.0}",
            c,
            ms(percentile(v, 0.5)),
            ms(percentile(v, 0.99)),
            ms(*v.last().unwrap()),
            v.len() as f64 / wall.as_secs_f64()
        );
    }
    println!(
        "ratios 32/1: p50 {:.2}, p99 {:.2}, throughput {:.2}",
        percentile(many, 0.5).as_secs_f64() / percentile(one, 0.5).as_secs_f64(),
        percentile(many, 0.99).as_secs_f64() / percentile(one, 0.99).as_secs_f64(),
        (many.len() as f64 / wall32.as_secs_f64()) / (one.len() as f64 / wall1.as_secs_f64())
    );
}

/// Drops the claims made so far, makes 500 holding 2 VFs each (1,000 of 1,024), restarts the
/// daemon and measures it idle.
fn footprint(d: &mut Daemon, f: &mut Figures) {
    let (_, claims) = d.call("GET", "/v1/claims", None);
    for c in claims.as_array().unwrap() {
        let u = c["instance_uuid"].as_str().unwrap();
        assert_eq!(d.call("DELETE", &format!("/v1/claims/{u}"), None).0, 200);
    }
    let (vf, _) = run_claims(d, 8, 63, 4_000_000, 1);
    let (_, u) = d.call("GET", "/v1/usage", None);
    let free: u64 = u["pci_pools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["free"].as_u64().unwrap())
        .sum();
    println!(
        "{} claims with 2 VFs each: p50 {}, p99 {}; VFs free {} of 1024",
        vf.len(),
        ms(percentile(&vf, 0.5)),
        ms(percentile(&vf, 0.99)),
        free
    );
    // Restart: the idle footprint of a daemon that loaded this state, not of one that served
    // 5,000 requests (allocator high-water marks).
    d.signal(nix::sys::signal::Signal::SIGTERM);
    d.wait_exit(Duration::from_secs(10)).expect("stopped");
    d.spawn();
    d.wait_ready();
    let pid = d.pid();
    std::thread::sleep(Duration::from_secs(2));
    let t0 = cpu_ticks(pid);
    let idle = Duration::from_secs(10);
    std::thread::sleep(idle);
    let t1 = cpu_ticks(pid);
    let (_, m) = d.call("GET", "/v1/usage", None);
    f.rss_kb = proc_status(pid, "VmRSS:");
    f.anon_kb = proc_status(pid, "RssAnon:");
    f.file_kb = proc_status(pid, "RssFile:");
    f.idle_ticks = t1 - t0;
    println!(
        "after restart with {} instances and {} VFs in use:",
        m["instances"],
        1024 - free
    );
    println!(
        "  idle RSS {} kB (anonymous {} kB, file-backed {} kB: the binary's pages; peak {} kB), threads {}",
        f.rss_kb,
        f.anon_kb,
        f.file_kb,
        proc_status(pid, "VmHWM:"),
        proc_status(pid, "Threads:")
    );
    println!(
        "  CPU used in {} s idle between audits: {} ticks of 10 ms",
        idle.as_secs(),
        f.idle_ticks
    );
    let r = client::request(&d.socket, "GET", "/metrics", None, Duration::from_secs(10)).unwrap();
    let body = String::from_utf8_lossy(&r.body).into_owned();
    let audit = body
        .lines()
        .find_map(|l| l.strip_prefix("rtrack_audit_duration_seconds_sum "))
        .map(|v| v.trim().to_string())
        .unwrap_or_default();
    println!("  startup audit {audit} s (rtrack_audit_duration_seconds_sum)");
    d.signal(nix::sys::signal::Signal::SIGTERM);
    d.wait_exit(Duration::from_secs(10));
}

/// The median of each figure over the rounds.
fn median(rounds: &[Figures]) -> Figures {
    let mid = |get: fn(&Figures) -> f64| {
        let mut v: Vec<f64> = rounds.iter().map(get).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Figures {
        one_p50_ms: mid(|f| f.one_p50_ms),
        one_p99_ms: mid(|f| f.one_p99_ms),
        many_p50_ms: mid(|f| f.many_p50_ms),
        many_p99_ms: mid(|f| f.many_p99_ms),
        many_per_s: mid(|f| f.many_per_s),
        rss_kb: mid(|f| f.rss_kb as f64) as u64,
        anon_kb: mid(|f| f.anon_kb as f64) as u64,
        file_kb: mid(|f| f.file_kb as f64) as u64,
        idle_ticks: mid(|f| f.idle_ticks as f64) as u64,
    }
}

/// Each figure beside its goal, the figure before issue 25 (the issue's own, measured on
/// another machine: compare the same run's columns), and (given `--base`) the other binary's
/// figure from the same run, with the ratio.
fn print_summary(rounds: usize, this: &Figures, base: Option<&Figures>) {
    println!();
    println!("summary (median of {rounds} round(s), each binary on a fresh state, in turn):");
    let cell = |v: Option<f64>, prec: usize| v.map_or("-".to_string(), |v| format!("{v:.prec$}"));
    println!(
        "{:<30} {:>10} {:>12} {:>10} {:>10} {:>8}",
        "figure", "goal", "before #25", "this", "--base", "ratio"
    );
    // (figure, how to read it, decimals, goal, before issue 25)
    type Row = (
        &'static str,
        fn(&Figures) -> f64,
        usize,
        Option<f64>,
        Option<f64>,
    );
    let rows: [Row; 9] = [
        (
            "1 client p50 (ms)",
            |f| f.one_p50_ms,
            3,
            Some(0.3),
            Some(0.35),
        ),
        ("1 client p99 (ms)", |f| f.one_p99_ms, 3, None, None),
        ("32 clients p50 (ms)", |f| f.many_p50_ms, 3, None, None),
        ("32 clients p99 (ms)", |f| f.many_p99_ms, 3, None, None),
        (
            "32 clients claims/s",
            |f| f.many_per_s,
            0,
            Some(12_000.0),
            Some(9_000.0),
        ),
        (
            "idle RSS (kB)",
            |f| f.rss_kb as f64,
            0,
            Some(16_384.0),
            Some(23_859.0),
        ),
        ("  anonymous (kB)", |f| f.anon_kb as f64, 0, None, None),
        (
            "  the binary's pages (kB)",
            |f| f.file_kb as f64,
            0,
            None,
            None,
        ),
        (
            "idle CPU ticks in 10 s",
            |f| f.idle_ticks as f64,
            0,
            Some(0.0),
            None,
        ),
    ];
    for (name, get, prec, goal, before) in rows {
        let (b, ratio) = match base.map(get) {
            Some(b) if b != 0.0 => (Some(b), format!("{:.2}", get(this) / b)),
            b => (b, "-".to_string()),
        };
        println!(
            "{:<30} {:>10} {:>12} {:>10} {:>10} {:>8}",
            name,
            cell(goal, prec),
            cell(before, prec),
            cell(Some(get(this)), prec),
            cell(b, prec),
            ratio
        );
    }
}

/// `-- NAME VALUE` from the bench's arguments.
fn arg_value(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("daemon: bench");
        return;
    }
    // `-- --base PATH`: another rtrackd (an earlier build) measured in turn with this one.
    let base = arg_value("--base").map(std::path::PathBuf::from);
    let rounds: usize = arg_value("--rounds")
        .map(|r| r.parse().expect("--rounds N"))
        .unwrap_or(if base.is_some() { 3 } else { 1 });
    if !std::env::args().any(|a| a == "--claims-only") {
        pci_against_plain(SyntheticHost::large(), 1024);
        let mut big = SyntheticHost::large();
        for pf in &mut big.pfs {
            pf.total_vfs = 1024;
            pf.num_vfs = 1024;
        }
        pci_against_plain(big, 4096);
    }
    let (mut this, mut other) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        this.push(daemon_figures(
            Path::new(RTRACKD),
            &format!("round {round}, this build"),
        ));
        if let Some(b) = &base {
            other.push(daemon_figures(b, &format!("round {round}, --base")));
        }
    }
    let base_median = (!other.is_empty()).then(|| median(&other));
    print_summary(rounds, &median(&this), base_median.as_ref());
}
