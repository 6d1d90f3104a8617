//! rtrack's accounting core: everything between the probed host and the daemon's I/O.
//!
//! In: the probe ([`rtrack_probes`]), the configuration's text, Nova's objects as JSON, requests
//! and the time. Out: the inventory and the ComputeNode, claims granted or refused with the
//! [`tracker::Changes`] to persist, usage. No async runtime, database, HTTP or OpenAPI crate is
//! a dependency: the daemon (the `rtrack` crate) persists, serves and reports.
//!
//! Data flows one way: [`inventory`] turns the probe into the report `rtrackd --once` prints and
//! the resource inventory, [`objects`] are Nova's versioned objects, [`tracker`] accounts claims
//! against the inventory. [`config`] is the configuration every part reads (its loaders are the
//! only file reads here: the configuration file, provider.yaml files, clouds.yaml).

pub mod config;
pub mod echo;
pub mod inventory;
pub mod nova_syntax;
pub mod objects;
pub mod pci_policy;
pub mod tracker;

pub use rtrack_probes as probes;
