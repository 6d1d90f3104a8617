//! rtrack against a real Keystone (keystone 30.0.0 from PyPI, SQLite, fernet tokens) and a real
//! Placement behind keystonemiddleware, both on 127.0.0.1, started by `scripts/keystone/` and
//! `scripts/placement/start.sh --keystone`; users, roles, the catalog and application credentials
//! made by `scripts/keystone/admin.py setup`.
//!
//! - Registration with an application credential (by id, and by name with its user), Placement's
//!   endpoint taken from the token's catalog; a token renewed before it expires.
//! - Password auth from `OS_*` variables alone (`rtrackd --once --report`).
//! - A daemon whose application credential (in a clouds.yaml) is deleted: a clear error, backoff,
//!   and recovery once a new one is in the clouds.yaml and SIGHUP is sent. No secret in its log,
//!   its metrics, `/v1/inventory` or `--check-config`.
//!
//! Needs python3 >= 3.11 with venv (the venvs are cached under `target/`);
//! `RTRACK_SKIP_PLACEMENT=1` skips these tests with the other Placement tests.

use crate::support;
use crate::support::keystone::Stack;
use crate::support::placement::runtime as rt;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use rtrack::config::Config;
use rtrack::probes::{self, HostRoot};
use rtrack::tracker::host_view::HostView;
use rtrack::upstream::{DesiredState, HttpPlacement, Reporter, ReporterOptions};
use rtrack_fixtures::synthetic::SyntheticHost;
use serde_json::Value;
use uuid::Uuid;

fn reporter(text: &str) -> (Reporter<HttpPlacement>, rtrack::config::ValidConfig) {
    let f = Path::new("keystone-test.toml");
    let cfg = Config::parse(text, f)
        .unwrap()
        .validate_in(f, &rtrack::config::placement_sources::Environment::empty())
        .unwrap();
    let settings = cfg.placement_settings.clone().unwrap();
    let r = Reporter::new(
        HttpPlacement::new(&settings).unwrap(),
        &settings,
        ReporterOptions {
            backoff_base: Duration::from_millis(200),
            backoff_cap: Duration::from_secs(2),
            conflict_tries: 4,
        },
    );
    (r, cfg)
}

fn desired(
    cfg: &rtrack::config::ValidConfig,
    host: &SyntheticHost,
    dir: &Path,
    node: Uuid,
    name: &str,
) -> DesiredState {
    if dir.exists() {
        std::fs::remove_dir_all(dir).unwrap();
    }
    host.write(dir);
    let inv = probes::probe_host(&HostRoot::under(dir), &probes::ProbeOptions::default()).unwrap();
    DesiredState::build(&HostView::of_config(inv, cfg), cfg, node, name, false, &[]).unwrap()
}

