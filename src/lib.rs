//! rtrack: a per-host resource tracker agent for cloud compute hosts.
//!
//! Data flows one way: [`rtrack_probes`] reads the hardware, [`inventory`] turns it into the
//! report `rtrackd --once` prints and the resource inventory, [`tracker`] accounts claims
//! against it. [`config`] is the configuration file every part reads.

pub mod api;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod echo;
pub mod inventory;
pub mod objects;
pub mod pci_policy;
pub mod service;
pub mod store;
pub mod tracker;
pub mod upstream;

pub use rtrack_probes as probes;
