//! The search over assignments of guest cells to host cells: Nova's order (the first
//! assignment in its permutation order wins), a matching check that prunes branches that cannot
//! complete, the networks' and PCI requests' checks per set of cells (each only allows more as
//! cells are added, so a set refused prunes), and the sets of taken cells known not to complete.
//!
//! In: which (guest cell, host position) pairs fit, the host positions' cell ids, the guest's
//! networks and a PCI check. Out: the first assignment, as host positions per guest cell, and
//! the PCI check's result for its cells; or nothing, with the last PCI error and whether a
//! network affinity refused a set.

use std::collections::{HashMap, HashSet};

use super::super::host::HostTopology;
use super::super::networks::networks_allow;
use super::super::GuestNetworks;

/// Assignments tried (PCI checks included) before the search gives up and refuses: far more
/// than any real guest needs with the pruning, few enough to answer in milliseconds.
pub const SEARCH_LIMIT: usize = 20_000;

/// Kuhn's augmenting paths: can guests `from..` each get an unused host position they fit?
pub(super) fn matchable(fits: &[Vec<bool>], from: usize, used: &[bool]) -> bool {
    let m = used.len();
    let mut owner: Vec<Option<usize>> = vec![None; m];
    fn augment(
        g: usize,
        fits: &[Vec<bool>],
        used: &[bool],
        seen: &mut [bool],
        owner: &mut [Option<usize>],
    ) -> bool {
        for h in 0..used.len() {
            if used[h] || !fits[g][h] || seen[h] {
                continue;
            }
            seen[h] = true;
            if owner[h].is_none_or(|o| augment(o, fits, used, seen, owner)) {
                owner[h] = Some(g);
                return true;
            }
        }
        false
    }
    for g in from..fits.len() {
        let mut seen = vec![false; m];
        if !augment(g, fits, used, &mut seen, &mut owner) {
            return false;
        }
    }
    true
}

/// The search over assignments of guest cells to host positions, in Nova's order, with the
/// networks' and PCI requests' checks per set of cells.
pub(super) struct Search<'s, R, E> {
    pub(super) fits: &'s [Vec<bool>],
    pub(super) ids: Vec<u32>,
    pub(super) host: &'s HostTopology,
    pub(super) nets: &'s GuestNetworks,
    pub(super) wants_pci: bool,
    /// A set of cells was refused for the networks' NUMA affinity.
    pub(super) network_refused: bool,
    /// PCI verdicts by set of host cells.
    pub(super) checked: HashMap<Vec<u32>, bool>,
    /// Sets of used host positions from which no assignment completes (what follows a
    /// node depends only on which cells are taken, not on the order they were taken in).
    pub(super) dead: HashSet<Vec<bool>>,
    pub(super) found: Option<R>,
    pub(super) last_error: Option<E>,
    pub(super) steps: usize,
}
impl<R, E> Search<'_, R, E> {
    /// Whether the cells at `positions` meet the networks' NUMA affinity and (when the guest
    /// asks for devices) the PCI requests; with `keep`, the PCI claim's result is kept.
    pub(super) fn pci_ok(
        &mut self,
        positions: &[usize],
        pci: &mut dyn FnMut(&[u32]) -> Result<R, E>,
        keep: bool,
    ) -> bool {
        let mut cells: Vec<u32> = positions.iter().map(|p| self.ids[*p]).collect();
        cells.sort_unstable();
        if let Some(ok) = self.checked.get(&cells) {
            if !(keep && *ok) {
                return *ok;
            }
        }
        self.steps += 1;
        if !networks_allow(self.host, &cells, self.nets) {
            self.network_refused = true;
            self.checked.insert(cells, false);
            return false;
        }
        if !self.wants_pci {
            // Only the networks to check; the PCI check runs once, at the end.
            return true;
        }
        let ok = match pci(&cells) {
            Ok(r) => {
                if keep {
                    self.found = Some(r);
                }
                true
            }
            Err(e) => {
                self.last_error = Some(e);
                false
            }
        };
        self.checked.insert(cells, ok);
        ok
    }

    /// The first assignment in Nova's order from guest cell `g` on, into `chosen`.
    pub(super) fn dfs(
        &mut self,
        g: usize,
        used: &mut Vec<bool>,
        chosen: &mut Vec<usize>,
        pci: &mut dyn FnMut(&[u32]) -> Result<R, E>,
        checks: bool,
    ) -> bool {
        if g == self.fits.len() {
            return !checks || self.pci_ok(&chosen.clone(), pci, true);
        }
        if self.steps > SEARCH_LIMIT || self.dead.contains(used) {
            return false;
        }
        if checks {
            // The requests must be met by the cells chosen plus some of the cells still
            // open to the guest cells left; if all of those together cannot meet them, no
            // completion can (more cells only allow more devices).
            let bound: Vec<usize> = chosen
                .iter()
                .copied()
                .chain(
                    (0..used.len())
                        .filter(|h| !used[*h] && (g..self.fits.len()).any(|r| self.fits[r][*h])),
                )
                .collect();
            if !self.pci_ok(&bound, pci, false) {
                self.dead.insert(used.clone());
                return false;
            }
        }
        for h in 0..used.len() {
            if used[h] || !self.fits[g][h] {
                continue;
            }
            self.steps += 1;
            used[h] = true;
            chosen.push(h);
            if matchable(self.fits, g + 1, used) && self.dfs(g + 1, used, chosen, pci, checks) {
                return true;
            }
            chosen.pop();
            used[h] = false;
        }
        if self.steps <= SEARCH_LIMIT {
            self.dead.insert(used.clone());
        }
        false
    }
}
