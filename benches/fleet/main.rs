//! The fleet benchmark (`cargo bench --bench fleet [-- --hosts N] [--db mariadb|sqlite]
//! [--short] [--cold-start-only] [--timeout S]`): N of rtrack's reporters in one process, each
//! for its own synthetic host (four kinds: a small SR-IOV host with three PCI children, a
//! two-socket host without PCI, a vGPU host with mdev parents and SEV, the large host with four
//! PFs of VFs; memory varied per host), against one real Placement on 127.0.0.1
//! (`scripts/placement/start.sh`): by default on MariaDB with 4 gunicorn workers, as production
//! runs it (`--db mariadb`); `--db sqlite` is the earlier setup, one worker on SQLite. Request
//! figures are read from Placement's access log (requests, status, 409 conflicts, server time);
//! Placement's CPU time from /proc (the gunicorn master and workers, and mariadbd) before and
//! after each phase. `--short` runs the cold start, the steady state and nova-compute's pattern
//! only (for 5,000 hosts); `--cold-start-only` the cold start alone; `--timeout S` sets the
//! reporters' `[placement] timeout_s` (30 by default). Failed reports are counted by kind.
//!
//! Phases: cold start (each host's first report after rtrackd's start jitter, retried with its
//! backoff); the scheduler's allocations (two instances per host, as Nova's scheduler writes
//! them; setup, not rtrack's); steady state (a cycle between refreshes, then a refresh cycle,
//! twice); 5 % of the hosts changing at once; Placement restarted while every host has a
//! report due (backoff with jitter); then nova-compute's own steady-state pattern replayed for
//! the same hosts on the same Placement (`nova.rs`). Requests per host per hour are the measured
//! requests per cycle at the daemons' default intervals (a report every 60 s, a refresh every
//! 300 s, for both).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test or bench: a panic is its failure

mod log;
mod nova;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rtrack::config::{Config, ValidConfig};
use rtrack::probes::{self, HostInventory, HostRoot};
use rtrack::tracker::host_view::HostView;
use rtrack::upstream::{DesiredState, HttpPlacement, Reporter, ReporterOptions};
use rtrack_fixtures::synthetic::SyntheticHost;
use serde_json::json;
use uuid::Uuid;

use log::{AccessLog, Stats};

/// One host of the fleet.
struct Host {
    name: String,
    node: Uuid,
    template: usize,
    mem_kb: u64,
    reporter: Reporter<HttpPlacement>,
    desired: DesiredState,
}

