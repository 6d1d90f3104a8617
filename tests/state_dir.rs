//! The state directory, end to end: one daemon per directory, `--once` beside a daemon, and a
//! database that holds no rtrack state refused at start (and `--start-empty`).

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use rtrack_fixtures::real::scratch_dir;
use rtrack_fixtures::synthetic::SyntheticHost;
use support::{base_config, claim, uuid, Daemon};

const RTRACKD: &str = env!("CARGO_BIN_EXE_rtrackd");

struct Env {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    dir: PathBuf,
}

fn env() -> Env {
    let tmp = scratch_dir();
    let root = tmp.path().join("host");
    SyntheticHost::small().write(&root);
    let dir = tmp.path().join("d");
    std::fs::create_dir_all(&dir).unwrap();
    Env {
        root,
        dir,
        _tmp: tmp,
    }
}

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
fn once_that_must_create_the_identity_refuses_a_held_directory() {
    let e = env();
    let state = e.dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    let cfg = e.dir.join("rtrack.toml");
    std::fs::write(&cfg, base_config(&e.root, &e.dir)).unwrap();
    let held = rtrack::store::lock::StateDirLock::acquire(&state).unwrap();
    let out = run(&["--once"], &cfg);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("pid {}", std::process::id())),
        "{err}"
    );
    assert!(!state.join("compute_id").exists());
    drop(held);
    let out = run(&["--once"], &cfg);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(state.join("compute_id").exists());
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
    let start = std::time::Instant::now();
    let (s, v) = loop {
        if let Ok(r) = rtrack::cli::client::request(
            &d.socket,
            "GET",
            "/v1/claims",
            None,
            Duration::from_secs(5),
        ) {
            break (r.status, r.json().unwrap_or_default());
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "{}",
            std::fs::read_to_string(e.dir.join("start-empty.log")).unwrap()
        );
        assert!(start.elapsed() < Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(20));
    };
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
