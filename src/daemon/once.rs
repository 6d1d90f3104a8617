//! `rtrackd --once`: probe, derive the tracker's view (inventory, tracked PCI devices, the
//! ComputeNode's host facts), build the ComputeNode, report.
//!
//! In: the [`ValidConfig`], the [`OnceOptions`] (state directory, instances path, virtual disks)
//! and the time. Out: a [`OnceResult`]: the [`InventoryReport`] with the ComputeNode primitive (no
//! instances counted), the ComputeNode object (for `--object-version`) and the [`HostView`] (for
//! `--report`); a [`ProbeError`] only for an unusable probe root.
//!
//! Nothing here fails on a bad host: only an unusable probe root is an error. Problems with the
//! node's identity (an unwritable state directory) become warnings and a name-derived uuid.

use std::path::PathBuf;
use std::sync::Arc;

use crate::config::ValidConfig;
use crate::inventory::InventoryReport;
use crate::objects::compute_node::ComputeNode;
use crate::objects::Versioned;
use crate::probes::{self, ProbeError, Warning};
use crate::store::node_id;
use crate::tracker::host_view::HostView;
use crate::tracker::model::HostNames;
use crate::tracker::node_template::{NodeIdentity, NodeUsage};
use crate::tracker::numa::nova::host_object;
use crate::tracker::numa::NumaUsage;
use crate::tracker::pci::pools::build_pools;
use crate::tracker::TrackerSettings;

/// What `--once` needs beyond the configuration.
#[derive(Debug, Clone)]
pub struct OnceOptions {
    /// State directory holding `compute_id`.
    pub state_dir: PathBuf,
    /// Measure this instances path (`None`: skip).
    pub instances_path: Option<PathBuf>,
    /// List loop/ram/zram devices too.
    pub include_virtual_disks: bool,
}

/// The report and the ComputeNode object it carries.
pub struct OnceResult {
    /// The full report (with `compute_node`).
    pub report: InventoryReport,
    /// The ComputeNode.
    pub compute_node: Versioned<ComputeNode>,
    /// What the tracker derives from the probe (for `--report`).
    pub view: HostView,
}

/// The node's name: configured, else the probed hostname, else this machine's.
pub fn node_name(configured: Option<&str>, probed: Option<&str>) -> String {
    configured
        .or(probed)
        .map(str::to_string)
        .or_else(|| {
            nix::unistd::gethostname()
                .ok()
                .map(|h| h.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "localhost".to_string())
}

/// Runs the one-shot inventory.
pub fn run_once(
    cfg: &ValidConfig,
    opts: &OnceOptions,
    now: time::OffsetDateTime,
) -> Result<OnceResult, ProbeError> {
    let probe_opts = probes::ProbeOptions {
        disk: probes::disk::DiskOptions {
            instances_path: opts.instances_path.clone(),
            include_virtual: opts.include_virtual_disks,
        },
        pci_vpd: cfg.pci.device_specs.iter().any(|s| s.remote_managed()),
        cpu_governors: cfg.resources.governor_cpus(),
    };
    let mut inventory = probes::probe_host(&cfg.host.probe_root, &probe_opts)?;
    let hostname = inventory.host.hostname.clone();
    let hypervisor_hostname =
        node_name(cfg.host.hypervisor_hostname.as_deref(), hostname.as_deref());
    let host = node_name(cfg.host.host.as_deref(), hostname.as_deref());
    // Read, never written: the daemon's first start chooses the identity (nova-compute's
    // provider for this host, if any), and a look at the inventory must not choose it first.
    let identity = match node_id::load(&opts.state_dir) {
        Ok(Some(id)) => NodeIdentity {
            uuid: id.uuid,
            hypervisor_hostname,
            host,
            created_at: id.created_at,
        },
        Ok(None) => NodeIdentity {
            uuid: node_id::derived(&hypervisor_hostname),
            hypervisor_hostname,
            host,
            created_at: now,
        },
        Err(e) => {
            inventory.warnings.push(Warning {
                path: opts.state_dir.join("compute_id").display().to_string(),
                message: format!(
                    "cannot read the compute node uuid ({e}); using one derived from the node name"
                ),
            });
            NodeIdentity {
                uuid: node_id::derived(&hypervisor_hostname),
                hypervisor_hostname,
                host,
                created_at: now,
            }
        }
    };
    let settings = TrackerSettings {
        policy: cfg.into(),
        names: HostNames {
            host: identity.host.clone(),
            node: identity.hypervisor_hostname.clone(),
        },
        node_uuid: identity.uuid.clone(),
        node_created_at: identity.created_at,
    };
    // The daemon's audit derives the same view from its probe.
    let view = HostView::build(Arc::new(inventory), &settings, 0).with_uptime_at(now);
    let pools = build_pools(view.tracked.values().map(|d| &**d), &cfg.pci.device_specs);
    let numa = host_object(&view.numa, &NumaUsage::default());
    let mut usage = NodeUsage::empty();
    if let Some(u) = &view.uptime {
        usage.stats.insert("uptime".into(), u.clone());
    }
    let node = view.node.with_usage(&usage, &numa, &pools, now);
    let mut report = InventoryReport::new(view.host.as_ref().clone(), now);
    report.offered = Some(view.offered());
    report.dedicated_cpus = crate::inventory::dedicated::dedicated_cpus(&view.host, &cfg.resources);
    report.compute_node = Some(node.to_primitive());
    Ok(OnceResult {
        report,
        compute_node: node,
        view,
    })
}
