//! The periodic audit (Nova's `update_available_resource`): probe the host, then update the
//! tracker with it. The probe runs on the blocking pool without the tracker lock, so claims go on
//! while it reads sysfs; only the update takes the lock. A probe that fails is logged and
//! retried next interval; one that hangs (a stuck NFS instances path) is not started twice.
//!
//! In: the [`DaemonState`] (the configuration in force, for the probe root and the instances path,
//! and the tracker service) and a time limit. Out: a checked [`HostInventory`] handed to the
//! service's audit, the outcome logged, the audit's health and metrics recorded in the shared
//! state, and a systemd status line when audits start or stop failing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::systemd;
use crate::api::disk_facts::DiskTotals;
use crate::api::shared::DaemonState;
use crate::config::DiskSource;
use crate::probes::{self, HostInventory};

/// How an [`Auditor`] probes the host.
pub type ProbeFn = Arc<dyn Fn(&DaemonState) -> Result<HostInventory, String> + Send + Sync>;

/// Probe options from the configuration.
pub fn probe_options(cfg: &crate::config::ValidConfig) -> probes::ProbeOptions {
    probes::ProbeOptions {
        disk: probes::disk::DiskOptions {
            // The caller's totals replace the measure (see `apply_disk_source`).
            instances_path: (cfg.host.disk_source == DiskSource::Statvfs)
                .then(|| cfg.host.instances_path.clone()),
            include_virtual: false,
        },
        pci_vpd: cfg.pci.device_specs.iter().any(|s| s.remote_managed()),
        cpu_governors: cfg.resources.governor_cpus(),
    }
}

/// Probes the host as configured now, and refuses a probe that cannot be right (no CPUs, no
/// memory, sysfs gone): the tracker would otherwise drop every free device and all capacity.
pub fn probe(state: &DaemonState) -> Result<HostInventory, String> {
    probe_with(&state.config(), state.caller_disk())
}

/// [`probe`] before the daemon's state exists (the first probe at start).
pub fn probe_with(
    cfg: &crate::config::ValidConfig,
    caller_disk: Option<DiskTotals>,
) -> Result<HostInventory, String> {
    let mut host =
        probes::probe_host(&cfg.host.probe_root, &probe_options(cfg)).map_err(|e| e.to_string())?;
    check_plausible(&host, &cfg.host.probe_root)?;
    apply_disk_source(&mut host, cfg, caller_disk);
    Ok(host)
}

/// With `[host] disk_source = "caller"`, the instances filesystem is the caller's totals (none
/// until the first: no DISK_GB is reported meanwhile).
pub fn apply_disk_source(
    host: &mut HostInventory,
    cfg: &crate::config::ValidConfig,
    caller: Option<DiskTotals>,
) {
    if cfg.host.disk_source == DiskSource::Caller {
        host.disks.instances = caller.map(|t| t.as_filesystem(&cfg.host.instances_path));
    }
}

/// Rejects a probe that found no online CPU or no memory, or whose sysfs PCI directory is gone.
pub fn check_plausible(host: &HostInventory, root: &probes::HostRoot) -> Result<(), String> {
    // sysfs must be there: its CPU directory is on every Linux host. A missing PCI bus is a
    // host without PCI devices (the probe warns), not a vanished sysfs.
    let cpu_dir = root.sys.join("devices/system/cpu");
    if !cpu_dir.is_dir() {
        return Err(format!(
            "{} is not a readable directory: sysfs is not mounted or not readable; keeping the last good inventory",
            cpu_dir.display()
        ));
    }
    if host.cpu.online.is_empty() {
        return Err(format!(
            "no online CPU found under {} and {}; keeping the last good inventory",
            root.sys.display(),
            root.proc.display()
        ));
    }
    if host.memory.total_mb == 0 {
        return Err(format!(
            "no memory found in {}/meminfo or the NUMA nodes; keeping the last good inventory",
            root.proc.display()
        ));
    }
    Ok(())
}

/// Runs audits; one at a time.
pub struct Auditor {
    state: Arc<DaemonState>,
    probe: ProbeFn,
    probing: Arc<AtomicBool>,
    /// Audits started, for the `audit` span's `cycle`.
    cycles: std::sync::atomic::AtomicU64,
}

