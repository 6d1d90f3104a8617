//! Logs through `tracing` to stderr (journald adds its own metadata): human text by default,
//! one JSON object per line with `--log-format json`. The level can change on SIGHUP.
//!
//! In: the log format and level (`RTRACK_LOG` wins over the level), and a new level on SIGHUP. Out:
//! the global `tracing` subscriber writing to stderr, and a [`LogHandle`] that changes its level.

use tracing_subscriber::filter::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::reload;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Registry;

use crate::config::LogFormat;

/// Changes the level of the installed subscriber.
#[derive(Clone)]
pub struct LogHandle {
    filter: reload::Handle<EnvFilter, Registry>,
}

fn filter(level: &str) -> Result<EnvFilter, String> {
    // RTRACK_LOG (e.g. "info,rtrack::upstream=debug") wins over the configured level.
    let directives = std::env::var("RTRACK_LOG").unwrap_or_else(|_| level.to_string());
    EnvFilter::try_new(&directives).map_err(|e| format!("log level {directives:?}: {e}"))
}

/// Installs the global subscriber. Fails if one is installed already or the level is invalid.
pub fn init(format: LogFormat, level: &str) -> Result<LogHandle, String> {
    let (filter_layer, handle) = reload::Layer::new(filter(level)?);
    let json = format == LogFormat::Json;
    let text_layer = (!json).then(|| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_target(true)
    });
    let json_layer = json.then(|| {
        tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .with_writer(std::io::stderr)
    });
    tracing_subscriber::registry()
        .with(filter_layer)
        .with(text_layer)
        .with(json_layer)
        .try_init()
        .map_err(|e| format!("cannot install the logger: {e}"))?;
    Ok(LogHandle { filter: handle })
}

impl LogHandle {
    /// Sets a new level.
    pub fn set_level(&self, level: &str) -> Result<(), String> {
        let f = filter(level)?;
        self.filter
            .reload(f)
            .map_err(|e| format!("cannot change the log level: {e}"))
    }
}
