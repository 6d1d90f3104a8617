//! What rtrack keeps on disk under its state directory: the compute node's identity
//! ([`node_id`]), the tracker's records in SQLite ([`sqlite`]), and the lock that keeps it to one
//! daemon ([`lock`]).
//!
//! In: the state directory, and batches of the tracker's changes to commit. Out: the compute node's
//! uuid, the tracker's records as last committed, and the lock held for the daemon's lifetime;
//! every error names its file.

pub mod lock;
pub mod node_id;
pub mod sqlite;

pub use sqlite::{Store, StoreError};
