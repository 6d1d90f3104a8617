//! Connections cannot starve rtrackd: with the descriptor limit systemd gives by default
//! (1024) and 2,000 idle connections held, `/healthz` and claims still answer promptly; excess
//! connections are closed at once and counted; a connection that sends no complete header
//! (slowly, or idle between requests) is closed after `[api] header_timeout_s`.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{base_config, claim, uuid};
use rtrack::cli::client;
use rtrack_fixtures::real::scratch_dir;
use rtrack_fixtures::synthetic::SyntheticHost;

const RTRACKD: &str = env!("CARGO_BIN_EXE_rtrackd");

fn metric(socket: &Path, name: &str) -> f64 {
    let r = client::request(socket, "GET", "/metrics", None, Duration::from_secs(10)).unwrap();
    let text = String::from_utf8_lossy(&r.body).into_owned();
    text.lines()
        .find(|l| l.starts_with(name) && !l.starts_with('#'))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
}

#[test]
fn idle_and_slow_connections_cannot_starve_the_daemon() {
    // The test itself holds 2,000 connections.
    let (_, hard) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard).unwrap();
    assert!(
        hard >= 4096,
        "the test needs a hard descriptor limit of 4096 or more, not {hard}"
    );

    let tmp = scratch_dir();
    let root = tmp.path().join("host");
    SyntheticHost::small().write(&root);
    let dir = tmp.path().join("d");
    std::fs::create_dir_all(&dir).unwrap();
    let config = base_config(&root, &dir) + "max_connections = 100\nheader_timeout_s = 3\n";
    let cfg = dir.join("rtrack.toml");
    std::fs::write(&cfg, config).unwrap();
    let socket = dir.join("run/rtrack.sock");
    let log = std::fs::File::create(dir.join("rtrackd.log")).unwrap();
    let mut cmd = Command::new(RTRACKD);
    cmd.arg("--config")
        .arg(&cfg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .env_remove("NOTIFY_SOCKET");
    // systemd's default for a unit without LimitNOFILE: 1024, soft and hard.
    // SAFETY: only setrlimit between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, 1024, 1024)
                .map_err(std::io::Error::from)
        });
    }
    let mut child = cmd.spawn().unwrap();
    let log_text = || std::fs::read_to_string(dir.join("rtrackd.log")).unwrap_or_default();
    let start = Instant::now();
    while client::request(&socket, "GET", "/healthz", None, Duration::from_secs(2)).is_err() {
        assert!(child.try_wait().unwrap().is_none(), "{}", log_text());
        assert!(start.elapsed() < Duration::from_secs(30), "{}", log_text());
        std::thread::sleep(Duration::from_millis(20));
    }

    let mut idle: Vec<UnixStream> = Vec::new();
    for _ in 0..2_000 {
        match UnixStream::connect(&socket) {
            Ok(s) => idle.push(s),
            Err(e) => panic!("connect {}: {e}", idle.len()),
        }
    }
    // Served promptly while they are held.
    let t = Instant::now();
    let r = client::request(&socket, "GET", "/healthz", None, Duration::from_secs(10));
    let healthz = t.elapsed();
    let r =
        r.unwrap_or_else(|e| panic!("healthz with 2,000 idle connections: {e}\n{}", log_text()));
    assert_eq!(r.status, 200);
    let body = claim(&uuid(1), 1, 256, 1, None).to_string();
    let t = Instant::now();
    let r = client::request(
        &socket,
        "POST",
        "/v1/claims",
        Some(body.as_bytes()),
        Duration::from_secs(10),
    )
    .unwrap();
    let claimed = t.elapsed();
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    assert!(
        healthz < Duration::from_secs(5) && claimed < Duration::from_secs(5),
        "{healthz:?} {claimed:?}"
    );
    assert!(metric(&socket, "rtrack_api_connections_rejected_total") >= 1_800.0);

    // A header sent a byte a second is cut off after the header timeout.
    let mut slow = UnixStream::connect(&socket).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let t = Instant::now();
    let mut closed = false;
    for b in b"GET /healthz HTTP/1.1\r\nHost: x\r\n".iter() {
        if slow.write_all(&[*b]).is_err() {
            closed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(1_000));
        if t.elapsed() > Duration::from_secs(8) {
            break;
        }
    }
    if !closed {
        let mut buf = [0u8; 512];
        // The server closes it (EOF, or a 408 then EOF); a read that times out means it kept it.
        loop {
            match slow.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
                Err(e) => panic!("the slow connection was kept open: {e}"),
            }
        }
    }
    assert!(
        t.elapsed() < Duration::from_secs(12),
        "closed after {:?}",
        t.elapsed()
    );

    // The idle connections that were accepted are closed after the header timeout too.
    let t = Instant::now();
    while metric(&socket, "rtrack_api_connections") > 1.0 {
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "idle connections kept open:\n{}",
            log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(idle);
    let r = client::request(&socket, "GET", "/healthz", None, Duration::from_secs(5)).unwrap();
    assert_eq!(r.status, 200);
    let _ = child.kill();
    let _ = child.wait();
}
