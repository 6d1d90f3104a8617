//! The integration tests' harness: a running `rtrackd` ([`daemon`]), a real Placement
//! ([`placement`]) and Keystone ([`keystone`]), real Nova's venv ([`nova`]), and the bodies
//! the tests send ([`bodies`]), and waiting for what happens in the background ([`poll`]).

pub mod bodies;
pub mod daemon;
pub mod keystone;
pub mod nova;
pub mod placement;
pub mod poll;

pub use bodies::*;
pub use daemon::*;
// The benches include this module too and wait for nothing.
#[allow(unused_imports)]
pub use poll::*;
