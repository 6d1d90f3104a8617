//! A running `rtrackd` for end-to-end tests and benchmarks: a config file, state directory and
//! socket in a temporary directory, a fixture root, the daemon's log kept in a file.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rtrack::cli::client;
use serde_json::Value;

/// A daemon under test.
pub struct Daemon {
    child: Option<Child>,
    /// The API socket.
    pub socket: PathBuf,
    /// The config file.
    pub config: PathBuf,
    /// The daemon's stderr.
    pub log: PathBuf,
    env: Vec<(String, String)>,
    binary: PathBuf,
}

/// The small synthetic host written to a scratch directory, and a directory for a daemon's
/// config, state, socket and log beside it.
pub struct Env {
    _tmp: tempfile::TempDir,
    /// The fixture root (`root/sys`, `root/proc`).
    pub root: PathBuf,
    /// The daemon's directory.
    pub dir: PathBuf,
}

/// A new [`Env`].
pub fn env() -> Env {
    let tmp = rtrack_fixtures::real::scratch_dir();
    let root = tmp.path().join("host");
    rtrack_fixtures::synthetic::SyntheticHost::small().write(&root);
    let dir = tmp.path().join("d");
    std::fs::create_dir_all(&dir).unwrap();
    Env {
        root,
        dir,
        _tmp: tmp,
    }
}

/// `binary` started on `e` with the base configuration and `extra` appended.
pub fn start_on(binary: &Path, e: &Env, extra: &str) -> Daemon {
    let config = base_config(&e.root, &e.dir) + extra;
    Daemon::start_with(binary, &e.dir, &config, &[])
}

/// The base configuration for a fixture root (more sections can be appended).
pub fn base_config(root: &Path, dir: &Path) -> String {
    format!(
        r#"
[host]
root = "{root}"
state_dir = "{dir}/state"
instances_path = "{dir}"
hypervisor_hostname = "cmp1"
host = "cmp1"

[resources]
cpu_allocation_ratio = 4.0
ram_allocation_ratio = 1.0
reserved_host_memory_mb = 512

[[pci.device_spec]]
vendor_id = "8086"
product_id = "1889"

[[pci.alias]]
name = "vf"
vendor_id = "8086"
product_id = "1889"
device_type = "type-VF"

[api]
socket = "{dir}/run/rtrack.sock"
"#,
        root = root.display(),
        dir = dir.display()
    )
}

impl Daemon {
    /// Writes `config` and starts `binary` with it; waits until the API answers.
    pub fn start_with(binary: &Path, dir: &Path, config: &str, env: &[(&str, &str)]) -> Daemon {
        std::fs::create_dir_all(dir).unwrap();
        let cfg = dir.join("rtrack.toml");
        std::fs::write(&cfg, config).unwrap();
        let mut d = Daemon {
            child: None,
            socket: dir.join("run/rtrack.sock"),
            config: cfg,
            log: dir.join("rtrackd.log"),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            binary: binary.to_path_buf(),
        };
        d.spawn();
        d.wait_ready();
        d
    }

    /// Starts the daemon again with the same files.
    pub fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let mut cmd = Command::new(&self.binary);
        cmd.arg("--config")
            .arg(&self.config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .env_remove("NOTIFY_SOCKET")
            .env_remove("RTRACK_LOG");
        // A developer's OS_* variables (an openrc sourced) must not change what the daemon
        // under test reports to: only what the test passes.
        for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("OS_")) {
            cmd.env_remove(k);
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        self.child = Some(cmd.spawn().unwrap());
    }

    /// Waits until `/healthz` answers 200 (panics with the log after 30 s or if it exits).
    pub fn wait_ready(&mut self) {
        let start = Instant::now();
        loop {
            if let Ok(r) = client::request(
                &self.socket,
                "GET",
                "/healthz",
                None,
                Duration::from_secs(5),
            ) {
                if r.status == 200 {
                    return;
                }
            }
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().unwrap()) {
                panic!(
                    "rtrackd exited with {status} before it was ready:\n{}",
                    self.log_text()
                );
            }
            if start.elapsed() > Duration::from_secs(30) {
                panic!("rtrackd not ready after 30 s:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The daemon's pid.
    pub fn pid(&self) -> i32 {
        self.child.as_ref().map(|c| c.id() as i32).unwrap_or(0)
    }

    /// What `GET /v1/usage` says is used of `class` and its capacity (-1 for what it does not
    /// show).
    pub fn usage_of(&self, class: &str) -> (i64, i64) {
        let (s, u) = self.call("GET", "/v1/usage", None);
        assert_eq!(s, 200, "{u}");
        let r = &u["resources"][class];
        (
            r["used"].as_i64().unwrap_or(-1),
            r["capacity"].as_i64().unwrap_or(-1),
        )
    }

    /// One request; the status and the JSON body (Null if none).
    pub fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let bytes = body.map(|b| b.to_string().into_bytes());
        let r = client::request(
            &self.socket,
            method,
            path,
            bytes.as_deref(),
            Duration::from_secs(60),
        )
        .unwrap_or_else(|e| panic!("{method} {path}: {e}\n{}", self.log_text()));
        (r.status, r.json().unwrap_or(Value::Null))
    }

    /// A raw request with a given body and content type.
    pub fn raw(&self, method: &str, path: &str, content_type: &str, body: &[u8]) -> (u16, Value) {
        use std::io::{BufReader, Write};
        let mut s = std::os::unix::net::UnixStream::connect(&self.socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).unwrap();
        // A rejected large body may be cut off by the server: ignore write errors.
        let _ = s.write_all(body);
        let r = client::read_response(BufReader::new(s), &self.socket).unwrap();
        (r.status, r.json().unwrap_or(Value::Null))
    }

    /// Sends a signal.
    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), sig).unwrap();
    }

    /// Waits for the process to exit, at most `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        let child = self.child.as_mut()?;
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                self.child = None;
                return Some(s);
            }
            if start.elapsed() > limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits up to `limit` for `needle` in the log; the test fails showing the log.
    pub fn wait_log(&self, needle: &str, limit: Duration) {
        let start = Instant::now();
        while !self.log_text().contains(needle) {
            assert!(
                start.elapsed() < limit,
                "no {needle:?} in the log after {limit:?}:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL, start again on the same state directory, and wait until it serves.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
        self.wait_ready();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One request to a socket; `None` when the daemon did not answer (gone, killed).
pub fn try_call(
    socket: &Path,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Option<(u16, Value)> {
    let bytes = body.map(|b| b.to_string().into_bytes());
    client::request(
        socket,
        method,
        path,
        bytes.as_deref(),
        Duration::from_secs(30),
    )
    .ok()
    .map(|r| (r.status, r.json().unwrap_or(Value::Null)))
}
