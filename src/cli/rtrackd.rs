//! `rtrackd`'s command line: the daemon (default), `--once` (print the inventory and exit,
//! optionally `--report` it to Placement) and `--check-config`.
//!
//! In: the command line: `--config`, overrides of the probe roots and the state directory, the
//! daemon's `--log-format` and `--start-empty`, and `--once`'s `--format`, `--object-version`,
//! `--manifest` and `--report`. Out: the checked configuration and the [`DaemonOptions`] handed to
//! the daemon; or `--once`'s report on stdout (JSON, a table, or the ComputeNode primitive), sent
//! to Placement with `--report`; or `--check-config`'s summary; and the exit code.
//!
//! Exit codes: 0 done (or the daemon stopped on SIGTERM), 1 error (bad configuration, unusable
//! probe root, Placement refused with `--report`), 2 usage error.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, ValueEnum};

use crate::config::LogFormat;
use crate::daemon::config_file::{self, LoadedConfig, Overrides};
use crate::daemon::once::{run_once, OnceOptions};
use crate::daemon::run::{self, DaemonOptions};
use crate::inventory::table;
use crate::objects::{current_manifest, Manifest, ObjVersion};

/// rtrack host agent: tracks CPU, memory, disk and PCI device claims of this compute host,
/// serves them on a local socket and reports the inventory to OpenStack Placement.
///
/// Without --once or --check-config, runs as a daemon.
#[derive(Debug, Parser)]
#[command(name = "rtrackd", version)]
pub struct Cli {
    /// Probe once, print the inventory and exit.
    #[arg(long)]
    pub once: bool,

    /// With --once: also report the inventory to Placement ([placement] in the configuration);
    /// the exit code is 1 if Placement refused or could not be reached.
    #[arg(long, requires = "once")]
    pub report: bool,

    /// Check the configuration file and exit (0 when valid).
    #[arg(long, conflicts_with = "once")]
    pub check_config: bool,

    /// Output format for --once: the whole report as JSON, a human table, or only the Nova
    /// ComputeNode primitive.
    #[arg(long, value_enum, default_value_t = Format::Json)]
    pub format: Format,

    /// ComputeNode version to produce with --once (backported from the newest, 1.19), e.g. 1.16.
    #[arg(long, value_name = "X.Y")]
    pub object_version: Option<String>,

    /// JSON file with the version manifest for backports ({"PciDevicePoolList": "1.0", ...});
    /// default: rtrack's current versions of every object.
    #[arg(long, value_name = "FILE")]
    pub manifest: Option<PathBuf>,

    /// Configuration file (TOML). Default: /etc/rtrack/rtrack.toml when it exists.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Probe a captured tree: sysfs is DIR/sys and procfs is DIR/proc (overrides [host] root).
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,

    /// sysfs mount point (overrides --root; containers often mount the host's at /host-sys).
    #[arg(long, value_name = "DIR")]
    pub sysfs: Option<PathBuf>,

    /// procfs mount point (overrides --root).
    #[arg(long, value_name = "DIR")]
    pub procfs: Option<PathBuf>,

    /// With --once: directory holding instance disks, measured with statvfs for local_gb
    /// ("none" to skip). Default: [host] instances_path, else /var/lib/nova/instances.
    #[arg(long, value_name = "PATH")]
    pub instances_path: Option<String>,

    /// Start even though the state database holds no rtrack state (empty, truncated, another
    /// file): move it aside to rtrack.db.bad-<time> and begin with no claims. A database that
    /// opens is never touched.
    #[arg(long)]
    pub start_empty: bool,

    /// State directory (compute node uuid, database). Default: [host] state_dir, else
    /// $STATE_DIRECTORY, else /var/lib/rtrack.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// With --once: also list loop, ram and zram block devices.
    #[arg(long)]
    pub include_virtual_disks: bool,

    /// Log format (overrides [log] format).
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub log_format: Option<LogFormatArg>,
}

/// `--format`: how `--once` prints the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// One JSON document (schema in docs/inventory.md).
    Json,
    /// A human summary.
    Table,
    /// The ComputeNode primitive only (oslo.versionedobjects JSON).
    Nova,
}

/// `--log-format`: how log records are written (overrides `[log] format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormatArg {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl Cli {
    fn overrides(&self) -> Overrides {
        Overrides {
            root: self.root.clone(),
            sysfs: self.sysfs.clone(),
            procfs: self.procfs.clone(),
            state_dir: self.state_dir.clone(),
        }
    }
}

/// Entry point of the `rtrackd` binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rtrackd: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn load_manifest(path: &Path) -> anyhow::Result<Manifest> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("{}: cannot read the manifest: {e}", path.display()))?;
    let raw: std::collections::BTreeMap<String, String> = serde_json::from_str(&text).map_err(|e| {
        anyhow::anyhow!(
            "{}: expected a JSON object of object names to versions like {{\"PciDevicePool\": \"1.0\"}}: {e}",
            path.display()
        )
    })?;
    raw.into_iter()
        .map(|(name, v)| {
            ObjVersion::parse(&v)
                .map(|ver| (name.clone(), ver))
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "{}: {name}: {v:?} is not a version like \"1.0\"",
                        path.display()
                    )
                })
        })
        .collect()
}