impl Auditor {
    /// An auditor for the daemon: probes the configured root with [`probe`].
    pub fn new(state: Arc<DaemonState>) -> Auditor {
        Auditor::with_probe(state, Arc::new(probe))
    }

    /// An auditor that probes with `probe` (tests: a probe that hangs or fails on demand).
    pub fn with_probe(state: Arc<DaemonState>, probe: ProbeFn) -> Auditor {
        Auditor {
            state,
            probe,
            probing: Arc::new(AtomicBool::new(false)),
            cycles: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// One audit, waiting at most `limit` for it. Errors are logged, counted and kept for
    /// `/healthz`; never fatal. A probe still running after `limit` goes on in the background
    /// (it cannot be interrupted) and its result still counts when it ends.
    pub async fn run_once(&self, limit: Duration) -> Result<(), String> {
        use tracing::Instrument;
        let cycle = self.cycles.fetch_add(1, Ordering::Relaxed) + 1;
        let span = tracing::info_span!("audit", cycle);
        self.run_in(limit, span.clone()).instrument(span).await
    }

    async fn run_in(&self, limit: Duration, span: tracing::Span) -> Result<(), String> {
        if self.probing.swap(true, Ordering::SeqCst) {
            let msg =
                "the previous probe is still running (a hung filesystem?); skipping this audit"
                    .to_string();
            tracing::warn!("{msg}");
            self.state.metrics.audit_failures.inc();
            self.state.audit_failed(msg.clone(), Duration::ZERO);
            return Err(msg);
        }
        let state = self.state.clone();
        let probing = self.probing.clone();
        let probe_host = self.probe.clone();
        let task = tokio::task::spawn_blocking(move || {
            let _entered = span.enter();
            let start = Instant::now();
            let probed = probe_host(&state);
            // The probe is done: another may start even if the update below waits for the lock.
            probing.store(false, Ordering::SeqCst);
            let result = probed.and_then(|host| {
                let warnings = host.warnings.len();
                let probed_at = crate::inventory::format_utc(time::OffsetDateTime::now_utc());
                let outcome = state.service.audit(host).map_err(|e| e.to_string())?;
                Ok((probed_at, outcome, warnings))
            });
            let r = finish(&state, result, start.elapsed());
            // An idle daemon should not hold a probe's worth of garbage.
            crate::service::release_free_memory();
            r
        });
        match tokio::time::timeout(limit, task).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                self.probing.store(false, Ordering::SeqCst);
                let msg = format!("the audit task failed: {e}");
                self.state.audit_failed(msg.clone(), Duration::ZERO);
                Err(msg)
            }
            Err(_) => {
                let msg = format!(
                    "the audit has run for more than {} s (slow sysfs/procfs or instances path); claims are served from the last good probe",
                    limit.as_secs()
                );
                tracing::error!("{msg}");
                self.state.metrics.audit_failures.inc();
                self.state.audit_failed(msg.clone(), limit);
                Err(msg)
            }
        }
    }
}

