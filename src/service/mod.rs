//! The tracker service: tracker operations in, committed outcomes and committed reads out.
//!
//! Two trackers hold the same records. `working` makes every decision under one fair lock and
//! holds everything granted, committed or not, so nothing in flight is handed out twice.
//! `committed` holds only what the store has committed: the writer thread (`writer`) applies
//! a batch to it after its transaction commits and before anyone waiting on that batch is
//! answered. Every reader (GET, usage, metrics, the ComputeNode, Placement reports) reads
//! `committed`; so a caller is told "done" only for what is on disk, and nobody sees what may
//! still roll back.
//!
//! An operation on an instance whose changes are still in flight waits for them (`in_flight`),
//! so an idempotent retry is answered from committed state. A claim whose caller left before
//! hearing of it is aborted, unless another caller was told of it ([`Granted`]).
//!
//! After a failed commit the store has rolled the transaction back, so `working` is reset to
//! `committed`, and the store is read back to confirm it. Until the store can be read, nothing
//! is changed: operations get [`ServiceError::Unavailable`] and `/healthz` says why.

mod in_flight;
mod placement;
mod stages;
mod writer;

use std::collections::{BTreeSet, HashMap};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::{FairMutex, Mutex};

pub use stages::ChangeStages;
pub use writer::{release_free_memory, CommitStats};

use crate::probes::HostInventory;
use crate::store::{Store, StoreError};
use crate::tracker::host_view::HostView;
use crate::tracker::model::InstanceRequest;
use crate::tracker::numa::power::carry_offline_topology;
use crate::tracker::{AuditOutcome, ClaimOutcome, InstanceInfo, InstanceUpdate, MoveRequest};
use crate::tracker::{Changes, Tracker, TrackerSettings};
use crate::tracker::{ClaimError, TrackerState};
use in_flight::InFlight;
use stages::StageTimes;
use writer::{CommitResult, Job};

/// A service failure: the tracker refused, or the store failed.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// Refused or invalid.
    #[error(transparent)]
    Claim(#[from] ClaimError),
    /// The commit failed; nothing of the operation was kept.
    #[error("not saved, nothing was changed: {0}")]
    Store(Arc<StoreError>),
    /// The store cannot be read back after a failed commit: nothing is changed until it can.
    #[error("the store is unavailable, so nothing is changed until it can be read again: {0}")]
    Unavailable(String),
    /// The writer thread is gone (shutting down).
    #[error("the store writer has stopped (shutting down)")]
    Stopped,
}

