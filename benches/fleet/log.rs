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
    /// Answers 409 (a generation or consumer conflict: the writer re-reads and retries).
    pub conflicts: usize,
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
        let mut conflicts = 0;
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
            if *status == "409" {
                conflicts += 1;
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
            conflicts,
            p50_ms: pct(0.5),
            p99_ms: pct(0.99),
            peak_per_second: per_second.values().copied().max().unwrap_or(0),
        }
    }
}

/// Placement's CPU time so far, seconds: utime + stime (/proc/PID/stat) of the gunicorn master
/// (DIR/run/gunicorn.pid), its workers (the master's children) and, on MariaDB, mariadbd
/// (DIR/run/mariadb.pid). Read before and after a phase; a server restarted in between makes the
/// difference meaningless (the caller says so).
pub fn placement_cpu_s(dir: &std::path::Path) -> f64 {
    let read_pid = |f: &str| -> Option<u32> {
        std::fs::read_to_string(dir.join("run").join(f))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    let mut pids = Vec::new();
    if let Some(master) = read_pid("gunicorn.pid") {
        pids.push(master);
        let children = std::fs::read_to_string(format!("/proc/{master}/task/{master}/children"))
            .unwrap_or_default();
        pids.extend(
            children
                .split_whitespace()
                .filter_map(|c| c.parse::<u32>().ok()),
        );
    }
    pids.extend(read_pid("mariadb.pid"));
    // clock ticks: 100 a second on Linux (USER_HZ)
    pids.iter()
        .map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let after = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or("");
            let f: Vec<&str> = after.split_whitespace().collect();
            // after the command: state is field 3; utime 14 and stime 15 (1-based in proc(5))
            let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
            (tick(11) + tick(12)) / 100.0
        })
        .sum()
}
