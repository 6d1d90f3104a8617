//! `rtrackd` as a daemon: load the configuration, open the store, audit once, listen on the
//! API socket, tell systemd it is ready, then audit every interval, report upstream, reload on
//! SIGHUP and drain on SIGTERM.
//!
//! In: the [`DaemonOptions`], the [`LoadedConfig`] the caller checked, the [`LogHandle`], and
//! SIGHUP, SIGTERM and SIGINT. Out: the daemon running until SIGTERM or SIGINT: the state directory
//! locked, the store open, the API socket (and the metrics listener) served, audits, upstream
//! reports and systemd notifications; an error when startup fails (state directory, lock, first
//! probe, store, socket).
//!
//! One tokio runtime on one thread serves the socket; tracker operations (which wait for
//! their fsync) and probes run on the blocking pool.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};

use super::audit::{self, Auditor};
use super::config_file::{self, LoadedConfig, Overrides};
use super::error::DaemonError;
use super::lifecycle::{self, Signals};
use super::logging::LogHandle;
use super::{socket, systemd};
use crate::api::metrics::Metrics;
use crate::api::peer::Access;
use crate::api::shared::DaemonState;
use crate::config::diff;
use crate::service::TrackerService;
use crate::store::lock::StateDirLock;
use crate::store::node_id;
use crate::tracker::model::HostNames;
use crate::tracker::TrackerSettings;

/// The daemon's inputs from the command line.
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    /// `--config`.
    pub config_path: Option<PathBuf>,
    /// Overrides of file values.
    pub overrides: Overrides,
    /// `--start-empty`: move a database that holds no rtrack state aside and start with none.
    pub start_empty: bool,
}