/// Which instance an operation is about; its changes in flight are waited for first.
enum Subject<'a> {
    /// An instance.
    Instance(&'a str),
    /// A migration's instance (looked up under the lock).
    Migration(i64),
    /// The audit: no one instance, and the new probe's view is committed with the changes.
    Audit,
    /// The host's own records (PCI providers, a device released): no one instance.
    Host,
    /// Several instances (an adoption).
    Instances(&'a [String]),
}

/// Whether the store answered the last read-back.
#[derive(Debug, Default)]
struct StoreHealth {
    /// Why changes are refused, while they are.
    unavailable: Option<String>,
    /// The last failure the working tracker was reset for.
    reset_epoch: u64,
    /// When the store was last tried while unavailable (tries are spaced).
    last_try: Option<Instant>,
}

/// The tracker behind a lock, its committed view, and its store writer.
pub struct TrackerService {
    working: FairMutex<Tracker>,
    committed: Arc<Mutex<Tracker>>,
    in_flight: InFlight,
    /// New claims whose caller has not been answered yet, by instance, with the answer's token.
    unanswered: Mutex<HashMap<String, u64>>,
    next_token: std::sync::atomic::AtomicU64,
    health: Mutex<StoreHealth>,
    /// Mirrors `health.unavailable.is_some()`, read without the lock.
    unavailable: std::sync::atomic::AtomicBool,
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    store_path: std::path::PathBuf,
    stats: Arc<Mutex<CommitStats>>,
    /// Where each change's time goes, once the daemon asks for it.
    stages: std::sync::OnceLock<ChangeStages>,
}

/// Seconds since the epoch, for records.
pub fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// How often an unavailable store is tried again by operations that arrive meanwhile.
const RETRY_UNAVAILABLE: Duration = Duration::from_secs(1);

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
        let committed = Arc::new(Mutex::new(tracker.clone()));
        let (tx, rx) = mpsc::channel::<Job>();
        let stats = Arc::new(Mutex::new(CommitStats::default()));
        let writer = {
            let stats = stats.clone();
            let committed = committed.clone();
            std::thread::Builder::new()
                .name("rtrack-store".into())
                .spawn(move || writer::writer_loop(store, rx, committed, stats))
                .map_err(|e| StoreError::Sqlite {
                    path: db.to_path_buf(),
                    message: format!("cannot start the writer thread: {e}"),
                })?
        };
        Ok(TrackerService {
            working: FairMutex::new(tracker),
            committed,
            in_flight: InFlight::default(),
            unanswered: Mutex::new(HashMap::new()),
            next_token: std::sync::atomic::AtomicU64::new(1),
            health: Mutex::new(StoreHealth::default()),
            unavailable: std::sync::atomic::AtomicBool::new(false),
            tx: Mutex::new(Some(tx)),
            writer: Mutex::new(Some(writer)),
            store_path: db.to_path_buf(),
            stats,
            stages: std::sync::OnceLock::new(),
        })
    }

    /// Runs `f` on the working tracker under the lock, once no change of its subject is in
    /// flight; returns after what it changed is committed (or rolled back, with the error).
    fn mutate<T>(
        &self,
        subject: Subject<'_>,
        f: impl FnOnce(&mut Tracker) -> Result<(T, Changes), ClaimError>,
    ) -> Result<T, ServiceError> {
        // Declared before the lock's guard, so dropped (and observed) after it is released.
        let mut timed = StageTimes::new(self.stages.get());
        let (mut working, keys) = loop {
            let mut working = self.working.lock();
            self.check_store_available(&mut working)?;
            let keys: BTreeSet<String> = match subject {
                Subject::Instance(u) => [u.to_string()].into(),
                Subject::Migration(id) => working
                    .state()
                    .migrations
                    .get(&id)
                    .map(|m| [m.instance_uuid.clone()].into())
                    .unwrap_or_default(),
                Subject::Instances(list) => list.iter().cloned().collect(),
                Subject::Audit | Subject::Host => BTreeSet::new(),
            };
            if !self.in_flight.any(&keys) {
                break (working, keys);
            }
            drop(working);
            self.in_flight.wait_until_settled(&keys);
        };
        timed.lock_taken();
        // A refusal is a decision too.
        let decided = f(&mut working);
        timed.decided();
        let (value, mut changes) = decided?;
        // Consumers the operation let go of are recorded with it, so that their part in
        // Placement is removed even after a crash.
        working.note_releases(&mut changes, now_secs());
        let view = matches!(subject, Subject::Audit).then(|| working.view());
        if changes.is_empty() && view.is_none() {
            return Ok(value);
        }
        let mut touched = changes.instances_touched();
        touched.extend(keys);
        self.in_flight.enter(&touched);
        // Queued under the lock: commits happen in the order the changes were made.
        let (done, wait) = mpsc::sync_channel::<CommitResult>(1);
        let job = Job::Commit {
            changes: Box::new(changes),
            view,
            done,
        };
        let queued = self
            .tx
            .lock()
            .as_ref()
            .is_some_and(|tx| tx.send(job).is_ok());
        if !queued {
            // Nothing was queued (the writer is gone): memory goes back to what is committed.
            *working = self.committed.lock().clone();
            self.in_flight.leave(&touched);
            return Err(ServiceError::Stopped);
        }
        drop(working);
        let result = wait.recv();
        timed.committed();
        let outcome = match result {
            Ok(Ok(())) => Ok(value),
            Ok(Err(failure)) => {
                self.reset_after_failure(failure.epoch);
                Err(ServiceError::Store(failure.error))
            }
            Err(_) => {
                self.reset_after_failure(u64::MAX);
                Err(ServiceError::Stopped)
            }
        };
        // Only now, with memory and store agreeing, may a waiting retry look.
        self.in_flight.leave(&touched);
        outcome
    }

    /// After a failed commit: the working tracker goes back to the committed view (the store
    /// rolled the transaction back, so that is what it holds), once per failure; then the store
    /// is read back to confirm it.
    fn reset_after_failure(&self, epoch: u64) {
        let mut working = self.working.lock();
        let mut health = self.health.lock();
        if health.reset_epoch >= epoch {
            return;
        }
        health.reset_epoch = epoch;
        *working = self.committed.lock().clone();
        // Under the working lock: every job queued after the marker was decided on the reset.
        if let Some(tx) = self.tx.lock().as_ref() {
            let _ = tx.send(Job::Reloaded);
        }
        self.read_back(&mut working, &mut health);
    }

    /// Reads the store and compares it with memory; on a difference the store wins (it is what
    /// survives a restart). On failure, marks the store unavailable.
    fn read_back(&self, working: &mut Tracker, health: &mut StoreHealth) {
        health.last_try = Some(Instant::now());
        match Store::open(&self.store_path).and_then(|mut s| s.load()) {
            Ok(state) => {
                if &state != working.state() {
                    tracing::error!(
                        path = %self.store_path.display(),
                        "the store holds other records than memory after a failed commit; taking the store's"
                    );
                    working.replace_state(state.clone());
                    self.committed.lock().replace_state(state);
                }
                if let Some(reason) = health.unavailable.take() {
                    tracing::warn!(was = %reason, "the store can be read again; changes are accepted again");
                }
                self.unavailable
                    .store(false, std::sync::atomic::Ordering::Release);
            }
            Err(e) => {
                let reason = e.to_string();
                if health.unavailable.is_none() {
                    tracing::error!(error = %reason, "cannot read the store back after a failed commit; refusing every change until it can be read");
                }
                health.unavailable = Some(reason);
                self.unavailable
                    .store(true, std::sync::atomic::Ordering::Release);
            }
        }
    }

    /// Refuses changes while the store is unavailable, trying it again now and then.
    fn check_store_available(&self, working: &mut Tracker) -> Result<(), ServiceError> {
        // The common case costs one atomic load, on the hot path of every claim.
        if !self.unavailable.load(std::sync::atomic::Ordering::Acquire) {
            return Ok(());
        }
        let mut health = self.health.lock();
        let Some(reason) = health.unavailable.clone() else {
            return Ok(());
        };
        if health
            .last_try
            .is_some_and(|t| t.elapsed() < RETRY_UNAVAILABLE)
        {
            return Err(ServiceError::Unavailable(reason));
        }
        self.read_back(working, &mut health);
        match &health.unavailable {
            Some(reason) => Err(ServiceError::Unavailable(reason.clone())),
            None => Ok(()),
        }
    }

    /// Why changes are refused, if they are (for `/healthz`).
    pub fn store_unavailable(&self) -> Option<String> {
        self.health.lock().unavailable.clone()
    }

    /// Reads the committed view.
    pub fn read<T>(&self, f: impl FnOnce(&Tracker) -> T) -> T {
        f(&self.committed.lock())
    }

    /// Instance claim (or dry run). The caller is answered by the return value itself (no
    /// caller-left rule: for callers inside the process).
    pub fn instance_claim(
        &self,
        info: &InstanceInfo,
        req: &InstanceRequest,
        dry_run: bool,
    ) -> Result<ClaimOutcome, ServiceError> {
        let now = now_secs();
        self.mutate(Subject::Instance(&info.uuid), |t| {
            t.instance_claim(info, req, now, dry_run)
        })
    }

    /// Move claim (or dry run), for callers inside the process.
    pub fn move_claim(
        &self,
        mv: &MoveRequest,
        dry_run: bool,
    ) -> Result<ClaimOutcome, ServiceError> {
        let now = now_secs();
        self.mutate(Subject::Instance(&mv.instance.uuid), |t| {
            t.move_claim(mv, now, dry_run)
        })
    }

    /// Aborts the instance's claim (or its move claim here) and commits the release.
    pub fn abort(&self, uuid: &str) -> Result<(), ServiceError> {
        self.mutate(Subject::Instance(uuid), |t| t.abort(uuid).map(|c| ((), c)))
    }

    /// Confirm a migration.
    pub fn confirm(&self, id: i64) -> Result<(), ServiceError> {
        let now = now_secs();
        self.mutate(Subject::Migration(id), |t| {
            t.confirm_move(id, now).map(|c| ((), c))
        })
    }

    /// Revert a migration.
    pub fn revert(&self, id: i64) -> Result<(), ServiceError> {
        let now = now_secs();
        self.mutate(Subject::Migration(id), |t| {
            t.revert_move(id, now).map(|c| ((), c))
        })
    }

    /// Instance state change.
    pub fn update_instance(&self, uuid: &str, up: &InstanceUpdate) -> Result<(), ServiceError> {
        self.mutate(Subject::Instance(uuid), |t| {
            t.update_instance(uuid, up).map(|c| ((), c))
        })
    }

    /// Audit with a new probe (taken by the caller, outside the lock).
    pub fn audit(&self, mut host: HostInventory) -> Result<AuditOutcome, ServiceError> {
        // The view (inventory, device selection, the ComputeNode's host facts) is derived
        // before the lock is taken: claims wait only for the device sync and the usage.
        let (settings, generation, previous) = {
            let t = self.committed.lock();
            let (settings, generation) = t.settings_snapshot();
            (settings, generation, t.view().host.clone())
        };
        // Offline CPUs keep the topology an earlier probe saw (the kernel removes it).
        carry_offline_topology(&previous, &mut host);
        let now = time::OffsetDateTime::now_utc();
        let view =
            Arc::new(HostView::build(Arc::new(host), &settings, generation).with_uptime_at(now));
        self.mutate(Subject::Audit, |t| Ok(t.audit_view(view, now)))
    }

    /// Claims devices for ports attached to a running instance (see [`Tracker::attach_pci`]).
    /// A retry of the same requests answers what they hold.
    pub fn attach_pci(
        &self,
        uuid: &str,
        requests: &[crate::tracker::model::PciRequest],
    ) -> Result<crate::tracker::ops::attach::AttachOutcome, ServiceError> {
        self.mutate(Subject::Instance(uuid), |t| t.attach_pci(uuid, requests))
    }

    /// Frees the devices of a port detached from an instance.
    pub fn detach_pci(&self, uuid: &str, request_id: &str) -> Result<(), ServiceError> {
        self.mutate(Subject::Instance(uuid), |t| {
            t.detach_pci(uuid, request_id).map(|c| ((), c))
        })
    }

    /// Plans the adoption of instances a host runs (see [`Tracker::adopt`]); with `apply`,
    /// commits it in one transaction when nothing stands in the way.
    pub fn adopt(
        &self,
        adoptees: &[crate::tracker::ops::adopt::Adoptee],
        problems: Vec<crate::tracker::ops::adopt::AdoptProblem>,
        apply: bool,
    ) -> Result<crate::tracker::ops::adopt::AdoptionPlan, ServiceError> {
        let now = now_secs();
        let uuids: Vec<String> = adoptees.iter().map(|a| a.info.uuid.clone()).collect();
        self.mutate(Subject::Instances(&uuids), |t| {
            t.adopt(adoptees, problems, now, apply)
        })
    }

    /// Replaces the settings (configuration reload) in both views.
    pub fn set_settings(&self, settings: TrackerSettings) {
        let mut working = self.working.lock();
        working.set_settings(settings);
        self.committed.lock().follow_settings(&working);
    }

    /// Puts a reloaded configuration in force; names and node identity stay.
    pub fn update_config(&self, config: crate::config::ValidConfig) {
        let mut settings = self.working.lock().settings().clone();
        settings.policy = config.into();
        self.set_settings(settings);
    }

    /// A copy of the committed state.
    pub fn state(&self) -> TrackerState {
        self.committed.lock().state().clone()
    }

    /// Commit statistics.
    pub fn commit_stats(&self) -> CommitStats {
        self.stats.lock().clone()
    }

    /// Observes every transaction's latency in `h` from now on.
    pub fn observe_commits(&self, h: prometheus_client::metrics::histogram::Histogram) {
        self.stats.lock().latency = Some(h);
    }

    /// Observes every change's stages in `stages` from now on (the first call wins).
    pub fn observe_stages(&self, stages: ChangeStages) {
        let _ = self.stages.set(stages);
    }

    /// Stops the writer after everything queued is committed.
    pub fn shutdown(&self) {
        self.tx.lock().take();
        if let Some(h) = self.writer.lock().take() {
            let _ = h.join();
        }
    }
}