struct Template {
    kind: &'static str,
    inv: HostInventory,
    cfg: ValidConfig,
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn templates(url: &str, scratch: &Path, timeout_s: u64) -> Vec<Template> {
    let probe = |dir: &Path| {
        probes::probe_host(&HostRoot::under(dir), &probes::ProbeOptions::default()).unwrap()
    };
    let cfg = |extra: &str| {
        let text = format!(
            "[placement]\nendpoint = \"{url}\"\nrefresh_interval_s = 3600\ntimeout_s = {timeout_s}\n{extra}"
        );
        let f = Path::new("fleet.toml");
        Config::parse(&text, f)
            .unwrap()
            .validate_in(f, &rtrack::config::placement_sources::Environment::empty())
            .unwrap()
    };
    let pci = "[pci]\nreport_in_placement = true\n[[pci.device_spec]]\nvendor_id = \"8086\"\n[[pci.device_spec]]\nvendor_id = \"144d\"\nresource_class = \"nvme\"\n";
    let mut out = Vec::new();
    let small = scratch.join("small");
    SyntheticHost::small().write(&small);
    out.push(Template {
        kind: "small SR-IOV (3 PCI children)",
        inv: probe(&small),
        cfg: cfg(pci),
    });
    let plain = scratch.join("plain");
    let mut h = SyntheticHost::small();
    h.sockets = 2;
    h.numa_nodes = 2;
    h.cores_per_socket = 8;
    h.pfs.clear();
    h.plain.clear();
    h.write(&plain);
    out.push(Template {
        kind: "two sockets, no PCI",
        inv: probe(&plain),
        cfg: cfg(""),
    });
    let vgpu = scratch.join("vgpu");
    rtrack_fixtures::vgpu::VgpuHost::mdev_gpu().write(&vgpu);
    out.push(Template {
        kind: "vGPU (2 GPU children, SEV children)",
        inv: probe(&vgpu),
        cfg: cfg("[devices]\nenabled_mdev_types = [\"nvidia-35\"]\n"),
    });
    let large = scratch.join("large");
    SyntheticHost::large().write(&large);
    out.push(Template {
        kind: "large (256 CPUs, 4 PF children)",
        inv: probe(&large),
        cfg: cfg(pci),
    });
    out
}

fn desired(t: &Template, name: &str, node: Uuid, mem_kb: u64) -> DesiredState {
    let mut inv = t.inv.clone();
    inv.memory.total_mb = mem_kb / 1024;
    DesiredState::build(
        &HostView::of_config(inv, &t.cfg),
        &t.cfg,
        node,
        name,
        false,
        &[],
    )
    .unwrap()
}

/// Reports until a report succeeds (the reporter's own backoff between tries); the time it took.
/// Failed reports since the last [`take_failures`], by kind (a transport error's reason, a
/// status, or the error's kind): what a phase's retries were for.
static FAILURES: std::sync::Mutex<std::collections::BTreeMap<String, u64>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

fn failure_kind(e: &rtrack::upstream::UpstreamError) -> String {
    use rtrack::upstream::UpstreamError as E;
    match e {
        E::Transport { reason, .. } => format!("no answer ({reason})"),
        E::Placement { status, .. } => format!("answered {status}"),
        other => {
            let text = other.to_string();
            text.chars().take(60).collect()
        }
    }
}

/// The failures counted since the last call, as "N kind; ..." (empty when none).
fn take_failures() -> String {
    let taken = std::mem::take(&mut *FAILURES.lock().unwrap());
    let parts: Vec<String> = taken.iter().map(|(k, n)| format!("{n} {k}")).collect();
    parts.join("; ")
}

fn none_if_empty(s: String) -> String {
    if s.is_empty() {
        "none".into()
    } else {
        s
    }
}

async fn converge(h: &mut Host) -> Duration {
    let t0 = Instant::now();
    loop {
        match h.reporter.report(&h.desired).await {
            Ok(o) if o.backing_off.is_none() => return t0.elapsed(),
            Ok(o) => tokio::time::sleep(o.backing_off.unwrap_or_default()).await,
            Err(e) => {
                *FAILURES
                    .lock()
                    .unwrap()
                    .entry(failure_kind(&e))
                    .or_default() += 1;
                tokio::time::sleep(
                    h.reporter
                        .backoff_remaining()
                        .max(Duration::from_millis(10)),
                )
                .await
            }
        }
    }
}

/// Runs `f` on every host at once (each on its own task); the hosts come back with the results.
async fn all<T, F, Fut>(hosts: Vec<Host>, f: F) -> (Vec<Host>, Vec<T>)
where
    T: Send + 'static,
    F: Fn(Host) -> Fut,
    Fut: std::future::Future<Output = (Host, T)> + Send + 'static,
{
    let tasks: Vec<_> = hosts.into_iter().map(|h| tokio::spawn(f(h))).collect();
    let mut hosts = Vec::new();
    let mut out = Vec::new();
    for t in tasks {
        let (h, v) = t.await.unwrap();
        hosts.push(h);
        out.push(v);
    }
    (hosts, out)
}

struct Row {
    phase: String,
    stats: Stats,
    /// Placement's CPU seconds in the phase (None: the server was restarted in it).
    cpu_s: Option<f64>,
    hosts: usize,
    wall: Duration,
    note: String,
}

/// The rows so far; each printed as it comes (a long run shows its progress).
struct Rows(Vec<Row>);

impl Rows {
    fn push(&mut self, r: Row) {
        eprint!("{}", r.line());
        self.0.push(r);
    }
}

impl Row {
    fn line(&self) -> String {
        format!(
            "| {} | {} | {:.2} | {} | {} | {:.1} ms | {:.1} ms | {} | {} | {:.1} s |\n",
            self.phase,
            self.stats.requests,
            self.stats.requests as f64 / self.hosts as f64,
            self.stats.conflicts,
            self.stats.server_errors,
            self.stats.p50_ms,
            self.stats.p99_ms,
            self.stats.peak_per_second,
            self.cpu_s
                .map_or("n/a (restarted)".to_string(), |c| format!("{c:.1} s")),
            self.wall.as_secs_f64()
        )
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args
        .iter()
        .position(|a| a == "--hosts")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let db = args
        .iter()
        .position(|a| a == "--db")
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| "mariadb".to_string());
    assert!(
        db == "mariadb" || db == "sqlite",
        "--db takes mariadb or sqlite, not {db}"
    );
    let short = args.iter().any(|a| a == "--short");
    let cold_only = args.iter().any(|a| a == "--cold-start-only");
    // `[placement] timeout_s` of every reporter (30 unless `--timeout S`).
    let timeout_s: u64 = args
        .iter()
        .position(|a| a == "--timeout")
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("--timeout takes seconds"))
        .unwrap_or(30);
    let started = Instant::now();
    let dir = repo().join(format!("target/fleet-{db}"));
    let pdir = dir.join("placement");
    let scripts = repo().join("scripts/placement");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let pid = std::process::id().to_string();
    let url = run(Command::new(scripts.join("start.sh"))
        .args(["--fresh", "--owner-pid", &pid, "--db", &db])
        .arg(&pdir)
        .arg("auto"));
    let port = url.rsplit(':').next().unwrap().to_string();
    let access = AccessLog::new(pdir.join("logs/access.log"));
    let cpu = || log::placement_cpu_s(&pdir);
    let scratch = tempfile::tempdir().unwrap();
    let templates = Arc::new(templates(&url, scratch.path(), timeout_s));
    rtrack::upstream::install_crypto_provider();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut rows = Rows(Vec::new());
    let opts = ReporterOptions::default();

