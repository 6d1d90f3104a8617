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
//! considered and why it was rejected ([`PoolVerdict`]). Freeing an owner's devices gives back
//! exactly what their allocation blocked.
//!
//! Filters, in order: spec match, NUMA policy, unrequested PFs, unrequested vDPA devices,
//! unrequested remote-managed devices, live-migratable. Within the pools left, devices are taken
//! from the first pool first (pools are ordered plainest first), lowest address first.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::devices::{DeviceOwner, DeviceStatus, TrackedDevice};
use super::pools::{build_pools, Pool};
use super::spec::{DeviceSpec, NON_POOL_TAGS};
use super::NumaPolicy;
use crate::probes::pci::{PciAddress, PciDevType};
use crate::tracker::model::PciRequest;

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

/// Why a pool could not serve a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolRejection {
    /// No spec of the request matches the pool.
    SpecMismatch,
    /// The NUMA policy excludes the pool's node.
    NumaAffinity,
    /// The pool holds PFs and the request did not ask for a PF.
    UnrequestedPf,
    /// The pool holds vDPA devices and the request did not ask for them.
    UnrequestedVdpa,
    /// The pool holds remote-managed devices and the request did not ask for them.
    UnrequestedRemoteManaged,
    /// The request's live_migratable requirement does not match.
    LiveMigratable,
}

/// One pool as a refused request saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PoolVerdict {
    /// vendor_id, product_id, numa_node and tags.
    pub pool: BTreeMap<String, Option<String>>,
    /// Available devices in it.
    pub count: usize,
    /// Why it was left out; null if it was usable.
    pub rejected: Option<PoolRejection>,
}

/// A PCI request that could not be met.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PciRefusal {
    /// Request id.
    pub request_id: String,
    /// Alias, if any.
    pub alias_name: Option<String>,
    /// Devices asked for.
    pub requested: u32,
    /// Devices left after the filters.
    pub usable: usize,
    /// The pools considered and why each was rejected.
    pub pools: Vec<PoolVerdict>,
    /// The other requests of the claim had already taken these devices when this one was tried.
    pub taken_by_earlier_requests: Vec<PciAddress>,
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

/// Nova's `_filter_pools` for one request: the usable pools in the order to use them, and a
/// verdict for every pool.
fn filter_pools<'p>(
    pools: &'p [Pool],
    req: &PciRequest,
    numa_cells: &[u32],
    sockets: &CellSockets,
) -> (Vec<&'p Pool>, Vec<PoolVerdict>) {
    let flat: Vec<BTreeMap<String, Option<String>>> = pools.iter().map(|p| p.key.flat()).collect();
    let mut rejected: Vec<Option<PoolRejection>> = vec![None; pools.len()];
    let alive = |r: &Vec<Option<PoolRejection>>| -> Vec<usize> {
        (0..pools.len()).filter(|i| r[*i].is_none()).collect()
    };
    let count = |idx: &[usize]| -> usize { idx.iter().map(|i| pools[*i].count()).sum() };
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
        let node = |i: usize| pools[i].key.numa_node;
        let on_cells = |i: &usize| node(*i).is_some_and(|n| numa_cells.contains(&n));
        let affine: Vec<usize> = order.iter().copied().filter(on_cells).collect();
        let keep: Vec<usize> = if req.numa_policy == NumaPolicy::Required
            || count(&affine) >= wanted
        {
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
            // Local pools first, then those with no NUMA node, then the rest (a stable sort
            // keeps the plainest-first order within each group). Nova's sort puts local and
            // unknown in one group; taking local ones first within it agrees with it.
            let rank = |i: &usize| {
                if on_cells(i) {
                    0
                } else if node(*i).is_none() {
                    1
                } else {
                    2
                }
            };
            let mut ranked = order.clone();
            ranked.sort_by_key(rank);
            let with_unknown: Vec<usize> = ranked.iter().copied().filter(|i| rank(i) < 2).collect();
            if req.numa_policy == NumaPolicy::Legacy || count(&with_unknown) >= wanted {
                with_unknown
            } else {
                // preferred: every pool.
                ranked
            }
        };
        for i in &order {
            if !keep.contains(i) {
                rejected[*i] = Some(PoolRejection::NumaAffinity);
            }
        }
        order = keep;
    }

    let drop_where = |order: &mut Vec<usize>,
                      rejected: &mut Vec<Option<PoolRejection>>,
                      why: PoolRejection,
                      bad: &dyn Fn(usize) -> bool| {
        order.retain(|i| {
            if bad(*i) {
                rejected[*i] = Some(why.clone());
                false
            } else {
                true
            }
        });
    };
    let tag = |i: usize, k: &str| flat[i].get(k).cloned().flatten();
    // 3. PFs only when asked for
    if req
        .specs
        .iter()
        .all(|s| s.get("dev_type").map(String::as_str) != Some("type-PF"))
    {
        drop_where(
            &mut order,
            &mut rejected,
            PoolRejection::UnrequestedPf,
            &|i| tag(i, "dev_type").as_deref() == Some("type-PF"),
        );
    }
    // 4. vDPA only when asked for
    if req
        .specs
        .iter()
        .all(|s| s.get("dev_type").map(String::as_str) != Some("vdpa"))
    {
        drop_where(
            &mut order,
            &mut rejected,
            PoolRejection::UnrequestedVdpa,
            &|i| tag(i, "dev_type").as_deref() == Some("vdpa"),
        );
    }
    // 5. remote-managed only when asked for
    if req
        .specs
        .iter()
        .all(|s| !spec_true(s.get("remote_managed")))
    {
        drop_where(
            &mut order,
            &mut rejected,
            PoolRejection::UnrequestedRemoteManaged,
            &|i| spec_true(tag(i, "remote_managed").as_ref()),
        );
    }
    // 7. live_migratable (6, Placement allocations, applies to Placement-scheduled requests only)
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
            &|i| tag(i, "live_migratable").as_deref() != Some("true"),
        );
    } else if lm("false") {
        drop_where(
            &mut order,
            &mut rejected,
            PoolRejection::LiveMigratable,
            &|i| tag(i, "live_migratable").as_deref() != Some("false"),
        );
    }

    let verdicts = pools
        .iter()
        .zip(flat)
        .zip(rejected)
        .map(|((p, f), r)| PoolVerdict {
            pool: f,
            count: p.count(),
            rejected: r,
        })
        .collect();
    (order.into_iter().map(|i| &pools[i]).collect(), verdicts)
}

