//! The accounting core: host resources in, claims and usage out. No I/O here: no files, no
//! clock, no network; callers pass the time and the probed host, and persist the [`Changes`]
//! each operation returns before answering.
//!
//! In: a probe (as a [`host_view::HostView`]), the [`TrackerPolicy`], records loaded from the
//! store, requests. Out: claims or refusals, [`Changes`] to persist, usage, the ComputeNode.
//!
//! - [`model`]: the instance records (instances, migrations, flavors, PCI requests).
//! - [`request`]: RequestSpec (or legacy dicts) to an instance request, checked.
//! - [`flavor_classes`]: the classes a flavor asks for beyond the host's four.
//! - [`usage`]: usage derived from the records with Nova's instance and migration rules, and
//!   which Placement consumer holds each counted side.
//! - [`released`]: the Placement consumers an operation released here (recorded with it).
//! - [`pci`]: device specs, aliases, tracked devices, pools, claims.
//! - [`numa`]: host cells, guest constraints, fitting and pinning, per-cell usage.
//! - [`nested`]: vGPU and memory encryption providers below the compute node, units and mdevs.
//! - [`records`]: what the store persists ([`TrackerState`]); [`changes`]: what an operation
//!   changed in them; [`settings`]: what the tracker takes from the configuration.
//! - [`resource_tracker`]: the [`Tracker`]: the records with the host, and what it derives;
//!   [`ops`]: its operations (claims, moves, confirm, revert, abort, audit).
//! - [`host_view`]: what one probe means under the settings, derived once per audit.
//! - [`node_template`]: the ComputeNode: host facts once per probe, usage at each read.

pub mod changes;
pub mod encryption_request;
pub mod error;
pub mod flavor_classes;
pub mod host_view;
pub mod model;
pub mod nested;
pub mod node_template;
pub mod nova_states;
pub mod numa;
pub mod ops;
pub mod pci;
pub mod records;
pub mod refusals;
pub mod released;
pub mod request;
pub mod resource_tracker;
pub mod settings;
pub mod upgrade;
pub mod usage;

pub use changes::Changes;
pub use error::{ClaimError, Refusal};
pub use ops::{
    AuditOutcome, ClaimOutcome, InstanceInfo, InstanceUpdate, MoveRequest, MoveType, PoolUsage,
};
pub use records::{
    ClaimRecord, Counters, PciProviderOrigin, PciProviderRecord, ReleasedConsumer, TrackerState,
};
pub use resource_tracker::Tracker;
pub use settings::{TrackerPolicy, TrackerSettings};

#[cfg(test)]
mod tests;