/// Runs the daemon until SIGTERM/SIGINT. `loaded` is the configuration already checked by the
/// caller; `log` changes the log level on reload.
pub fn run(opts: DaemonOptions, loaded: LoadedConfig, log: LogHandle) -> Result<(), DaemonError> {
    // Blocking-pool threads would each get a glibc arena holding its own free memory; two
    // arenas are plenty for a daemon whose work is mostly waiting for fsync.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator tuning; called before any thread is started.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name("rtrackd")
        .build()?;
    let result = runtime.block_on(main_loop(opts, loaded, log));
    // A probe stuck in the kernel (a hung filesystem) holds its blocking thread forever; the
    // process exits anyway instead of waiting for it.
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

fn host_names(cfg: &crate::config::ValidConfig, host: &crate::probes::HostInventory) -> HostNames {
    let probed = host.host.hostname.as_deref();
    HostNames {
        host: super::once::node_name(cfg.host.host.as_deref(), probed),
        node: super::once::node_name(cfg.host.hypervisor_hostname.as_deref(), probed),
    }
}

fn settings_for(
    cfg: &crate::config::ValidConfig,
    id: &node_id::NodeId,
    names: HostNames,
) -> TrackerSettings {
    TrackerSettings {
        names,
        node_uuid: id.uuid.clone(),
        node_created_at: id.created_at,
        policy: cfg.into(),
    }
}

async fn main_loop(
    opts: DaemonOptions,
    loaded: LoadedConfig,
    log: LogHandle,
) -> Result<(), DaemonError> {
    let started = Instant::now();
    let cfg = loaded.valid.clone();
    // The lock is held until the daemon exits: a second daemon on this directory would hand
    // out the same devices twice.
    let (state_dir, _state_lock) = lock_state_dir(&cfg)?;
    // Signals are ours from here on: SIGTERM during startup ends it cleanly, even while the
    // first probe hangs.
    let mut signals = Signals::take()?;
    let Some(Started {
        service,
        state,
        auditor,
        access,
    }) = start(&opts, &loaded, &state_dir, &mut signals).await?
    else {
        return Ok(());
    };
    crate::service::release_free_memory();
    let (stop_tx, stop_rx) = watch::channel(false);
    let servers = lifecycle::serve(&cfg, &state, &access, &stop_rx).await?;
    let kick = Arc::new(Notify::new());
    // Runs even with nothing to report to: a reload may configure Placement.
    let reporter = tokio::spawn(super::report::run(
        state.clone(),
        kick.clone(),
        stop_rx.clone(),
    ));
    let ready_status = format!(
        "serving on {}; {} instances, {} PCI devices tracked",
        servers.socket_path.display(),
        service.read(|t| t.state().instances.len()),
        service.read(|t| t.state().devices.len())
    );
    systemd::ready(&ready_status);
    tracing::info!(socket = %servers.socket_path.display(), seconds = started.elapsed().as_secs_f64(), "rtrackd ready");

    let mut tasks = vec![
        reporter,
        spawn_audits(
            auditor.clone(),
            state.clone(),
            kick.clone(),
            stop_rx.clone(),
        ),
        spawn_refreshes(state.clone(), auditor.clone()),
    ];
    tasks.extend(
        systemd::watchdog_interval()
            .map(|every| spawn_watchdog(service.clone(), every, stop_rx.clone())),
    );
    let reloads = Reloads {
        opts: &opts,
        state: &state,
        log: &log,
        socket_path: &servers.socket_path,
        auditor: &auditor,
        kick: &kick,
    };
    serve_until_stopped(&mut signals, loaded, &reloads).await;
    lifecycle::drain(&state, service, stop_tx, servers, tasks).await
}

/// What startup made: the service over the store, the state the API shares, the auditor.
struct Started {
    service: Arc<TrackerService>,
    state: Arc<DaemonState>,
    auditor: Arc<Auditor>,
    access: Access,
}

/// Startup, up to serving: the first probe, the compute node's identity, the store, the shared
/// state and the first audit. `None` when SIGTERM or SIGINT ended it.
async fn start(
    opts: &DaemonOptions,
    loaded: &LoadedConfig,
    state_dir: &std::path::Path,
    signals: &mut Signals,
) -> Result<Option<Started>, DaemonError> {
    let cfg = &loaded.valid;
    let caller_disk = caller_disk_at_start(cfg, state_dir);
    let Some(host) = lifecycle::first_probe(cfg, caller_disk, signals).await? else {
        return Ok(None);
    };
    for w in config_file::check_against_host(loaded, &host).map_err(DaemonError::Refused)? {
        tracing::warn!("{w}: nothing offered for it until the host has it");
    }
    let names = host_names(cfg, &host);
    // At the first start of a state directory, nova-compute's provider for this host (if any)
    // gives the uuid; SIGTERM meanwhile ends the start.
    let (id, chosen) = tokio::select! {
        r = super::identity::resolve(state_dir, cfg, &names) => r?,
        _ = signals.term.recv() => return Ok(None),
        _ = signals.int.recv() => return Ok(None),
    };
    lifecycle::log_identity(&id, &chosen);
    let settings = settings_for(cfg, &id, names);
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        config = %loaded.path.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "(built-in defaults)".into()),
        sysfs = %cfg.host.probe_root.sys.display(), procfs = %cfg.host.probe_root.proc.display(),
        state_dir = %state_dir.display(), node = %settings.names.node, node_uuid = %settings.node_uuid,
        "rtrackd starting"
    );
    let db = state_dir.join("rtrack.db");
    if opts.start_empty {
        start_empty(&db)?;
    }
    let service = Arc::new(
        tokio::task::spawn_blocking(move || TrackerService::open(settings, host, &db)).await??,
    );
    let metrics = Arc::new(Metrics::new());
    service.observe_commits(metrics.commit_latency.clone());
    service.observe_stages(metrics.service_stages());
    let access = Access::for_group(&cfg.api.socket_group);
    if access.group.is_none() {
        tracing::warn!(group = %cfg.api.socket_group, "the socket group does not exist: only root and rtrackd's own user may use the API");
    }
    let state = Arc::new(DaemonState::new(
        service.clone(),
        metrics,
        cfg.clone(),
        access.clone(),
    ));
    state.init_caller_disk(caller_disk, state_dir.to_path_buf());
    let auditor = Arc::new(Auditor::new(state.clone()));
    // The probe above worked; an audit that cannot save what it found (a full disk, a locked
    // store) does not keep rtrackd from serving what the store holds: it is logged, /healthz
    // says degraded, and the next interval tries again.
    if let Err(e) = auditor
        .run_once(audit::time_limit(cfg.audit.interval_s))
        .await
    {
        tracing::error!(error = %e, "the first audit failed; serving what the store holds and retrying every interval");
    }
    Ok(Some(Started {
        service,
        state,
        auditor,
        access,
    }))
}

