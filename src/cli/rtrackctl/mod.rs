//! `rtrackctl`: the operator's and script's client of rtrackd's socket. Human tables by
//! default, `--json` for scripts.
//!
//! In: the command line (one subcommand and its flags; the socket from `--socket`, `RTRACK_SOCKET`
//! or the default). Out: one request to rtrackd's API, its answer on stdout as a table or a line
//! (rtrackd's JSON with `--json`), and the exit code below.
//!
//! Exit codes: 0 done; 3 claim refused (or would be, with `--dry-run`): the reason on stderr,
//! or the error document on stdout with `--json`; also 3 for `reconcile` while drift remains and
//! for `adopt` when consumers cannot be adopted; 2 usage error (bad flags, an unreadable
//! `--file`, or rtrackd found the request malformed); 1 any other error (rtrackd unreachable,
//! not found, store failure...).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use serde_json::Value;

mod body;
mod commands;
mod numa;
mod pci;
mod placement;
mod tables;

use super::client::{self, Response};
pub use body::claim_body;
use body::{encode_query, instance_segment};
use tables::*;

/// Default socket path (rtrackd's default).
pub const DEFAULT_SOCKET: &str = "/run/rtrack/rtrack.sock";

/// Exit code: a claim was refused.
pub const EXIT_REFUSED: u8 = 3;
/// Exit code: usage error.
pub const EXIT_USAGE: u8 = 2;
/// Exit code: any other error.
pub const EXIT_ERROR: u8 = 1;

/// Client of rtrackd's local API: claims, migrations, usage and inventory of this host.
///
/// Exit codes: 0 done, 3 claim refused, 2 usage error, 1 other error.
#[derive(Debug, Parser)]
#[command(name = "rtrackctl", version)]
pub struct Cli {
    /// rtrackd's socket. Default: $RTRACK_SOCKET, else /run/rtrack/rtrack.sock.
    #[arg(long, global = true, value_name = "PATH")]
    pub socket: Option<PathBuf>,

    /// Print rtrackd's JSON answer instead of a table.
    #[arg(long, global = true)]
    pub json: bool,

    /// Seconds to wait for an answer.
    #[arg(long, global = true, default_value_t = 60, value_name = "SECONDS")]
    pub timeout: u64,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// rtrackctl's commands; each is one request to rtrackd's API.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// The host's inventory (the rtrackd --once report, with the ComputeNode as it is now).
    Inventory,
    /// Per resource class: total, reserved, capacity, used, free; PCI pools.
    Usage,
    /// Per NUMA cell: cores with who holds each CPU, memory and pages, local PCI devices.
    Numa,
    /// The ComputeNode primitive (JSON), optionally backported.
    ComputeNode {
        /// ComputeNode version, e.g. 1.16.
        #[arg(long, value_name = "X.Y")]
        version: Option<String>,
    },
    /// Claim resources for an instance.
    Claim(ClaimArgs),
    /// List claims, or show one instance's.
    Claims {
        /// Instance uuid.
        instance: Option<String>,
    },
    /// Abort an instance's claim (frees its resources and devices).
    Abort {
        /// Instance uuid.
        instance: String,
    },
    /// Claim (destination) or record (source) a resize, migration, live migration or evacuation.
    Migrate(MigrateArgs),
    /// List migrations known to this host.
    Migrations,
    /// Confirm a migration (the source frees the old side).
    Confirm {
        /// Migration id.
        id: i64,
    },
    /// Revert a migration (the destination frees the new side).
    Revert {
        /// Migration id.
        id: i64,
    },
    /// Change an instance's state (e.g. --vm-state deleted when it is gone).
    State(StateArgs),
    /// PCI devices: list them, release one-time-use devices, attach or detach a port's.
    Pci {
        /// What to do.
        #[command(subcommand)]
        command: pci::PciCommand,
    },
    /// Compare the local claims, Placement's allocations on this host's tree and the host's
    /// inventory (exit 3 while they differ); --fix writes what rtrack owns.
    Reconcile(placement::ReconcileArgs),
    /// Turn the instances Placement's allocations say this host runs (a host taken over from
    /// nova-compute) into local claims: the plan, or with --apply, the claims in one transaction.
    Adopt(placement::AdoptArgs),
    /// rtrackd's health.
    Health,
}

