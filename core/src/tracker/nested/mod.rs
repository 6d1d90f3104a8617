//! Resources that live on providers below the compute node: vGPUs (one provider per mdev parent,
//! as Nova's libvirt driver makes them) and memory encryption contexts (one provider per
//! encryption model, as Nova 34 makes them: AMD SEV here, Intel TDX in [`tdx`]); and the named
//! devices a claim is given whatever provider holds their units: vPMEM namespaces ([`pmem`],
//! whose classes are the compute node's own).
//!
//! In: the probe (mdev parents, types and devices; SEV and TDX state; PMEM namespaces) and the
//! [`MdevPolicy`]. Out: the [`NestedProvider`]s with their totals, the [`NestedAllocation`] a
//! claim holds (units per provider, and the mediated devices and namespaces given), and the
//! configuration's problems on this host. Pure: no I/O. [`assign`] places a claim's units.
//!
//! Totals follow Nova's `_get_gpu_inventories`: a parent's total is the mdevs of its type that
//! exist plus the type's `available_instances`, with `max_unit` = total. A parent whose
//! `available_instances` would pass the type's `max_instances` offers none of them (Nova's
//! rule: its provider goes once nothing is held there); unlike Nova, which zeroes the whole
//! parent, its existing mdevs stay counted (docs/differences.md). A parent no enabled type
//! applies to is left alone, as Nova leaves it: its provider, if any, keeps what it had.

pub mod assign;
mod model;
mod offer;
pub mod operator;
pub mod pmem;
pub mod tdx;

pub use model::*;
pub use offer::*;

#[cfg(test)]
mod tests;
