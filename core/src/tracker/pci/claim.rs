//! Claiming PCI devices for requests, with Nova's filter order (`PciDeviceStats._filter_pools`)
//! and device state rules (`nova/pci/device.py`), made exact: all of an instance's requests are
//! applied to a copy of the device states, taking devices one request after the other as Nova's
//! `consume_requests` does (so a PF taken by one request hides its VFs from the next), and the
//! copy replaces the real states only if every request is met. Nova's own pre-claim test only
//! counts pool sizes and can pass claims that then fail half-way.
//!
//! In: the tracked devices ([`TrackedDevice`]s), the device specs, an instance's [`PciRequest`]s,
//! its NUMA cells and their sockets ([`CellSockets`]), and the owner's uuid. Out: the new device
//! states and the [`Assignment`]s, or a [`PciRefusal`]: the first request not met, with every pool
//! considered and why it was rejected ([`PoolVerdict`]). Freeing is in [`super::free`].
//!
//! Filters, in order: spec match, NUMA policy, unrequested PFs, unrequested vDPA devices,
//! unrequested remote-managed devices, Placement's allocation (requests with `rp_uuids`),
//! live-migratable. Within the pools left, devices are taken from the first pool first (pools
//! are ordered plainest first), and within a pool in Nova's order: the device returned last
//! first, then the highest address; held to Placement's allocation, each
//! provider gives exactly what Placement took from it.

use crate::tracker::refusals::{PciRefusal, PoolRejection, PoolVerdict};
use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::devices::{DeviceOwner, DeviceStatus, TrackedDevice};
use super::index::{IndexedPool, PciIndex};
use super::spec::NON_POOL_TAGS;
use super::NumaPolicy;
use crate::probes::pci::{PciAddress, PciDevType};
use crate::tracker::model::PciRequest;
use crate::tracker::pci::devices::TrackedDevices;

/// Host NUMA cells and their sockets (for the `socket` policy); a cell without CPUs has no
/// socket.
pub type CellSockets = BTreeMap<u32, Option<i64>>;

/// A device given to a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Assignment {
    /// Address of the device given.
    pub address: PciAddress,
    /// Request it satisfies.
    pub request_id: String,
}

fn prop_match(pool: &BTreeMap<String, Option<String>>, spec: &BTreeMap<String, String>) -> bool {
    // pci_device_prop_match: every key equal, strings compared case-insensitively.
    spec.iter()
        .filter(|(k, _)| !NON_POOL_TAGS.contains(&k.as_str()))
        .all(|(k, v)| {
            pool.get(k)
                .and_then(|x| x.as_deref())
                .map(str::to_lowercase)
                == Some(v.to_lowercase())
        })
}

fn spec_true(v: Option<&String>) -> bool {
    v.is_some_and(|s| {
        matches!(
            s.to_ascii_lowercase().as_str(),
            "true" | "1" | "yes" | "on" | "y" | "t"
        )
    })
}

/// How many devices Placement allocated from each provider for `req`; empty when the request
/// is not held to Placement's allocation (no `rp_uuids`, or a port request, whose devices Nova
/// does not put in Placement).
fn provider_counts(req: &PciRequest) -> BTreeMap<uuid::Uuid, usize> {
    let mut out = BTreeMap::new();
    if req.alias_name.is_some() {
        for rp in &req.rp_uuids {
            *out.entry(*rp).or_default() += 1;
        }
    }
    out
}