/// What an instance asks for.
#[derive(Debug, Args)]
pub struct RequestArgs {
    /// JSON file with the whole API body (see docs/api.md); "-" reads stdin. Excludes the
    /// sizing flags.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["vcpus", "memory_mb", "disk_gb", "pci_alias", "extra_spec", "image_property"])]
    pub file: Option<PathBuf>,
    /// Instance uuid.
    #[arg(long, value_name = "UUID")]
    pub instance: Option<String>,
    /// VCPUs the instance gets (counted as PCPU with --dedicated-cpus).
    #[arg(long, value_name = "N")]
    pub vcpus: Option<i64>,
    /// Memory, MiB.
    #[arg(long, value_name = "N")]
    pub memory_mb: Option<i64>,
    /// Root disk, GiB.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub disk_gb: i64,
    /// Ephemeral disk, GiB.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub ephemeral_gb: i64,
    /// Swap, MiB.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub swap_mb: i64,
    /// PCI devices through a [pci] alias, NAME:COUNT; repeatable.
    #[arg(long, value_name = "NAME:COUNT")]
    pub pci_alias: Vec<String>,
    /// Pinned CPUs (hw:cpu_policy=dedicated: counted as PCPU).
    #[arg(long)]
    pub dedicated_cpus: bool,
    /// A flavor extra spec, KEY=VALUE (e.g. hw:numa_nodes=2, hw:mem_page_size=1GB,
    /// hw:cpu_thread_policy=isolate); repeatable.
    #[arg(long, value_name = "KEY=VALUE")]
    pub extra_spec: Vec<String>,
    /// An image property, KEY=VALUE (e.g. hw_cpu_policy=dedicated); repeatable.
    #[arg(long, value_name = "KEY=VALUE")]
    pub image_property: Vec<String>,
    /// Booted from volume (no root disk here).
    #[arg(long)]
    pub boot_from_volume: bool,
    /// Project id.
    #[arg(long, value_name = "ID")]
    pub project: Option<String>,
    /// User id.
    #[arg(long, value_name = "ID")]
    pub user: Option<String>,
    /// Flavor id (default: derived from the sizes, so the same sizes give the same flavor).
    #[arg(long, value_name = "N")]
    pub flavor_id: Option<i64>,
}

/// Options of `rtrackctl claim`: the request, and whether only to check that it fits.
#[derive(Debug, Args)]
pub struct ClaimArgs {
    /// The request.
    #[command(flatten)]
    pub request: RequestArgs,
    /// Only say whether it fits.
    #[arg(long)]
    pub dry_run: bool,
}

/// Options of `rtrackctl migrate`: the request at the destination and the move's details.
#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// The request at the destination.
    #[command(flatten)]
    pub request: RequestArgs,
    /// resize, migration, live-migration or evacuation.
    #[arg(long = "type", value_name = "TYPE")]
    pub move_type: Option<String>,
    /// Nova's migration id (default: rtrackd assigns one).
    #[arg(long, value_name = "ID")]
    pub migration_id: Option<i64>,
    /// Source host (default: this host's instance record).
    #[arg(long, value_name = "HOST")]
    pub source_host: Option<String>,
    /// Source node.
    #[arg(long, value_name = "NODE")]
    pub source_node: Option<String>,
    /// Destination host (default: this host).
    #[arg(long, value_name = "HOST")]
    pub dest_host: Option<String>,
    /// Destination node (default: this node).
    #[arg(long, value_name = "NODE")]
    pub dest_node: Option<String>,
    /// Only say whether it fits.
    #[arg(long)]
    pub dry_run: bool,
}

/// Options of `rtrackctl state`: the instance and what to change about it.
#[derive(Debug, Args)]
pub struct StateArgs {
    /// Instance uuid.
    pub instance: String,
    /// New VM state (active, stopped, deleted, shelved_offloaded...).
    #[arg(long, value_name = "STATE")]
    pub vm_state: Option<String>,
    /// New task state ("" clears it).
    #[arg(long, value_name = "STATE")]
    pub task_state: Option<String>,
    /// New host.
    #[arg(long, value_name = "HOST")]
    pub host: Option<String>,
    /// New node.
    #[arg(long, value_name = "NODE")]
    pub node: Option<String>,
    /// Switch to the new flavor (after a resize).
    #[arg(long)]
    pub apply_new_flavor: bool,
}

/// A failure with its exit code.
#[derive(Debug)]
pub struct Failure {
    /// Exit code.
    pub code: u8,
    /// Message for stderr (empty: already printed).
    pub message: String,
}

fn usage(message: impl Into<String>) -> Failure {
    Failure {
        code: EXIT_USAGE,
        message: message.into(),
    }
}

fn failure(message: impl Into<String>) -> Failure {
    Failure {
        code: EXIT_ERROR,
        message: message.into(),
    }
}

/// Entry point of the `rtrackctl` binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(f) => {
            if !f.message.is_empty() {
                eprintln!("rtrackctl: {}", f.message);
            }
            ExitCode::from(f.code)
        }
    }
}

struct Ctx<'a> {
    socket: PathBuf,
    timeout: Duration,
    cli: &'a Cli,
}

