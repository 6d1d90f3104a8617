//! The state directory, end to end: one daemon per directory, `--once` beside a daemon, and a
//! database that holds no rtrack state refused at start (and `--start-empty`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::support::{base_config, claim, env, poll, uuid, Daemon};
use serde_json::Value;

const RTRACKD: &str = env!("CARGO_BIN_EXE_rtrackd");

/// Runs rtrackd to completion (it must exit by itself within the limit).
fn run(args: &[&str], config: &Path) -> Output {
    let mut child = Command::new(RTRACKD)
        .arg("--config")
        .arg(config)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("NOTIFY_SOCKET")
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("rtrackd {args:?} did not exit within 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn a_second_daemon_on_the_same_state_directory_is_refused_naming_the_holder() {
    let e = env();
    let d = Daemon::start_with(
        Path::new(RTRACKD),
        &e.dir,
        &base_config(&e.root, &e.dir),
        &[],
    );
    let (s, v) = d.call(
        "POST",
        "/v1/claims",
        Some(&claim(&uuid(1), 1, 256, 1, Some("vf:1"))),
    );
    assert_eq!(s, 201, "{v}");

    // Same state directory, another socket.
    let other = e.dir.join("other");
    std::fs::create_dir_all(&other).unwrap();
    let config = base_config(&e.root, &e.dir).replace(
        &format!("socket = \"{}/run/rtrack.sock\"", e.dir.display()),
        &format!("socket = \"{}/rtrack.sock\"", other.display()),
    );
    let cfg = other.join("rtrack.toml");
    std::fs::write(&cfg, config).unwrap();
    let out = run(&[], &cfg);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let state = e.dir.join("state");
    assert!(err.contains(&state.display().to_string()), "{err}");
    assert!(err.contains(&format!("pid {}", d.pid())), "{err}");
    assert!(!other.join("rtrack.sock").exists());

    // The first one still serves, with its claim.
    let (s, v) = d.call("GET", &format!("/v1/claims/{}", uuid(1)), None);
    assert_eq!(s, 200, "{v}");

    // `--once` only reads the state directory: it runs beside the daemon.
    let out = run(&["--once", "--format", "nova"], &d.config);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn once_never_chooses_the_identity_and_report_needs_the_directory_and_placement() {
    let e = env();
    let state = e.dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    let cfg = e.dir.join("rtrack.toml");
    std::fs::write(
        &cfg,
        base_config(&e.root, &e.dir)
            + "[placement]\nendpoint = \"http://127.0.0.1:1/placement\"\ntimeout_s = 1\n",
    )
    .unwrap();
    let held = rtrack::store::lock::StateDirLock::acquire(&state).unwrap();
    // A look at the inventory runs beside a daemon and chooses nothing: the identity is derived
    // from the name until the daemon's first start chooses it.
    let out = run(&["--once", "--format", "nova"], &cfg);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let node: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        node["nova_object.data"]["uuid"],
        rtrack::store::node_id::derived("cmp1")
    );
    assert!(!state.join("compute_id").exists());
    // --report must choose it: it needs the directory's lock...
    let out = run(&["--once", "--report"], &cfg);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("pid {}", std::process::id())),
        "{err}"
    );
    drop(held);
    // ...and Placement's answer (is this host registered already?): none, none chosen.
    let out = run(&["--once", "--report"], &cfg);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("must ask Placement whether nova-compute registered this host"),
        "{err}"
    );
    assert!(!state.join("compute_id").exists());
    // Without Placement, the daemon's first start chooses a new one.
    let d = Daemon::start_with(
        Path::new(RTRACKD),
        &e.dir,
        &base_config(&e.root, &e.dir),
        &[],
    );
    assert!(state.join("compute_id").exists());
    drop(d);
}

