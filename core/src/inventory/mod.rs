//! The inventory report: what `rtrackd --once` prints and `GET /v1/inventory` returns.
//!
//! In: a [`HostInventory`] from the probes and the time it was taken. Out: an
//! [`InventoryReport`] (serialized as JSON with fixed top-level keys, see `docs/inventory.md`) or
//! a human table ([`table::render`]).

pub mod dedicated;
pub mod offered;
pub mod resources;
pub mod table;
pub mod traits;

use serde::Serialize;
use time::OffsetDateTime;

use crate::probes::HostInventory;

/// The report. Top-level keys are fixed: tools read them.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct InventoryReport {
    /// Version of rtrack that made the report.
    pub rtrack_version: String,
    /// When the probe ran, UTC, `YYYY-MM-DDTHH:MM:SSZ`.
    pub probed_at: String,
    /// host, cpu, numa_nodes, memory, disks, pci_devices, warnings.
    #[serde(flatten)]
    pub inventory: HostInventory,
    /// What the host offers guests beyond its four classes under the configuration (memory
    /// encryption, Intel TDX, vPMEM), when the tracker's view was built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offered: Option<offered::Offered>,
    /// `cpu_dedicated_set` on this host: each CPU's node, state, governor, and whether it
    /// counts (with CPU power management, offline ones do); absent without a dedicated set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedicated_cpus: Option<dedicated::DedicatedCpus>,
    /// The ComputeNode primitive (see docs/objects.md), when built.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compute_node: Option<serde_json::Value>,
}

impl InventoryReport {
    /// Wraps a probe result taken at `probed_at`.
    pub fn new(inventory: HostInventory, probed_at: OffsetDateTime) -> InventoryReport {
        InventoryReport {
            rtrack_version: env!("CARGO_PKG_VERSION").to_string(),
            probed_at: format_utc(probed_at),
            inventory,
            offered: None,
            dedicated_cpus: None,
            compute_node: None,
        }
    }
}

pub use crate::objects::fields::format_utc;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_format_drops_fractions_and_converts_offsets() {
        let t = time::macros::datetime!(2025-03-14 10:26:53.589793 +01:00);
        assert_eq!(format_utc(t), "2025-03-14T09:26:53Z");
    }
}
