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

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

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
    while let Ok(first) = rx.recv() {
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
