//! `prefer_closest_cells`: a multi-cell guest takes, among the sets of host cells that fit it,
//! the one with the smallest total NUMA distance between its cells; Nova's cell order breaks
//! ties (of the sets at that distance, the one whose first assignment Nova's order reaches
//! first). Only sets that fit are looked at, so a guest fits exactly when it does without the
//! policy: distance never refuses.
//!
//! In: which (guest cell, host position) pairs fit, the host positions' cell ids, the host's
//! distances, the assignment Nova's order gave, and a check of a set of positions (networks,
//! PCI). Out: the assignment to use instead, when a closer set fits.
//!
//! The sets are searched as subsets of host positions in increasing order, with a bound: the
//! distance of the cells chosen so far plus the least the cells still to add can bring (each
//! new cell's distance to the chosen ones, the smallest first, and the smallest distance
//! between two cells for each pair of new ones). The search stops after [`CLOSEST_LIMIT`]
//! steps with the best set found so far (Nova's, at worst).

use super::super::host::HostTopology;
use super::search::matchable;

/// Steps (subsets extended, sets checked) after which the closest set found so far is taken.
pub const CLOSEST_LIMIT: usize = 20_000;

/// Total distance of a set of positions: the distances of every ordered pair (SLIT tables may
/// be asymmetric; both directions count).
pub fn set_distance(dist: &[Vec<u32>], set: &[usize]) -> u64 {
    let mut total = 0u64;
    for &a in set {
        for &b in set {
            if a != b {
                total += u64::from(dist[a][b]);
            }
        }
    }
    total
}

/// The distances between host positions, when the host knows every one.
pub fn position_distances(host: &HostTopology, ids: &[u32]) -> Option<Vec<Vec<u32>>> {
    ids.iter()
        .map(|a| ids.iter().map(|b| host.distance(*a, *b)).collect())
        .collect()
}

struct Best {
    distance: u64,
    sets: Vec<Vec<usize>>,
}

struct Subsets<'a> {
    fits: &'a [Vec<bool>],
    dist: &'a [Vec<u32>],
    /// Positions some guest cell fits.
    candidates: Vec<usize>,
    min_pair: u64,
    steps: usize,
    best: Best,
}

impl Subsets<'_> {
    /// The least `k` more cells from `candidates[from..]` can add to `chosen`'s distance.
    fn bound(&self, chosen: &[usize], from: usize, k: usize) -> u64 {
        let mut adds: Vec<u64> = self.candidates[from..]
            .iter()
            .map(|&q| {
                chosen
                    .iter()
                    .map(|&c| u64::from(self.dist[c][q]) + u64::from(self.dist[q][c]))
                    .sum()
            })
            .collect();
        adds.sort_unstable();
        let pairs = (k * k.saturating_sub(1)) as u64;
        adds.iter().take(k).sum::<u64>() + pairs * self.min_pair
    }

    fn walk(
        &mut self,
        from: usize,
        chosen: &mut Vec<usize>,
        check: &mut dyn FnMut(&[usize]) -> bool,
    ) {
        let n = self.fits.len();
        self.steps += 1;
        if self.steps > CLOSEST_LIMIT {
            return;
        }
        let d = set_distance(self.dist, chosen);
        if chosen.len() == n {
            if d <= self.best.distance && self.fit(chosen) && check(chosen) {
                if d < self.best.distance {
                    self.best = Best {
                        distance: d,
                        sets: Vec::new(),
                    };
                }
                self.best.sets.push(chosen.clone());
            }
            return;
        }
        let k = n - chosen.len();
        if self.candidates.len() - from < k || d + self.bound(chosen, from, k) > self.best.distance
        {
            return;
        }
        for i in from..self.candidates.len() {
            chosen.push(self.candidates[i]);
            self.walk(i + 1, chosen, check);
            chosen.pop();
        }
    }

    /// Each guest cell can get a cell of the set of its own.
    fn fit(&self, set: &[usize]) -> bool {
        let m = self.fits.first().map_or(0, Vec::len);
        let used: Vec<bool> = (0..m).map(|p| !set.contains(&p)).collect();
        matchable(self.fits, 0, &used)
    }
}

