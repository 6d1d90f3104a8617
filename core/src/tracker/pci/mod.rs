//! PCI passthrough tracking, with Nova's semantics: device specs select tracked devices, aliases
//! turn flavor extra specs into requests, pools summarise available devices.
//!
//! In: the probed PCI functions, the device specs and aliases, and an instance's PCI requests. Out:
//! the tracked devices with their states and owners, pools of the available ones, and claims: the
//! devices assigned, or why a request could not be met.

pub mod claim;
pub mod devices;
pub mod free;
pub mod index;
pub mod pools;
pub mod providers;

// The policy lives below the configuration and the tracker; these paths stay for callers.
pub use crate::pci_policy::{alias, spec};
pub use alias::{Alias, AliasTable, NumaPolicy};
pub use devices::{DeviceStatus, PoolKey, TrackedDevice};
pub use pools::Pool;
pub use spec::{DeviceSpec, SpecError};
