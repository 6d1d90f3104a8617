//! Where a change's time goes: the service's stages of it (waiting for the tracker's lock,
//! deciding, waiting for the commit), timed for the daemon's metrics.
//!
//! In: the histograms the daemon hands the service once ([`ChangeStages`]). Out: one observation
//! per stage a change passed, made when its [`StageTimes`] is dropped, after the lock is released.

use std::time::Instant;

use prometheus_client::metrics::histogram::Histogram;

/// Histograms of a change's stages, seconds: waiting for the tracker's lock (and for the same
/// instance's changes in flight), deciding under it, and waiting for the store's writer (the
/// transactions queued before it and its own).
#[derive(Debug, Clone)]
pub struct ChangeStages {
    /// Waiting for the lock.
    pub lock: Histogram,
    /// The decision, under the lock.
    pub decide: Histogram,
    /// Waiting for the commit.
    pub commit: Histogram,
}

/// One change's stage times, observed when dropped: after the tracker's lock is released.
pub(super) struct StageTimes<'a> {
    stages: Option<&'a ChangeStages>,
    mark: Instant,
    lock: Option<f64>,
    decide: Option<f64>,
    commit: Option<f64>,
}

impl<'a> StageTimes<'a> {
    pub(super) fn new(stages: Option<&'a ChangeStages>) -> Self {
        StageTimes {
            stages,
            mark: Instant::now(),
            lock: None,
            decide: None,
            commit: None,
        }
    }

    /// Seconds since the last mark, and a new mark.
    fn lap(&mut self) -> Option<f64> {
        let now = Instant::now();
        let secs = now.duration_since(self.mark).as_secs_f64();
        self.mark = now;
        self.stages.map(|_| secs)
    }

    pub(super) fn lock_taken(&mut self) {
        self.lock = self.lap();
    }

    pub(super) fn decided(&mut self) {
        self.decide = self.lap();
    }

    pub(super) fn committed(&mut self) {
        self.commit = self.lap();
    }
}

impl Drop for StageTimes<'_> {
    fn drop(&mut self) {
        let Some(s) = self.stages else { return };
        for (h, secs) in [
            (&s.lock, self.lock),
            (&s.decide, self.decide),
            (&s.commit, self.commit),
        ] {
            if let Some(secs) = secs {
                h.observe(secs);
            }
        }
    }
}
