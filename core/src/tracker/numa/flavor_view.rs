//! What the NUMA constraints are read from, and how: the flavor's sizes and extra specs with
//! their JSON path, oslo's loose booleans, Nova's limit on numbered cell keys, and the error a
//! bad value gives. Shared by the flavor's and the image's readers.

use std::collections::BTreeMap;

use crate::tracker::error::ClaimError;

/// Nova's `ImageMetaProps.NUMA_NODES_MAX`: `hw:numa_cpus.N` and `hw:numa_mem.N` are read for N
/// below it.
pub const NUMA_NODES_MAX: usize = 128;

pub(super) fn invalid(field: String, message: impl Into<String>) -> ClaimError {
    ClaimError::Invalid {
        field,
        message: message.into(),
    }
}

/// What [`numa_constraints`] reads: the flavor's sizes and extra specs, and where they came from
/// (for error paths).
pub struct FlavorView<'a> {
    /// Guest CPUs.
    pub vcpus: i64,
    /// Guest memory, MiB.
    pub memory_mb: i64,
    /// The flavor's extra specs.
    pub extra_specs: &'a BTreeMap<String, String>,
    /// The flavor's JSON path in the request, e.g. `request_spec.flavor`.
    pub path: &'a str,
}

impl FlavorView<'_> {
    pub(super) fn spec(&self, key: &str) -> Option<&str> {
        self.extra_specs.get(key).map(String::as_str)
    }

    pub(super) fn field(&self, key: &str) -> String {
        format!("{}.extra_specs.{key}", self.path)
    }
}

/// oslo's `bool_from_string`, not strict: anything but a true word is false.
pub(super) fn truthy(v: &str) -> bool {
    matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "1" | "t" | "true" | "on" | "y" | "yes"
    )
}
