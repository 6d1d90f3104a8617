//! The OpenAPI document against the live server: `schemathesis` (pinned in
//! `scripts/schemathesis/`, run by `scripts/schemathesis/run.sh`) reads `GET /v1/openapi.json`
//! from a real `rtrackd` on the synthetic fixture and calls every operation with generated
//! requests, valid and invalid, with every check on (status codes, content types, headers and
//! bodies as documented, no 5xx, invalid data refused, valid data accepted, allowed methods...),
//! and follows the document's links (claim -> show/abort, migration -> show/confirm/revert) and
//! those schemathesis infers from field names in stateful sequences, on a second daemon (a host
//! the other phases have not filled); then, on a third, the document's links alone, most of
//! which must be followed. No hooks, and schemathesis's default settings but in that last run:
//! the document (OpenAPI 3.1) alone says what is valid. A fixed seed and a bounded number of
//! examples keep a run reproducible and within about two minutes on two cores; any failure
//! fails the test with schemathesis's report.
//!
//! The daemon listens on its Unix socket only: the test process itself forwards a loopback TCP
//! port (127.0.0.1, a free port) to that socket, one Unix connection per TCP connection, bytes
//! copied both ways.
//!
//! Needs python3 >= 3.11 with its venv module (the venv is cached in `target/schemathesis-venv`;
//! the first run installs it from PyPI). `RTRACK_SKIP_SCHEMATHESIS=1` skips the test;
//! `RTRACK_SCHEMATHESIS_ARGS` adds arguments to the run (split on whitespace; e.g.
//! `--include-path /v1/claims` while investigating one route).

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use crate::support::{base_config, env, Daemon};

const RTRACKD: &str = env!("CARGO_BIN_EXE_rtrackd");
/// The same seed every run: a failure is reproduced by running the test again.
const SEED: &str = "20260611";
/// Examples per operation and phase (about 5,000 requests in the first run, under a minute on
/// two cores; a few hundred in each stateful run).
const MAX_EXAMPLES: &str = "200";

/// A loopback TCP port forwarded to the daemon's Unix socket; stopped when dropped.
struct Proxy {
    port: u16,
    stop: Arc<AtomicBool>,
    connections: Arc<AtomicUsize>,
    accept: Option<JoinHandle<()>>,
}

impl Proxy {
    fn start(socket: &Path) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let connections = Arc::new(AtomicUsize::new(0));
        let (socket, st, count) = (socket.to_path_buf(), stop.clone(), connections.clone());
        let accept = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(tcp) = conn else { continue };
                match UnixStream::connect(&socket) {
                    Ok(unix) => {
                        count.fetch_add(1, Ordering::SeqCst);
                        forward(tcp, unix);
                    }
                    Err(e) => {
                        eprintln!("proxy: cannot connect to {}: {e}", socket.display());
                        let _ = tcp.shutdown(Shutdown::Both);
                    }
                }
            }
        });
        Proxy {
            port,
            stop,
            connections,
            accept: Some(accept),
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which then sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

/// Copies both ways until each side has finished sending; an end of file on one side is passed
/// on as a half close, so that a request or an answer is never cut short.
fn forward(tcp: TcpStream, unix: UnixStream) {
    fn pump(mut from: impl Read, mut to: impl Write, close: impl FnOnce()) {
        let _ = io::copy(&mut from, &mut to);
        close();
    }
    let (Ok(tcp2), Ok(unix2)) = (tcp.try_clone(), unix.try_clone()) else {
        return;
    };
    let (unix_w, tcp_w) = (unix2.try_clone(), tcp2.try_clone());
    std::thread::spawn(move || {
        pump(&tcp, &unix, || {
            let _ = unix_w.map(|u| u.shutdown(Shutdown::Write));
        })
    });
    std::thread::spawn(move || {
        pump(&unix2, &tcp2, || {
            let _ = tcp_w.map(|t| t.shutdown(Shutdown::Write));
        })
    });
}

/// Socket inodes the process holds.
fn socket_inodes(pid: i32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| {
            dir.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter_map(|l| {
                    let l = l.to_string_lossy().to_string();
                    Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
                })
                .collect()
        })
        .unwrap_or_default()
}

