//! Upstream reporting: keeps an OpenStack Placement resource provider tree in step with the
//! host, as nova-compute's report client does, and optionally POSTs the ComputeNode record to an
//! HTTP endpoint.
//!
//! In: a snapshot of the tracker (probed host, configuration, node identity, service state, local
//! claims) and the `[placement]` and `[upstream.http]` settings. Out: Placement's provider tree,
//! inventories, traits, aggregates and allocations brought in line with it (a [`ReportOutcome`] per
//! report), and the ComputeNode POSTed to `[upstream.http]` ([`HttpPush`]).
//!
//! Data flows one way through this module:
//!
//! 1. [`crate::config::upstream`] turns `[placement]` into [`PlacementSettings`] (as part of
//!    the configuration's one validation).
//! 2. [`DesiredState::build`] turns a snapshot (probed host, configuration, node identity,
//!    service state, local claims) into the providers, inventories, traits, aggregates and
//!    allocations Placement should hold. Pure: no I/O, no clock.
//! 3. [`Reporter::report`] compares that with its cached copy of Placement's state
//!    ([`plan::plan`], also pure), sends only the differences, adopts the generations Placement
//!    returns and handles conflicts and outages. It never takes the tracker lock: the caller
//!    builds the snapshot, releases the lock, then calls `report`.
//!
//! [`report_once`] does all of that once, for `rtrackd --once --report`. The wire format and
//! behaviour are described in `docs/upstream.md`.

pub mod adoption;
pub mod allocations;
pub mod api;
pub mod auth;
pub mod backoff;
pub mod children;
pub mod client;
pub mod consumers;
pub mod desired;
pub mod expected;
pub mod http_push;
pub mod identity;
pub mod patience;
pub mod plan;
pub mod reconcile;
pub mod reporter;
pub use crate::inventory::traits;
pub mod transport;

use uuid::Uuid;

pub use crate::config::upstream::{
    AuthSettings, HttpPushSettings, KeyError, KeystoneAuth, KeystoneMethod, PlacementSettings,
};
pub use api::{PlacementApi, RequestCounts};
pub use backoff::Backoff;
pub use client::HttpPlacement;
pub use desired::{Consumer, DesiredState, ResourceKey};
pub use http_push::HttpPush;
pub use reporter::{ReportOutcome, Reporter, ReporterOptions};

/// What went wrong while reporting upstream. Messages name the request, the provider or the
/// configuration key; they never carry a password or a token.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// A `[placement]` or `[upstream.http]` key has a bad value. Secret values are not echoed.
    /// `key` may be a clouds.yaml path or an `OS_*` variable, with its file.
    #[error("{key} = {value}: {expected}")]
    Config {
        /// Dotted key, e.g. `placement.endpoint`.
        key: String,
        /// The value as written, or `(hidden)` for secrets.
        value: String,
        /// What is accepted.
        expected: String,
    },
    /// No answer: connection refused, reset, DNS failure or timeout.
    #[error("{method} {url}: no answer from the server ({reason})")]
    Transport {
        /// HTTP method.
        method: String,
        /// The URL (endpoint and path, no credentials).
        url: String,
        /// Why, e.g. "connection refused" or "timed out after 10 s".
        reason: String,
    },
    /// Placement answered with an error status.
    #[error("{method} {path}: placement answered {status}{}: {detail}", code.as_deref().map(|c| format!(" {c}")).unwrap_or_default())]
    Placement {
        /// HTTP method.
        method: String,
        /// Path below the endpoint.
        path: String,
        /// HTTP status.
        status: u16,
        /// Placement's error `code` (from microversion 1.23 on), e.g. `placement.concurrent_update`.
        code: Option<String>,
        /// Placement's `detail` (for people; never matched on), on one line.
        detail: String,
        /// The same as Placement wrote it (at most 1000 characters): passed on to callers
        /// that show Placement's own words (nova-compute's PlacementPciException).
        verbatim: String,
    },
    /// An answer that is not the JSON Placement documents.
    #[error("{method} {path}: unexpected answer: {reason}")]
    Decode {
        /// HTTP method.
        method: String,
        /// Path below the endpoint.
        path: String,
        /// What did not parse.
        reason: String,
    },
    /// The server cannot speak a microversion rtrack needs.
    #[error("placement at {endpoint} supports microversions {min} to {max}; rtrack needs at least {needed}")]
    Microversion {
        /// The endpoint.
        endpoint: String,
        /// Server minimum.
        min: String,
        /// Server maximum.
        max: String,
        /// What rtrack needs.
        needed: String,
    },
    /// Another provider already has the name rtrack wants for one of its own.
    #[error("cannot create resource provider {name:?} with uuid {ours}: provider {theirs} already has that name (rename or delete one of them)")]
    NameClash {
        /// The name.
        name: String,
        /// The uuid rtrack wanted.
        ours: Uuid,
        /// The uuid of the provider that has the name.
        theirs: Uuid,
    },
    /// Keystone refused or failed to issue a token.
    #[error("keystone at {url}: {reason}")]
    Auth {
        /// The token URL.
        url: String,
        /// Why (status and Keystone's message; never the password).
        reason: String,
    },
    /// Generation conflicts kept coming back.
    #[error("resource provider {provider}: still a generation conflict after {tries} tries")]
    ConflictsExhausted {
        /// Provider (or consumer) uuid.
        provider: Uuid,
        /// Tries made.
        tries: u32,
    },
    /// The input cannot be reported (e.g. a consumer names a PCI device no provider holds).
    #[error("cannot report: {0}")]
    Input(String),
}

