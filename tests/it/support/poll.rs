//! Waiting for something that happens in the background (a report cycle, an audit, a restart):
//! poll until it holds, and fail after a limit with what the last look saw.

use std::future::Future;
use std::time::{Duration, Instant};

/// Polls `look` every `every` until it gives a value; after `limit` the test fails naming
/// `what` and the last thing `look` saw (its `Err`).
pub fn poll<T>(
    what: &str,
    limit: Duration,
    every: Duration,
    mut look: impl FnMut() -> Result<T, String>,
) -> T {
    let start = Instant::now();
    loop {
        match look() {
            Ok(v) => return v,
            Err(last) => assert!(
                start.elapsed() < limit,
                "timed out after {limit:?} waiting for {what}; last seen: {last}"
            ),
        }
        std::thread::sleep(every);
    }
}

/// [`poll`] for an async look, sleeping on the runtime.
pub async fn poll_async<T, F: Future<Output = Result<T, String>>>(
    what: &str,
    limit: Duration,
    every: Duration,
    mut look: impl FnMut() -> F,
) -> T {
    let start = Instant::now();
    loop {
        match look().await {
            Ok(v) => return v,
            Err(last) => assert!(
                start.elapsed() < limit,
                "timed out after {limit:?} waiting for {what}; last seen: {last}"
            ),
        }
        tokio::time::sleep(every).await;
    }
}

/// Polls `f` every 50 ms until it holds; the test fails naming `what` after `limit`.
pub fn eventually(what: &str, limit: Duration, f: &mut dyn FnMut() -> bool) {
    let every = Duration::from_millis(50);
    poll(what, limit, every, || {
        f().then_some(()).ok_or_else(String::new)
    });
}
