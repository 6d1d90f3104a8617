//! systemd notifications (`Type=notify`): READY once the first audit is done and the socket
//! listens, STATUS lines, WATCHDOG pings, RELOADING/STOPPING. Outside systemd (no
//! `NOTIFY_SOCKET`) every call does nothing.
//!
//! In: the daemon's milestones and status lines, and `NOTIFY_SOCKET` and the watchdog settings from
//! the environment. Out: `sd_notify` messages to systemd, and the watchdog ping interval (half of
//! `WatchdogSec`).

use std::time::Duration;

use sd_notify::NotifyState;

fn send(states: &[NotifyState]) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!(error = %e, "cannot notify systemd");
    }
}

/// Startup is complete.
pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// A status line (`systemctl status` shows it).
pub fn status(status: &str) {
    send(&[NotifyState::Status(status)]);
}

/// Reloading the configuration.
pub fn reloading() {
    let mut states = vec![NotifyState::Reloading];
    // systemd 253+ wants the time with RELOADING=1 (Type=notify-reload); older ones ignore it.
    if let Ok(t) = NotifyState::monotonic_usec_now() {
        states.push(t);
    }
    send(&states);
}

/// Shutting down.
pub fn stopping() {
    send(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
}

/// The watchdog ping interval (half of `WatchdogSec`), when the watchdog is on for this process.
pub fn watchdog_interval() -> Option<Duration> {
    sd_notify::watchdog_enabled().map(|d| d / 2)
}

/// One watchdog ping.
pub fn watchdog() {
    send(&[NotifyState::Watchdog]);
}
