//! The command lines: `rtrackd` (daemon, `--once`, `--check-config`) and `rtrackctl` (the
//! client of the daemon's socket). Their clap definitions live here so that the man pages and
//! shell completions are generated from the same source (`packaging/assets`).

pub mod client;
pub mod rtrackctl;
pub mod rtrackd;