/// The first assignment in Nova's order that uses only the positions in `set`.
fn first_assignment(fits: &[Vec<bool>], set: &[usize]) -> Option<Vec<usize>> {
    let m = fits.first().map_or(0, Vec::len);
    let mut used: Vec<bool> = (0..m).map(|p| !set.contains(&p)).collect();
    let mut out = Vec::with_capacity(fits.len());
    for g in 0..fits.len() {
        let h = (0..m).find(|&h| {
            if used[h] || !fits[g][h] {
                return false;
            }
            used[h] = true;
            let ok = matchable(fits, g + 1, &used);
            used[h] = false;
            ok
        })?;
        used[h] = true;
        out.push(h);
    }
    Some(out)
}

/// The assignment of the closest fitting set of positions, when it is closer than `first`
/// (Nova's assignment); `check` says whether a set meets the networks' and PCI requests.
pub fn closest_assignment(
    fits: &[Vec<bool>],
    dist: &[Vec<u32>],
    first: &[usize],
    check: &mut dyn FnMut(&[usize]) -> bool,
) -> Option<Vec<usize>> {
    let m = fits.first().map_or(0, Vec::len);
    let mut first_set = first.to_vec();
    first_set.sort_unstable();
    let min_pair = (0..m)
        .flat_map(|a| (0..m).filter(move |b| *b != a).map(move |b| (a, b)))
        .map(|(a, b)| u64::from(dist[a][b]))
        .min()
        .unwrap_or(0);
    let mut s = Subsets {
        fits,
        dist,
        candidates: (0..m).filter(|h| fits.iter().any(|r| r[*h])).collect(),
        min_pair,
        steps: 0,
        best: Best {
            distance: set_distance(dist, &first_set),
            sets: vec![first_set.clone()],
        },
    };
    s.walk(0, &mut Vec::with_capacity(fits.len()), check);
    // Nova's order among the closest sets: the smallest first assignment. Nova's own set, if
    // among them, has the first of all.
    if s.best.sets.contains(&first_set) {
        return None;
    }
    s.best
        .sets
        .iter()
        .filter_map(|set| first_assignment(fits, set))
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four cells: 0-1 and 2-3 close (12), across 32.
    fn dist() -> Vec<Vec<u32>> {
        (0..4)
            .map(|a| {
                (0..4)
                    .map(|b| match (a, b) {
                        _ if a == b => 10,
                        _ if a / 2 == b / 2 => 12,
                        _ => 32,
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn the_closest_fitting_set_wins_and_ties_keep_novas_order() {
        let all = vec![vec![true; 4]; 2];
        // Nova's order gave positions 1 and 2 (across sockets): 0-1 is as close as 2-3; 0-1 comes
        // first in Nova's order.
        let got = closest_assignment(&all, &dist(), &[1, 2], &mut |_| true);
        assert_eq!(got, Some(vec![0, 1]));
        // Nova's own set is among the closest: kept.
        assert_eq!(
            closest_assignment(&all, &dist(), &[2, 3], &mut |_| true),
            None
        );
        // A closer set that the check refuses (PCI, networks) is not taken.
        let got = closest_assignment(&all, &dist(), &[1, 2], &mut |s| s != [0, 1]);
        assert_eq!(got, Some(vec![2, 3]));
    }

    #[test]
    fn only_sets_where_every_guest_cell_fits_are_taken() {
        // Guest cell 1 fits only position 2: the closest set with 2 is {2, 3}, in the order
        // guest 0 -> 3, guest 1 -> 2.
        let fits = vec![
            vec![true, true, false, true],
            vec![false, false, true, false],
        ];
        assert_eq!(
            closest_assignment(&fits, &dist(), &[0, 2], &mut |_| true),
            Some(vec![3, 2])
        );
        assert_eq!(set_distance(&dist(), &[2, 3]), 24);
    }
}
