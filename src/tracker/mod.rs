//! The accounting core: host resources in, claims and usage out. No I/O here: no files, no
//! clock, no network; callers pass the time and persist the results.

pub mod compute_node;
pub mod pci;