/// TCP sockets of `pid` that listen (`/proc/net/tcp{,6}`, state 0A), as `local address` fields.
fn tcp_listeners(pid: i32) -> Vec<String> {
    let mine = socket_inodes(pid);
    let mut found = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() > 9 && f[3] == "0A" && mine.iter().any(|i| i == f[9]) {
                found.push(f[1].to_string());
            }
        }
    }
    found
}

fn python_ok() -> bool {
    Command::new("python3")
        .args([
            "-c",
            "import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))",
        ])
        .status()
        .is_ok_and(|s| s.success())
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Runs schemathesis's `phases` against a new daemon (a fresh host: nothing claimed), with
/// schemathesis's defaults or the settings file `settings` beside run.sh, and answers its output;
/// fails on any failure it reports, on a TCP listener or an unhealthy daemon.
fn run_phases(phases: &str, settings: Option<&str>) -> String {
    let e = env();
    // The document bounds each string, not a whole body: generated bodies past the default
    // 1 MiB limit would be answered 413 before any check of their content (and 413 is neither
    // schemathesis's answer to valid data nor, for it, a rejection of invalid data).
    let config =
        base_config(&e.root, &e.dir).replace("[api]\n", "[api]\nmax_body_bytes = 67108864\n");
    assert!(config.contains("max_body_bytes"), "{config}");
    let d = Daemon::start_with(Path::new(RTRACKD), &e.dir, &config, &[]);
    // The daemon itself listens on its socket only.
    assert!(d.socket.exists());
    assert_eq!(
        tcp_listeners(d.pid()),
        Vec::<String>::new(),
        "rtrackd listens on TCP"
    );

    let proxy = Proxy::start(&d.socket);
    let origin = format!("http://127.0.0.1:{}", proxy.port);
    let work: PathBuf = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("schemathesis")
        .join(phases.replace(',', "-") + settings.map_or("", |_| "-configured"));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    // The document as tested, beside schemathesis's output and report.
    let (s, doc) = d.call("GET", "/v1/openapi.json", None);
    assert_eq!(s, 200, "{doc}");
    std::fs::write(
        work.join("openapi.json"),
        serde_json::to_string_pretty(&doc).unwrap(),
    )
    .unwrap();
    let run = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/schemathesis/run.sh");
    let mut args: Vec<String> = [
        "--checks",
        "all",
        "--phases",
        phases,
        "--max-examples",
        MAX_EXAMPLES,
        "--seed",
        SEED,
        "--generation-database",
        "none",
        "--workers",
        "1",
        "--request-timeout",
        "30",
        "--no-color",
        "--report",
        "junit",
        "--report-dir",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push(work.join("report").to_string_lossy().to_string());
    args.extend(["--url".to_string(), origin.clone()]);
    if let Ok(extra) = std::env::var("RTRACK_SCHEMATHESIS_ARGS") {
        args.extend(extra.split_whitespace().map(str::to_string));
    }
    args.push(format!("{origin}/v1/openapi.json"));

    let started = Instant::now();
    let mut command = Command::new("bash");
    command
        .arg(&run)
        .args(&args)
        .current_dir(&work)
        .env("PYTHONUNBUFFERED", "1");
    // The defaults unless `settings` is given, whatever the environment says.
    let settings_file = settings.map(|c| run.with_file_name(c));
    match &settings_file {
        Some(file) => command.env("RTRACK_SCHEMATHESIS_CONFIG", file),
        None => command.env_remove("RTRACK_SCHEMATHESIS_CONFIG"),
    };
    let shown_settings = settings_file.as_ref().map_or_else(
        || "schemathesis's defaults".to_string(),
        |f| format!("RTRACK_SCHEMATHESIS_CONFIG={}", f.display()),
    );
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", run.display()));
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr);
    std::fs::write(work.join("output.txt"), format!("{stdout}\n{stderr}")).unwrap();
    eprintln!(
        "schemathesis {phases} ({shown_settings}): exit {:?} after {:.0} s, {} connections through the proxy; output in {}",
        out.status.code(),
        took.as_secs_f64(),
        proxy.connections.load(Ordering::SeqCst),
        work.join("output.txt").display()
    );
    assert!(
        out.status.success(),
        "schemathesis {} ({shown_settings}) failed (exit {:?}):\n{stdout}\n{stderr}\n--- rtrackd log (tail) ---\n{}",
        args.join(" "),
        out.status.code(),
        tail(&d.log_text(), 40)
    );
    // Still only the socket, and still healthy.
    assert_eq!(
        tcp_listeners(d.pid()),
        Vec::<String>::new(),
        "rtrackd listens on TCP"
    );
    let (s, h) = d.call("GET", "/healthz", None);
    assert_eq!(s, 200, "{h}");
    drop(proxy);
    stdout
}

#[test]
fn the_document_and_the_server_agree_under_schemathesis() {
    if std::env::var("RTRACK_SKIP_SCHEMATHESIS").is_ok_and(|v| v == "1") {
        eprintln!("RTRACK_SKIP_SCHEMATHESIS=1: skipping the schemathesis test");
        return;
    }
    assert!(
        python_ok(),
        "the schemathesis test needs python3 >= 3.11 with its venv module \
         (Debian: apt-get install python3 python3-venv); set RTRACK_SKIP_SCHEMATHESIS=1 to skip it"
    );
    // The stateful sequences start from claims and moves that fit: on a host the other phases
    // have filled with what they claimed, few would, and the links would go untried.
    let single = run_phases("examples,coverage,fuzzing", None);
    // Through every link, the inferred ones too: no failure. Then through the document's own
    // links only, so that most of them are followed.
    let stateful = run_phases("stateful", None);
    let declared = run_phases("stateful", Some("declared-links.toml"));
    // It tested every route (but the document's own, which schemathesis leaves out), in every
    // phase, the stateful one through the document's links, most of them followed.
    let routes = rtrack::api::ROUTES.len() - 1;
    for expected in [
        format!("Selected: {routes}/{routes}"),
        format!("Tested: {routes}"),
        "✅ Examples".to_string(),
        "✅ Coverage".to_string(),
        "✅ Fuzzing".to_string(),
    ] {
        assert!(single.contains(&expected), "no {expected:?} in:\n{single}");
    }
    assert!(stateful.contains("✅ Stateful"), "{stateful}");
    // The run this test exists for: the links schemathesis infers were among those followed.
    assert!(
        stateful
            .lines()
            .any(|l| l.contains("API Links:") && l.contains("inferred")),
        "no inferred links in:\n{stateful}"
    );
    assert!(declared.contains("✅ Stateful"), "{declared}");
    let links = declared
        .lines()
        .find_map(|l| l.trim().strip_prefix("API Links:"))
        .unwrap_or_else(|| panic!("no API Links in:\n{declared}"));
    assert!(!links.contains("inferred"), "{links}");
    let (covered, total) = links
        .split_once(" covered / ")
        .and_then(|(c, rest)| Some((c.trim().parse::<usize>().ok()?, rest)))
        .and_then(|(c, rest)| Some((c, rest.split_once(" selected / ")?.1)))
        .and_then(|(c, rest)| Some((c, rest.split_whitespace().next()?.parse::<usize>().ok()?)))
        .unwrap_or_else(|| panic!("API Links:{links}"));
    assert!(
        2 * covered > total,
        "only {covered} of {total} links followed:\n{declared}"
    );
}