impl Ctx<'_> {
    fn call(&self, method: &str, target: &str, body: Option<&Value>) -> Result<Value, Failure> {
        let bytes = body.map(|b| b.to_string().into_bytes());
        let r = client::request(&self.socket, method, target, bytes.as_deref(), self.timeout)
            .map_err(|e| failure(e.to_string()))?;
        self.answer(r)
    }

    fn answer(&self, r: Response) -> Result<Value, Failure> {
        let v = r.json();
        if (200..300).contains(&r.status) {
            return v.ok_or_else(|| {
                failure(format!(
                    "rtrackd answered {} with a body that is not JSON",
                    r.status
                ))
            });
        }
        let (code, message) = v
            .as_ref()
            .map(|v| {
                (
                    v["error"]["code"].as_str().unwrap_or("").to_string(),
                    v["error"]["message"].as_str().unwrap_or("").to_string(),
                )
            })
            .unwrap_or_default();
        let exit = match (r.status, code.as_str()) {
            (409, "claim_refused") => EXIT_REFUSED,
            (400, _) | (413, _) | (415, _) => EXIT_USAGE,
            _ => EXIT_ERROR,
        };
        if self.cli.json {
            if let Some(v) = &v {
                println!("{}", pretty(v));
                return Err(Failure {
                    code: exit,
                    message: String::new(),
                });
            }
        }
        let text = if message.is_empty() {
            String::from_utf8_lossy(&r.body).into_owned()
        } else {
            message
        };
        let prefix = if exit == EXIT_REFUSED {
            "refused: "
        } else {
            ""
        };
        Err(Failure {
            code: exit,
            message: format!(
                "{prefix}{text} (HTTP {}{})",
                r.status,
                if code.is_empty() {
                    String::new()
                } else {
                    format!(", {code}")
                }
            ),
        })
    }
}

/// Runs the command; returns what to print.
pub fn run(cli: &Cli) -> Result<String, Failure> {
    let socket = cli
        .socket
        .clone()
        .or_else(|| std::env::var_os("RTRACK_SOCKET").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET));
    let ctx = Ctx {
        socket,
        timeout: Duration::from_secs(cli.timeout.max(1)),
        cli,
    };
    match &cli.command {
        Command::Inventory => commands::inventory(&ctx),
        Command::Usage => {
            let v = ctx.call("GET", "/v1/usage", None)?;
            if cli.json {
                return json_out(&v);
            }
            Ok(usage_table(&v))
        }
        Command::Numa => {
            let v = ctx.call("GET", "/v1/numa", None)?;
            if cli.json {
                return json_out(&v);
            }
            Ok(numa::numa_screen(&v))
        }
        Command::ComputeNode { version } => {
            let target = match version {
                Some(v) => format!("/v1/compute-node?version={}", encode_query(v)),
                None => "/v1/compute-node".to_string(),
            };
            json_out(&ctx.call("GET", &target, None)?)
        }
        Command::Claim(a) => commands::claim(&ctx, a),
        Command::Claims { instance } => {
            let v = match instance {
                Some(u) => {
                    ctx.call("GET", &format!("/v1/claims/{}", instance_segment(u)?), None)?
                }
                None => ctx.call("GET", "/v1/claims", None)?,
            };
            if cli.json {
                return json_out(&v);
            }
            let list = match &v {
                Value::Array(a) => a.clone(),
                other => vec![other.clone()],
            };
            Ok(claims_table(&list))
        }
        Command::Abort { instance } => {
            let v = ctx.call(
                "DELETE",
                &format!("/v1/claims/{}", instance_segment(instance)?),
                None,
            )?;
            if cli.json {
                return json_out(&v);
            }
            Ok(format!("aborted the claim of {instance}\n"))
        }
        Command::Migrate(a) => commands::migrate(&ctx, a),
        Command::Migrations => {
            let v = ctx.call("GET", "/v1/migrations", None)?;
            if cli.json {
                return json_out(&v);
            }
            Ok(migrations_table(
                v.as_array().map(Vec::as_slice).unwrap_or(&[]),
            ))
        }
        Command::Confirm { id } | Command::Revert { id } => {
            let verb = if matches!(cli.command, Command::Confirm { .. }) {
                "confirm"
            } else {
                "revert"
            };
            let v = ctx.call("POST", &format!("/v1/migrations/{id}/{verb}"), None)?;
            if cli.json {
                return json_out(&v);
            }
            Ok(format!(
                "migration {id}: {}\n",
                v["migration"]["status"].as_str().unwrap_or("?")
            ))
        }
        Command::State(a) => commands::state(&ctx, a),
        Command::Pci { command } => pci::run(&ctx, command),
        Command::Reconcile(a) => placement::reconcile(&ctx, a),
        Command::Adopt(a) => placement::adopt(&ctx, a),
        Command::Health => commands::health(&ctx),
    }
}

/// `--json`: rtrackd's answer as it came, pretty-printed.
fn json_out(v: &Value) -> Result<String, Failure> {
    Ok(pretty(v) + "\n")
}

#[cfg(test)]
mod tests;
