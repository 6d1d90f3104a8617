//! The command lines: `rtrackd` (daemon, `--once`, `--check-config`) and `rtrackctl` (the
//! client of the daemon's socket). Their clap definitions live here so that the man pages and
//! shell completions are generated from the same source (`packaging/assets`).
//!
//! In: the process's arguments (and `RTRACK_SOCKET` for `rtrackctl`). Out: for `rtrackd`, the
//! configuration and options handed to [`crate::daemon`]; for `rtrackctl`, one request to rtrackd's
//! socket through [`client`], its answer printed, and an exit code.

pub mod client;
pub mod rtrackctl;
pub mod rtrackd;
