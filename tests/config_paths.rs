//! One configuration path: startup, SIGHUP and `--check-config` accept and refuse the same
//! files, and a secret is never printed, not even inside a syntax error.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use rtrack_fixtures::real::scratch_dir;
use rtrack_fixtures::synthetic::SyntheticHost;
use support::{base_config, Daemon};

const RTRACKD: &str = env!("CARGO_BIN_EXE_rtrackd");
const SECRET: &str = "hunter2-s3cr3t";

fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = scratch_dir();
    let root = tmp.path().join("host");
    SyntheticHost::small().write(&root);
    let dir = tmp.path().join("d");
    std::fs::create_dir_all(&dir).unwrap();
    (tmp, root, dir)
}

fn check_config(config: &Path) -> (Option<i32>, String) {
    let out = Command::new(RTRACKD)
        .arg("--config")
        .arg(config)
        .arg("--check-config")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text)
}

fn wait_log(d: &Daemon, needle: &str) {
    let start = Instant::now();
    while !d.log_text().contains(needle) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no {needle:?}:\n{}",
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sighup_startup_and_check_config_refuse_the_same_bad_placement() {
    let (_tmp, root, dir) = setup();
    let d = Daemon::start_with(Path::new(RTRACKD), &dir, &base_config(&root, &dir), &[]);
    let good = std::fs::read_to_string(&d.config).unwrap();
    let bad = good.replace("cpu_allocation_ratio = 4.0", "cpu_allocation_ratio = 8.0")
        + "\n[placement]\nendpoint = \"http://127.0.0.1:1/placement\"\nauth = \"bogus\"\n";
    std::fs::write(&d.config, &bad).unwrap();

    let (code, text) = check_config(&d.config);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("placement.auth") && text.contains("bogus"),
        "{text}"
    );

    d.signal(Signal::SIGHUP);
    wait_log(&d, "reload rejected");
    assert!(d.log_text().contains("placement.auth"), "{}", d.log_text());
    // Nothing of the rejected file is in force (the ratio change in it is not applied).
    let (_, u) = d.call("GET", "/v1/usage", None);
    assert_eq!(u["resources"]["VCPU"]["capacity"], 32, "{u}");

    // And a start with it fails the same way.
    let out = Command::new(RTRACKD)
        .arg("--config")
        .arg(&d.config)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("placement.auth"));
}

#[test]
fn a_syntax_error_on_a_secret_line_never_shows_the_secret() {
    let (_tmp, root, dir) = setup();
    let d = Daemon::start_with(Path::new(RTRACKD), &dir, &base_config(&root, &dir), &[]);
    let good = std::fs::read_to_string(&d.config).unwrap();
    for broken in [
        format!("\n[placement]\nendpoint = \"http://127.0.0.1:1/p\"\nauth = \"password\"\npassword = \"{SECRET}\n"),
        format!("\n[placement]\nendpoint = \"http://127.0.0.1:1/p\"\nauth = \"token\"\ntoken = {SECRET}\n"),
    ] {
        std::fs::write(&d.config, good.clone() + &broken).unwrap();
        let (code, text) = check_config(&d.config);
        assert_eq!(code, Some(1), "{text}");
        assert!(!text.contains(SECRET), "--check-config printed the secret: {text}");
        assert!(text.contains(&d.config.display().to_string()) && text.contains("line "), "{text}");
        let before = d.log_text().matches("reload rejected").count();
        d.signal(Signal::SIGHUP);
        let start = Instant::now();
        while d.log_text().matches("reload rejected").count() == before {
            assert!(start.elapsed() < Duration::from_secs(10), "{}", d.log_text());
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!d.log_text().contains(SECRET), "the log has the secret:\n{}", d.log_text());
    }
}