fn run(cli: &Cli) -> anyhow::Result<()> {
    let loaded = config_file::load(cli.config.as_deref(), &cli.overrides())?;
    if cli.check_config {
        return check_config(&loaded);
    }
    if cli.once {
        return once(cli, &loaded);
    }
    let format = match cli.log_format {
        Some(LogFormatArg::Json) => LogFormat::Json,
        Some(LogFormatArg::Text) => LogFormat::Text,
        None => loaded.valid.log.format,
    };
    let log = crate::daemon::logging::init(format, &loaded.valid.log.level)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let opts = DaemonOptions {
        config_path: cli.config.clone(),
        overrides: cli.overrides(),
        start_empty: cli.start_empty,
    };
    run::run(opts, loaded, log)
        .map_err(anyhow::Error::from)
        .inspect_err(|e| tracing::error!(error = %format!("{e:#}"), "rtrackd failed"))
}

fn check_config(loaded: &LoadedConfig) -> anyhow::Result<()> {
    let c = &loaded.valid;
    // [placement] and [upstream.http] were validated with the rest of the file.
    let placement = c.placement_settings.clone();
    let file = loaded
        .path
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "(no file: built-in defaults)".into());
    println!("{file}: valid");
    println!(
        "  probe root: sysfs {}, procfs {}",
        c.host.probe_root.sys.display(),
        c.host.probe_root.proc.display()
    );
    println!(
        "  state dir: {}; socket: {} (mode {:o}, group {})",
        config_file::state_dir(c).display(),
        config_file::socket_path(c).display(),
        c.api.socket_mode,
        c.api.socket_group
    );
    println!(
        "  audit every {} s (jitter {} s); {} device spec(s), {} alias(es)",
        c.audit.interval_s,
        c.audit.jitter_s,
        c.pci.device_specs.len(),
        c.pci.aliases.len()
    );
    match placement {
        Some(p) => {
            let auth = match &p.auth {
                crate::upstream::AuthSettings::NoAuth { .. } => "noauth".to_string(),
                crate::upstream::AuthSettings::Token(_) => "static token".to_string(),
                crate::upstream::AuthSettings::Keystone(k) => {
                    format!("Keystone at {} as {}", k.auth_url, k.who())
                }
            };
            println!(
                "  placement: {} every {} s; auth: {auth}",
                p.endpoint.as_ref().map_or_else(
                    || "endpoint from Keystone's catalog".to_string(),
                    |e| e.to_string()
                ),
                p.report_interval.as_secs()
            );
            // Where each value came from (never the value: some are secrets).
            let from: Vec<String> = p
                .origins
                .iter()
                .filter(|(_, o)| !o.starts_with("placement."))
                .map(|(k, o)| format!("{k} from {o}"))
                .collect();
            if !from.is_empty() {
                println!("  placement values: {}", from.join(", "));
            }
        }
        None => println!("  placement: not configured (no upstream reporting)"),
    }
    // What the file names on this host (CPU sets, reserved pages) must exist; a root that
    // cannot be probed here (a file checked on another machine) is said so, not an error.
    match crate::probes::probe_host(&c.host.probe_root, &crate::daemon::audit::probe_options(c)) {
        Ok(host) => {
            for w in config_file::check_against_host(loaded, &host)
                .map_err(|e| anyhow::anyhow!("{e}"))?
            {
                println!("  warning: {w}: nothing offered for it until the host has it");
            }
            let numa = crate::tracker::numa::HostTopology::build(&host, &c.resources);
            println!(
                "  NUMA: {} cell(s), {}; base pages {} KiB",
                numa.cells.len(),
                if numa.legacy_cpus {
                    "no CPU sets (every CPU shared and dedicated)".to_string()
                } else {
                    format!(
                        "{} shared and {} dedicated CPUs in cells",
                        numa.cells.iter().map(|x| x.cpuset.len()).sum::<usize>(),
                        numa.cells.iter().map(|x| x.pcpuset.len()).sum::<usize>()
                    )
                },
                numa.base_page_kb
            );
            for line in
                crate::tracker::numa::host::policy_summary(&numa, &host, &c.resources.topology)
            {
                println!("  {line}");
            }
            if let Some(pm) = &c.resources.cpu_power_management {
                let offline = c
                    .resources
                    .cpu_dedicated_set
                    .as_ref()
                    .map(|d| d.difference(&host.cpu.online))
                    .unwrap_or_default();
                println!(
                    "  CPU power management: {}; dedicated CPUs offline now: {} (they count)",
                    pm.strategy.as_str(),
                    if offline.is_empty() {
                        "none".to_string()
                    } else {
                        offline.to_string()
                    }
                );
            }
        }
        Err(e) => println!(
            "  host not probed here ({e}): CPU sets and reserved pages not checked against it"
        ),
    }
    Ok(())
}

