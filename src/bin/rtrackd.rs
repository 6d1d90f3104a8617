//! `rtrackd`: the rtrack host agent.
//!
//! `rtrackd --once` probes the host, prints the inventory and exits.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, ValueEnum};

use rtrack::config::{Config, ValidConfig};
use rtrack::daemon::once::{run_once, OnceOptions};
use rtrack::inventory::table;
use rtrack::objects::{current_manifest, Manifest, ObjVersion};
use rtrack::probes::HostRoot;

/// Where the configuration lives by default (the daemon reads it when present).
const DEFAULT_CONFIG: &str = "/etc/rtrack/rtrack.toml";

/// rtrack host agent: probes CPUs, NUMA, memory, disks and PCI devices from sysfs/procfs and
/// tracks resource claims.
#[derive(Debug, Parser)]
#[command(name = "rtrackd", version, about)]
struct Cli {
    /// Probe once, print the inventory and exit.
    #[arg(long)]
    once: bool,

    /// Output format for --once: the whole report as JSON, a human table, or only the Nova
    /// ComputeNode primitive.
    #[arg(long, value_enum, default_value_t = Format::Json)]
    format: Format,

    /// ComputeNode version to produce (backported from the newest, 1.19), e.g. 1.16.
    #[arg(long, value_name = "X.Y")]
    object_version: Option<String>,

    /// JSON file with the version manifest for backports ({"PciDevicePoolList": "1.0", ...});
    /// default: rtrack's current versions of every object.
    #[arg(long, value_name = "FILE")]
    manifest: Option<PathBuf>,

    /// Configuration file (TOML). Default: /etc/rtrack/rtrack.toml when it exists.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,

    /// Probe a captured tree: sysfs is DIR/sys and procfs is DIR/proc.
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,

    /// sysfs mount point (overrides --root; containers often mount the host's at /host-sys).
    #[arg(long, value_name = "DIR")]
    sysfs: Option<PathBuf>,

    /// procfs mount point (overrides --root).
    #[arg(long, value_name = "DIR")]
    procfs: Option<PathBuf>,

    /// Directory holding instance disks, measured with statvfs for local_gb ("none" to skip).
    /// Default: the configuration's host.instances_path, else /var/lib/nova/instances.
    #[arg(long, value_name = "PATH")]
    instances_path: Option<String>,

    /// State directory (compute node uuid, database). Default: the configuration's
    /// host.state_dir, else $STATE_DIRECTORY, else /var/lib/rtrack.
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,

    /// Also list loop, ram and zram block devices.
    #[arg(long)]
    include_virtual_disks: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// One JSON document (schema in docs/inventory.md).
    Json,
    /// A human summary.
    Table,
    /// The ComputeNode primitive only (oslo.versionedobjects JSON).
    Nova,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rtrackd: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn load_config(cli: &Cli) -> anyhow::Result<ValidConfig> {
    let (text_path, must_exist) = match &cli.config {
        Some(p) => (p.clone(), true),
        None => (PathBuf::from(DEFAULT_CONFIG), false),
    };
    let mut cfg = if must_exist || text_path.exists() {
        Config::load(&text_path)?.validate(&text_path)?
    } else {
        ValidConfig::defaults()
    };
    if let Some(root) = &cli.root {
        cfg.probe_root = HostRoot::under(root);
    }
    if let Some(sys) = &cli.sysfs {
        cfg.probe_root.sys = sys.clone();
    }
    if let Some(proc_) = &cli.procfs {
        cfg.probe_root.proc = proc_.clone();
    }
    Ok(cfg)
}

fn state_dir(cli: &Cli, cfg: &ValidConfig) -> PathBuf {
    cli.state_dir
        .clone()
        .or_else(|| cfg.state_dir.clone())
        .or_else(|| std::env::var_os("STATE_DIRECTORY").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/var/lib/rtrack"))
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
    if !cli.once {
        anyhow::bail!("nothing to do: pass --once to print the inventory (see --help)");
    }
    let cfg = load_config(cli)?;
    let instances_path = match cli.instances_path.as_deref() {
        Some("none") => None,
        Some(p) => Some(PathBuf::from(p)),
        None => Some(cfg.instances_path.clone()),
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
        state_dir: state_dir(cli, &cfg),
        instances_path,
        include_virtual_disks: cli.include_virtual_disks,
    };
    let mut result = run_once(&cfg, &opts, time::OffsetDateTime::now_utc())?;
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
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(e.into()),
    }
}
