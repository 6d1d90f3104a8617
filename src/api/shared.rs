//! What the daemon's parts share: the tracker service, the configuration in force (swapped on
//! SIGHUP), the last probe's report, audit health and metrics. The API reads it; the audit loop
//! and the reload handler write it.
//!
//! In: the [`TrackerService`], the [`Metrics`], the [`ValidConfig`] and the [`Access`] at start; a
//! new configuration and access on SIGHUP; each audit's result; the start of the drain. Out: what
//! the API reads: the service, the configuration in force, when the held probe was taken, the
//! [`AuditHealth`], who may connect, and whether new requests are refused.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;

use super::metrics::Metrics;
use super::peer::Access;
use crate::config::ValidConfig;
use crate::service::TrackerService;
use crate::upstream::reconcile::Drift;
use crate::upstream::reporter::drift::FixReport;

/// What the API asks of the report loop, which holds the Placement client.
#[derive(Debug)]
pub enum UpstreamCommand {
    /// Read Placement now and compare with the local claims; with `fix`, write what rtrack
    /// owns and read again.
    Reconcile {
        /// Write what rtrack owns.
        fix: bool,
        /// Unclaimed consumers whose part on this host to remove (the operator named them).
        remove: Vec<uuid::Uuid>,
        /// The answer.
        reply: tokio::sync::oneshot::Sender<Result<ReconcileAnswer, UpstreamCommandError>>,
    },
    /// Report to Placement now, even while backing off (`POST /v1/refresh`, after its audit).
    ReportNow {
        /// What was written, or why not.
        reply: tokio::sync::oneshot::Sender<Result<ReportSummary, UpstreamCommandError>>,
    },
    /// Read the provider tree and every allocation on it, with each consumer's owner (adoption).
    ReadAllocations {
        /// The answer.
        reply: tokio::sync::oneshot::Sender<
            Result<crate::upstream::reporter::holdings::HoldingsRead, UpstreamCommandError>,
        >,
    },
}

/// Why the report loop could not answer a command: the API tells these apart by kind (409 for
/// no Placement configured, 503 for the rest).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamCommandError {
    /// No `[placement]` endpoint, cloud or auth: there is nothing to ask.
    #[error("Placement is not configured ([placement] endpoint, cloud or auth)")]
    NotConfigured,
    /// Configured, but the client could not be set up.
    #[error("the Placement client could not be set up (see the log)")]
    ClientUnavailable,
    /// The desired state could not be built from the tracker.
    #[error("{0}")]
    Desired(String),
    /// Placement did not answer, or refused.
    #[error("{0}")]
    Placement(String),
}

/// What a report asked for by `POST /v1/refresh` did.
#[derive(Debug, Clone, Default, serde::Serialize, utoipa::ToSchema)]
pub struct ReportSummary {
    /// Writes Placement accepted.
    pub changes: u32,
    /// Requests sent.
    pub requests: u64,
    /// Generation conflicts met (each re-read and retried).
    pub conflicts: u32,
    /// Inventory changes Placement refused because the classes to go are in use (the old
    /// records were kept): which provider, whether it is a PCI provider, Placement's detail.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub inventory_in_use: Vec<InventoryInUse>,
    /// PCI providers whose total is kept above what the device specs report, at what
    /// instances hold there (a spec changed under them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pci_raised: Vec<crate::upstream::desired::PciRaised>,
}

/// An inventory change Placement refused because allocations use the classes it removes.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct InventoryInUse {
    /// The provider.
    pub provider: uuid::Uuid,
    /// It holds a PCI device's inventory (Nova stops nova-compute at start for those).
    pub pci: bool,
    /// Placement's words.
    pub detail: String,
}

/// `POST /v1/refresh`: audit now, then report now; the answer once both are done.
pub type RefreshRequest = tokio::sync::oneshot::Sender<RefreshAnswer>;

/// What a refresh did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RefreshAnswer {
    /// The audit's error, if it failed (the tracker keeps the last good probe).
    pub audit_error: Option<String>,
    /// The report, when Placement is configured; its error when it failed.
    pub placement: Option<Result<ReportSummary, String>>,
}

/// The answer to [`UpstreamCommand::Reconcile`].
#[derive(Debug, Clone)]
pub enum ReconcileAnswer {
    /// Read and compared.
    Inspected(Drift),
    /// Read, fixed, read again.
    Fixed(FixReport),
    /// Unclaimed consumers removed (or refused), and the drift read after.
    Removed(crate::upstream::reporter::drift::RemovalReport, Drift),
}

/// The last reconciliation's result, for `/healthz`.
#[derive(Debug, Clone, Default)]
pub struct DriftHealth {
    /// Confirmed drift counts by kind.
    pub counts: std::collections::BTreeMap<&'static str, usize>,
    /// When it was judged, `YYYY-MM-DDTHH:MM:SSZ`.
    pub at: Option<String>,
}

/// How the audits have been going.
#[derive(Debug, Clone, Default)]
pub struct AuditHealth {
    /// Audits that succeeded.
    pub succeeded: u64,
    /// Audits that failed in a row (0 after a success).
    pub failing_in_a_row: u64,
    /// When the last successful audit ended.
    pub last_success: Option<Instant>,
    /// Wall-clock time of the last successful audit, `YYYY-MM-DDTHH:MM:SSZ`.
    pub last_success_at: Option<String>,
    /// The last failure's message.
    pub last_error: Option<String>,
    /// Duration of the last audit.
    pub last_duration: Option<Duration>,
}

