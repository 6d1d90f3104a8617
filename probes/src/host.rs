//! Host identity probe: hostname and kernel release from procfs.
//!
//! In: `proc/sys/kernel/{hostname,osrelease}`. Out: [`HostIdentity`]. Both are null when the
//! tree does not carry them (captured fixtures usually don't); that is not a warning.

use serde::Serialize;

use crate::read::{read_optional, Warnings};
use crate::HostRoot;

/// Who the host is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct HostIdentity {
    /// Kernel hostname (`proc/sys/kernel/hostname`).
    pub hostname: Option<String>,
    /// Architecture (same as `cpu.arch`).
    pub arch: Option<String>,
    /// Kernel release (`proc/sys/kernel/osrelease`).
    pub kernel: Option<String>,
}

/// Reads hostname and kernel release; `arch` is filled in from the CPU probe.
pub fn probe_host_identity(
    root: &HostRoot,
    arch: Option<String>,
    w: &mut Warnings,
) -> HostIdentity {
    let non_empty = |v: Option<String>| v.filter(|s| !s.is_empty());
    HostIdentity {
        hostname: non_empty(read_optional(&root.proc_path("sys/kernel/hostname"), w)),
        arch,
        kernel: non_empty(read_optional(&root.proc_path("sys/kernel/osrelease"), w)),
    }
}