fn once(cli: &Cli, loaded: &LoadedConfig) -> anyhow::Result<()> {
    let cfg = &loaded.valid;
    let instances_path = match cli.instances_path.as_deref() {
        Some("none") => None,
        Some(p) => Some(PathBuf::from(p)),
        None => Some(cfg.host.instances_path.clone()),
    };
    let target = match &cli.object_version {
        None => None,
        Some(v) => Some(ObjVersion::parse(v).ok_or_else(|| {
            anyhow::anyhow!(
                "--object-version {v:?}: expected a version like 1.16 (ComputeNode 1.0 to 1.19)"
            )
        })?),
    };
    let manifest = match &cli.manifest {
        Some(p) => load_manifest(p)?,
        None => current_manifest(),
    };
    let opts = OnceOptions {
        state_dir: config_file::state_dir(cfg),
        instances_path,
        include_virtual_disks: cli.include_virtual_disks,
    };
    // `--once` only reads the state directory. `--report` at the first start of one chooses
    // the node's identity as the daemon does (nova-compute's provider for this host, if any);
    // that write takes the daemon's lock, so it never races a daemon on the same directory.
    let mut result = run_once(cfg, &opts, time::OffsetDateTime::now_utc())?;
    let _state_lock = if cli.report && !opts.state_dir.join("compute_id").exists() {
        std::fs::create_dir_all(&opts.state_dir).map_err(|e| {
            anyhow::anyhow!(
                "{}: cannot create the state directory: {e}",
                opts.state_dir.display()
            )
        })?;
        let lock = crate::store::lock::StateDirLock::acquire(&opts.state_dir)?;
        let probed = result.view.host.host.hostname.as_deref();
        let names = crate::tracker::model::HostNames {
            host: crate::daemon::once::node_name(cfg.host.host.as_deref(), probed),
            node: crate::daemon::once::node_name(cfg.host.hypervisor_hostname.as_deref(), probed),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (id, chosen) = runtime.block_on(crate::daemon::identity::resolve(
            &opts.state_dir,
            cfg,
            &names,
        ))?;
        if let crate::daemon::identity::Chosen::Adopted { name } = &chosen {
            eprintln!(
                "rtrackd: taking over the compute node provider {name:?} ({}) nova-compute registered",
                id.uuid
            );
        }
        // Probed again with the identity now stored.
        result = run_once(cfg, &opts, time::OffsetDateTime::now_utc())?;
        Some(lock)
    } else {
        None
    };
    let full_node = result.report.compute_node.clone();
    if let Some(t) = target {
        let node = result
            .compute_node
            .to_primitive_at(t, Some(&manifest))
            .map_err(|e| anyhow::anyhow!("--object-version {t}: {e}"))?;
        result.report.compute_node = Some(node);
    }
    let text = match cli.format {
        Format::Json => serde_json::to_string_pretty(&result.report)? + "\n",
        Format::Table => table::render(&result.report),
        Format::Nova => {
            let node = result
                .report
                .compute_node
                .as_ref()
                .map(serde_json::to_string_pretty)
                .transpose()?;
            node.unwrap_or_default() + "\n"
        }
    };
    let mut stdout = std::io::stdout().lock();
    // A closed pipe (`| head`) is not an error worth a message.
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        Err(e) => return Err(e.into()),
    }
    if cli.report {
        report(cfg, &result, full_node.as_ref())?;
    }
    Ok(())
}

fn report(
    cfg: &crate::config::ValidConfig,
    result: &crate::daemon::once::OnceResult,
    node: Option<&serde_json::Value>,
) -> anyhow::Result<()> {
    let uuid = result
        .compute_node
        .obj
        .uuid
        .get()
        .and_then(|u| uuid::Uuid::parse_str(u).ok())
        .ok_or_else(|| anyhow::anyhow!("the compute node has no valid uuid"))?;
    let name = result
        .compute_node
        .obj
        .hypervisor_hostname
        .get()
        .cloned()
        .unwrap_or_default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let outcome = runtime.block_on(crate::upstream::report_once(
        cfg,
        &result.view,
        uuid,
        &name,
        false,
        &[],
        node,
    ))?;
    eprintln!(
        "rtrackd: reported to Placement: {} change(s), requests {}",
        outcome.changes, outcome.requests
    );
    if outcome.inventory_in_use > 0 || outcome.allocations_rejected > 0 {
        anyhow::bail!(
            "Placement refused part of the report: {} inventory write(s) kept in-use classes, {} allocation(s) rejected",
            outcome.inventory_in_use,
            outcome.allocations_rejected
        );
    }
    Ok(())
}
