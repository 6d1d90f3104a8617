//! Exponential backoff with a cap and jitter, for outages (connection refused, timeouts, 5xx),
//! and the short jittered pause between generation-conflict retries. Time is passed in, so the
//! arithmetic is tested without sleeping.
//!
//! In: failures and successes with the time they happened, and a conflict retry's attempt number.
//! Out: how long to wait before the next try ([`Backoff`]), or between conflict retries
//! ([`conflict_pause`]).

use std::time::{Duration, Instant};

/// Backoff state: after `n` consecutive failures the next try waits `base x 2^(n-1)`, capped,
/// with +-20 % jitter so that many hosts do not retry in step after a Placement restart.
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    failures: u32,
    not_before: Option<Instant>,
}

impl Backoff {
    /// A backoff starting at `base` and never waiting more than `cap`.
    pub fn new(base: Duration, cap: Duration) -> Backoff {
        Backoff {
            base,
            cap: cap.max(base),
            failures: 0,
            not_before: None,
        }
    }

    /// The delay after `failures` consecutive failures, before jitter.
    pub fn delay_for(&self, failures: u32) -> Duration {
        if failures == 0 {
            return Duration::ZERO;
        }
        let factor = 1u32
            .checked_shl(failures.saturating_sub(1).min(30))
            .unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// Records a failure at `now`; returns the wait before the next try.
    pub fn failed(&mut self, now: Instant) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let d = jitter(self.delay_for(self.failures), 0.2);
        self.not_before = Some(now + d);
        d
    }

    /// Records a success: the next failure starts from `base` again.
    pub fn succeeded(&mut self) {
        self.failures = 0;
        self.not_before = None;
    }

    /// Time left before the next try may start (zero when it may start now).
    pub fn remaining(&self, now: Instant) -> Duration {
        self.not_before
            .map_or(Duration::ZERO, |t| t.saturating_duration_since(now))
    }

    /// Consecutive failures so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

/// `d` scaled by a random factor in `[1 - spread, 1 + spread]`.
pub fn jitter(d: Duration, spread: f64) -> Duration {
    let f = 1.0 + spread * (fastrand::f64() * 2.0 - 1.0);
    d.mul_f64(f.max(0.0))
}

/// The wait between two reports: the interval +-10 %, so that hosts started together (a rack
/// powered on, a fleet upgraded) drift apart instead of reporting in step.
pub fn cycle_wait(interval: Duration) -> Duration {
    jitter(interval, 0.1)
}

/// The wait before a daemon's first report: up to a tenth of the interval (6 s by default, 10 s
/// at most), so that hosts started at once do not all register in the same second.
pub fn first_report_delay(interval: Duration) -> Duration {
    interval
        .min(Duration::from_secs(100))
        .mul_f64(0.1 * fastrand::f64())
}

/// The pause before generation-conflict retry `attempt` (1-based): a few tens of ms, random, so
/// two writers that collided do not collide again.
pub fn conflict_pause(attempt: u32) -> Duration {
    Duration::from_millis(fastrand::u64(0..=25 * u64::from(attempt.max(1))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap() {
        let b = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
        let d: Vec<u64> = (0..10).map(|n| b.delay_for(n).as_secs()).collect();
        assert_eq!(d, [0, 1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(b.delay_for(u32::MAX), Duration::from_secs(60));
    }

    #[test]
    fn failures_wait_with_jitter_and_success_resets() {
        let mut b = Backoff::new(Duration::from_secs(10), Duration::from_secs(100));
        let now = Instant::now();
        assert_eq!(b.remaining(now), Duration::ZERO);
        let w = b.failed(now);
        assert!(
            w >= Duration::from_secs(8) && w <= Duration::from_secs(12),
            "{w:?}"
        );
        assert_eq!(b.remaining(now), w);
        assert_eq!(b.remaining(now + w), Duration::ZERO);
        let w2 = b.failed(now);
        assert!(
            w2 >= Duration::from_secs(16) && w2 <= Duration::from_secs(24),
            "{w2:?}"
        );
        b.succeeded();
        assert_eq!(b.failures(), 0);
        assert_eq!(b.remaining(now), Duration::ZERO);
    }

    #[test]
    fn conflict_pauses_are_short() {
        for attempt in 1..=4 {
            assert!(conflict_pause(attempt) <= Duration::from_millis(100));
        }
    }
}
