//! Where the probes read from: a sysfs root and a procfs root, passed in as a value.
//!
//! In: the sysfs and procfs mount points (`/sys` and `/proc`, or `dir/sys` and `dir/proc` of a
//! captured tree). Out: a [`HostRoot`] that builds paths below them and checks that they can be
//! probed at all (a [`ProbeError`] when neither is a readable directory).
//!
//! Containers often mount the host's `/sys` somewhere else (`/host-sys`), so the two roots are
//! separate paths rather than one prefix. No probe writes `/sys` or `/proc` itself.

use std::path::{Path, PathBuf};

use crate::ProbeError;

/// The two filesystem roots every probe reads from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRoot {
    /// Mount point of sysfs (normally `/sys`).
    pub sys: PathBuf,
    /// Mount point of procfs (normally `/proc`).
    pub proc: PathBuf,
}

impl HostRoot {
    /// The running host: `/sys` and `/proc`.
    pub fn system() -> HostRoot {
        HostRoot {
            sys: PathBuf::from("/sys"),
            proc: PathBuf::from("/proc"),
        }
    }

    /// A captured tree: `dir/sys` and `dir/proc`.
    pub fn under(dir: &Path) -> HostRoot {
        HostRoot {
            sys: dir.join("sys"),
            proc: dir.join("proc"),
        }
    }

    /// Checks that the roots can be probed at all. At least one of the two must be a readable
    /// directory; a fixture may carry only one of them (PCI-only snapshots have no `proc`).
    /// Anything missing below the roots is the probes' business and only gives warnings.
    pub fn check(&self) -> Result<(), ProbeError> {
        let sys_ok = is_readable_dir(&self.sys);
        let proc_ok = is_readable_dir(&self.proc);
        if sys_ok.is_err() && proc_ok.is_err() {
            return Err(ProbeError::UnusableRoot {
                sys: self.sys.clone(),
                proc: self.proc.clone(),
                reason: format!(
                    "sysfs root: {}; procfs root: {}",
                    sys_ok.err().unwrap_or_default(),
                    proc_ok.err().unwrap_or_default()
                ),
            });
        }
        Ok(())
    }

    /// A path below the sysfs root, e.g. `sys_path("bus/pci/devices")`.
    pub fn sys_path(&self, rel: &str) -> PathBuf {
        self.sys.join(rel)
    }

    /// A path below the procfs root, e.g. `proc_path("meminfo")`.
    pub fn proc_path(&self, rel: &str) -> PathBuf {
        self.proc.join(rel)
    }
}

fn is_readable_dir(path: &Path) -> Result<(), String> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => std::fs::read_dir(path)
            .map(|_| ())
            .map_err(|e| format!("{} cannot be listed: {e}", path.display())),
        Ok(_) => Err(format!("{} is not a directory", path.display())),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_joins_sys_and_proc() {
        let r = HostRoot::under(Path::new("/x/y"));
        assert_eq!(r.sys, PathBuf::from("/x/y/sys"));
        assert_eq!(r.proc, PathBuf::from("/x/y/proc"));
    }

    #[test]
    fn check_rejects_a_root_with_neither_tree() {
        let dir = tempfile::tempdir().unwrap();
        let err = HostRoot::under(dir.path()).check().unwrap_err().to_string();
        assert!(err.contains("sysfs root"), "{err}");
        assert!(err.contains(&dir.path().display().to_string()), "{err}");
    }

    #[test]
    fn check_accepts_a_root_with_only_sys() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sys")).unwrap();
        HostRoot::under(dir.path()).check().unwrap();
    }

    #[test]
    fn check_rejects_files_in_place_of_directories() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("sys"), "x").unwrap();
        std::fs::write(dir.path().join("proc"), "x").unwrap();
        let err = HostRoot::under(dir.path()).check().unwrap_err().to_string();
        assert!(err.contains("is not a directory"), "{err}");
    }
}
