//! Full probe of the large synthetic host (8 NUMA nodes, 256 CPUs, 4 PFs x 256 VFs).
//! Run: `cargo bench -p rtrack-probes`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test or bench: a panic is its failure

use rtrack_fixtures::synthetic::SyntheticHost;
use rtrack_probes::{probe_host, HostRoot, ProbeOptions};

fn main() {
    divan::main();
}

#[divan::bench(sample_count = 30)]
fn probe_large_host(bencher: divan::Bencher) {
    let dir = tempfile::tempdir().expect("temp dir");
    SyntheticHost::large().write(dir.path());
    let root = HostRoot::under(dir.path());
    let opts = ProbeOptions::default();
    bencher.bench(|| {
        let inv = probe_host(&root, &opts).expect("probe");
        assert_eq!(inv.pci_devices.len(), 1029);
        inv
    });
}
