//! A real Placement for the integration tests (`scripts/placement/start.sh`): one server per
//! test in its own directory, stopped when dropped; plain requests to it with the noauth token;
//! the `openstack` client against it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use rtrack::upstream::desired::{ProviderRole, RatioRule};
use rtrack::upstream::DesiredState;
use serde_json::{json, Value};
use uuid::Uuid;

/// One Placement server; stopped when dropped.
pub struct Server {
    /// Its directory (config, database, logs).
    pub dir: PathBuf,
    /// Its base URL.
    pub url: String,
    /// Its port.
    pub port: String,
}

pub fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/placement")
}

pub fn run_script(args: &[&str]) -> String {
    let out = Command::new("bash")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run bash {args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `openstack ARGS -f json` (python-openstackclient with osc-placement, `scripts/placement/osc.sh`)
/// against `srv`: what an operator sees.
pub fn osc(srv: &Server, args: &[&str]) -> Value {
    let osc = scripts().join("osc.sh");
    let mut all = vec![osc.to_str().unwrap(), srv.url.as_str()];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-f", "json"]);
    let text = run_script(&all);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("openstack {args:?}: {e}: {text}"))
}

/// Starts a server for `name`, or returns None when the tests are skipped on purpose.
pub fn server(name: &str) -> Option<Server> {
    server_with(name, &[])
}

/// Starts a server for `name` on its own MariaDB with 4 gunicorn workers (`start.sh --db
/// mariadb`), or returns None when the tests are skipped on purpose: RTRACK_SKIP_PLACEMENT=1, or
/// mariadbd is absent and RTRACK_SKIP_MARIADB=1 says that is expected. mariadbd absent without
/// that is a failure (scripts/test installs it).
pub fn mariadb_server(name: &str) -> Option<Server> {
    let found = Command::new("bash")
        .args(["-c", "command -v mariadbd || test -x /usr/sbin/mariadbd"])
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        if std::env::var("RTRACK_SKIP_MARIADB").is_ok_and(|v| v == "1") {
            eprintln!("mariadbd not found and RTRACK_SKIP_MARIADB=1: skipping the MariaDB Placement test {name}");
            return None;
        }
        panic!(
            "the MariaDB Placement test {name} needs mariadbd (Debian: apt-get install \
             mariadb-server mariadb-client; scripts/test installs them); \
             set RTRACK_SKIP_MARIADB=1 to skip it where MariaDB cannot be installed"
        );
    }
    server_with(name, &["--db", "mariadb"])
}

