//! What rtrack keeps on disk under its state directory: the compute node's identity
//! ([`node_id`]), the tracker's records in SQLite ([`sqlite`]), and the lock that keeps it to one
//! daemon ([`lock`]).

pub mod lock;
pub mod node_id;
pub mod sqlite;

pub use sqlite::{Store, StoreError};