#[test]
fn application_credentials_register_through_the_catalog_and_tokens_are_renewed() {
    // 70 s tokens: renewed 60 s before expiry, i.e. after about 10 s.
    let Some(st) = Stack::start("appcred", 70) else {
        return;
    };
    let rt = rt();
    let tmp = tempfile::tempdir().unwrap();
    let mut host = SyntheticHost::small();

    // By id; no endpoint: the token's catalog gives it (internal, RegionOne).
    let (mut r, cfg) = reporter(&format!(
        "[placement]\nauth = \"application_credential\"\nauth_url = \"{}\"\napplication_credential_id = \"{}\"\napplication_credential_secret = \"{}\"\nregion_name = \"RegionOne\"\n",
        st.auth_url,
        st.s("app_cred_id"),
        st.s("app_cred_secret")
    ));
    assert_eq!(cfg.placement_settings.as_ref().unwrap().endpoint, None);
    let node = Uuid::new_v4();
    let d = desired(&cfg, &host, &tmp.path().join("a"), node, "cmp-ks-1");
    let o = rt.block_on(r.report(&d)).unwrap();
    assert!(o.changes > 0, "{o:?}");
    assert_eq!(
        r.api().keystone_requests(),
        1,
        "one token for the whole registration"
    );
    assert_eq!(
        r.api().endpoint().unwrap(),
        st.placement_url,
        "from the catalog"
    );
    let (s, rp) = rt.block_on(st.get(&format!("/resource_providers/{node}")));
    assert_eq!(s, 200, "{rp}");
    assert_eq!(rp["name"], "cmp-ks-1");
    let (_, inv) = rt.block_on(st.get(&format!("/resource_providers/{node}/inventories")));
    assert_eq!(
        inv["inventories"]["MEMORY_MB"]["total"],
        d.provider(node).unwrap().inventories["MEMORY_MB"].total
    );

    // Unchanged: nothing sent, no new token.
    let before = st.placement_requests();
    let o = rt.block_on(r.report(&d)).unwrap();
    assert_eq!((o.changes, o.requests.total()), (0, 0), "{o:?}");
    assert_eq!(st.placement_requests(), before);
    assert_eq!(r.api().keystone_requests(), 1);

    // Past the renewal point, the next write comes with a new token.
    std::thread::sleep(Duration::from_secs(11));
    host.memory_mb_per_node = 12288;
    let d = desired(&cfg, &host, &tmp.path().join("b"), node, "cmp-ks-1");
    let o = rt.block_on(r.report(&d)).unwrap();
    assert_eq!(o.changes, 1, "{o:?}");
    assert_eq!(r.api().keystone_requests(), 2, "renewed before it expired");
    let (_, inv) = rt.block_on(st.get(&format!("/resource_providers/{node}/inventories")));
    assert_eq!(
        inv["inventories"]["MEMORY_MB"]["total"],
        d.provider(node).unwrap().inventories["MEMORY_MB"].total
    );

    // By name, with the user that owns it; public interface asked for explicitly.
    let (mut r2, cfg2) = reporter(&format!(
        "[placement]\nauth = \"application_credential\"\nauth_url = \"{}\"\napplication_credential_name = \"{}\"\nusername = \"{}\"\napplication_credential_secret = \"{}\"\ninterface = \"public\"\n",
        st.auth_url,
        st.s("app_cred_name"),
        st.s("user"),
        st.s("app_cred_secret")
    ));
    let node2 = Uuid::new_v4();
    let d2 = desired(&cfg2, &host, &tmp.path().join("c"), node2, "cmp-ks-2");
    rt.block_on(r2.report(&d2)).unwrap();
    assert_eq!(
        rt.block_on(st.get(&format!("/resource_providers/{node2}")))
            .0,
        200
    );

    // A catalog without the interface asked for: the error says what is missing.
    let (mut r3, cfg3) = reporter(&format!(
        "[placement]\nauth = \"application_credential\"\nauth_url = \"{}\"\napplication_credential_id = \"{}\"\napplication_credential_secret = \"{}\"\nregion_name = \"Elsewhere\"\n",
        st.auth_url,
        st.s("app_cred_id"),
        st.s("app_cred_secret")
    ));
    let d3 = desired(
        &cfg3,
        &host,
        &tmp.path().join("d"),
        Uuid::new_v4(),
        "cmp-ks-3",
    );
    let e = rt.block_on(r3.report(&d3)).unwrap_err().to_string();
    assert!(
        e.contains("no placement endpoint on interface internal or public in region \"Elsewhere\""),
        "{e}"
    );
    assert!(!e.contains(&st.s("app_cred_secret")), "{e}");

    // Password from OS_* variables alone; the file only says auth = "password".
    let root = tmp.path().join("once-host");
    host.write(&root);
    let dir = tmp.path().join("once");
    std::fs::create_dir_all(&dir).unwrap();
    let cfg_path = dir.join("rtrack.toml");
    std::fs::write(
        &cfg_path,
        format!(
            "[host]\nroot = \"{}\"\nstate_dir = \"{}/state\"\ninstances_path = \"{}\"\nhypervisor_hostname = \"cmp-ks-env\"\n[placement]\nauth = \"password\"\n",
            root.display(),
            dir.display(),
            dir.display()
        ),
    )
    .unwrap();
    let envs = [
        ("OS_AUTH_URL", st.auth_url.clone()),
        ("OS_USERNAME", st.s("user")),
        ("OS_PASSWORD", st.s("password")),
        ("OS_PROJECT_NAME", st.s("project")),
        ("OS_USER_DOMAIN_NAME", "Default".to_string()),
        ("OS_PROJECT_DOMAIN_NAME", "Default".to_string()),
    ];
    let bin = env!("CARGO_BIN_EXE_rtrackd");
    let check = Command::new(bin)
        .args(["--config"])
        .arg(&cfg_path)
        .arg("--check-config")
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .env_remove("OS_CLOUD")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&check.stdout).to_string()
        + &String::from_utf8_lossy(&check.stderr);
    assert!(check.status.success(), "{text}");
    assert!(text.contains("password from $OS_PASSWORD"), "{text}");
    assert!(text.contains("endpoint from Keystone's catalog"), "{text}");
    assert!(!text.contains(&st.s("password")), "{text}");
    let once = Command::new(bin)
        .args(["--config"])
        .arg(&cfg_path)
        .args(["--once", "--report"])
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .env_remove("OS_CLOUD")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&once.stderr).to_string();
    assert!(once.status.success(), "{err}");
    assert!(!err.contains(&st.s("password")));
    let node_env = std::fs::read_to_string(dir.join("state/compute_id"))
        .ok()
        .and_then(|t| Uuid::parse_str(t.trim()).ok());
    let (_, list) = rt.block_on(st.get("/resource_providers?name=cmp-ks-env"));
    let found = list["resource_providers"].as_array().unwrap();
    assert_eq!(found.len(), 1, "{list}");
    if let Some(n) = node_env {
        assert_eq!(found[0]["uuid"], n.to_string());
    }
}

