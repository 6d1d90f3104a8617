//! PCI passthrough tracking, with Nova's semantics: device specs select tracked devices, aliases
//! turn flavor extra specs into requests, pools summarise available devices.

pub mod alias;
pub mod claim;
pub mod devices;
pub mod pools;
pub mod spec;

pub use alias::{Alias, AliasTable, NumaPolicy};
pub use devices::{DeviceStatus, PoolKey, TrackedDevice};
pub use pools::Pool;
pub use spec::{DeviceSpec, SpecError};
