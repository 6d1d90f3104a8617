//! How long to wait for Placement's answer to one request. `[placement] timeout_s` while
//! Placement answers within it; twice as long after each request that got no answer in time,
//! up to [`PATIENCE_CAP`]; `timeout_s` again once an answer comes within it.
//!
//! Why: an overloaded Placement queues requests in front of its workers, and still serves a
//! request whose client has left. A fleet that gives up after `timeout_s` while the queue is
//! longer than that keeps Placement busy with answers nobody reads, retries, and never gets
//! in step (5,000 hosts on 4 workers: 6 in step after 390 s, docs/upstream.md). Waiting
//! longer lets the queue take the hosts in turn. Time is passed in, so this is tested without
//! sleeping.
//!
//! In: each request's outcome (answered after how long, or timed out). Out: the wait for the
//! next request.

use std::time::Duration;

/// The longest wait for one answer, whatever `timeout_s` and however many timeouts ran.
pub const PATIENCE_CAP: Duration = Duration::from_secs(600);

/// The wait for Placement's next answer.
#[derive(Debug, Clone)]
pub struct Patience {
    base: Duration,
    current: Duration,
}

impl Patience {
    /// Starts at `base` (`timeout_s`).
    pub fn new(base: Duration) -> Patience {
        Patience {
            base,
            current: base,
        }
    }

    /// The wait for the next answer.
    pub fn current(&self) -> Duration {
        self.current
    }

    /// A request got no answer within [`Patience::current`]: the next waits twice as long
    /// (never beyond the cap, never below `base`). Returns the new wait.
    pub fn timed_out(&mut self) -> Duration {
        self.current = self
            .current
            .saturating_mul(2)
            .min(PATIENCE_CAP)
            .max(self.base);
        self.current
    }

    /// [`Patience::timed_out`], with a warning when the wait grows.
    pub fn no_answer_in_time(&mut self) {
        let waited = self.current;
        let next = self.timed_out();
        if next > waited {
            tracing::warn!(
                waited_s = waited.as_secs_f64(),
                next_wait_s = next.as_secs_f64(),
                "placement did not answer in time (overloaded?): waiting longer for its next answers"
            );
        }
    }

    /// An answer came after `took`: within `base`, Placement keeps up again and the wait
    /// goes back to `base`. A slower answer keeps the longer wait (the queue is still long).
    pub fn answered(&mut self, took: Duration) {
        if took <= self.base {
            self.current = self.base;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn each_timeout_doubles_the_wait_up_to_the_cap() {
        let mut p = Patience::new(S(10));
        let waits: Vec<u64> = (0..8).map(|_| p.timed_out().as_secs()).collect();
        assert_eq!(waits, [20, 40, 80, 160, 320, 600, 600, 600]);
        assert!(p.current() > S(10));
    }

    #[test]
    fn a_slow_answer_keeps_the_wait_and_a_prompt_one_restores_timeout_s() {
        let mut p = Patience::new(S(10));
        p.timed_out();
        p.timed_out();
        p.answered(S(25));
        assert_eq!(p.current(), S(40), "the queue is still long");
        p.answered(Duration::from_millis(30));
        assert_eq!(p.current(), S(10));
        assert!(p.current() <= S(10));
    }

    #[test]
    fn a_timeout_s_above_the_cap_is_kept() {
        let mut p = Patience::new(S(900));
        assert_eq!(p.timed_out(), S(900));
    }
}