impl Drop for TrackerService {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A claim (or move claim) granted for a caller that has not been answered yet. Answer the
/// caller, then [`Granted::answered`]; dropped unanswered, a new claim is aborted.
pub struct Granted<'a> {
    service: &'a TrackerService,
    /// What was granted (or found, or would fit on a dry run).
    pub outcome: ClaimOutcome,
    /// Set for a new claim: the token of its unanswered mark.
    token: Option<u64>,
}

impl Granted<'_> {
    /// The caller has the answer: the claim stays.
    pub fn answered(mut self) -> ClaimOutcome {
        if let Some(token) = self.token.take() {
            let uuid = &self.outcome.claim.instance_uuid;
            let mut unanswered = self.service.unanswered.lock();
            if unanswered.get(uuid) == Some(&token) {
                unanswered.remove(uuid);
            }
        }
        self.outcome.clone()
    }
}

impl Drop for Granted<'_> {
    fn drop(&mut self) {
        let Some(token) = self.token.take() else {
            return;
        };
        let uuid = self.outcome.claim.instance_uuid.clone();
        tracing::warn!(instance = %uuid, "the caller left before the claim was answered; aborting it unless another caller was told of it");
        if let Err(e) = self.service.abort_unanswered(&uuid, token) {
            tracing::error!(instance = %uuid, error = %e, "aborting an unanswered claim failed");
        }
    }
}

