//! `rtrackd`: the rtrack host agent.
//!
//! `rtrackd --once` probes the host, prints the inventory and exits.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};

use rtrack::inventory::{table, InventoryReport};
use rtrack::probes::{self, HostRoot};

/// rtrack host agent: probes CPUs, NUMA, memory, disks and PCI devices from sysfs/procfs.
#[derive(Debug, Parser)]
#[command(name = "rtrackd", version, about)]
struct Cli {
    /// Probe once, print the inventory and exit.
    #[arg(long)]
    once: bool,

    /// Output format for --once.
    #[arg(long, value_enum, default_value_t = Format::Json)]
    format: Format,

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
    #[arg(long, value_name = "PATH", default_value = "/var/lib/nova/instances")]
    instances_path: String,

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

fn run(cli: &Cli) -> anyhow::Result<()> {
    if !cli.once {
        anyhow::bail!("nothing to do: pass --once to print the inventory (see --help)");
    }
    let mut root = match &cli.root {
        Some(dir) => HostRoot::under(dir),
        None => HostRoot::system(),
    };
    if let Some(sys) = &cli.sysfs {
        root.sys = sys.clone();
    }
    if let Some(proc_) = &cli.procfs {
        root.proc = proc_.clone();
    }
    let opts = probes::ProbeOptions {
        disk: probes::disk::DiskOptions {
            instances_path: (cli.instances_path != "none")
                .then(|| PathBuf::from(&cli.instances_path)),
            include_virtual: cli.include_virtual_disks,
        },
    };
    let inventory = probes::probe_host(&root, &opts)?;
    let report = InventoryReport::new(inventory, time::OffsetDateTime::now_utc());
    let text = match cli.format {
        Format::Json => {
            let mut s = serde_json::to_string_pretty(&report)?;
            s.push('\n');
            s
        }
        Format::Table => table::render(&report),
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