/// The daemon's shared state.
pub struct DaemonState {
    /// The tracker and its store.
    pub service: Arc<TrackerService>,
    /// The daemon's Prometheus registry and its counters.
    pub metrics: Arc<Metrics>,
    config: RwLock<Arc<ValidConfig>>,
    probed_at: RwLock<Option<String>>,
    health: RwLock<AuditHealth>,
    access: RwLock<Access>,
    stopping: AtomicBool,
    upstream: parking_lot::Mutex<Option<tokio::sync::mpsc::Sender<UpstreamCommand>>>,
    refresh: parking_lot::Mutex<Option<tokio::sync::mpsc::Sender<RefreshRequest>>>,
    drift: RwLock<Option<DriftHealth>>,
    /// `[host] disk_source = "caller"`: the totals last given, and the state directory that
    /// keeps them.
    caller_disk: RwLock<(
        Option<super::disk_facts::DiskTotals>,
        Option<std::path::PathBuf>,
    )>,
}

impl DaemonState {
    /// Shared state around a service.
    pub fn new(
        service: Arc<TrackerService>,
        metrics: Arc<Metrics>,
        config: ValidConfig,
        access: Access,
    ) -> DaemonState {
        DaemonState {
            service,
            metrics,
            config: RwLock::new(Arc::new(config)),
            probed_at: RwLock::new(None),
            health: RwLock::new(AuditHealth::default()),
            access: RwLock::new(access),
            stopping: AtomicBool::new(false),
            upstream: parking_lot::Mutex::new(None),
            refresh: parking_lot::Mutex::new(None),
            drift: RwLock::new(None),
            caller_disk: RwLock::new((None, None)),
        }
    }

    /// The DISK_GB totals the caller gave last (`[host] disk_source = "caller"`).
    pub fn caller_disk(&self) -> Option<super::disk_facts::DiskTotals> {
        self.caller_disk.read().0
    }

    /// The totals kept at startup, and the state directory new ones are kept in.
    pub fn init_caller_disk(
        &self,
        totals: Option<super::disk_facts::DiskTotals>,
        state_dir: std::path::PathBuf,
    ) {
        *self.caller_disk.write() = (totals, Some(state_dir));
    }

    /// Keeps new totals in the state directory, then in force (a failed write changes nothing).
    pub fn set_caller_disk(&self, totals: super::disk_facts::DiskTotals) -> std::io::Result<()> {
        let mut held = self.caller_disk.write();
        if held.0 == Some(totals) {
            return Ok(());
        }
        if let Some(dir) = &held.1 {
            totals.save(dir)?;
        }
        held.0 = Some(totals);
        Ok(())
    }

    /// The configuration in force.
    pub fn config(&self) -> Arc<ValidConfig> {
        self.config.read().clone()
    }

    /// Puts a new configuration in force (the tracker's settings are changed separately).
    pub fn set_config(&self, config: ValidConfig) {
        *self.config.write() = Arc::new(config);
    }

    /// When the probe the tracker holds was taken (`None` before the first audit).
    pub fn probed_at(&self) -> Option<String> {
        self.probed_at.read().clone()
    }

    /// Records a successful audit and when its probe was taken.
    pub fn audit_succeeded(&self, probed_at: String, duration: Duration) {
        *self.probed_at.write() = Some(probed_at);
        let mut h = self.health.write();
        h.succeeded += 1;
        h.failing_in_a_row = 0;
        h.last_success = Some(Instant::now());
        h.last_success_at = Some(crate::inventory::format_utc(time::OffsetDateTime::now_utc()));
        h.last_duration = Some(duration);
        h.last_error = None;
    }

    /// Records a failed audit.
    pub fn audit_failed(&self, message: String, duration: Duration) {
        let mut h = self.health.write();
        h.failing_in_a_row += 1;
        h.last_error = Some(message);
        h.last_duration = Some(duration);
    }

    /// Audit health.
    pub fn health(&self) -> AuditHealth {
        self.health.read().clone()
    }

    /// Who may use the API.
    pub fn access(&self) -> Access {
        self.access.read().clone()
    }

    /// Changes who may use the API (a reloaded socket group).
    pub fn set_access(&self, access: Access) {
        *self.access.write() = access;
    }

    /// The report loop's command queue (set while it reports to Placement).
    pub fn set_upstream(&self, tx: Option<tokio::sync::mpsc::Sender<UpstreamCommand>>) {
        *self.upstream.lock() = tx;
    }

    /// Where to send commands to the report loop; `None` when Placement is not configured.
    pub fn upstream(&self) -> Option<tokio::sync::mpsc::Sender<UpstreamCommand>> {
        self.upstream.lock().clone()
    }

    /// The refresh task's queue (set once the daemon serves).
    pub fn set_refresh(&self, tx: Option<tokio::sync::mpsc::Sender<RefreshRequest>>) {
        *self.refresh.lock() = tx;
    }

    /// Where to ask for a refresh; `None` before the daemon serves (or in tests without one).
    pub fn refresh(&self) -> Option<tokio::sync::mpsc::Sender<RefreshRequest>> {
        self.refresh.lock().clone()
    }

    /// Records the last reconciliation's confirmed drift.
    pub fn set_drift(&self, d: Option<DriftHealth>) {
        *self.drift.write() = d;
    }

    /// The last reconciliation's drift (`None` before the first, or without Placement).
    pub fn drift(&self) -> Option<DriftHealth> {
        self.drift.read().clone()
    }

    /// The daemon is shutting down: new requests are refused.
    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    /// Starts refusing new requests.
    pub fn set_stopping(&self) {
        self.stopping.store(true, Ordering::Relaxed);
    }
}
