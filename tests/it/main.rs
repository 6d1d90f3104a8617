//! rtrack's integration tests, in one binary (one link of the crate instead of one per file):
//! one module per subject, sharing `support` (the daemon, Placement and Keystone harnesses) and
//! the named NUMA and PCI cases of the differential tests. `cargo test --test it MODULE::` runs
//! one subject, e.g. `cargo test --test it placement::`. libtest starts the tests in the order
//! of their names: the longest, schemathesis against the API (three minutes), is named to start
//! among the first, so that it does not run alone at the end.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test or bench: a panic is its failure

mod numa_cases;
mod pci_cases;
mod support;

mod adoption;
mod api_fuzz;
mod api_schemathesis;
mod chaos;
mod chaos_placement;
mod config_paths;
mod connections;
mod crash_safety;
mod daemon;
mod disk_source;
mod facts_daemon;
mod facts_diff;
mod integrity;
mod keystone;
mod monitoring;
mod nova_interop;
mod numa_daemon;
mod numa_diff;
mod numa_properties;
mod objects_golden;
mod once;
mod once_topology;
mod packaging;
mod pci_daemon;
mod pci_diff;
mod placement;
mod placement_facts;
mod placement_safety;
mod probe_faults;
mod state_dir;
mod tracker_properties;
mod vdpa_diff;
mod vgpu_daemon;
