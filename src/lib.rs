//! rtrack: a per-host resource tracker agent for cloud compute hosts.
//!
//! Data flows one way: [`rtrack_probes`] reads the hardware, [`inventory`] turns it into the
//! report `rtrackd --once` prints.

pub mod inventory;

pub use rtrack_probes as probes;