/// The state directory, created if need be, and its lock.
fn lock_state_dir(
    cfg: &crate::config::ValidConfig,
) -> Result<(PathBuf, StateDirLock), DaemonError> {
    let state_dir = config_file::state_dir(cfg);
    std::fs::create_dir_all(&state_dir).map_err(|e| {
        DaemonError::Refused(format!(
            "{}: cannot create the state directory: {e}",
            state_dir.display()
        ))
    })?;
    let lock = StateDirLock::acquire(&state_dir)?;
    Ok((state_dir, lock))
}

/// What a SIGHUP reload needs.
struct Reloads<'a> {
    opts: &'a DaemonOptions,
    state: &'a Arc<DaemonState>,
    log: &'a LogHandle,
    socket_path: &'a std::path::Path,
    auditor: &'a Arc<Auditor>,
    kick: &'a Arc<Notify>,
}

/// Reloads on SIGHUP until SIGTERM or SIGINT.
async fn serve_until_stopped(signals: &mut Signals, loaded: LoadedConfig, r: &Reloads<'_>) {
    let mut current = loaded;
    loop {
        tokio::select! {
            _ = signals.term.recv() => { tracing::info!("SIGTERM: draining"); return; }
            _ = signals.int.recv() => { tracing::info!("SIGINT: draining"); return; }
            _ = signals.hup.recv() => {
                systemd::reloading();
                match reload(r.opts, &current, r.state, r.log, r.socket_path) {
                    Ok(next) => {
                        current = next;
                        // New device specs or ratios: audit now rather than in a minute.
                        let auditor = r.auditor.clone();
                        let kick = r.kick.clone();
                        let limit = audit::time_limit(r.state.config().audit.interval_s);
                        tokio::spawn(async move {
                            if auditor.run_once(limit).await.is_ok() {
                                kick.notify_one();
                            }
                        });
                        systemd::ready("serving; configuration reloaded");
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "configuration reload rejected; the old configuration stays in force");
                        systemd::ready(&format!("serving; reload rejected: {e}"));
                    }
                }
            }
        }
    }
}

/// The DISK_GB totals kept from the caller (`[host] disk_source = "caller"`). A file that
/// cannot be read is logged and left for the next `POST /v1/refresh` to replace.
fn caller_disk_at_start(
    cfg: &crate::config::ValidConfig,
    state_dir: &std::path::Path,
) -> Option<crate::api::disk_facts::DiskTotals> {
    if cfg.host.disk_source != crate::config::DiskSource::Caller {
        return None;
    }
    match crate::api::disk_facts::DiskTotals::load(state_dir) {
        Ok(Some(t)) => Some(t),
        Ok(None) => {
            tracing::warn!("[host] disk_source = \"caller\": no DISK_GB totals given yet; none is reported until POST /v1/refresh gives disk_gb");
            None
        }
        Err(e) => {
            tracing::error!(error = %e, "[host] disk_source = \"caller\": the kept DISK_GB totals cannot be read; none is reported until POST /v1/refresh gives disk_gb");
            None
        }
    }
}

/// Audits every interval (jittered); a successful one wakes the reporter.
fn spawn_audits(
    auditor: Arc<Auditor>,
    state: Arc<DaemonState>,
    kick: Arc<Notify>,
    mut stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let cfg = state.config();
            let delay = audit::next_delay(cfg.audit.interval_s, cfg.audit.jitter_s);
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = stop.changed() => return,
            }
            let limit = audit::time_limit(cfg.audit.interval_s);
            if auditor.run_once(limit).await.is_ok() {
                kick.notify_one();
            }
        }
    })
}

