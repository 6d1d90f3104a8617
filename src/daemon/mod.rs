//! The edge of rtrack: the one-shot inventory (`rtrackd --once`) and the daemon around the
//! tracker (audit loop, API socket, reload, metrics, upstream reporting, systemd).

pub mod audit;
pub mod config_file;
pub mod logging;
pub mod once;
pub mod report;
pub mod run;
pub mod socket;
pub mod systemd;