impl TrackerService {
    /// An instance claim for a caller that may go away before it is answered.
    pub fn guarded_claim(
        &self,
        info: &InstanceInfo,
        req: &InstanceRequest,
    ) -> Result<Granted<'_>, ServiceError> {
        self.guarded(&info.uuid, |t, now| t.instance_claim(info, req, now, false))
    }

    /// A move claim for a caller that may go away before it is answered.
    pub fn guarded_move(&self, mv: &MoveRequest) -> Result<Granted<'_>, ServiceError> {
        self.guarded(&mv.instance.uuid, |t, now| t.move_claim(mv, now, false))
    }

    /// Runs a claim operation on instance `uuid` (given the tracker and the time) for a caller
    /// that may go away before it is answered: see [`Granted`].
    pub fn guarded(
        &self,
        uuid: &str,
        op: impl FnOnce(&mut Tracker, i64) -> Result<(ClaimOutcome, Changes), ClaimError>,
    ) -> Result<Granted<'_>, ServiceError> {
        let token = self
            .next_token
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let now = now_secs();
        let result = self.mutate(Subject::Instance(uuid), |t| {
            let (outcome, changes) = op(t, now)?;
            let mut unanswered = self.unanswered.lock();
            if outcome.existing {
                // This caller is told of it: nobody may abort it for leaving any more.
                unanswered.remove(uuid);
            } else if !outcome.dry_run {
                unanswered.insert(uuid.to_string(), token);
            }
            Ok((outcome, changes))
        });
        match result {
            Ok(outcome) => {
                let new = !outcome.existing && !outcome.dry_run;
                Ok(Granted {
                    service: self,
                    outcome,
                    token: new.then_some(token),
                })
            }
            Err(e) => {
                let mut unanswered = self.unanswered.lock();
                if unanswered.get(uuid) == Some(&token) {
                    unanswered.remove(uuid);
                }
                Err(e)
            }
        }
    }

    /// Aborts the claim of `uuid` if it is still the unanswered one marked `token`.
    fn abort_unanswered(&self, uuid: &str, token: u64) -> Result<(), ServiceError> {
        self.mutate(Subject::Instance(uuid), |t| {
            let mut unanswered = self.unanswered.lock();
            if unanswered.get(uuid) != Some(&token) {
                tracing::info!(instance = %uuid, "another caller was told of the claim; it stays");
                return Ok(((), Changes::default()));
            }
            unanswered.remove(uuid);
            t.abort(uuid).map(|c| ((), c))
        })
    }
}
