//! The edge of rtrack: the one-shot inventory (`rtrackd --once`) and, later, the daemon.

pub mod once;
pub mod service;