/// Claims devices for all `requests` on behalf of `owner`. On success returns the new device
/// states and the assignments; on failure, the first request that could not be met and why
/// (the states passed in are untouched either way).
#[allow(clippy::too_many_arguments)]
pub fn claim_devices(
    devices: &[TrackedDevice],
    specs: &[DeviceSpec],
    requests: &[PciRequest],
    numa_cells: &[u32],
    sockets: &CellSockets,
    owner: &str,
) -> Result<(Vec<TrackedDevice>, Vec<Assignment>), PciRefusal> {
    let mut sim = devices.to_vec();
    let mut assigned = Vec::new();
    for req in requests {
        let pools = build_pools(&sim, specs);
        let (usable, verdicts) = filter_pools(&pools, req, numa_cells, sockets);
        let available: usize = usable.iter().map(|p| p.count()).sum();
        if available < req.count as usize {
            return Err(PciRefusal {
                request_id: req.request_id.clone(),
                alias_name: req.alias_name.clone(),
                requested: req.count,
                usable: available,
                pools: verdicts,
                taken_by_earlier_requests: assigned
                    .iter()
                    .map(|a: &Assignment| a.address)
                    .collect(),
            });
        }
        // Take devices pool by pool; a device may have become unavailable because an earlier
        // device of this same request was its PF or VF, so re-check each one.
        let mut left = req.count as usize;
        let candidates: Vec<usize> = usable
            .iter()
            .flat_map(|p| p.devices.iter().copied())
            .collect();
        for idx in candidates {
            if left == 0 {
                break;
            }
            if sim[idx].status != DeviceStatus::Available {
                continue;
            }
            allocate(&mut sim, idx, owner, &req.request_id);
            assigned.push(Assignment {
                address: sim[idx].address,
                request_id: req.request_id.clone(),
            });
            left -= 1;
        }
        if left > 0 {
            return Err(PciRefusal {
                request_id: req.request_id.clone(),
                alias_name: req.alias_name.clone(),
                requested: req.count,
                usable: req.count as usize - left,
                pools: filter_pools(&build_pools(&sim, specs), req, numa_cells, sockets).1,
                taken_by_earlier_requests: assigned.iter().map(|a| a.address).collect(),
            });
        }
    }
    Ok((sim, assigned))
}

