//! rtrack: a per-host resource tracker agent for cloud compute hosts.
//!
//! In: the host's sysfs and procfs, the configuration file, and claims, moves and state updates on
//! the local socket. Out: claims granted or refused and committed under the state directory, the
//! inventory and the ComputeNode, metrics, and reports to Placement (and the ComputeNode to
//! `[upstream.http]`).
//!
//! Data flows one way: [`rtrack_probes`] reads the hardware; the accounting core
//! ([`rtrack_core`]: [`inventory`], [`objects`], [`tracker`], [`config`]) turns it into the
//! inventory and accounts claims against it, without I/O; this crate persists ([`store`],
//! [`service`]), reports ([`upstream`]), serves ([`api`], [`daemon`]) and drives it ([`cli`]).

pub mod api;
pub mod cli;
pub mod daemon;
pub mod service;
pub mod store;
pub mod upstream;

pub use rtrack_core::{config, echo, inventory, nova_syntax, objects, pci_policy, tracker};
pub use rtrack_probes as probes;
