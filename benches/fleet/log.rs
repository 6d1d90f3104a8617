//! Placement's access log (`scripts/placement/start.sh` writes one line per request: time,
//! method, path, status, server microseconds): what a phase sent, read between two marks.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// The log file.
pub struct AccessLog {
    path: PathBuf,
}

/// What Placement saw in one phase.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Requests.
    pub requests: usize,
    /// Answers 500 and above.
    pub server_errors: usize,
    /// Server time, median and 99th percentile, ms.
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Most requests logged in one second.
    pub peak_per_second: usize,
}

impl AccessLog {
    pub fn new(path: PathBuf) -> AccessLog {
        AccessLog { path }
    }

    fn lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.path)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Where the log stands now.
    pub fn mark(&self) -> usize {
        self.lines().len()
    }

    /// What was logged since `mark`.
    pub fn since(&self, mark: usize) -> Stats {
        // gunicorn writes its access log as it answers: a moment for the last lines.
        std::thread::sleep(std::time::Duration::from_millis(300));
        let lines = self.lines();
        let mut times: Vec<f64> = Vec::new();
        let mut per_second: BTreeMap<String, usize> = BTreeMap::new();
        let mut server_errors = 0;
        for l in lines.iter().skip(mark) {
            // [26/Nov/2026:12:00:00 +0000] GET /path 200 1234
            let Some(end) = l.find(']') else { continue };
            let second = l[..end].to_string();
            let fields: Vec<&str> = l[end + 1..].split_whitespace().collect();
            let [_, _, status, micros] = fields.as_slice() else {
                continue;
            };
            *per_second.entry(second).or_default() += 1;
            if status.parse::<u16>().is_ok_and(|s| s >= 500) {
                server_errors += 1;
            }
            if let Ok(us) = micros.parse::<f64>() {
                times.push(us / 1000.0);
            }
        }
        times.sort_by(|a, b| a.total_cmp(b));
        let pct = |p: f64| {
            if times.is_empty() {
                0.0
            } else {
                times[((times.len() - 1) as f64 * p).round() as usize]
            }
        };
        Stats {
            requests: times.len(),
            server_errors,
            p50_ms: pct(0.5),
            p99_ms: pct(0.99),
            peak_per_second: per_second.values().copied().max().unwrap_or(0),
        }
    }
}