    let mut hosts: Vec<Host> = (0..n)
        .map(|i| {
            let template = i % templates.len();
            let t = &templates[template];
            let name = format!("fleet-{i:05}");
            let node = Uuid::new_v5(&Uuid::NAMESPACE_OID, name.as_bytes());
            let base = t.inv.memory.total_mb * 1024;
            let mem_kb = base + (i as u64 % 16) * (1 << 20);
            let settings = t.cfg.placement_settings.clone().unwrap();
            Host {
                desired: desired(t, &name, node, mem_kb),
                name,
                node,
                template,
                mem_kb,
                reporter: Reporter::new(
                    HttpPlacement::new(&settings).unwrap(),
                    &settings,
                    opts.clone(),
                ),
            }
        })
        .collect();
    let kinds: Vec<String> = templates
        .iter()
        .map(|t| {
            let d = desired(t, "x", Uuid::nil(), 1 << 24);
            format!("{} ({} providers)", t.kind, d.providers.len())
        })
        .collect();

    // ---- cold start: each host's first report after rtrackd's start jitter
    let mark = access.mark();
    let cpu0 = cpu();
    let t0 = Instant::now();
    let interval = Duration::from_secs(60);
    // Progress on stderr every 30 s: a large fleet's cold start takes minutes.
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let progress = {
        let done = done.clone();
        rt.spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(30)).await;
                let failures = FAILURES.lock().unwrap().clone();
                eprintln!(
                    "cold start, {:.0} s: {} of {n} hosts in step; failed reports so far {failures:?}",
                    t0.elapsed().as_secs_f64(),
                    done.load(std::sync::atomic::Ordering::Relaxed),
                );
            }
        })
    };
    let (h, times) = rt.block_on(all(hosts, move |mut h| {
        let done = done.clone();
        async move {
            tokio::time::sleep(rtrack::upstream::backoff::first_report_delay(interval)).await;
            let t = converge(&mut h).await;
            done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            (h, t)
        }
    }));
    progress.abort();
    hosts = h;
    let wall = t0.elapsed();
    let slowest = times.iter().max().copied().unwrap_or_default();
    rows.push(Row {
        phase: "cold start (first registration, start jitter 0-6 s)".into(),
        stats: access.since(mark),
        hosts: n,
        cpu_s: Some(cpu() - cpu0),
        wall,
        note: format!(
            "fleet converged {:.1} s after the first start; slowest host {:.1} s from its start; failed reports (each retried after its backoff, with a re-read): {}",
            wall.as_secs_f64(),
            slowest.as_secs_f64(),
            none_if_empty(take_failures())
        ),
    });

    if cold_only {
        let mut s = format!(
            "Fleet of {n} hosts, cold start only, Placement on {db}, reporters' timeout_s = {timeout_s}\n\n| phase | requests | per host | 409 | 5xx | server p50 | server p99 | busiest second | Placement CPU | wall |\n|---|---|---|---|---|---|---|---|---|---|\n"
        );
        for r in &rows.0 {
            s.push_str(&r.line());
            s.push_str(&format!("\n- {}\n", r.note));
        }
        run(Command::new(scripts.join("stop.sh")).arg(&pdir));
        println!("{s}");
        return;
    }

    // ---- the scheduler's allocations: two instances per host (setup)
    let mark = access.mark();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    rt.block_on(async {
        let sem = Arc::new(tokio::sync::Semaphore::new(4));
        let mut tasks = Vec::new();
        for h in &hosts {
            for k in 0..2u8 {
                let (http, url, sem) = (http.clone(), url.clone(), sem.clone());
                let consumer = Uuid::new_v5(&h.node, &[k]);
                let node = h.node;
                tasks.push(tokio::spawn(async move {
                    let _p = sem.acquire().await.unwrap();
                    let r = http
                        .put(format!("{url}/allocations/{consumer}"))
                        .header("x-auth-token", "admin")
                        .header("openstack-api-version", "placement 1.39")
                        .json(&json!({"allocations": {node.to_string(): {"resources": {"VCPU": 1, "MEMORY_MB": 512}}},
                            "project_id": "p", "user_id": "u", "consumer_generation": null, "consumer_type": "INSTANCE"}))
                        .send()
                        .await
                        .unwrap();
                    assert!(r.status().is_success(), "{}", r.status());
                }));
            }
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    let setup = access.since(mark);
    println!(
        "setup: {} allocations written (as the scheduler would)",
        setup.requests
    );

    // ---- steady state: a cycle between refreshes, then a refresh cycle; twice
    let mut per_cycle = (0.0, 0.0);
    for round in 1..=2 {
        let mark = access.mark();
        let cpu0 = cpu();
        let t0 = Instant::now();
        let (h, _) = rt.block_on(all(hosts, |mut h| async move {
            let r = h
                .reporter
                .report(&h.desired)
                .await
                .map(|o| o.requests.total());
            (h, r.is_ok())
        }));
        hosts = h;
        let plain = access.since(mark);
        rows.push(Row {
            phase: format!("steady, cycle between refreshes (round {round})"),
            hosts: n,
            cpu_s: Some(cpu() - cpu0),
            wall: t0.elapsed(),
            note: String::new(),
            stats: plain.clone(),
        });
        let mark = access.mark();
        let cpu0 = cpu();
        let t0 = Instant::now();
        let (h, _) = rt.block_on(all(hosts, |mut h| async move {
            h.reporter.expire();
            let ok = h.reporter.report(&h.desired).await.is_ok();
            (h, ok)
        }));
        hosts = h;
        let refresh = access.since(mark);
        rows.push(Row {
            phase: format!("steady, refresh cycle (round {round})"),
            hosts: n,
            cpu_s: Some(cpu() - cpu0),
            wall: t0.elapsed(),
            note: if round == 1 {
                "the compute nodes' generations moved (the allocations above): those are read again"
                    .into()
            } else {
                "nothing changed since the last refresh".into()
            },
            stats: refresh.clone(),
        });
        if round == 2 {
            per_cycle = (
                plain.requests as f64 / n as f64,
                refresh.requests as f64 / n as f64,
            );
        }
    }
    // Every 12th refresh reads everything again (the reporter's FULL_READ_EVERY).
    let mark = access.mark();
    let cpu0 = cpu();
    let t0 = Instant::now();
    let (h, _) = rt.block_on(all(hosts, |mut h| async move {
        h.reporter.invalidate();
        let ok = h.reporter.report(&h.desired).await.is_ok();
        (h, ok)
    }));
    hosts = h;
    let full = access.since(mark);
    rows.push(Row {
        phase: "steady, refresh cycle reading everything (every 12th)".into(),
        hosts: n,
        cpu_s: Some(cpu() - cpu0),
        wall: t0.elapsed(),
        note: String::new(),
        stats: full.clone(),
    });
    let full_per_host = full.requests as f64 / n as f64;
    // Refresh every 300 s, a report every 60 s: 12 refresh cycles (one of them reading
    // everything) and 48 others an hour.
    let rtrack_hour = 48.0 * per_cycle.0 + 11.0 * per_cycle.1 + full_per_host;

    if !short {
        // ---- 5 % of the hosts change at once (memory)
        let changed = n.div_ceil(20);
        for h in hosts.iter_mut().take(changed) {
            h.mem_kb -= 1 << 20;
            h.desired = desired(&templates[h.template], &h.name, h.node, h.mem_kb);
        }
        let mark = access.mark();
        let cpu0 = cpu();
        let t0 = Instant::now();
        let (h, times) = rt.block_on(all(hosts, |mut h| async move {
            let t = converge(&mut h).await;
            (h, t)
        }));
        hosts = h;
        let slowest = times.iter().max().copied().unwrap_or_default();
        rows.push(Row {
            phase: format!("{changed} hosts (5 %) change their memory at once"),
            hosts: n,
            cpu_s: Some(cpu() - cpu0),
            wall: t0.elapsed(),
            note: format!(
                "last host in step after {:.1} s; failed reports: {}",
                slowest.as_secs_f64(),
                none_if_empty(take_failures())
            ),
            stats: access.since(mark),
        });

        // ---- Placement restarted while every host has a report due
        for h in hosts.iter_mut() {
            h.reporter.expire();
        }
        run(Command::new(scripts.join("stop.sh")).arg(&pdir));
        let mark = access.mark();
        let down = Instant::now();
        let restart = {
            let (start, pdir, port, pid, db) = (
                scripts.join("start.sh"),
                pdir.clone(),
                port.clone(),
                pid.clone(),
                db.clone(),
            );
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_secs(10));
                run(Command::new(start)
                    .args(["--owner-pid", &pid, "--db", &db])
                    .arg(&pdir)
                    .arg(&port));
                Instant::now()
            })
        };
        let (h, times) = rt.block_on(all(hosts, |mut h| async move {
            let t = converge(&mut h).await;
            (h, t)
        }));
        hosts = h;
        let back = restart.join().unwrap();
        let last = down + times.iter().max().copied().unwrap_or_default();
        let stats = access.since(mark);
        rows.push(Row {
        phase: "Placement down 10 s, then back (same database), every host due".into(),
        hosts: n,
        cpu_s: None,
        wall: last.saturating_duration_since(back),
        note: format!(
            "wall = from Placement answering again to the last host in step; backoff 1 s, 2 s, 4 s... +-20 %; busiest second {} requests; failed reports: {}",
            stats.peak_per_second,
            none_if_empty(take_failures())
        ),
        stats,
    });
    }

    // ---- nova-compute's pattern for the same hosts
    let trees: Vec<nova::NovaHost> = hosts
        .iter()
        .map(|h| nova::NovaHost {
            node: h.node,
            providers: h
                .desired
                .providers
                .iter()
                .filter(|p| p.parent.is_some() || p.uuid == h.node)
                .map(|p| p.uuid)
                .collect(),
        })
        .collect();
    let (nova_plain, nova_refresh) = {
        let mark = access.mark();
        let cpu0 = cpu();
        let t0 = Instant::now();
        rt.block_on(nova::steady_cycle(&url, &trees, false));
        let plain = access.since(mark);
        rows.push(Row {
            phase: "nova-compute pattern: cycle between refreshes".into(),
            hosts: n,
            cpu_s: Some(cpu() - cpu0),
            wall: t0.elapsed(),
            note: String::new(),
            stats: plain.clone(),
        });
        let mark = access.mark();
        let cpu0 = cpu();
        let t0 = Instant::now();
        rt.block_on(nova::steady_cycle(&url, &trees, true));
        let refresh = access.since(mark);
        rows.push(Row {
            phase: "nova-compute pattern: refresh cycle".into(),
            hosts: n,
            cpu_s: Some(cpu() - cpu0),
            wall: t0.elapsed(),
            note: String::new(),
            stats: refresh.clone(),
        });
        (
            plain.requests as f64 / n as f64,
            refresh.requests as f64 / n as f64,
        )
    };
    let nova_hour = 48.0 * nova_plain + 12.0 * nova_refresh;

    run(Command::new(scripts.join("stop.sh")).arg(&pdir));
    let report = render(
        n,
        &db,
        &kinds,
        &rows.0,
        per_cycle,
        rtrack_hour,
        (nova_plain, nova_refresh),
        nova_hour,
        started.elapsed(),
    );
    print!("{report}");
    let out = repo().join("target/fleet-report.md");
    std::fs::write(&out, &report).unwrap();
    println!("written to {}", out.display());
}

