//! The store writer: one thread that commits queued changes, as many per transaction as are
//! waiting (group commit: one fsync for many claims), then applies them to the committed view
//! before anyone waiting on them is answered.
//!
//! In: [`Job`]s on a channel: [`Changes`] to commit (with the new [`HostView`] after an audit) and
//! the `Reloaded` marker. Out: one store transaction per batch, the changes applied to the
//! committed [`Tracker`], each job's [`CommitResult`] sent back, and the [`CommitStats`].
//!
//! After a failed transaction the writer fails every job until the service has reset its
//! working tracker (the `Reloaded` marker): jobs queued in between were decided on top of the
//! changes that were lost.
//!
//! When no job has come for [`QUIET`] after one did (a commit, a new probe, the marker), the
//! writer gives the heap's free memory back to the system ([`release_free_memory`]), once per
//! quiet spell: a burst of claims, or the release of many records, would otherwise leave its
//! high-water mark in glibc's arenas for as long as the daemon stays idle. An idle writer does
//! not wake up.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::store::{Store, StoreError};
use crate::tracker::host_view::HostView;
use crate::tracker::{Changes, Tracker};

/// Why a commit failed, and which failure it belongs to (one reset per failure).
#[derive(Debug, Clone)]
pub struct CommitFailure {
    /// The store's error.
    pub error: Arc<StoreError>,
    /// Counts failures since start: jobs failed because of the same failure share it.
    pub epoch: u64,
}

/// What a job's caller is told.
pub type CommitResult = Result<(), CommitFailure>;

/// Work for the writer.
pub enum Job {
    /// Changes to commit, the probe they were decided against when it changed (an audit),
    /// and where to say how it went.
    Commit {
        /// Rows to write.
        changes: Box<Changes>,
        /// A new probe for the committed view.
        view: Option<Arc<HostView>>,
        /// The caller waits here.
        done: mpsc::SyncSender<CommitResult>,
    },
    /// The working tracker was reset to the committed view after a failure: jobs after this
    /// marker were decided on committed state again.
    Reloaded,
}

/// Counts of commits, and where their latency goes.
#[derive(Debug, Default, Clone)]
pub struct CommitStats {
    /// Transactions committed.
    pub transactions: u64,
    /// Changes committed.
    pub changes: u64,
    /// Failed transactions.
    pub failures: u64,
    /// Observes each transaction's time, seconds (the daemon's metrics).
    pub latency: Option<prometheus_client::metrics::histogram::Histogram>,
}

/// How long commits must stop before the writer gives free heap back.
const QUIET: Duration = Duration::from_secs(5);

/// Gives the heap's free memory back to the system: glibc keeps what was freed in its arenas
/// otherwise (only their tops are returned on their own).
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own arenas; it takes no pointers from us.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The next job, or `None` when the channel has closed. After work (`worked`), waits at most
/// `quiet` for it; when none comes, runs `on_quiet` once and waits without a limit.
fn next_job<J>(
    rx: &mpsc::Receiver<J>,
    worked: &mut bool,
    quiet: Duration,
    on_quiet: &dyn Fn(),
) -> Option<J> {
    if std::mem::take(worked) {
        match rx.recv_timeout(quiet) {
            Ok(job) => return Some(job),
            Err(mpsc::RecvTimeoutError::Disconnected) => return None,
            Err(mpsc::RecvTimeoutError::Timeout) => on_quiet(),
        }
    }
    rx.recv().ok()
}

