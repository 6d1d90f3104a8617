//! Why the daemon could not start, or why a reload was refused: one type for the daemon's own
//! steps, wrapping the error of the layer below (configuration, state directory lock, store,
//! socket, Placement, the compute node's identity) or saying in words what a step needed and
//! what to do. `main` prints it and exits non-zero.

use crate::config::ConfigError;
use crate::store::lock::LockError;
use crate::store::node_id::NodeIdError;
use crate::store::StoreError;
use crate::upstream::UpstreamError;

use super::socket::SocketError;

/// A start or reload that cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The configuration file (or what it names) is wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The state directory is another daemon's, or cannot be locked.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// The store cannot be opened or read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The API socket cannot be set up.
    #[error(transparent)]
    Socket(#[from] SocketError),
    /// The Placement client cannot be set up (boxed: it is large, and rare).
    #[error(transparent)]
    Placement(Box<UpstreamError>),
    /// The compute node's uuid cannot be read or stored (its message is the whole story: not a
    /// source, so that `main`'s chain does not say it twice).
    #[error("compute node identity: {0}")]
    Identity(NodeIdError),
    /// The runtime, the signal handlers or a listener cannot be set up.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A startup task panicked or was cancelled.
    #[error("a startup task failed: {0}")]
    Task(tokio::task::JoinError),
    /// A step that cannot go on, in words: what it needed and what to do.
    #[error("{0}")]
    Refused(String),
}

impl From<NodeIdError> for DaemonError {
    fn from(e: NodeIdError) -> DaemonError {
        DaemonError::Identity(e)
    }
}

impl From<tokio::task::JoinError> for DaemonError {
    fn from(e: tokio::task::JoinError) -> DaemonError {
        DaemonError::Task(e)
    }
}

impl From<UpstreamError> for DaemonError {
    fn from(e: UpstreamError) -> DaemonError {
        DaemonError::Placement(Box::new(e))
    }
}
