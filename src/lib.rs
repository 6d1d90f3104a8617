//! rtrack: a per-host resource tracker agent for cloud compute hosts.
//!
//! In: the host's sysfs and procfs, the configuration file, and claims, moves and state updates on
//! the local socket. Out: claims granted or refused and committed under the state directory, the
//! inventory and the ComputeNode, metrics, and reports to Placement (and the ComputeNode to
//! `[upstream.http]`).
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
pub mod nova_syntax;
pub mod objects;
pub mod pci_policy;
pub mod service;
pub mod store;
pub mod tracker;
pub mod upstream;

pub use rtrack_probes as probes;