fn server_with(name: &str, extra: &[&str]) -> Option<Server> {
    if std::env::var("RTRACK_SKIP_PLACEMENT").is_ok_and(|v| v == "1") {
        eprintln!("RTRACK_SKIP_PLACEMENT=1: skipping the Placement test {name}");
        return None;
    }
    let py = Command::new("python3")
        .args([
            "-c",
            "import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))",
        ])
        .status();
    if !py.is_ok_and(|s| s.success()) {
        panic!(
            "the Placement tests need python3 >= 3.11 with its venv module \
             (Debian: apt-get install python3 python3-venv); \
             set RTRACK_SKIP_PLACEMENT=1 to skip them"
        );
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("placement")
        .join(name);
    let d = dir.to_string_lossy().to_string();
    let stop = scripts().join("stop.sh").to_string_lossy().to_string();
    let start = scripts().join("start.sh").to_string_lossy().to_string();
    // A previous run that crashed may have left a server or a database behind.
    run_script(&[&stop, "--purge", &d]);
    let pid = std::process::id().to_string();
    let mut args = vec![start.as_str(), "--owner-pid", &pid];
    args.extend_from_slice(extra);
    args.extend([d.as_str(), "auto"]);
    let url = run_script(&args);
    let port = url.rsplit(':').next().unwrap_or_default().to_string();
    Some(Server { dir, url, port })
}

impl Server {
    /// Stops it.
    pub fn stop(&self) {
        let stop = scripts().join("stop.sh").to_string_lossy().to_string();
        run_script(&[&stop, &self.dir.to_string_lossy()]);
    }

    /// Starts again on the same port; `fresh` empties the database first.
    pub fn start_again(&self, fresh: bool) {
        let start = scripts().join("start.sh").to_string_lossy().to_string();
        let d = self.dir.to_string_lossy().to_string();
        let pid = std::process::id().to_string();
        let mut args = vec![start.as_str()];
        if fresh {
            args.push("--fresh");
        }
        args.extend(["--owner-pid", &pid, &d, &self.port]);
        let url = run_script(&args);
        assert_eq!(url, self.url);
    }

    /// Requests Placement has logged so far (one `placement.requestlog` line each).
    pub fn logged_requests(&self) -> usize {
        std::fs::read_to_string(self.dir.join("logs/placement.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("placement.requestlog"))
            .count()
    }

    /// Plain requests to it.
    pub fn client(&self) -> Raw {
        Raw {
            // No idle connections: the server is restarted under some tests.
            http: {
                rtrack::upstream::install_crypto_provider();
                reqwest::Client::builder()
            }
            .no_proxy()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap(),
            url: self.url.clone(),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Plain requests to Placement, independent of rtrack's client.
pub struct Raw {
    http: reqwest::Client,
    url: String,
}

impl Raw {
    /// One request with the noauth token.
    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        self.send_at("1.39", method, path, body).await
    }

    /// One request at a microversion (an older client: `1.36` writes consumers without a type).
    pub async fn send_at(
        &self,
        version: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut r = self
            .http
            .request(method, format!("{}{path}", self.url))
            .header("x-auth-token", "admin")
            .header("openstack-api-version", format!("placement {version}"));
        if let Some(b) = body {
            r = r.json(&b);
        }
        let resp = r.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// GET, asserting 200.
    pub async fn get(&self, path: &str) -> Value {
        let (s, v) = self.send(reqwest::Method::GET, path, None).await;
        assert_eq!(s, 200, "GET {path}: {v}");
        v
    }

    /// PUT.
    pub async fn put(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(reqwest::Method::PUT, path, Some(body)).await
    }
}

/// Checks with plain GETs that Placement holds what `d` describes (our traits and classes;
/// others' traits and aggregates may be there too).
pub async fn assert_placement_matches(raw: &Raw, d: &DesiredState) {
    for p in &d.providers {
        let rp = raw.get(&format!("/resource_providers/{}", p.uuid)).await;
        if p.role != ProviderRole::Sharing {
            assert_eq!(rp["name"], json!(p.name));
        }
        assert_eq!(
            rp["parent_provider_uuid"],
            p.parent.map_or(Value::Null, |u| json!(u.to_string()))
        );
        let inv = raw
            .get(&format!("/resource_providers/{}/inventories", p.uuid))
            .await;
        let held: BTreeMap<String, Value> =
            serde_json::from_value(inv["inventories"].clone()).unwrap();
        for (class, want) in &p.inventories {
            let h = held
                .get(class)
                .unwrap_or_else(|| panic!("{}: no {class} in {held:?}", p.name));
            assert!(h["total"].as_i64().unwrap() >= want.total, "{class} total");
            if !want.floor_at_usage {
                assert_eq!(h["total"], json!(want.total), "{} {class}", p.name);
                assert_eq!(h["max_unit"], json!(want.max_unit), "{} {class}", p.name);
            }
            assert_eq!(h["reserved"], json!(want.reserved), "{} {class}", p.name);
            assert_eq!(h["min_unit"], json!(want.min_unit));
            assert_eq!(h["step_size"], json!(want.step_size));
            if let RatioRule::Fixed(r) = want.ratio {
                assert_eq!(h["allocation_ratio"].as_f64(), Some(r), "{class} ratio");
            }
        }
        if p.owned_classes.is_none() {
            let want: BTreeSet<&String> = p.inventories.keys().collect();
            let have: BTreeSet<&String> = held.keys().collect();
            assert_eq!(have, want, "{} classes", p.name);
        }
        let traits = raw
            .get(&format!("/resource_providers/{}/traits", p.uuid))
            .await;
        let traits: BTreeSet<String> = serde_json::from_value(traits["traits"].clone()).unwrap();
        for t in &p.traits {
            assert!(
                traits.contains(t),
                "{}: {t} missing from {traits:?}",
                p.name
            );
        }
        match &p.owned_traits {
            None => assert_eq!(traits, p.traits, "{} traits", p.name),
            Some(owned) => {
                for t in traits.intersection(owned) {
                    assert!(p.traits.contains(t), "{}: {t} should be gone", p.name);
                }
            }
        }
        let aggs = raw
            .get(&format!("/resource_providers/{}/aggregates", p.uuid))
            .await;
        let aggs: BTreeSet<Uuid> = serde_json::from_value(aggs["aggregates"].clone()).unwrap();
        assert!(aggs.is_superset(&p.aggregates), "{} aggregates", p.name);
    }
    if let Some(allocs) = &d.allocations {
        for (c, a) in allocs {
            let got = raw.get(&format!("/allocations/{c}")).await;
            let mut have: BTreeMap<Uuid, BTreeMap<String, u64>> = BTreeMap::new();
            for (rp, e) in got["allocations"].as_object().unwrap() {
                have.insert(
                    rp.parse().unwrap(),
                    serde_json::from_value(e["resources"].clone()).unwrap(),
                );
            }
            assert_eq!(have, a.resources, "allocations of {c}");
            assert_eq!(got["consumer_type"], json!(a.consumer_type));
            assert_eq!(got["project_id"], json!(a.project_id));
        }
    }
}

/// Placement's providers in the tree of `root`, by name.
pub async fn tree_names(raw: &Raw, root: Uuid) -> BTreeSet<String> {
    let v = raw
        .get(&format!("/resource_providers?in_tree={root}"))
        .await;
    v["resource_providers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect()
}

/// A single-threaded tokio runtime for the tests' HTTP checks.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}
