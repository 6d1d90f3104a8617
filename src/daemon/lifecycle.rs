//! The daemon's start and end, around `run.rs`'s main loop: the signals taken at once, the
//! first probe (bounded, and ended by SIGTERM), the compute node identity logged, the API
//! socket and metrics listener served, and the drain (requests in flight finish, tasks stop,
//! the store is flushed).
//!
//! In: the checked configuration and the daemon's state. Out: the host's first inventory, the
//! server tasks, or the error that stops the start.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::audit;
use super::error::DaemonError;
use super::identity::Chosen;
use super::{config_file, socket, systemd};
use crate::api::disk_facts::DiskTotals;
use crate::api::peer::Access;
use crate::api::shared::DaemonState;
use crate::api::{self, Limits};
use crate::config::ValidConfig;
use crate::probes::HostInventory;
use crate::service::TrackerService;
use crate::store::node_id::NodeId;

/// How long SIGTERM waits for in-flight requests before closing connections.
const DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// The signals the daemon handles, taken as soon as it starts.
pub(super) struct Signals {
    pub(super) term: Signal,
    pub(super) int: Signal,
    pub(super) hup: Signal,
}

impl Signals {
    /// Takes SIGTERM, SIGINT and SIGHUP from the default handlers.
    pub(super) fn take() -> std::io::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }
}

/// The first probe, which must work: without it there is no inventory to claim against. It is
/// bounded in time like every later one; `None` when SIGTERM or SIGINT ended the start.
pub(super) async fn first_probe(
    cfg: &ValidConfig,
    caller_disk: Option<DiskTotals>,
    signals: &mut Signals,
) -> Result<Option<HostInventory>, DaemonError> {
    let probe_cfg = cfg.clone();
    let limit = audit::time_limit(cfg.audit.interval_s);
    let probe = tokio::task::spawn_blocking(move || {
        audit::probe_with(&probe_cfg, caller_disk).map_err(|e| DaemonError::Refused(e.to_string()))
    });
    tokio::select! {
        r = tokio::time::timeout(limit, probe) => match r {
            Ok(joined) => Ok(Some(joined??)),
            Err(_) => Err(DaemonError::Refused(format!(
                "the first probe of {} and {} has not finished after {} s (a hung filesystem, or a file that never ends?); nothing was started",
                cfg.host.probe_root.sys.display(),
                cfg.host.probe_root.proc.display(),
                limit.as_secs()
            ))),
        },
        _ = signals.term.recv() => {
            tracing::info!("SIGTERM during startup: exiting");
            Ok(None)
        }
        _ = signals.int.recv() => {
            tracing::info!("SIGINT during startup: exiting");
            Ok(None)
        }
    }
}

/// Logs where the compute node uuid came from (nothing when it was stored).
pub(super) fn log_identity(id: &NodeId, chosen: &Chosen) {
    match chosen {
        Chosen::Stored => {}
        Chosen::Configured => {
            tracing::info!(node_uuid = %id.uuid, "compute node uuid from [host] compute_node_uuid")
        }
        Chosen::Adopted { name } => {
            tracing::info!(node_uuid = %id.uuid, provider = %name, "taking over the compute node provider nova-compute registered for this host: its uuid is kept as this node's")
        }
        Chosen::New => {
            tracing::info!(node_uuid = %id.uuid, "new compute node uuid")
        }
    }
}

/// The API socket's and the metrics listener's server tasks.
pub(super) struct Servers {
    /// The socket's path (removed at the end).
    pub(super) socket_path: PathBuf,
    /// The API server.
    pub(super) api: JoinHandle<()>,
    /// The metrics listener, when `[metrics] listen` is set.
    pub(super) metrics: Option<JoinHandle<()>>,
}

/// Binds the API socket (and the metrics listener) and serves them until `stop`.
pub(super) async fn serve(
    cfg: &ValidConfig,
    state: &Arc<DaemonState>,
    access: &Access,
    stop: &watch::Receiver<bool>,
) -> Result<Servers, DaemonError> {
    let socket_path = config_file::socket_path(cfg);
    let listener = socket::bind(
        &socket_path,
        cfg.api.socket_mode,
        access.group.as_ref().map(|g| g.0),
    )?;
    let limits = Limits {
        max_body_bytes: usize::try_from(cfg.api.max_body_bytes).unwrap_or(usize::MAX),
        timeout: Duration::from_secs(cfg.api.request_timeout_s),
    };
    let conn_limits = api::server::ConnLimits {
        max_connections: super::run::connection_cap(cfg.api.max_connections),
        header_timeout: Duration::from_secs(cfg.api.header_timeout_s),
    };
    let counters = state.metrics.connections.clone();
    let api = tokio::spawn(api::server::serve(
        listener,
        api::router(state.clone(), limits),
        conn_limits,
        counters.clone(),
        stop.clone(),
    ));
    let metrics = match cfg.metrics.listen {
        None => None,
        Some(addr) => {
            let l = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
                DaemonError::Refused(format!("[metrics] listen = \"{addr}\": cannot listen: {e}"))
            })?;
            tracing::info!(%addr, "metrics listener up");
            Some(tokio::spawn(api::server::serve(
                l,
                api::metrics_router(state.clone()),
                conn_limits,
                counters,
                stop.clone(),
            )))
        }
    };
    Ok(Servers {
        socket_path,
        api,
        metrics,
    })
}

/// Drains: stops taking requests, lets the ones in flight finish (at most [`DRAIN_LIMIT`]),
/// stops the tasks, flushes the store and removes the socket.
pub(super) async fn drain(
    state: &DaemonState,
    service: Arc<TrackerService>,
    stop: watch::Sender<bool>,
    servers: Servers,
    tasks: Vec<JoinHandle<()>>,
) -> Result<(), DaemonError> {
    systemd::stopping();
    let drain_start = Instant::now();
    state.set_stopping();
    let _ = stop.send(true);
    match tokio::time::timeout(DRAIN_LIMIT, servers.api).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "the API server task failed"),
        Err(_) => tracing::warn!(
            limit_s = DRAIN_LIMIT.as_secs(),
            "requests still running after the drain limit; closing"
        ),
    }
    for t in tasks {
        t.abort();
    }
    if let Some(m) = servers.metrics {
        m.abort();
    }
    tokio::task::spawn_blocking(move || service.shutdown()).await?;
    let _ = std::fs::remove_file(&servers.socket_path);
    tracing::info!(
        seconds = drain_start.elapsed().as_secs_f64(),
        "rtrackd stopped; the store is flushed"
    );
    Ok(())
}