#[test]
fn a_database_without_rtrack_state_is_refused_and_start_empty_keeps_it_aside() {
    let e = env();
    let mut d = Daemon::start_with(
        Path::new(RTRACKD),
        &e.dir,
        &base_config(&e.root, &e.dir),
        &[],
    );
    for n in 0..5 {
        let (s, v) = d.call(
            "POST",
            "/v1/claims",
            Some(&claim(&uuid(n), 1, 256, 1, None)),
        );
        assert_eq!(s, 201, "{v}");
    }
    d.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(d.wait_exit(Duration::from_secs(10)).is_some());
    let db = e.dir.join("state/rtrack.db");
    for (what, content) in [
        ("empty", Vec::new()),
        (
            "garbage",
            b"this is not a database, it is a note".repeat(200),
        ),
    ] {
        std::fs::write(&db, &content).unwrap();
        let out = run(&[], &d.config);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{what}: {err}");
        assert!(err.contains(&db.display().to_string()), "{what}: {err}");
        assert!(
            err.contains("--start-empty") && err.contains("backup"),
            "{what}: {err}"
        );
        assert_eq!(
            std::fs::read(&db).unwrap(),
            content,
            "{what}: the file was changed"
        );
    }
    // Another SQLite database.
    std::fs::remove_file(&db).unwrap();
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch("CREATE TABLE notes (t TEXT); INSERT INTO notes VALUES ('x');")
        .unwrap();
    let out = run(&[], &d.config);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("without rtrack's tables"), "{err}");

    // On purpose: the bad file is kept aside and the daemon starts with no claims.
    std::fs::write(&db, b"").unwrap();
    let log = std::fs::File::create(e.dir.join("start-empty.log")).unwrap();
    let mut child = Command::new(RTRACKD)
        .arg("--config")
        .arg(&d.config)
        .arg("--start-empty")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .env_remove("NOTIFY_SOCKET")
        .spawn()
        .unwrap();
    let every = Duration::from_millis(20);
    let (s, v): (u16, Value) = poll("the daemon serving", Duration::from_secs(30), every, || {
        let timeout = Duration::from_secs(5);
        let r = rtrack::cli::client::request(&d.socket, "GET", "/v1/claims", None, timeout);
        // Still starting is fine; gone is a failure at once.
        assert!(
            child.try_wait().unwrap().is_none(),
            "{}",
            std::fs::read_to_string(e.dir.join("start-empty.log")).unwrap()
        );
        r.map(|r| (r.status, r.json().unwrap_or_default()))
            .map_err(|e| e.to_string())
    });
    assert_eq!(s, 200);
    assert_eq!(v.as_array().map(Vec::len), Some(0), "{v}");
    let kept: Vec<_> = std::fs::read_dir(e.dir.join("state"))
        .unwrap()
        .filter_map(|f| f.ok())
        .filter(|f| {
            f.file_name()
                .to_string_lossy()
                .starts_with("rtrack.db.bad-")
        })
        .collect();
    assert_eq!(kept.len(), 1, "the bad database is kept aside");
    let _ = child.kill();
    let _ = child.wait();
}

/// A tmpfs of `size` mounted at `at` until dropped (tests run as root; elsewhere they say why
/// they skip).
struct SmallFs(PathBuf);

impl SmallFs {
    fn mount(at: &Path, size: &str) -> Option<SmallFs> {
        std::fs::create_dir_all(at).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| SmallFs(at.to_path_buf()))
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Fills the filesystem holding `dir` with one file; returns its path.
fn fill(dir: &Path) -> PathBuf {
    let filler = dir.join("filler");
    let mut f = std::fs::File::create(&filler).unwrap();
    let block = vec![0xa5u8; 64 * 1024];
    let mut small = vec![0xa5u8; 4096];
    use std::io::Write;
    while f.write_all(&block).is_ok() {}
    while f.write_all(&small).is_ok() {}
    small.truncate(1);
    while f.write_all(&small).is_ok() {}
    let _ = f.sync_all();
    filler
}

#[test]
fn a_full_disk_neither_stops_a_restart_nor_loses_a_claim_and_claims_resume_with_room() {
    let e = env();
    let Some(_fs) = SmallFs::mount(&e.dir.join("state"), "8m") else {
        eprintln!("skipped: cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN)");
        return;
    };
    let mut d = Daemon::start_with(
        Path::new(RTRACKD),
        &e.dir,
        &base_config(&e.root, &e.dir),
        &[],
    );
    for n in 0..20 {
        let (s, v) = d.call("POST", "/v1/claims", Some(&claim(&uuid(n), 1, 64, 1, None)));
        assert_eq!(s, 201, "{v}");
    }
    d.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(d.wait_exit(Duration::from_secs(10)).is_some());
    let filler = fill(&e.dir.join("state"));

    // A restart with nothing changed needs no room.
    d.spawn();
    d.wait_ready();
    let (s, v) = d.call("GET", "/v1/claims", None);
    assert_eq!(s, 200);
    assert_eq!(v.as_array().map(Vec::len), Some(20), "{v}");
    // A claim is refused cleanly, saying why, and leaves nothing.
    let body = claim(&uuid(100), 1, 64, 1, None);
    let (s, v) = d.call("POST", "/v1/claims", Some(&body));
    assert_eq!(s, 507, "{v}");
    assert_eq!(v["error"]["code"], "insufficient_storage", "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("full"),
        "{v}"
    );
    let (s, _) = d.call("GET", &format!("/v1/claims/{}", uuid(100)), None);
    assert_eq!(s, 404);
    // With room again, claims resume without a restart, and are durable.
    std::fs::remove_file(&filler).unwrap();
    let (s, v) = d.call("POST", "/v1/claims", Some(&body));
    assert_eq!(s, 201, "{v}");
    d.restart();
    let (s, v) = d.call("GET", "/v1/claims", None);
    assert_eq!(s, 200);
    assert_eq!(v.as_array().map(Vec::len), Some(21), "{v}");
}
