//! Why a claim is refused, in detail: the NUMA fit's verdict per host cell and guest cell, and
//! the PCI pools a request saw and why each was left out. [`super::error::Refusal`] carries them
//! to the API, which shows them as they are.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::probes::pci::PciAddress;

/// One guest cell on one host cell: fits, or why not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// Guest cell id.
    pub guest_cell: u32,
    /// `fits`, or what is short, with the numbers.
    pub reason: String,
}

/// One host cell as the refused guest saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CellVerdicts {
    /// Host cell id.
    pub id: u32,
    /// One per guest cell.
    pub verdicts: Vec<Verdict>,
}

/// Why a guest's NUMA topology does not fit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NumaRefusal {
    /// The reason in one sentence.
    pub reason: String,
    /// Every host cell, with a verdict per guest cell.
    pub cells: Vec<CellVerdicts>,
}

/// Why a pool could not serve a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolRejection {
    /// No spec of the request matches the pool.
    SpecMismatch,
    /// The NUMA policy excludes the pool's node.
    NumaAffinity,
    /// The pool holds PFs and the request did not ask for a PF.
    UnrequestedPf,
    /// The pool holds vDPA devices and the request did not ask for them.
    UnrequestedVdpa,
    /// The pool holds remote-managed devices and the request did not ask for them.
    UnrequestedRemoteManaged,
    /// The request's live_migratable requirement does not match.
    LiveMigratable,
    /// Placement allocated the request's devices from other providers (or the pool is not in
    /// Placement, or its provider has fewer devices left than Placement allocated from it).
    PlacementAllocation,
}

/// One pool as a refused request saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PoolVerdict {
    /// vendor_id, product_id, numa_node and tags.
    pub pool: BTreeMap<String, Option<String>>,
    /// Available devices in it.
    pub count: usize,
    /// Why it was left out; null if it was usable.
    pub rejected: Option<PoolRejection>,
}

/// A PCI request that could not be met.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PciRefusal {
    /// Request id.
    pub request_id: String,
    /// Alias, if any.
    pub alias_name: Option<String>,
    /// Devices asked for.
    pub requested: u32,
    /// Devices left after the filters.
    pub usable: usize,
    /// The pools considered and why each was rejected.
    pub pools: Vec<PoolVerdict>,
    /// The other requests of the claim had already taken these devices when this one was tried.
    pub taken_by_earlier_requests: Vec<PciAddress>,
}
