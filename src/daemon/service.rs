//! The tracker with its store: operations run under one fair lock on the in-memory tracker, and
//! their changes are committed by a single writer thread that groups whatever is queued into
//! one transaction (one fsync for many claims). A caller is answered only after its changes are
//! on disk. If a commit fails, the tracker is reloaded from the store, so nothing that was not
//! committed survives in memory either, and every caller whose changes were in flight gets the
//! error.
//!
//! The lock is fair (FIFO), and the audit holds it only for its in-memory part: probing happens
//! before, committing after.

use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use parking_lot::FairMutex;

use crate::probes::HostInventory;
use crate::store::{Store, StoreError};
use crate::tracker::state::{
    AuditOutcome, Changes, ClaimOutcome, InstanceInfo, InstanceUpdate, MoveRequest, Tracker,
    TrackerSettings,
};
use crate::tracker::{ClaimError, TrackerState};

/// A service failure: the tracker refused, or the store failed.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// Refused or invalid.
    #[error(transparent)]
    Claim(#[from] ClaimError),
    /// Could not be made durable; nothing was kept.
    #[error("not saved, nothing was changed: {0}")]
    Store(#[from] StoreError),
    /// The writer thread is gone (shutting down).
    #[error("the store writer has stopped (shutting down)")]
    Stopped,
}

enum Job {
    /// Changes to commit, and where to say how it went.
    Commit {
        changes: Box<Changes>,
        done: mpsc::SyncSender<Result<(), String>>,
    },
    /// The tracker was reloaded from disk after a failed commit: jobs queued after this are
    /// based on what is on disk again.
    Reloaded,
}

/// Counts of commits, and where their latency goes.
#[derive(Debug, Default, Clone)]
pub struct CommitStats {
    /// Transactions committed.
    pub transactions: u64,
    /// Changes committed.
    pub changes: u64,
    /// Observes each transaction's time, seconds (the daemon's metrics).
    pub latency: Option<prometheus_client::metrics::histogram::Histogram>,
}

/// The tracker behind a lock, and its store writer.
pub struct TrackerService {
    tracker: FairMutex<Tracker>,
    tx: parking_lot::Mutex<Option<mpsc::Sender<Job>>>,
    writer: parking_lot::Mutex<Option<JoinHandle<()>>>,
    store_path: std::path::PathBuf,
    stats: Arc<parking_lot::Mutex<CommitStats>>,
}

/// Seconds since the epoch, for records.
pub fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

impl TrackerService {
    /// Opens the store, loads the state and starts the writer.
    pub fn open(
        settings: TrackerSettings,
        host: HostInventory,
        db: &std::path::Path,
    ) -> Result<TrackerService, StoreError> {
        let mut store = Store::open(db)?;
        let state = store.load()?;
        let tracker = Tracker::new(settings, host, state);
        let (tx, rx) = mpsc::channel::<Job>();
        let stats = Arc::new(parking_lot::Mutex::new(CommitStats::default()));
        let writer_stats = stats.clone();
        let writer = std::thread::Builder::new()
            .name("rtrack-store".into())
            .spawn(move || writer_loop(store, rx, writer_stats))
            .map_err(|e| StoreError::Sqlite {
                path: db.to_path_buf(),
                message: format!("cannot start the writer thread: {e}"),
            })?;
        Ok(TrackerService {
            tracker: FairMutex::new(tracker),
            tx: parking_lot::Mutex::new(Some(tx)),
            writer: parking_lot::Mutex::new(Some(writer)),
            store_path: db.to_path_buf(),
            stats,
        })
    }

    /// Runs `f` on the tracker under the lock; commits what it changed before returning.
    fn mutate<T>(
        &self,
        f: impl FnOnce(&mut Tracker) -> Result<(T, Changes), ClaimError>,
    ) -> Result<T, ServiceError> {
        let (value, wait) = {
            let mut t = self.tracker.lock();
            let (value, changes) = f(&mut t)?;
            if changes.is_empty() {
                return Ok(value);
            }
            // Queued under the lock: commits happen in the order the changes were made.
            (value, self.submit(changes)?)
        };
        match wait.recv() {
            Ok(Ok(())) => Ok(value),
            Ok(Err(message)) => {
                self.reload();
                Err(ServiceError::Store(StoreError::Sqlite {
                    path: self.store_path.clone(),
                    message,
                }))
            }
            Err(_) => {
                self.reload();
                Err(ServiceError::Stopped)
            }
        }
    }

    fn submit(&self, changes: Changes) -> Result<mpsc::Receiver<Result<(), String>>, ServiceError> {
        let (done, wait) = mpsc::sync_channel(1);
        let tx = self.tx.lock();
        let tx = tx.as_ref().ok_or(ServiceError::Stopped)?;
        tx.send(Job::Commit {
            changes: Box::new(changes),
            done,
        })
        .map_err(|_| ServiceError::Stopped)?;
        Ok(wait)
    }

    /// After a failed commit: memory goes back to what the store holds. Jobs queued before
    /// this were computed on top of the lost changes, so the writer fails them until it sees
    /// the `Reloaded` marker sent here (under the lock, so later jobs come after it).
    fn reload(&self) {
        let mut t = self.tracker.lock();
        match Store::open(&self.store_path).and_then(|mut s| s.load()) {
            Ok(state) => t.replace_state(state),
            Err(e) => {
                tracing::error!(error = %e, "cannot reload the tracker state after a failed commit")
            }
        }
        if let Some(tx) = self.tx.lock().as_ref() {
            let _ = tx.send(Job::Reloaded);
        }
    }

    /// Reads the tracker under the lock.
    pub fn read<T>(&self, f: impl FnOnce(&Tracker) -> T) -> T {
        f(&self.tracker.lock())
    }

    /// Instance claim (or dry run).
    pub fn instance_claim(
        &self,
        info: &InstanceInfo,
        req: &crate::tracker::model::InstanceRequest,
        dry_run: bool,
    ) -> Result<ClaimOutcome, ServiceError> {
        let now = now_secs();
        self.mutate(|t| t.instance_claim(info, req, now, dry_run))
    }

    /// An instance claim held by a guard: dropped without [`ClaimGuard::commit`] (the build
    /// failed, the caller returned early), it is aborted.
    pub fn guarded_claim(
        &self,
        info: &InstanceInfo,
        req: &crate::tracker::model::InstanceRequest,
    ) -> Result<ClaimGuard<'_>, ServiceError> {
        let outcome = self.instance_claim(info, req, false)?;
        Ok(ClaimGuard {
            service: self,
            outcome,
            committed: false,
        })
    }

    /// Move claim (or dry run).
    pub fn move_claim(
        &self,
        mv: &MoveRequest,
        dry_run: bool,
    ) -> Result<ClaimOutcome, ServiceError> {
        let now = now_secs();
        self.mutate(|t| t.move_claim(mv, now, dry_run))
    }

    /// Abort.
    pub fn abort(&self, uuid: &str) -> Result<(), ServiceError> {
        self.mutate(|t| t.abort(uuid).map(|c| ((), c)))
    }

    /// Confirm a migration.
    pub fn confirm(&self, id: i64) -> Result<(), ServiceError> {
        let now = now_secs();
        self.mutate(|t| t.confirm_move(id, now).map(|c| ((), c)))
    }

    /// Revert a migration.
    pub fn revert(&self, id: i64) -> Result<(), ServiceError> {
        let now = now_secs();
        self.mutate(|t| t.revert_move(id, now).map(|c| ((), c)))
    }

    /// Instance state change.
    pub fn update_instance(&self, uuid: &str, up: &InstanceUpdate) -> Result<(), ServiceError> {
        self.mutate(|t| t.update_instance(uuid, up).map(|c| ((), c)))
    }

    /// Audit with a new probe (taken by the caller, outside the lock).
    pub fn audit(&self, host: HostInventory) -> Result<AuditOutcome, ServiceError> {
        let now = time::OffsetDateTime::now_utc();
        self.mutate(|t| Ok(t.audit(host, now)))
    }

    /// Replaces the settings (configuration reload).
    pub fn set_settings(&self, settings: TrackerSettings) {
        self.tracker.lock().set_settings(settings);
    }

    /// Puts a reloaded configuration in force; names and node identity stay.
    pub fn update_config(&self, config: crate::config::ValidConfig) {
        let mut t = self.tracker.lock();
        let mut settings = t.settings().clone();
        settings.config = config;
        t.set_settings(settings);
    }

    /// A copy of the state.
    pub fn state(&self) -> TrackerState {
        self.tracker.lock().state().clone()
    }

    /// Commit statistics.
    pub fn commit_stats(&self) -> CommitStats {
        self.stats.lock().clone()
    }

    /// Observes every transaction's latency in `h` from now on.
    pub fn observe_commits(&self, h: prometheus_client::metrics::histogram::Histogram) {
        self.stats.lock().latency = Some(h);
    }

    /// Stops the writer after everything queued is committed.
    pub fn shutdown(&self) {
        self.tx.lock().take();
        if let Some(h) = self.writer.lock().take() {
            let _ = h.join();
        }
    }
}

