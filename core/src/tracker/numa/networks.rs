//! NUMA-aware vSwitches: whether a set of host cells meets the NUMA affinity of the networks a
//! guest's ports are on (Nova's `_numa_cells_support_network_metadata`), checked for every
//! set of cells a fit chooses, and the refusal's words.
//!
//! In: the host's cells (with the physnets and tunnel each is configured for) and the guest's
//! networks. Out: allowed or not; why not.

use super::host::HostTopology;
use super::GuestNetworks;

/// Nova's `_numa_cells_support_network_metadata`: whether the host cells `chosen` (ids) meet
/// the guest's networks. A physical network is met when one chosen cell has it; it cannot be
/// met when only other cells have it; one no cell names has no affinity. Tunneled networks
/// likewise.
pub fn networks_allow(host: &HostTopology, chosen: &[u32], nets: &GuestNetworks) -> bool {
    if nets.is_empty() {
        return true;
    }
    let chosen_cells = || host.cells.iter().filter(|c| chosen.contains(&c.id));
    if !nets.physnets.is_empty() {
        let mut left = nets.physnets.clone();
        for c in chosen_cells() {
            for p in &c.physnets {
                left.remove(p);
            }
        }
        if host.cells.iter().any(|c| !c.physnets.is_disjoint(&left)) {
            return false;
        }
    }
    if nets.tunneled {
        if chosen_cells().any(|c| c.tunneled) {
            return true;
        }
        if host.cells.iter().any(|c| c.tunneled) {
            return false;
        }
    }
    true
}

/// Why the networks' affinity refused: where each network the guest is on can be served.
pub(super) fn network_reason(host: &HostTopology, nets: &GuestNetworks) -> String {
    let mut parts: Vec<String> = nets
        .physnets
        .iter()
        .map(|p| {
            let cells: Vec<String> = host
                .cells
                .iter()
                .filter(|c| c.physnets.contains(p))
                .map(|c| c.id.to_string())
                .collect();
            format!("physnet {p} on host cells [{}]", cells.join(", "))
        })
        .collect();
    if nets.tunneled {
        let cells: Vec<String> = host
            .cells
            .iter()
            .filter(|c| c.tunneled)
            .map(|c| c.id.to_string())
            .collect();
        parts.push(format!(
            "tunneled networks on host cells [{}]",
            cells.join(", ")
        ));
    }
    format!(
        "no combination of host cells that fits every guest cell is one its networks' NUMA affinity allows ({})",
        parts.join("; ")
    )
}