/// Refreshes asked for over the API: audit now, then report now; answered once both are done.
fn spawn_refreshes(state: Arc<DaemonState>, auditor: Arc<Auditor>) -> tokio::task::JoinHandle<()> {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<crate::api::shared::RefreshRequest>(16);
    state.set_refresh(Some(tx));
    tokio::spawn(async move {
        while let Some(reply) = rx.recv().await {
            let _ = reply.send(refresh_now(&state, &auditor).await);
        }
    })
}

/// systemd's watchdog: pinged only while the tracker answers.
fn spawn_watchdog(
    service: Arc<TrackerService>,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let s = service.clone();
            let alive =
                tokio::time::timeout(every, tokio::task::spawn_blocking(move || s.read(|_| ())))
                    .await
                    .is_ok();
            if alive {
                systemd::watchdog();
            } else {
                tracing::error!("the tracker lock was not free within the watchdog interval; not pinging systemd");
            }
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stop.changed() => return,
            }
        }
    })
}

/// One refresh: an audit, then (with Placement configured) a report that does not wait for a
/// backoff.
async fn refresh_now(
    state: &Arc<DaemonState>,
    auditor: &Auditor,
) -> crate::api::shared::RefreshAnswer {
    let limit = audit::time_limit(state.config().audit.interval_s);
    let audit_error = auditor.run_once(limit).await.err();
    let placement = match (
        state.upstream(),
        state.config().placement_settings.is_some(),
    ) {
        (Some(tx), true) => {
            let (reply, answer) = tokio::sync::oneshot::channel();
            let sent = tx
                .send(crate::api::shared::UpstreamCommand::ReportNow { reply })
                .await;
            Some(match (sent, answer.await) {
                (Ok(()), Ok(r)) => r.map_err(|e| e.to_string()),
                _ => Err("the report loop stopped (shutting down)".to_string()),
            })
        }
        _ => None,
    };
    crate::api::shared::RefreshAnswer {
        audit_error,
        placement,
    }
}

/// SIGHUP: read the file again; if it is valid, put what can change live in force and say what
/// changed (and what needs a restart).
fn reload(
    opts: &DaemonOptions,
    current: &LoadedConfig,
    state: &Arc<DaemonState>,
    log: &LogHandle,
    socket_path: &std::path::Path,
) -> Result<LoadedConfig, DaemonError> {
    let next = config_file::load(opts.config_path.as_deref(), &opts.overrides)?;
    let host = state.service.read(|t| t.view().host.clone());
    for w in config_file::check_against_host(&next, &host).map_err(DaemonError::Refused)? {
        tracing::warn!("{w}: nothing offered for it until the host has it");
    }
    // Pins and pages the claims hold must still fit the new CPU sets and reserved pages.
    let held = state.service.read(|t| t.numa_problems_under(&next.valid));
    if !held.is_empty() {
        return Err(DaemonError::Refused(format!(
            "the new [resources] would leave what instances hold outside the host's NUMA capacity: {}",
            held.join("; ")
        )));
    }
    let changes = diff::diff(&current.raw, &next.raw);
    // A clouds.yaml or secure.yaml may have changed under an unchanged file.
    let upstream_changed = {
        let old = state.config();
        old.placement_settings != next.valid.placement_settings
            || old.http_push != next.valid.http_push
    };
    if changes.is_empty() && !upstream_changed {
        tracing::info!("configuration reloaded: nothing changed");
        return Ok(next);
    }
    if upstream_changed && changes.iter().all(|c| !c.key.starts_with("placement.")) {
        tracing::info!(
            "the Placement settings changed (clouds.yaml); the reporter starts over with them"
        );
    }
    let (live, restart): (Vec<_>, Vec<_>) =
        changes.iter().partition(|c| diff::applies_live(&c.key));
    // Log level first: the lines below are then logged at the new level.
    if live.iter().any(|c| c.key == "log.level") {
        log.set_level(&next.valid.log.level)
            .map_err(|e| DaemonError::Refused(format!("log.level: {e}")))?;
    }
    if live.iter().any(|c| c.key == "api.socket_group") {
        let access = Access::for_group(&next.valid.api.socket_group);
        match &access.group {
            Some((gid, _)) => socket::set_group(socket_path, *gid)?,
            None => {
                tracing::warn!(group = %next.valid.api.socket_group, "the new socket group does not exist: only root and rtrackd's own user may use the API")
            }
        }
        state.set_access(access);
    }
    // What needs a restart (host names, the probe root, `[devices]`, ...) stays as it runs.
    let valid = diff::in_force_after_reload(&state.config(), &next.valid);
    state.service.update_config(valid.clone());
    state.set_config(valid.clone());
    let live_text: Vec<String> = live.iter().map(|c| c.to_string()).collect();
    let restart_text: Vec<String> = restart.iter().map(|c| c.key.clone()).collect();
    tracing::info!(
        applied = %live_text.join("; "),
        needs_restart = %restart_text.join(", "),
        "configuration reloaded"
    );
    Ok(LoadedConfig { valid, ..next })
}

