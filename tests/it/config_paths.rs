//! One configuration path: startup, SIGHUP and `--check-config` accept and refuse the same
//! files, and a secret is never printed, not even inside a syntax error.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{base_config, Daemon};
use nix::sys::signal::Signal;
use rtrack_fixtures::real::scratch_dir;
use rtrack_fixtures::synthetic::SyntheticHost;

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
    d.wait_log("reload rejected", Duration::from_secs(10));
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

/// Application credential secrets and clouds.yaml passwords are secrets too: never in
/// `--check-config`'s summary or errors, the reload diff, or the log.
#[test]
fn application_credential_and_clouds_yaml_secrets_are_never_shown() {
    let (_tmp, root, dir) = setup();
    let d = Daemon::start_with(Path::new(RTRACKD), &dir, &base_config(&root, &dir), &[]);
    let good = std::fs::read_to_string(&d.config).unwrap();
    let clouds = dir.join("clouds.yaml");
    std::fs::write(
        &clouds,
        format!("clouds:\n  c:\n    auth:\n      auth_url: http://127.0.0.1:1/v3\n      username: rtrack\n      password: {SECRET}\n      project_name: service\n"),
    )
    .unwrap();
    let cases = [
        // Valid: the summary says where the values came from, not what they are.
        (
            format!("\n[placement]\nauth = \"application_credential\"\nauth_url = \"http://127.0.0.1:1/v3\"\napplication_credential_id = \"abc\"\napplication_credential_secret = \"{SECRET}\"\n"),
            Some(0),
        ),
        (
            format!("\n[placement]\ncloud = \"c\"\nclouds_yaml = \"{}\"\n", clouds.display()),
            Some(0),
        ),
        // Invalid: a secret on a line the error is about.
        (
            format!("\n[placement]\nendpoint = \"http://127.0.0.1:1/p\"\napplication_credential_secret = \"{SECRET}\"\n"),
            Some(1),
        ),
        (
            format!("\n[placement]\nauth = \"application_credential\"\nauth_url = \"http://127.0.0.1:1/v3\"\napplication_credential_id = \"abc\"\napplication_credential_secret = \"{SECRET}\nx\"\n"),
            Some(1),
        ),
    ];
    for (i, (extra, want)) in cases.iter().enumerate() {
        std::fs::write(&d.config, good.clone() + extra).unwrap();
        let (code, text) = check_config(&d.config);
        assert_eq!(code, *want, "case {i}: {text}");
        assert!(
            !text.contains(SECRET),
            "case {i}: --check-config printed the secret: {text}"
        );
        if i == 1 {
            assert!(
                text.contains("password from") && text.contains("clouds.c.auth.password"),
                "{text}"
            );
        }
        let before = d.log_text().matches("reload").count();
        d.signal(Signal::SIGHUP);
        let start = Instant::now();
        while d.log_text().matches("reload").count() == before {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{}",
                d.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            !d.log_text().contains(SECRET),
            "case {i}: the log has the secret:\n{}",
            d.log_text()
        );
    }
}

/// A few hundred bytes of nested aliases ("billion laughs") expand to 10^9 nodes: refused, with
/// the file named, by `--check-config` and by a reload, before anything is built; the daemon
/// keeps running with its old configuration.
#[test]
fn a_yaml_alias_bomb_is_refused_naming_the_file_and_the_daemon_lives_on() {
    let (_tmp, root, dir) = setup();
    let mut bomb = String::from("a0: &a0 [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n");
    for i in 1..10 {
        let prev = format!("*a{}", i - 1);
        bomb.push_str(&format!(
            "a{i}: &a{i} [{}]\n",
            [prev.as_str(); 10].join(",")
        ));
    }
    let clouds = dir.join("clouds.yaml");
    std::fs::write(
        &clouds,
        format!("clouds:\n  c:\n    auth: {{auth_url: \"http://127.0.0.1:1/v3\"}}\n{bomb}"),
    )
    .unwrap();
    let providers = dir.join("provider_config");
    std::fs::create_dir_all(&providers).unwrap();
    let d = Daemon::start_with(Path::new(RTRACKD), &dir, &base_config(&root, &dir), &[]);
    let good = std::fs::read_to_string(&d.config).unwrap();
    let with_clouds = good.clone()
        + &format!(
            "\n[placement]\ncloud = \"c\"\nclouds_yaml = \"{}\"\n",
            clouds.display()
        );
    let with_providers = good.replace(
        "[resources]\n",
        &format!(
            "[resources]\nprovider_config_location = \"{}\"\n",
            providers.display()
        ),
    );
    std::fs::write(providers.join("bomb.yaml"), &bomb).unwrap();
    for (cfg, file) in [
        (with_clouds, &clouds),
        (with_providers, &providers.join("bomb.yaml")),
    ] {
        std::fs::write(&d.config, &cfg).unwrap();
        let started = Instant::now();
        let (code, text) = check_config(&d.config);
        assert_eq!(code, Some(1), "{text}");
        assert!(
            text.contains(&file.display().to_string()) && text.contains("nodes"),
            "{text}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        let before = d.log_text().matches("reload rejected").count();
        d.signal(Signal::SIGHUP);
        let start = Instant::now();
        while d.log_text().matches("reload rejected").count() == before {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{}",
                d.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(
            d.call("GET", "/healthz", None).0,
            200,
            "alive after the reload"
        );
    }
}