/// Nova's NUMA step of `_filter_pools`: the pools of `order` the request's NUMA policy keeps
/// for a guest on `numa_cells`.
fn numa_keep(
    pools: &[IndexedPool],
    counts: &[usize],
    order: &[usize],
    req: &PciRequest,
    numa_cells: &[u32],
    sockets: &CellSockets,
) -> Vec<usize> {
    let count = |idx: &[usize]| -> usize { idx.iter().map(|i| counts[*i]).sum() };
    let wanted = req.count as usize;
    let node = |i: usize| pools[i].key.numa_node;
    let on_cells = |i: &usize| node(*i).is_some_and(|n| numa_cells.contains(&n));
    let affine: Vec<usize> = order.iter().copied().filter(on_cells).collect();
    let keep: Vec<usize> = if req.numa_policy == NumaPolicy::Required || count(&affine) >= wanted {
        affine
    } else if req.numa_policy == NumaPolicy::Socket {
        if sockets.values().any(Option::is_none) {
            Vec::new()
        } else {
            let wanted_sockets: BTreeSet<i64> = numa_cells
                .iter()
                .filter_map(|c| sockets.get(c).copied().flatten())
                .collect();
            let allowed: BTreeSet<u32> = sockets
                .iter()
                .filter(|(_, s)| s.is_some_and(|s| wanted_sockets.contains(&s)))
                .map(|(c, _)| *c)
                .collect();
            order
                .iter()
                .copied()
                .filter(|i| node(*i).is_some_and(|n| allowed.contains(&n)))
                .collect()
        }
    } else {
        // Pools on the guest's cells or with no NUMA node, in pool order (Nova does not
        // put the local ones first here); for `preferred`, then every other pool (a
        // stable sort, as Nova's).
        let near = |i: &usize| on_cells(i) || node(*i).is_none();
        let with_unknown: Vec<usize> = order.iter().copied().filter(near).collect();
        if req.numa_policy == NumaPolicy::Legacy || count(&with_unknown) >= wanted {
            with_unknown
        } else {
            let mut ranked = order.to_vec();
            ranked.sort_by_key(|i| !near(i));
            ranked
        }
    };
    keep
}

/// Takes the pools `bad` says of out of `order`, recording `why` for each.
fn drop_where(
    order: &mut Vec<usize>,
    rejected: &mut [Option<PoolRejection>],
    why: PoolRejection,
    bad: impl Fn(usize) -> bool,
) {
    order.retain(|i| {
        if bad(*i) {
            rejected[*i] = Some(why.clone());
            false
        } else {
            true
        }
    });
}

/// Nova's steps 3 to 5: PFs, vDPA devices and remote-managed devices only for requests that
/// ask for them (`tag` reads a pool's tag).
fn drop_unrequested_kinds(
    order: &mut Vec<usize>,
    rejected: &mut [Option<PoolRejection>],
    req: &PciRequest,
    tag: &dyn Fn(usize, &str) -> Option<String>,
) {
    // 3. PFs only when asked for
    if req
        .specs
        .iter()
        .all(|s| s.get("dev_type").map(String::as_str) != Some("type-PF"))
    {
        drop_where(order, rejected, PoolRejection::UnrequestedPf, |i| {
            tag(i, "dev_type").as_deref() == Some("type-PF")
        });
    }
    // 4. vDPA only when asked for
    if req
        .specs
        .iter()
        .all(|s| s.get("dev_type").map(String::as_str) != Some("vdpa"))
    {
        drop_where(order, rejected, PoolRejection::UnrequestedVdpa, |i| {
            tag(i, "dev_type").as_deref() == Some("vdpa")
        });
    }
    // 5. remote-managed only when asked for
    if req
        .specs
        .iter()
        .all(|s| !spec_true(s.get("remote_managed")))
    {
        drop_where(
            order,
            rejected,
            PoolRejection::UnrequestedRemoteManaged,
            |i| spec_true(tag(i, "remote_managed").as_ref()),
        );
    }
}

