//! How long the host has been up, and its load: what Nova's libvirt driver puts in the
//! ComputeNode's `stats["uptime"]` (the text of `uptime`, which reads these same files).
//!
//! In: `proc/uptime` (`350735.47 234388.90`: seconds up, seconds idle) and `proc/loadavg`
//! (`0.00 0.01 0.05 1/170 12345`). Out: [`HostUptime`]; null parts when the tree does not carry
//! the files (captured trees often don't: not a warning), a warning when a file is malformed.

use serde::Serialize;

use crate::read::{read_optional, Warnings};
use crate::HostRoot;

/// Uptime and load averages as the kernel reports them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct HostUptime {
    /// Whole seconds since boot.
    pub seconds: Option<u64>,
    /// Load averages over 1, 5 and 15 minutes.
    pub load_average: Option<[f64; 3]>,
}

/// Reads `proc/uptime` and `proc/loadavg`.
pub fn probe_uptime(root: &HostRoot, w: &mut Warnings) -> HostUptime {
    let uptime_path = root.proc_path("uptime");
    let seconds = read_optional(&uptime_path, w).and_then(|text| {
        let parsed = parse_uptime(&text);
        if parsed.is_none() {
            w.push(
                &uptime_path,
                "expected seconds up and idle (\"350735.47 234388.90\"); uptime unknown",
            );
        }
        parsed
    });
    let load_path = root.proc_path("loadavg");
    let load_average = read_optional(&load_path, w).and_then(|text| {
        let parsed = parse_loadavg(&text);
        if parsed.is_none() {
            w.push(
                &load_path,
                "expected three load averages first (\"0.00 0.01 0.05 1/170 12345\"); load unknown",
            );
        }
        parsed
    });
    HostUptime {
        seconds,
        load_average,
    }
}

/// The whole seconds of `proc/uptime`'s first field.
pub fn parse_uptime(text: &str) -> Option<u64> {
    let first = text.split_whitespace().next()?;
    let secs: f64 = first.parse().ok()?;
    (0.0..1e15).contains(&secs).then_some(secs as u64)
}

/// The three load averages of `proc/loadavg`.
pub fn parse_loadavg(text: &str) -> Option<[f64; 3]> {
    let mut it = text
        .split_whitespace()
        .map(|v| v.parse::<f64>().ok().filter(|x| (0.0..1e9).contains(x)));
    Some([it.next()??, it.next()??, it.next()??])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_formats() {
        assert_eq!(parse_uptime("350735.47 234388.90\n"), Some(350735));
        assert_eq!(parse_uptime("x 1"), None);
        assert_eq!(parse_uptime("-1 1"), None);
        assert_eq!(
            parse_loadavg("0.00 0.01 12.50 1/170 12345\n"),
            Some([0.0, 0.01, 12.5])
        );
        assert_eq!(parse_loadavg("0.00 0.01"), None);
        assert_eq!(parse_loadavg("NaN 1 1"), None);
    }

    #[test]
    fn missing_files_are_unknown_and_malformed_ones_warned() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("proc")).unwrap();
        std::fs::create_dir_all(dir.path().join("sys")).unwrap();
        let root = HostRoot::under(dir.path());
        let mut w = Warnings::new();
        assert_eq!(probe_uptime(&root, &mut w), HostUptime::default());
        assert!(w.into_vec().is_empty());
        std::fs::write(dir.path().join("proc/uptime"), "garbage\n").unwrap();
        std::fs::write(dir.path().join("proc/loadavg"), "0.50 0.25 0.10 1/2 3\n").unwrap();
        let mut w = Warnings::new();
        let u = probe_uptime(&root, &mut w);
        assert_eq!(u.seconds, None);
        assert_eq!(u.load_average, Some([0.5, 0.25, 0.1]));
        let w = w.into_vec();
        assert_eq!(w.len(), 1);
        assert!(w[0].path.ends_with("proc/uptime"), "{w:?}");
    }
}
