//! NUMA accounting with Nova's semantics: the host's cells as the libvirt driver reports them,
//! a guest's NUMA constraints from its flavor and image, the fit of guest cells onto host cells
//! (CPU pinning, thread and emulator-thread policies, page sizes, PCI affinity), and the usage of
//! every cell derived from what the claims hold.
//!
//! In: the probe and `[resources]` ([`host`]), a flavor's extra specs and the image properties
//! ([`constraints`]), the current per-cell usage ([`usage`]). Out: a [`FittedTopology`] per guest
//! (which host cell each guest cell is on, which host CPU each guest CPU is pinned to, the page
//! size), or a [`NumaRefusal`](crate::tracker::refusals::NumaRefusal) that says, per host cell, why each guest cell does not fit.
//!
//! - [`host`] — the host topology (`_get_host_numa_topology`);
//! - [`constraints`] — `numa_get_constraints`, with [`image`] the image's properties;
//! - [`fit`] — `numa_fit_instance_to_host` and `_numa_fit_instance_cell`;
//! - [`pinning`] — `_pack_instance_onto_cores`;
//! - [`power`] — CPU power management: offline dedicated CPUs, pinned CPUs offline;
//! - [`usage`] — `numa_usage_from_instance_numa`, summed over the records;
//! - [`report`] — what `GET /v1/usage`, `GET /v1/numa` and `rtrackctl numa` show;
//! - [`nova`] — the Nova objects (NUMATopology with usage, InstanceNUMATopology).
//!
//! Where rtrack differs from Nova (deterministic pinning order, no fit cache, page sizes that do
//! not stick between attempts, emulator threads of `isolate` guests on whole free cores, a
//! bounded search) is written in `docs/differences.md`.

pub mod align;
pub mod constraints;
pub mod domains;
pub mod fit;
mod fitted;
mod flavor_view;
mod guest;
pub mod host;
pub mod image;
pub mod networks;
pub mod nova;
pub mod pinning;
pub mod placed;
pub mod power;
pub mod report;
pub mod usage;

pub use constraints::{numa_constraints, ImageProps};
pub use fit::{fit_instance, FitInput};
pub use fitted::*;
pub use guest::*;
pub use host::{HostCell, HostTopology, PagePool};
pub use usage::{CellUsage, NumaUsage};