/// Nova's `_filter_pools` for one request: the usable pools in the order to use them, and a
/// verdict for every pool.
fn filter_pools(
    pools: &[IndexedPool],
    counts: &[usize],
    req: &PciRequest,
    numa_cells: &[u32],
    sockets: &CellSockets,
) -> (Vec<usize>, Vec<PoolVerdict>) {
    let flat: Vec<&BTreeMap<String, Option<String>>> = pools.iter().map(|p| &p.flat).collect();
    let mut rejected: Vec<Option<PoolRejection>> = vec![None; pools.len()];
    let alive = |r: &Vec<Option<PoolRejection>>| -> Vec<usize> {
        (0..pools.len()).filter(|i| r[*i].is_none()).collect()
    };
    let count = |idx: &[usize]| -> usize { idx.iter().map(|i| counts[*i]).sum() };
    let wanted = req.count as usize;

    // 1. spec match
    for (i, f) in flat.iter().enumerate() {
        if !req.specs.iter().any(|s| prop_match(f, s)) {
            rejected[i] = Some(PoolRejection::SpecMismatch);
        }
    }
    let mut order: Vec<usize> = alive(&rejected);

    // 2. NUMA
    if !order.is_empty() && count(&order) >= wanted && !numa_cells.is_empty() {
        let keep = numa_keep(pools, counts, &order, req, numa_cells, sockets);
        for i in &order {
            if !keep.contains(i) {
                rejected[*i] = Some(PoolRejection::NumaAffinity);
            }
        }
        order = keep;
    }

    let tag = |i: usize, k: &str| flat[i].get(k).cloned().flatten();
    drop_unrequested_kinds(&mut order, &mut rejected, req, &tag);
    // 6. Placement's allocation: only the pools of the providers allocated from, each with at
    // least as many devices left as Placement took from it. Nova counts each pool alone; one
    // provider's devices can sit in two pools (VFs with and without a network interface), so
    // rtrack counts them per provider.
    let per_provider = provider_counts(req);
    if !per_provider.is_empty() {
        let mut left: BTreeMap<uuid::Uuid, usize> = BTreeMap::new();
        for i in &order {
            if let Some(rp) = pools[*i].rp_uuid {
                *left.entry(rp).or_default() += counts[*i];
            }
        }
        drop_where(
            &mut order,
            &mut rejected,
            PoolRejection::PlacementAllocation,
            |i| match pools[i].rp_uuid {
                Some(rp) => per_provider
                    .get(&rp)
                    .is_none_or(|want| left.get(&rp).copied().unwrap_or(0) < *want),
                None => true,
            },
        );
    }
    // 7. live_migratable
    let lm = |v: &str| {
        req.specs
            .iter()
            .all(|s| s.get("live_migratable").map(String::as_str) == Some(v))
    };
    if lm("true") {
        drop_where(
            &mut order,
            &mut rejected,
            PoolRejection::LiveMigratable,
            |i| tag(i, "live_migratable").as_deref() != Some("true"),
        );
    } else if lm("false") {
        drop_where(
            &mut order,
            &mut rejected,
            PoolRejection::LiveMigratable,
            |i| tag(i, "live_migratable").as_deref() != Some("false"),
        );
    }

    let verdicts = flat
        .into_iter()
        .zip(counts)
        .zip(rejected)
        .map(|((f, c), r)| PoolVerdict {
            pool: f.clone(),
            count: *c,
            rejected: r,
        })
        .collect();
    (order, verdicts)
}

/// Device states while a claim is tried: the map's, by index position, with the claim's changes
/// on top; nothing is copied but the states.
struct Sim<'a> {
    index: &'a PciIndex,
    status: Vec<DeviceStatus>,
    touched: BTreeSet<usize>,
}

impl Sim<'_> {
    /// Available devices of each pool.
    fn counts(&self) -> Vec<usize> {
        self.index
            .pools
            .iter()
            .map(|p| {
                p.members
                    .iter()
                    .filter(|i| self.status[**i] == DeviceStatus::Available)
                    .count()
            })
            .collect()
    }

    /// Nova's allocation with PF/VF exclusivity: an allocated PF makes its VFs (and vDPA
    /// devices) unavailable; an allocated VF or vDPA device makes its PF unavailable.
    fn allocate(&mut self, i: usize) {
        self.status[i] = DeviceStatus::Allocated;
        self.touched.insert(i);
        let relatives: Vec<usize> = match self.index.dev_type[i] {
            PciDevType::Pf => self.index.children[i].clone(),
            PciDevType::Vf | PciDevType::Vdpa => self.index.parent[i].into_iter().collect(),
            PciDevType::Pci => Vec::new(),
        };
        for r in relatives {
            if matches!(
                self.status[r],
                DeviceStatus::Available | DeviceStatus::Unclaimable
            ) {
                self.status[r] = DeviceStatus::Unavailable;
                self.touched.insert(r);
            }
        }
    }
}

