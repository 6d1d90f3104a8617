//! The periodic audit (Nova's `update_available_resource`): probe the host, then update the
//! tracker with it. The probe runs on the blocking pool without the tracker lock, so claims go on
//! while it reads sysfs; only the update takes the lock. A probe that fails is logged and
//! retried next interval; one that hangs (a stuck NFS instances path) is not started twice.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::systemd;
use crate::api::shared::DaemonState;
use crate::probes::{self, HostInventory};

/// Probe options from the configuration.
pub fn probe_options(cfg: &crate::config::ValidConfig) -> probes::ProbeOptions {
    probes::ProbeOptions {
        disk: probes::disk::DiskOptions {
            instances_path: Some(cfg.instances_path.clone()),
            include_virtual: false,
        },
    }
}

/// Probes the host as configured now, and refuses a probe that cannot be right (no CPUs, no
/// memory, sysfs gone): the tracker would otherwise drop every free device and all capacity.
pub fn probe(state: &DaemonState) -> Result<HostInventory, String> {
    let cfg = state.config();
    let host =
        probes::probe_host(&cfg.probe_root, &probe_options(&cfg)).map_err(|e| e.to_string())?;
    check_plausible(&host, &cfg.probe_root)?;
    Ok(host)
}

/// Rejects a probe that found no online CPU or no memory, or whose sysfs PCI directory is gone.
pub fn check_plausible(host: &HostInventory, root: &probes::HostRoot) -> Result<(), String> {
    let pci_dir = root.sys.join("bus/pci/devices");
    if !pci_dir.is_dir() {
        return Err(format!(
            "{} is not a readable directory: sysfs is not mounted or not readable; keeping the last good inventory",
            pci_dir.display()
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
    probing: Arc<AtomicBool>,
}

impl Auditor {
    /// An auditor for the daemon.
    pub fn new(state: Arc<DaemonState>) -> Auditor {
        Auditor {
            state,
            probing: Arc::new(AtomicBool::new(false)),
        }
    }

    /// One audit, waiting at most `limit` for it. Errors are logged, counted and kept for
    /// `/healthz`; never fatal. A probe still running after `limit` goes on in the background
    /// (it cannot be interrupted) and its result still counts when it ends.
    pub async fn run_once(&self, limit: Duration) -> Result<(), String> {
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
        let task = tokio::task::spawn_blocking(move || {
            let start = Instant::now();
            let probed = probe(&state);
            // The probe is done: another may start even if the update below waits for the lock.
            probing.store(false, Ordering::SeqCst);
            let result = probed.and_then(|host| {
                let warnings = host.warnings.len();
                let probed_at = crate::inventory::format_utc(time::OffsetDateTime::now_utc());
                let outcome = state.service.audit(host).map_err(|e| e.to_string())?;
                Ok((probed_at, outcome, warnings))
            });
            let r = finish(&state, result, start.elapsed());
            release_free_memory();
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

/// Gives the heap the probe and the audit freed back to the system: glibc keeps freed memory
/// in its arenas otherwise, and an idle daemon should not hold a probe's worth of garbage.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own arenas; it takes no pointers from us.
    unsafe {
        libc::malloc_trim(0);
    }
}

type AuditResult = Result<(String, crate::tracker::state::AuditOutcome, usize), String>;

fn finish(state: &DaemonState, result: AuditResult, elapsed: Duration) -> Result<(), String> {
    state.metrics.audit_duration.observe(elapsed.as_secs_f64());
    match result {
        Ok((probed_at, outcome, warnings)) => {
            state.metrics.probe_warnings.set(warnings as i64);
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
}
