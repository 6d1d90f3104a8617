//! What rtrack keeps on disk under its state directory: the compute node's identity
//! ([`node_id`]) and the tracker's records in SQLite ([`sqlite`]).

pub mod node_id;
pub mod sqlite;

pub use sqlite::{Store, StoreError};