#[allow(clippy::too_many_arguments)]
fn render(
    n: usize,
    db: &str,
    kinds: &[String],
    rows: &[Row],
    rtrack: (f64, f64),
    rtrack_hour: f64,
    nova: (f64, f64),
    nova_hour: f64,
    took: Duration,
) -> String {
    let mut s = format!(
        "Fleet of {n} hosts ({}) against one Placement 16.0.0 ({}) on 127.0.0.1; {:.0} s in all.\n\n",
        kinds.join(", "),
        if db == "mariadb" { "4 gunicorn workers, MariaDB" } else { "1 gunicorn worker, SQLite" },
        took.as_secs_f64()
    );
    s.push_str("| phase | requests | per host | 409 | 5xx | server p50 | server p99 | busiest second | Placement CPU | wall |\n|---|---|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        s.push_str(&r.line());
    }
    for r in rows.iter().filter(|r| !r.note.is_empty()) {
        s.push_str(&format!("\n- {}: {}", r.phase, r.note));
    }
    s.push_str(&format!(
        "\n\nSteady state, requests per host per hour (a report every 60 s, a refresh every 300 s; rtrack reads everything at one refresh in 12):\n\n| | between refreshes | refresh | per hour |\n|---|---|---|---|\n| rtrack | {:.2} | {:.2} | {:.0} |\n| nova-compute's pattern | {:.2} | {:.2} | {:.0} |\n",
        rtrack.0, rtrack.1, rtrack_hour, nova.0, nova.1, nova_hour
    ));
    s.push_str(&summary(n, rows, rtrack_hour, nova_hour));
    s
}