/// `--start-empty`: a database that cannot be opened as rtrack's is moved aside (never deleted)
/// so the daemon starts with no claims; one that opens is kept, and the flag does nothing.
fn start_empty(db: &std::path::Path) -> Result<(), DaemonError> {
    if !db.exists() {
        return Ok(());
    }
    match crate::store::Store::open(db) {
        Ok(_) => {
            tracing::warn!(path = %db.display(), "--start-empty: the database holds rtrack state; it is kept and used");
            Ok(())
        }
        Err(
            e @ (crate::store::StoreError::Sqlite { .. } | crate::store::StoreError::TooNew { .. }),
        ) => {
            // Locked, unreadable, or from a newer rtrack: not something to start over from.
            Err(DaemonError::Refused(format!(
                "--start-empty does not apply: {e}"
            )))
        }
        Err(e) => {
            let stamp = time::OffsetDateTime::now_utc().unix_timestamp();
            let mut aside = db.as_os_str().to_owned();
            aside.push(format!(".bad-{stamp}"));
            let aside = PathBuf::from(aside);
            std::fs::rename(db, &aside).map_err(|r| {
                DaemonError::Refused(format!(
                    "--start-empty: cannot move {} aside: {r}",
                    db.display()
                ))
            })?;
            for suffix in ["-wal", "-shm"] {
                let mut side = db.as_os_str().to_owned();
                side.push(suffix);
                let mut side_aside = aside.as_os_str().to_owned();
                side_aside.push(suffix);
                let _ = std::fs::rename(PathBuf::from(side), PathBuf::from(side_aside));
            }
            tracing::warn!(path = %db.display(), kept_as = %aside.display(), reason = %e, "--start-empty: the database held no usable rtrack state; it was moved aside and rtrackd starts with no claims");
            Ok(())
        }
    }
}

/// Descriptors kept for everything but API connections: the store, the probe's files, the
/// upstream client, the log.
const RESERVED_FDS: u64 = 128;

/// The connection cap that fits the process's descriptor limit. The soft limit is raised to
/// the hard one first (systemd's default soft limit is 1024); a configured cap that still does
/// not fit is lowered, with a warning, so that audits and commits always have descriptors.
pub(super) fn connection_cap(configured: u64) -> usize {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let soft = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => hard,
            Err(_) => soft,
        },
        Ok((soft, _)) => soft,
        Err(_) => 1024,
    };
    let fits = soft.saturating_sub(RESERVED_FDS).max(1);
    if configured > fits {
        tracing::warn!(
            configured,
            used = fits,
            nofile = soft,
            "[api] max_connections does not fit the descriptor limit (LimitNOFILE); serving fewer"
        );
    }
    usize::try_from(configured.min(fits)).unwrap_or(usize::MAX)
}
