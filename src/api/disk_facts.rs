//! DISK_GB from the caller (`[host] disk_source = "caller"`): the totals `POST /v1/refresh`
//! gives, kept in the state directory so that a restart reports the same until the next. For
//! image backends whose capacity is not the instances path's filesystem (rbd, LVM) and for
//! nova-compute on rtrack, whose driver measures them (Nova's `local_gb`, `local_gb_used`,
//! `disk_available_least`).
//!
//! In: a request's `disk_gb`, or the state directory's file. Out: checked totals, and the
//! instances filesystem the audit reports in their place.

use std::io::{Read, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::probes::disk::InstancesFilesystem;

/// The file in the state directory.
pub const FILE: &str = "disk_gb.json";

/// Largest total accepted, GiB (1 EiB): beyond any host, far below overflow.
const MAX_GB: u64 = 1 << 30;
const GIB: u64 = 1 << 30;
/// The file is a few dozen bytes; anything larger is not ours.
const MAX_FILE_BYTES: u64 = 4096;

/// DISK_GB totals in GiB, as Nova's driver reports them. `used` and `free` are the caller's
/// facts as given (a driver's `disk_available_least` counts overcommitted images); only
/// `total` makes the inventory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DiskTotals {
    /// Capacity (Nova's `local_gb`): the DISK_GB inventory's total.
    #[schema(maximum = 1073741824)]
    pub total: u64,
    /// In use, whoever uses it (Nova's `local_gb_used`).
    #[schema(maximum = 1073741824)]
    pub used: u64,
    /// Free for new disks (Nova's `disk_available_least`).
    #[schema(maximum = 1073741824)]
    pub free: u64,
}

impl DiskTotals {
    /// Checks the totals; the error names the field and what was expected.
    pub fn check(&self) -> Result<(), (String, String)> {
        for (field, v) in [
            ("disk_gb.total", self.total),
            ("disk_gb.used", self.used),
            ("disk_gb.free", self.free),
        ] {
            if v > MAX_GB {
                return Err((field.into(), format!("{v} is more than {MAX_GB} GiB")));
            }
        }
        Ok(())
    }

    /// What the audit reports as the instances filesystem.
    pub fn as_filesystem(&self, instances_path: &Path) -> InstancesFilesystem {
        let path = instances_path.display().to_string();
        InstancesFilesystem {
            path,
            measured_path: "(caller: POST /v1/refresh disk_gb)".into(),
            total_gb: self.total,
            free_gb: self.free,
            used_gb: self.used,
            total_bytes: self.total.saturating_mul(GIB),
            free_bytes: self.free.saturating_mul(GIB),
        }
    }

    /// The totals kept in `state_dir`; `None` when none were given yet. A file that cannot be
    /// read or is not such totals is an error naming it.
    pub fn load(state_dir: &Path) -> Result<Option<DiskTotals>, String> {
        let path = state_dir.join(FILE);
        let file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        let mut text = String::new();
        file.take(MAX_FILE_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if text.len() as u64 > MAX_FILE_BYTES {
            return Err(format!(
                "{}: larger than {MAX_FILE_BYTES} bytes; expected {{\"total\": N, \"used\": N, \"free\": N}}",
                path.display()
            ));
        }
        let totals: DiskTotals = serde_json::from_str(&text).map_err(|e| {
            format!(
                "{}: {e}; expected {{\"total\": N, \"used\": N, \"free\": N}} (GiB)",
                path.display()
            )
        })?;
        totals
            .check()
            .map_err(|(field, why)| format!("{}: {field}: {why}", path.display()))?;
        Ok(Some(totals))
    }

    /// Keeps the totals in `state_dir`, whole or not at all (a temporary file, synced, renamed).
    pub fn save(&self, state_dir: &Path) -> std::io::Result<()> {
        let path = state_dir.join(FILE);
        let tmp = state_dir.join(format!("{FILE}.tmp"));
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(serde_json::to_string(self)?.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)?;
        std::fs::File::open(state_dir)?.sync_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_round_trip_through_the_state_directory() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(DiskTotals::load(dir.path()).unwrap(), None);
        let t = DiskTotals {
            total: 128,
            used: 44,
            free: 84,
        };
        t.save(dir.path()).unwrap();
        assert_eq!(DiskTotals::load(dir.path()).unwrap(), Some(t));
        let fs = t.as_filesystem(Path::new("/var/lib/nova/instances"));
        assert_eq!(
            (fs.total_gb, fs.used_gb, fs.free_gb, fs.total_bytes),
            (128, 44, 84, 128 << 30)
        );
    }

    #[test]
    fn bad_totals_and_files_are_named() {
        let over = DiskTotals {
            total: 10,
            used: MAX_GB + 1,
            free: 0,
        };
        assert_eq!(over.check().unwrap_err().0, "disk_gb.used");
        let huge = DiskTotals {
            total: u64::MAX,
            used: 0,
            free: 0,
        };
        assert_eq!(huge.check().unwrap_err().0, "disk_gb.total");
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE), "{\"total\": 1}").unwrap();
        let e = DiskTotals::load(dir.path()).unwrap_err();
        assert!(e.contains(FILE) && e.contains("expected"), "{e}");
        std::fs::write(dir.path().join(FILE), "x".repeat(10_000)).unwrap();
        let e = DiskTotals::load(dir.path()).unwrap_err();
        assert!(e.contains("larger than"), "{e}");
    }
}
