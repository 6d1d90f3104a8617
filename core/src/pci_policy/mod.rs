//! The operator's PCI policy, as Nova's `[pci]` section states it: which devices are tracked
//! and with which tags ([`spec`]), and which names flavors use to ask for them ([`alias`]).
//!
//! In: the configuration's tables and the probed devices. Out: matching and requests. It sits
//! below both the configuration (which validates it) and the tracker (which applies it).

pub mod alias;
pub mod spec;

pub use alias::{Alias, AliasTable, NumaPolicy};
pub use spec::{DeviceSpec, SpecError};
