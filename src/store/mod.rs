//! What rtrack keeps on disk under its state directory: the compute node's identity
//! ([`node_id`]).

pub mod node_id;
