//! The upstream reporter against a real OpenStack Placement (openstack-placement 16.0.0 under
//! gunicorn on 127.0.0.1, SQLite, noauth2), started by `scripts/placement/start.sh`.
//!
//! Each test runs its own server in its own directory under `target/tmp/placement/`, so request
//! counts read from the server's access log belong to that test alone. A guard stops the server
//! when the test ends, and `start.sh --owner-pid` stops it too if this binary dies first. What
//! Placement holds is checked with plain GETs made here, not through rtrack's client.
//!
//! Needs python3 >= 3.11 with its venv module (the venv is cached in `target/placement-venv`;
//! the first run installs it from PyPI). `RTRACK_SKIP_PLACEMENT=1` skips these tests.
//!
//! Run with `--nocapture` to see the measured figures (lines starting with `MEASURE`).

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rtrack::config::{Config, ValidConfig};
use rtrack::probes::{self, HostInventory, HostRoot};
use rtrack::tracker::host_view::HostView;
use rtrack::upstream::desired::{ReportInputs, CONSUMER_INSTANCE, CONSUMER_MIGRATION};
use rtrack::upstream::{
    Consumer, DesiredState, HttpPlacement, PlacementApi, Reporter, ReporterOptions, ResourceKey,
    UpstreamError,
};
use rtrack_fixtures::synthetic::{PlainFunction, SyntheticHost};
use serde_json::{json, Value};
use uuid::Uuid;

// ------------------------------------------------------------------ server harness

use crate::support::placement::{assert_placement_matches, osc, server, tree_names, Server};
use crate::support::poll_async;

// ------------------------------------------------------------------ test inputs

/// The tracker's view of a probe under `cfg` (what the daemon reports from).
fn view(inv: &HostInventory, cfg: &ValidConfig) -> HostView {
    HostView::of_config(inv.clone(), cfg)
}

fn probe(host: &SyntheticHost, dir: &Path) -> HostInventory {
    if dir.exists() {
        std::fs::remove_dir_all(dir).unwrap();
    }
    host.write(dir);
    probes::probe_host(&HostRoot::under(dir), &probes::ProbeOptions::default()).unwrap()
}

fn config(url: &str, extra: &str) -> ValidConfig {
    let text = format!("[placement]\nendpoint = \"{url}\"\n{extra}");
    let f = Path::new("test.toml");
    // The TOML alone: a developer's OS_* variables must not change what the test reports to.
    Config::parse(&text, f)
        .unwrap()
        .validate_in(f, &rtrack::config::placement_sources::Environment::empty())
        .unwrap()
}

const PCI: &str = r#"
[pci]
report_in_placement = true
[[pci.device_spec]]
address = "0000:3b:*.*"
traits = "fast-path, HW_NIC_SRIOV"
[[pci.device_spec]]
vendor_id = "144d"
resource_class = "nvme"
"#;

fn reporter(cfg: &ValidConfig) -> Reporter<HttpPlacement> {
    let settings = rtrack::upstream::validate_placement(&cfg.placement)
        .unwrap()
        .unwrap();
    let api = HttpPlacement::new(&settings).unwrap();
    Reporter::new(
        api,
        &settings,
        ReporterOptions {
            backoff_base: Duration::from_millis(200),
            backoff_cap: Duration::from_secs(2),
            conflict_tries: 4,
        },
    )
}

mod daemon;
mod keystone;
mod mariadb;
mod nested;
mod pci;
mod reporter;