/// Commits jobs until the channel closes.
pub fn writer_loop(
    mut store: Store,
    rx: mpsc::Receiver<Job>,
    committed: Arc<Mutex<Tracker>>,
    stats: Arc<Mutex<CommitStats>>,
) {
    const MAX_BATCH: usize = 512;
    let mut poisoned: Option<CommitFailure> = None;
    let mut epoch = 0u64;
    let mut worked = false;
    while let Some(first) = next_job(&rx, &mut worked, QUIET, &release_free_memory) {
        worked = true;
        let mut jobs = vec![first];
        while jobs.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(j) => jobs.push(j),
                Err(_) => break,
            }
        }
        let mut batch: Vec<(Box<Changes>, Option<Arc<HostView>>)> = Vec::new();
        let mut dones: Vec<mpsc::SyncSender<CommitResult>> = Vec::new();
        for job in jobs {
            match job {
                Job::Reloaded => {
                    // Jobs before the marker are answered first, then the slate is clean.
                    if let Some(f) = &poisoned {
                        for d in dones.drain(..) {
                            let _ = d.send(Err(f.clone()));
                        }
                        batch.clear();
                    }
                    poisoned = None;
                }
                Job::Commit {
                    changes,
                    view,
                    done,
                } => {
                    batch.push((changes, view));
                    dones.push(done);
                }
            }
        }
        if dones.is_empty() {
            continue;
        }
        let result = match &poisoned {
            Some(f) => Err(f.clone()),
            None => {
                let rows: Vec<&Changes> = batch
                    .iter()
                    .map(|(c, _)| c.as_ref())
                    .filter(|c| !c.is_empty())
                    .collect();
                let written = if rows.is_empty() {
                    Ok(())
                } else {
                    let start = Instant::now();
                    let r = store.commit(rows.iter().copied());
                    let mut s = stats.lock();
                    match &r {
                        Ok(()) => {
                            s.transactions += 1;
                            s.changes += rows.len() as u64;
                        }
                        Err(_) => s.failures += 1,
                    }
                    if let Some(h) = &s.latency {
                        h.observe(start.elapsed().as_secs_f64());
                    }
                    r
                };
                match written {
                    Ok(()) => {
                        // Readers see the batch only now, and before its callers are answered.
                        let mut replaced = Vec::new();
                        let mut view = committed.lock();
                        for (changes, host_view) in batch.drain(..) {
                            replaced.extend(view.apply_committed(host_view, *changes));
                        }
                        drop(view);
                        // An old probe is freed here, not under the readers' lock.
                        drop(replaced);
                        Ok(())
                    }
                    Err(e) => {
                        epoch += 1;
                        tracing::error!(error = %e, jobs = dones.len(), "commit failed; the tracker goes back to what is committed");
                        let f = CommitFailure {
                            error: Arc::new(e),
                            epoch,
                        };
                        poisoned = Some(f.clone());
                        Err(f)
                    }
                }
            }
        };
        for d in dones {
            let _ = d.send(result.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const SHORT: Duration = Duration::from_millis(30);

    /// An action that counts its calls, and the count.
    fn counting() -> (Arc<AtomicUsize>, impl Fn()) {
        let calls = Arc::new(AtomicUsize::new(0));
        let counter = calls.clone();
        (calls, move || {
            counter.fetch_add(1, Ordering::SeqCst);
        })
    }

    /// Sends `job` on `tx` from another thread once `calls` reaches `after` (or 2 s passed, so
    /// that a wrong `next_job` fails its test instead of hanging it) and then `delay` has
    /// passed; gives the sender back.
    fn send_later(
        tx: mpsc::Sender<u32>,
        job: u32,
        calls: Arc<AtomicUsize>,
        after: usize,
        delay: Duration,
    ) -> std::thread::JoinHandle<mpsc::Sender<u32>> {
        let give_up = Instant::now() + Duration::from_secs(2);
        std::thread::spawn(move || {
            while calls.load(Ordering::SeqCst) < after && Instant::now() < give_up {
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(delay);
            tx.send(job).unwrap();
            tx
        })
    }

    #[test]
    fn after_work_a_quiet_spell_runs_the_action_once_then_waits_for_the_next_job() {
        let (tx, rx) = mpsc::channel();
        let (calls, on_quiet) = counting();
        // The job comes only after the action ran, and well after the quiet spell: a wait
        // that woke up again at every spell would run the action more than once.
        let sender = send_later(tx, 7, calls.clone(), 1, SHORT * 5);
        let mut worked = true;
        assert_eq!(next_job(&rx, &mut worked, SHORT, &on_quiet), Some(7));
        assert_eq!(calls.load(Ordering::SeqCst), 1, "once per quiet spell");
        assert!(!worked);
        let tx = sender.join().unwrap();
        drop(tx);
        assert_eq!(next_job(&rx, &mut worked, SHORT, &on_quiet), None);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn without_work_since_the_last_spell_a_long_wait_runs_nothing() {
        let (tx, rx) = mpsc::channel();
        let (calls, on_quiet) = counting();
        let start = Instant::now();
        let sender = send_later(tx, 8, calls.clone(), 0, SHORT * 5);
        let mut worked = false;
        assert_eq!(next_job(&rx, &mut worked, SHORT, &on_quiet), Some(8));
        assert!(start.elapsed() >= SHORT * 5, "it waited for the job");
        assert_eq!(
            calls.load(Ordering::SeqCst),
            0,
            "an idle writer does nothing"
        );
        drop(sender.join().unwrap());
    }

    #[test]
    fn a_job_within_the_quiet_spell_runs_nothing() {
        let (tx, rx) = mpsc::channel();
        let (calls, on_quiet) = counting();
        tx.send(1).unwrap();
        let mut worked = true;
        assert_eq!(next_job(&rx, &mut worked, SHORT, &on_quiet), Some(1));
        assert_eq!(calls.load(Ordering::SeqCst), 0);
        // The channel closing after work ends the wait without the action.
        worked = true;
        drop(tx);
        assert_eq!(next_job(&rx, &mut worked, SHORT, &on_quiet), None);
        assert_eq!(calls.load(Ordering::SeqCst), 0);
    }
}
