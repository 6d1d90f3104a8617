//! A real Keystone (keystone 30.0.0 from PyPI, SQLite, fernet tokens) and a real Placement
//! behind keystonemiddleware, both on 127.0.0.1, started by `scripts/keystone/` and
//! `scripts/placement/start.sh --keystone`, with users, roles, the catalog and an application
//! credential made by `scripts/keystone/admin.py setup`.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Keystone, and Placement behind it, for one test; both stopped when dropped.
pub struct Stack {
    ks_dir: PathBuf,
    pl_dir: PathBuf,
    /// Keystone's URL.
    pub auth_url: String,
    /// Placement's URL.
    pub placement_url: String,
    /// What `admin.py setup` printed (users, passwords, the first application credential).
    pub setup: Value,
}

impl Stack {
    pub fn start(name: &str, token_expiration_s: u32) -> Option<Stack> {
        if std::env::var("RTRACK_SKIP_PLACEMENT").is_ok_and(|v| v == "1") {
            eprintln!("RTRACK_SKIP_PLACEMENT=1: skipping the Keystone test {name}");
            return None;
        }
        let base = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join("keystone")
            .join(name);
        let ks_dir = base.join("keystone");
        let pl_dir = base.join("placement");
        let ks = repo().join("scripts/keystone");
        let pl = repo().join("scripts/placement");
        run(Command::new(pl.join("stop.sh")).arg("--purge").arg(&pl_dir));
        run(Command::new(ks.join("stop.sh")).arg("--purge").arg(&ks_dir));
        let pid = std::process::id().to_string();
        let auth_url = run(Command::new(ks.join("start.sh"))
            .args(["--owner-pid", &pid, "--token-expiration"])
            .arg(token_expiration_s.to_string())
            .arg(&ks_dir)
            .arg("auto"));
        let admin = |args: &[&str]| {
            run(Command::new("python3")
                .arg(ks.join("admin.py"))
                .arg("--admin-password-file")
                .arg(ks_dir.join("etc/admin-password"))
                .arg(&auth_url)
                .args(args))
        };
        let setup: Value = serde_json::from_str(&admin(&["setup"])).unwrap();
        let placement_url = run(Command::new(pl.join("start.sh"))
            .env(
                "PLACEMENT_KEYSTONE_PASSWORD",
                setup["placement_password"].as_str().unwrap(),
            )
            .args(["--owner-pid", &pid, "--keystone", &auth_url])
            .arg(&pl_dir)
            .arg("auto"));
        admin(&["placement-endpoint", &placement_url]);
        Some(Stack {
            ks_dir,
            pl_dir,
            auth_url,
            placement_url,
            setup,
        })
    }

    pub fn admin(&self, args: &[&str]) -> String {
        run(Command::new("python3")
            .arg(repo().join("scripts/keystone/admin.py"))
            .arg("--admin-password-file")
            .arg(self.ks_dir.join("etc/admin-password"))
            .arg(&self.auth_url)
            .args(args))
    }

    pub fn s(&self, key: &str) -> String {
        self.setup[key].as_str().unwrap().to_string()
    }

    /// A token of user rtrack (role service on project service) for checks made here.
    pub async fn token(&self, http: &reqwest::Client) -> String {
        let body = json!({"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": self.s("user"), "domain": {"id": "default"}, "password": self.s("password")}}},
            "scope": {"project": {"name": self.s("project"), "domain": {"id": "default"}}}}});
        let r = http
            .post(format!("{}/auth/tokens", self.auth_url))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        r.headers()["x-subject-token"].to_str().unwrap().to_string()
    }

    /// GET on Placement with a valid token.
    pub async fn get(&self, path: &str) -> (u16, Value) {
        let http = client();
        let token = self.token(&http).await;
        let r = http
            .get(format!("{}{path}", self.placement_url))
            .header("x-auth-token", token)
            .header("openstack-api-version", "placement 1.39")
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// Placement's requests so far (one `placement.requestlog` line each).
    pub fn placement_requests(&self) -> usize {
        std::fs::read_to_string(self.pl_dir.join("logs/placement.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("placement.requestlog"))
            .count()
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        let _ = Command::new(repo().join("scripts/placement/stop.sh"))
            .arg(&self.pl_dir)
            .output();
        let _ = Command::new(repo().join("scripts/keystone/stop.sh"))
            .arg(&self.ks_dir)
            .output();
    }
}

/// An HTTP client for checks made by the tests (no proxy, no idle connections).
pub fn client() -> reqwest::Client {
    rtrack::upstream::install_crypto_provider();
    reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}