impl UpstreamError {
    /// Placement's error code, when Placement answered with one.
    pub fn code(&self) -> Option<&str> {
        match self {
            UpstreamError::Placement { code, .. } => code.as_deref(),
            _ => None,
        }
    }

    /// Placement's `detail` as it wrote it, when Placement answered with an error.
    pub fn detail(&self) -> Option<&str> {
        match self {
            UpstreamError::Placement { verbatim, .. } => Some(verbatim),
            _ => None,
        }
    }

    /// HTTP status, when Placement answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            UpstreamError::Placement { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// A generation conflict (409 `placement.concurrent_update`): re-read and retry.
    pub fn is_concurrent_update(&self) -> bool {
        self.status() == Some(409) && self.code() == Some("placement.concurrent_update")
    }

    /// Removing inventory that has allocations (409 `placement.inventory.inuse`).
    pub fn is_inventory_in_use(&self) -> bool {
        self.status() == Some(409) && self.code() == Some("placement.inventory.inuse")
    }

    /// The server refused the negotiated microversion (406: it was replaced by an older
    /// Placement): negotiate again before the next request. Nothing else calls for it; a
    /// timeout or a refused connection says nothing about the version, and asking at every
    /// retry would add a request to each attempt of every host while Placement is overloaded.
    pub fn calls_for_negotiation(&self) -> bool {
        matches!(self, UpstreamError::Placement { status: 406, .. })
    }

    /// The server is unreachable or failing (transport error or 5xx): back off exponentially.
    pub fn is_outage(&self) -> bool {
        match self {
            UpstreamError::Transport { .. } => true,
            UpstreamError::Placement { status, .. } => *status >= 500,
            UpstreamError::Auth { .. } => true,
            _ => false,
        }
    }
}

impl From<KeyError> for UpstreamError {
    fn from(e: KeyError) -> UpstreamError {
        UpstreamError::Config {
            key: match &e.file {
                Some(f) => format!("{}: {}", f.display(), e.key),
                None => e.key,
            },
            value: e.value,
            expected: e.expected,
        }
    }
}

/// Validates `[placement]` as [`crate::config::Config::validate`] does, from the TOML alone
/// (no `OS_*` variables, no clouds.yaml). `Ok(None)` when reporting is off.
pub fn validate_placement(
    c: &crate::config::PlacementConfig,
) -> Result<Option<PlacementSettings>, UpstreamError> {
    Ok(crate::config::upstream::validate_placement(
        c,
        &crate::config::placement_sources::Environment::empty(),
    )?)
}

/// Validates `[upstream.http]` (as [`crate::config::Config::validate`] does).
pub fn validate_http_push(
    c: Option<&crate::config::UpstreamHttpConfig>,
) -> Result<Option<HttpPushSettings>, UpstreamError> {
    Ok(crate::config::upstream::validate_http_push(c)?)
}

/// Reports once: validates `[placement]`, builds the desired state from the probed host, sends
/// what Placement lacks, and POSTs `compute_node` to `[upstream.http]` when that is configured.
/// For `rtrackd --once --report`; the daemon keeps a [`Reporter`] instead.
///
/// `consumers` are the local claims (used only with `report_allocations = true`).
#[allow(clippy::too_many_arguments)]
pub async fn report_once(
    config: &crate::config::ValidConfig,
    view: &crate::tracker::host_view::HostView,
    node_uuid: Uuid,
    hypervisor_hostname: &str,
    service_disabled: bool,
    consumers: &[Consumer],
    compute_node: Option<&serde_json::Value>,
) -> Result<ReportOutcome, UpstreamError> {
    let settings = config
        .placement_settings
        .clone()
        .ok_or_else(|| UpstreamError::Config {
            key: "placement.endpoint".into(),
            value: "(unset)".into(),
            expected: "must be set to report to Placement, e.g. \"http://controller:8778\"".into(),
        })?;
    let push = config.http_push.clone();
    let desired = DesiredState::build(
        view,
        config,
        node_uuid,
        hypervisor_hostname,
        service_disabled,
        consumers,
    )?;
    let api = HttpPlacement::new(&settings)?;
    let mut reporter = Reporter::new(api, &settings, ReporterOptions::default());
    let outcome = reporter.report(&desired).await?;
    if let (Some(push), Some(cn)) = (push, compute_node) {
        HttpPush::new(push)?.push(cn).await?;
    }
    Ok(outcome)
}

/// Makes rustls use the ring crypto provider (once per process). reqwest is built without a
/// default provider so that no CMake/C++ toolchain (aws-lc) is needed to build rtrack.
pub fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Err means another provider was installed first, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

#[cfg(test)]
mod tests {
    use super::UpstreamError;

    fn answered(status: u16) -> UpstreamError {
        UpstreamError::Placement {
            method: "GET".into(),
            path: "/resource_providers".into(),
            status,
            code: None,
            detail: String::new(),
            verbatim: String::new(),
        }
    }

    #[test]
    fn only_a_refused_microversion_calls_for_negotiation() {
        assert!(answered(406).calls_for_negotiation());
        for status in [400, 404, 409, 500, 503] {
            assert!(!answered(status).calls_for_negotiation(), "{status}");
        }
        let timeout = UpstreamError::Transport {
            method: "GET".into(),
            url: "http://placement/".into(),
            reason: "timed out".into(),
        };
        assert!(!timeout.calls_for_negotiation());
    }
}