#[test]
fn a_deleted_application_credential_backs_off_and_a_new_one_recovers_on_sighup() {
    let Some(st) = Stack::start("revoked", 3600) else {
        return;
    };
    let rt = rt();
    let env = support::env();
    let clouds = env.dir.join("clouds.yaml");
    let write_clouds = |id: &str, secret: &str| {
        std::fs::write(
            &clouds,
            format!(
                "clouds:\n  test:\n    auth_type: v3applicationcredential\n    region_name: RegionOne\n    auth:\n      auth_url: {}\n      application_credential_id: {id}\n      application_credential_secret: {secret}\n",
                st.auth_url
            ),
        )
        .unwrap();
    };
    let first_secret = st.s("app_cred_secret");
    write_clouds(&st.s("app_cred_id"), &first_secret);
    let config = support::base_config(&env.root, &env.dir)
        + &format!(
            "[placement]\ncloud = \"test\"\nclouds_yaml = \"{}\"\nreport_interval_s = 1\nreport_allocations = true\n",
            clouds.display()
        );
    let mut d = support::Daemon::start_with(
        Path::new(env!("CARGO_BIN_EXE_rtrackd")),
        &env.dir,
        &config,
        &[],
    );
    let node = std::fs::read_to_string(env.dir.join("state/compute_id"))
        .unwrap()
        .trim()
        .to_string();
    let wait = |what: &str, f: &dyn Fn() -> bool| {
        let start = Instant::now();
        while !f() {
            assert!(start.elapsed() < Duration::from_secs(40), "{what}");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    wait("registered", &|| {
        rt.block_on(st.get(&format!("/resource_providers/{node}")))
            .0
            == 200
    });

    // The credential is deleted; a claim's allocation cannot be written: Placement refuses the
    // old token at once, and Keystone refuses the credential.
    st.admin(&["delete-app-cred", &st.s("app_cred_id")]);
    let a = support::uuid(7);
    let (s, v) = d.call(
        "POST",
        "/v1/claims",
        Some(&support::claim(&a, 1, 512, 1, None)),
    );
    assert_eq!(s, 201, "{v}");
    wait("the failure logged", &|| {
        d.log_text().contains("wrong, revoked or deleted")
    });
    let log = d.log_text();
    assert!(log.contains("answered 404 Not Found"), "{log}");
    let text = metrics_text(&d);
    assert!(
        text.lines()
            .any(|l| l.starts_with("rtrack_upstream_reports_total{outcome=\"error\"}")),
        "{text}"
    );
    // Backing off (1 s, 2 s, 4 s...): at most 2 tries in the next 4 s of 1 s cycles.
    let tries = |log: &str| {
        log.lines()
            .filter(|l| {
                l.contains("wrong, revoked or deleted") && l.contains("retrying with backoff")
            })
            .count()
    };
    let t0 = tries(&d.log_text());
    std::thread::sleep(Duration::from_secs(4));
    let t1 = tries(&d.log_text());
    assert!(t0 >= 1 && t1 - t0 <= 2, "{t0} -> {t1}: no backoff");
    let (_, alloc) = rt.block_on(st.get(&format!("/allocations/{a}")));
    assert!(
        alloc["allocations"].as_object().unwrap().is_empty(),
        "{alloc}"
    );

    // A new credential in the clouds.yaml; the TOML is unchanged. SIGHUP: written.
    let new: Value = serde_json::from_str(&st.admin(&["new-app-cred", "rtrack-2"])).unwrap();
    let new_secret = new["app_cred_secret"].as_str().unwrap().to_string();
    write_clouds(new["app_cred_id"].as_str().unwrap(), &new_secret);
    d.signal(nix::sys::signal::Signal::SIGHUP);
    wait("the allocation written with the new credential", &|| {
        let (_, v) = rt.block_on(st.get(&format!("/allocations/{a}")));
        v["allocations"][&node]["resources"]["VCPU"] == 1
    });
    assert!(
        d.log_text().contains("the reporter starts over"),
        "{}",
        d.log_text()
    );

    // No secret anywhere an operator or a scraper looks.
    let (_, inventory) = d.call("GET", "/v1/inventory", None);
    let check = Command::new(env!("CARGO_BIN_EXE_rtrackd"))
        .arg("--config")
        .arg(&d.config)
        .arg("--check-config")
        .output()
        .unwrap();
    let check_text = String::from_utf8_lossy(&check.stdout).to_string()
        + &String::from_utf8_lossy(&check.stderr);
    assert!(check.status.success(), "{check_text}");
    assert!(
        check_text.contains("clouds.test.auth.application_credential_secret"),
        "{check_text}"
    );
    for secret in [&first_secret, &new_secret] {
        for (what, text) in [
            ("log", d.log_text()),
            ("metrics", metrics_text(&d)),
            ("inventory", inventory.to_string()),
            ("--check-config", check_text.clone()),
        ] {
            assert!(!text.contains(secret.as_str()), "{what} shows a secret");
        }
    }
    d.kill();
}

fn metrics_text(d: &support::Daemon) -> String {
    let r =
        rtrack::cli::client::request(&d.socket, "GET", "/metrics", None, Duration::from_secs(10))
            .unwrap();
    String::from_utf8_lossy(&r.body).to_string()
}