/// A claim that is aborted when dropped unless committed (Nova's `with rt.instance_claim(...)`).
pub struct ClaimGuard<'a> {
    service: &'a TrackerService,
    /// The claim.
    pub outcome: ClaimOutcome,
    committed: bool,
}

impl ClaimGuard<'_> {
    /// Keeps the claim.
    pub fn commit(mut self) -> ClaimOutcome {
        self.committed = true;
        self.outcome.clone()
    }
}

impl Drop for ClaimGuard<'_> {
    fn drop(&mut self) {
        if !self.committed && !self.outcome.existing {
            if let Err(e) = self.service.abort(&self.outcome.claim.instance_uuid) {
                tracing::error!(instance = %self.outcome.claim.instance_uuid, error = %e, "aborting a dropped claim failed");
            }
        }
    }
}

impl Drop for TrackerService {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Commits queued jobs, as many per transaction as are waiting (group commit). After a failed
/// commit, fails every job until the tracker has reloaded (the `Reloaded` marker).
fn writer_loop(
    mut store: Store,
    rx: mpsc::Receiver<Job>,
    stats: Arc<parking_lot::Mutex<CommitStats>>,
) {
    const MAX_BATCH: usize = 512;
    let mut poisoned: Option<String> = None;
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        while jobs.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(j) => jobs.push(j),
                Err(_) => break,
            }
        }
        let mut batch = Vec::new();
        let mut dones: Vec<mpsc::SyncSender<Result<(), String>>> = Vec::new();
        for job in jobs {
            match job {
                Job::Reloaded => {
                    // Jobs before the marker are answered first, then the slate is clean.
                    if let Some(e) = &poisoned {
                        for d in dones.drain(..) {
                            let _ = d.send(Err(e.clone()));
                        }
                        batch.clear();
                    }
                    poisoned = None;
                }
                Job::Commit { changes, done } => {
                    batch.push(*changes);
                    dones.push(done);
                }
            }
        }
        if batch.is_empty() && dones.is_empty() {
            continue;
        }
        let result = match &poisoned {
            Some(e) => Err(format!("{e} (an earlier commit failed; retry)")),
            None => {
                let start = Instant::now();
                let r = store.commit(&batch).map_err(|e| e.to_string());
                let mut s = stats.lock();
                s.transactions += 1;
                s.changes += batch.len() as u64;
                if let Some(h) = &s.latency {
                    h.observe(start.elapsed().as_secs_f64());
                }
                r
            }
        };
        if let Err(e) = &result {
            if poisoned.is_none() {
                tracing::error!(error = %e, jobs = dones.len(), "commit failed; the tracker reloads what is on disk");
                poisoned = Some(e.clone());
            }
        }
        for d in dones {
            let _ = d.send(result.clone());
        }
    }
}