/// The figures beside their goals and beside the earlier run (SQLite, one worker, 1,000 hosts,
/// docs/upstream.md, 2026-11-26).
fn summary(n: usize, rows: &[Row], rtrack_hour: f64, nova_hour: f64) -> String {
    let row = |prefix: &str| rows.iter().find(|r| r.phase.starts_with(prefix));
    let cpu_of = |prefix: &str| row(prefix).and_then(|r| r.cpu_s).unwrap_or(0.0);
    // CPU per host-hour from the measured cycles at the default intervals, as for requests.
    let rtrack_cpu = (48.0 * cpu_of("steady, cycle between refreshes (round 2)")
        + 11.0 * cpu_of("steady, refresh cycle (round 2)")
        + cpu_of("steady, refresh cycle reading everything"))
        / n as f64;
    let nova_cpu = (48.0 * cpu_of("nova-compute pattern: cycle between refreshes")
        + 12.0 * cpu_of("nova-compute pattern: refresh cycle"))
        / n as f64;
    let conflicts: usize = rows.iter().map(|r| r.stats.conflicts).sum();
    let errors: usize = rows.iter().map(|r| r.stats.server_errors).sum();
    let cold = row("cold start");
    let mut s = String::from(
        "\nSummary (earlier: SQLite, 1 worker, 1,000 hosts, docs/upstream.md 2026-11-26):\n\n| figure | this run | goal | earlier |\n|---|---|---|---|\n",
    );
    let mut line = |f: &str, v: String, goal: &str, earlier: &str| {
        s.push_str(&format!("| {f} | {v} | {goal} | {earlier} |\n"));
    };
    line(
        "rtrack, requests per host-hour",
        format!("{rtrack_hour:.0}"),
        "below nova-compute's",
        "91",
    );
    line(
        "nova-compute pattern, requests per host-hour",
        format!("{nova_hour:.0}"),
        "",
        "600",
    );
    line(
        "rtrack, Placement CPU s per host-hour",
        format!("{rtrack_cpu:.3}"),
        "below nova-compute's",
        "not measured",
    );
    line(
        "nova-compute pattern, Placement CPU s per host-hour",
        format!("{nova_cpu:.3}"),
        "",
        "not measured",
    );
    line(
        "409 conflicts, all phases (every one retried: all hosts converged)",
        conflicts.to_string(),
        "",
        "0 (one writer at a time)",
    );
    line("5xx, all phases", errors.to_string(), "0", "0");
    if let Some(c) = cold {
        line(
            "cold start: requests per host",
            format!("{:.2}", c.stats.requests as f64 / n as f64),
            "",
            "16.00",
        );
        line(
            "cold start: server p50 / p99",
            format!("{:.1} / {:.1} ms", c.stats.p50_ms, c.stats.p99_ms),
            "",
            "7.9 / 12.7 ms",
        );
        line(
            "cold start: last host in step",
            format!("{:.1} s", c.wall.as_secs_f64()),
            "",
            "131.6 s",
        );
    }
    if let Some(r) = row("steady, refresh cycle (round 2)") {
        line(
            "steady refresh: server p50 / p99",
            format!("{:.1} / {:.1} ms", r.stats.p50_ms, r.stats.p99_ms),
            "",
            "3.6 / 9.4 ms",
        );
    }
    if let Some(r) = row("Placement down") {
        line(
            "Placement back: last host in step after",
            format!("{:.1} s", r.wall.as_secs_f64()),
            "",
            "26.0 s",
        );
    }
    s
}