/// The members of pool `p` in the order Nova's pool gives them: the device returned last
/// first, then (never returned) the highest address first, as Nova pops the device its pool
/// appended last and appends devices in discovery order.
fn nova_take_order(devices: &TrackedDevices, index: &PciIndex, p: usize) -> Vec<usize> {
    let returned = |i: usize| devices.get(&index.addresses[i]).map_or(0, |d| d.returned);
    let mut order = index.pools[p].members.clone();
    order.sort_by_key(|&i| std::cmp::Reverse((returned(i), i)));
    order
}

/// Claims devices for all `requests` on behalf of `owner`. On success returns the devices whose
/// state changed (with their new state) and the assignments; on failure, the first request that
/// could not be met and why. `devices` is the tracker's map and `index` its index; neither is
/// changed, and only the devices that change are copied.
pub fn claim_devices(
    devices: &TrackedDevices,
    index: &PciIndex,
    requests: &[PciRequest],
    numa_cells: &[u32],
    sockets: &CellSockets,
    owner: &str,
) -> Result<(Vec<TrackedDevice>, Vec<Assignment>), PciRefusal> {
    let mut sim = Sim {
        index,
        status: devices.values().map(|d| d.status).collect(),
        touched: BTreeSet::new(),
    };
    let mut assigned: Vec<(usize, String)> = Vec::new();
    let refusal = |sim: &Sim<'_>, req: &PciRequest, usable: usize, assigned: &[(usize, String)]| {
        let counts = sim.counts();
        PciRefusal {
            request_id: req.request_id.clone(),
            alias_name: req.alias_name.clone(),
            requested: req.count,
            usable,
            pools: filter_pools(&index.pools, &counts, req, numa_cells, sockets).1,
            taken_by_earlier_requests: assigned.iter().map(|(i, _)| index.addresses[*i]).collect(),
        }
    };
    for req in requests {
        let counts = sim.counts();
        let (usable, _) = filter_pools(&index.pools, &counts, req, numa_cells, sockets);
        let available: usize = usable.iter().map(|p| counts[*p]).sum();
        if available < req.count as usize {
            return Err(refusal(&sim, req, available, &assigned));
        }
        // Take devices pool by pool; a device may have become unavailable because an earlier
        // device of this same request was its PF or VF, so re-check each one. Held to
        // Placement's allocation, each provider gives exactly what Placement took from it.
        let mut per_provider = provider_counts(req);
        let mut left = req.count as usize;
        'pools: for p in usable {
            let mut from_pool = match index.pools[p].rp_uuid {
                Some(rp) if !per_provider.is_empty() => per_provider.get_mut(&rp),
                _ => None,
            };
            for i in nova_take_order(devices, index, p) {
                if left == 0 {
                    break 'pools;
                }
                if from_pool.as_deref() == Some(&0) {
                    break;
                }
                if sim.status[i] != DeviceStatus::Available {
                    continue;
                }
                if !req.devices.is_empty() && !req.devices.contains(&index.addresses[i]) {
                    continue;
                }
                sim.allocate(i);
                assigned.push((i, req.request_id.clone()));
                left -= 1;
                if let Some(n) = from_pool.as_deref_mut() {
                    *n -= 1;
                }
            }
        }
        if left > 0 {
            return Err(refusal(&sim, req, req.count as usize - left, &assigned));
        }
    }
    let owners: BTreeMap<usize, &str> = assigned.iter().map(|(i, r)| (*i, r.as_str())).collect();
    let changed = sim
        .touched
        .iter()
        .filter_map(|i| devices.get(&index.addresses[*i]).map(|d| (*i, d)))
        .map(|(i, d)| {
            let mut d = TrackedDevice::clone(d);
            d.status = sim.status[i];
            if let Some(r) = owners.get(&i) {
                d.owner = Some(DeviceOwner {
                    instance_uuid: owner.to_string(),
                    request_id: Some((*r).to_string()),
                });
            }
            d
        })
        .collect();
    let assignments = assigned
        .into_iter()
        .map(|(i, request_id)| Assignment {
            address: index.addresses[i],
            request_id,
        })
        .collect();
    Ok((changed, assignments))
}

pub use super::free::{free_owner, recompute_relatives_in};