/// Marks a device allocated to `owner` and applies PF/VF exclusivity: an allocated PF makes its
/// VFs unavailable; an allocated VF makes its PF unavailable.
pub fn allocate(devices: &mut [TrackedDevice], idx: usize, owner: &str, request_id: &str) {
    devices[idx].status = DeviceStatus::Allocated;
    devices[idx].owner = Some(DeviceOwner {
        instance_uuid: owner.to_string(),
        request_id: Some(request_id.to_string()),
    });
    let addr = devices[idx].address;
    match devices[idx].dev_type {
        PciDevType::Pf => {
            for d in devices.iter_mut() {
                if d.parent_addr == Some(addr)
                    && matches!(
                        d.status,
                        DeviceStatus::Available | DeviceStatus::Unclaimable
                    )
                {
                    d.status = DeviceStatus::Unavailable;
                }
            }
        }
        PciDevType::Vf => {
            if let Some(parent) = devices[idx].parent_addr {
                for d in devices.iter_mut() {
                    if d.address == parent
                        && matches!(
                            d.status,
                            DeviceStatus::Available | DeviceStatus::Unclaimable
                        )
                    {
                        d.status = DeviceStatus::Unavailable;
                    }
                }
            }
        }
        PciDevType::Pci => {}
    }
}

/// Frees every device `owner` holds (optionally only those for `request_ids`) and restores
/// exactly what their allocation made unavailable: a freed PF's VFs become available; a freed
/// VF's PF becomes available once none of its VFs is in use. Returns the freed addresses.
pub fn free_owner(
    devices: &mut [TrackedDevice],
    owner: &str,
    request_ids: Option<&BTreeSet<String>>,
) -> Vec<PciAddress> {
    let mut freed = Vec::new();
    for d in devices.iter_mut() {
        let mine = d.owner.as_ref().is_some_and(|o| {
            o.instance_uuid == owner
                && request_ids
                    .is_none_or(|ids| o.request_id.as_ref().is_some_and(|r| ids.contains(r)))
        });
        if mine {
            d.status = DeviceStatus::Available;
            d.owner = None;
            freed.push(d.address);
        }
    }
    recompute_relatives(devices);
    freed
}

/// Re-derives the unavailable/available states of relatives from the allocated devices: a PF is
/// unavailable while any VF is allocated or claimed; VFs are unavailable while their PF is.
/// Every other non-owned device is available.
pub fn recompute_relatives(devices: &mut [TrackedDevice]) {
    let blocked = BlockedRelatives::of(devices.iter());
    for d in devices.iter_mut() {
        if let Some(status) = blocked.status_of(d) {
            d.status = status;
        }
    }
}

/// [`recompute_relatives`] over the tracker's device map; returns the devices whose status
/// changed.
pub fn recompute_relatives_in(
    devices: &mut BTreeMap<PciAddress, TrackedDevice>,
) -> Vec<PciAddress> {
    let blocked = BlockedRelatives::of(devices.values());
    let mut changed = Vec::new();
    for d in devices.values_mut() {
        match blocked.status_of(d) {
            Some(status) if status != d.status => {
                d.status = status;
                changed.push(d.address);
            }
            _ => {}
        }
    }
    changed
}

/// The PFs that are busy and the PFs that have a busy VF: their relatives are unavailable.
struct BlockedRelatives {
    busy_pfs: BTreeSet<PciAddress>,
    pfs_with_busy_vfs: BTreeSet<PciAddress>,
}

impl BlockedRelatives {
    fn of<'a>(devices: impl Iterator<Item = &'a TrackedDevice> + Clone) -> BlockedRelatives {
        BlockedRelatives {
            busy_pfs: devices
                .clone()
                .filter(|d| d.dev_type == PciDevType::Pf && is_busy(d.status))
                .map(|d| d.address)
                .collect(),
            pfs_with_busy_vfs: devices
                .filter(|d| d.dev_type == PciDevType::Vf && is_busy(d.status))
                .filter_map(|d| d.parent_addr)
                .collect(),
        }
    }

    /// The status a free device should have; `None` for a busy one (it keeps its own).
    fn status_of(&self, d: &TrackedDevice) -> Option<DeviceStatus> {
        if is_busy(d.status) {
            return None;
        }
        let blocked = match d.dev_type {
            PciDevType::Pf => self.pfs_with_busy_vfs.contains(&d.address),
            PciDevType::Vf => d.parent_addr.is_some_and(|p| self.busy_pfs.contains(&p)),
            PciDevType::Pci => false,
        };
        Some(if blocked {
            DeviceStatus::Unavailable
        } else {
            DeviceStatus::Available
        })
    }
}

fn is_busy(s: DeviceStatus) -> bool {
    matches!(s, DeviceStatus::Allocated | DeviceStatus::Claimed)
}
