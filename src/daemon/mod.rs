//! The edge of rtrack: the one-shot inventory (`rtrackd --once`) and the daemon around the
//! tracker (audit loop, API socket, reload, metrics, upstream reporting, systemd).
//!
//! In: the checked configuration and the command line's options, the host's sysfs and procfs, the
//! state directory, signals, and requests on the API socket. Out: `--once`'s report; for the
//! daemon, answers on the socket, commits to the store, logs, metrics, systemd notifications and
//! reports upstream.

pub mod audit;
pub mod config_file;
pub mod error;
pub mod identity;
mod lifecycle;
pub mod logging;
pub mod once;
pub mod report;
pub mod run;
pub mod socket;
pub mod systemd;
mod upstream_commands;