fn addresses(list: &[crate::probes::pci::PciAddress]) -> String {
    list.iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// Logs each pinned host CPU that is offline while it should not be: its guest runs, or CPU
/// power management is off (with it on, Nova powers down the CPUs of guests it stops).
fn warn_offline_pins(state: &DaemonState) {
    let pins = state.service.read(|t| t.offline_pins());
    for p in pins.iter().filter(|p| !p.powered_down) {
        let why = if p.running {
            "a host CPU pinned by this running instance is offline: its guest cannot run there (taken offline by hand, or not powered up?)"
        } else {
            "a host CPU pinned by this instance is offline: its guest will need it when it starts"
        };
        tracing::warn!(instance = %p.instance, cpu = p.cpu, "{why}");
    }
}

type AuditResult = Result<(String, crate::tracker::AuditOutcome, usize), String>;

fn finish(state: &DaemonState, result: AuditResult, elapsed: Duration) -> Result<(), String> {
    state.metrics.audit_duration.observe(elapsed.as_secs_f64());
    match result {
        Ok((probed_at, outcome, warnings)) => {
            state.metrics.probe_warnings.set(warnings as i64);
            state
                .metrics
                .mdevs_missing
                .set(outcome.mdevs_missing.len() as i64);
            if !outcome.mdevs_appeared.is_empty() || !outcome.mdevs_vanished.is_empty() {
                tracing::info!(
                    appeared = %outcome.mdevs_appeared.join(","),
                    vanished = %outcome.mdevs_vanished.join(","),
                    "mediated devices changed"
                );
            }
            for (instance, mdev) in &outcome.mdevs_missing {
                tracing::warn!(
                    instance, mdev,
                    "a mediated device given to this instance is gone from the host (sys/bus/mdev/devices)"
                );
            }
            for (instance, namespace) in &outcome.pmem_missing {
                tracing::warn!(
                    instance, namespace,
                    "a PMEM namespace given to this instance is no longer offered (gone from sys/bus/nd/devices or from [devices] pmem_namespaces; Nova refuses to start then)"
                );
            }
            warn_offline_pins(state);
            let changed = !outcome.devices_added.is_empty()
                || !outcome.devices_removed.is_empty()
                || !outcome.devices_deferred.is_empty()
                || !outcome.devices_reclaimed.is_empty()
                || !outcome.stale_migrations.is_empty();
            if changed {
                tracing::info!(
                    added = %addresses(&outcome.devices_added),
                    removed = %addresses(&outcome.devices_removed),
                    deferred = %addresses(&outcome.devices_deferred),
                    reclaimed = %addresses(&outcome.devices_reclaimed),
                    stale_migrations = ?outcome.stale_migrations,
                    seconds = elapsed.as_secs_f64(), "audit changed the tracked devices or migrations"
                );
            } else {
                tracing::debug!(seconds = elapsed.as_secs_f64(), warnings, "audit done");
            }
            let was_failing = state.health().failing_in_a_row > 0;
            state.audit_succeeded(probed_at, elapsed);
            if was_failing {
                tracing::info!("audits succeed again");
                systemd::status("serving; audits succeed again");
            }
            Ok(())
        }
        Err(e) => {
            tracing::error!(error = %e, "audit failed; claims are still served from the last good probe, retrying next interval");
            state.metrics.audit_failures.inc();
            state.audit_failed(e.clone(), elapsed);
            systemd::status(&format!("serving; audit failing: {e}"));
            Err(e)
        }
    }
}

/// How long an audit may take before it is reported as hung: one interval, at least 10 s.
pub fn time_limit(interval_s: u64) -> Duration {
    Duration::from_secs(interval_s.max(10))
}

/// The wait before the next audit: the interval, moved by up to `jitter` either way so that
/// hosts started together do not probe (and report) in step.
pub fn next_delay(interval_s: u64, jitter_s: u64) -> Duration {
    let base = Duration::from_secs(interval_s);
    if jitter_s == 0 {
        return base;
    }
    let j = fastrand::u64(0..=2 * jitter_s * 1000);
    (base + Duration::from_millis(j)).saturating_sub(Duration::from_secs(jitter_s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// A daemon state over a small synthetic host, its probe, and the directory holding both.
    fn daemon() -> (tempfile::TempDir, Arc<DaemonState>, HostInventory) {
        let dir = tempfile::tempdir().unwrap();
        rtrack_fixtures::synthetic::SyntheticHost::small().write(&dir.path().join("host"));
        let host = probes::probe_host(
            &probes::HostRoot::under(&dir.path().join("host")),
            &probes::ProbeOptions::default(),
        )
        .unwrap();
        let config = crate::config::ValidConfig::defaults();
        let settings = crate::tracker::TrackerSettings {
            policy: (&config).into(),
            names: crate::tracker::model::HostNames {
                host: "cmp1".into(),
                node: "cmp1".into(),
            },
            node_uuid: "11111111-2222-3333-4444-555555555555".into(),
            node_created_at: time::OffsetDateTime::UNIX_EPOCH,
        };
        let service = crate::service::TrackerService::open(
            settings,
            host.clone(),
            &dir.path().join("db.sqlite"),
        )
        .unwrap();
        let state = DaemonState::new(
            Arc::new(service),
            Arc::new(crate::api::metrics::Metrics::new()),
            config,
            crate::api::peer::Access::for_group("rtrack"),
        );
        (dir, Arc::new(state), host)
    }

    /// A probe that hangs past the time limit: the audit gives up in time, the next audit is
    /// not started beside the hung one, claims go on meanwhile, and the late probe still counts.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hung_probe_times_out_is_not_started_twice_and_does_not_stop_claims() {
        let (_dir, state, host) = daemon();
        let (release, wait) = mpsc::channel::<()>();
        let wait = std::sync::Mutex::new(wait);
        let probed = host.clone();
        let auditor = Auditor::with_probe(
            state.clone(),
            Arc::new(move |_| {
                let _ = wait.lock().unwrap().recv();
                Ok(probed.clone())
            }),
        );
        let e = auditor
            .run_once(Duration::from_millis(200))
            .await
            .unwrap_err();
        assert!(e.contains("has run for more than"), "{e}");
        let e = auditor
            .run_once(Duration::from_millis(200))
            .await
            .unwrap_err();
        assert!(e.contains("previous probe is still running"), "{e}");
        assert_eq!(state.metrics.audit_failures.get(), 2);
        // Claims are decided while the probe hangs.
        let svc = state.service.clone();
        let granted = tokio::task::spawn_blocking(move || {
            let info = crate::tracker::InstanceInfo {
                uuid: "aaaaaaaa-0000-0000-0000-000000000001".into(),
                vm_state: Some("building".into()),
                ..Default::default()
            };
            let request = crate::tracker::model::InstanceRequest {
                flavor: crate::tracker::model::FlavorUsage {
                    id: 1,
                    flavorid: "f".into(),
                    name: None,
                    vcpus: 1,
                    memory_mb: 256,
                    root_gb: 0,
                    ephemeral_gb: 0,
                    swap_mb: 0,
                    cpus: None,
                    extra_resources: Default::default(),
                    mem_encryption_model: None,
                    extra_specs: Default::default(),
                },
                is_bfv: true,
                pci_requests: Vec::new(),
                numa: None,
            };
            svc.instance_claim(&info, &request, false)
                .map(|o| o.existing)
        })
        .await
        .unwrap();
        assert!(!granted.unwrap(), "a new claim, not an existing one");
        // Released, the late probe is applied and the next audit may start.
        release.send(()).unwrap();
        for _ in 0..100 {
            if state.probed_at().is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(state.probed_at().is_some(), "the late probe did not count");
        release.send(()).unwrap();
        auditor.run_once(Duration::from_secs(5)).await.unwrap();
    }

    #[test]
    fn jitter_stays_within_bounds_and_varies() {
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let d = next_delay(60, 6);
            assert!(
                d >= Duration::from_secs(54) && d <= Duration::from_secs(66),
                "{d:?}"
            );
            seen.insert(d.as_millis());
        }
        assert!(seen.len() > 10);
        assert_eq!(next_delay(60, 0), Duration::from_secs(60));
    }

    #[test]
    fn a_tree_without_a_pci_bus_is_a_host_without_devices_and_one_without_sysfs_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("host");
        rtrack_fixtures::synthetic::SyntheticHost::small().write(&root);
        std::fs::remove_dir_all(root.join("sys/bus/pci")).unwrap();
        let roots = probes::HostRoot::under(&root);
        let host = probes::probe_host(&roots, &probes::ProbeOptions::default()).unwrap();
        assert!(host.pci_devices.is_empty());
        assert!(
            host.warnings
                .iter()
                .any(|w| w.message.contains("the host has no PCI devices")),
            "{:?}",
            host.warnings
        );
        check_plausible(&host, &roots).unwrap();
        std::fs::remove_dir_all(root.join("sys/devices/system/cpu")).unwrap();
        let e = check_plausible(&host, &roots).unwrap_err();
        assert!(e.contains("sysfs is not mounted or not readable"), "{e}");
    }
}
