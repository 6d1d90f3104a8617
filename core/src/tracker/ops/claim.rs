//! Build claims (Nova's `instance_claim`), aborts (`abort_instance_claim`) and the failed-build
//! counter, and the test every claim and move claim passes (resources and PCI, nothing
//! changed): an instance's request in, the claim (or the refusal) and its [`Changes`] out.
//!
//! [`Changes`]: crate::tracker::Changes

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{ClaimOutcome, InstanceInfo};
use crate::inventory::resources::ResourceClass;
use crate::tracker::error::{ClaimError, Refusal};
use crate::tracker::model::{InstanceRecord, InstanceRequest, ResourceRules};
use crate::tracker::nested::NestedAllocation;
use crate::tracker::nova_states::{check_task_state, check_vm_state, releases_resources};
use crate::tracker::numa::placed::check_placed;
use crate::tracker::numa::{fit_instance, FitInput, FittedTopology, GuestTopology};
use crate::tracker::pci::claim::{claim_devices, Assignment};
use crate::tracker::pci::devices::TrackedDevice;
use crate::tracker::refusals::NumaRefusal;
use crate::tracker::refusals::PciRefusal;
use crate::tracker::resource_tracker::validate_uuid;
use crate::tracker::usage::Usage;
use crate::tracker::{Changes, ClaimRecord, Tracker};

impl Tracker {
    /// Nova's `instance_claim` (build): checks resources and PCI, then records the instance on
    /// this node with its devices allocated. The same instance claimed again with the same
    /// request returns the existing claim; with another request it is a conflict.
    pub fn instance_claim(
        &mut self,
        info: &InstanceInfo,
        req: &InstanceRequest,
        now: i64,
        dry_run: bool,
    ) -> Result<(ClaimOutcome, Changes), ClaimError> {
        let uuid = &info.uuid;
        validate_uuid(uuid, "instance.uuid")?;
        let vm_state = info.vm_state.as_deref().unwrap_or("building");
        check_vm_state(vm_state, "instance.vm_state")?;
        if let Some(t) = &info.task_state {
            check_task_state(t, "instance.task_state", false)?;
        }
        if releases_resources(vm_state, info.task_state.as_deref()) {
            // Granted but never counted: refuse rather than hand out what no rule holds.
            return Err(ClaimError::Conflict {
                id: uuid.clone(),
                message: format!(
                    "instance {uuid} with vm_state {vm_state} uses no resources under Nova's rules, so nothing claimed for it would be counted; claim it in the state it will run in (e.g. building)"
                ),
            });
        }
        if let Some(existing) = self.state.claims.get(uuid) {
            if *existing.request == *req {
                return Ok((
                    ClaimOutcome {
                        claim: ClaimRecord::clone(existing),
                        existing: true,
                        dry_run,
                    },
                    Changes::default(),
                ));
            }
            return Err(ClaimError::Conflict {
                id: uuid.clone(),
                message: format!(
                    "instance {uuid} already holds a claim on this host with a different request; abort it first"
                ),
            });
        }
        if let Some(inst) = self.state.instances.get(uuid) {
            return Err(ClaimError::Conflict {
                id: uuid.clone(),
                message: format!(
                    "instance {uuid} is already known here ({}, vm_state {}); a move uses a migration claim",
                    inst.host.as_deref().unwrap_or("no host"),
                    inst.vm_state
                ),
            });
        }
        let placed_req;
        let req = if info.placed_devices.is_empty() {
            req
        } else {
            placed_req = with_placed_devices(req, &info.placed_devices)?;
            &placed_req
        };
        let tested = self.test_claim(
            uuid,
            req,
            TestKind::Instance,
            &info.allocations,
            info.placed_numa.as_ref(),
        )?;
        // One copy of the request and of the placement, shared by the instance, its claim and
        // both views.
        let request = std::sync::Arc::new(req.clone());
        let numa = tested.numa.map(std::sync::Arc::new);
        let nested = tested.nested.map(std::sync::Arc::new);
        let claim = ClaimRecord {
            instance_uuid: uuid.clone(),
            migration_id: None,
            request: request.clone(),
            assignments: tested.assignments,
            resources: tested.resources,
            numa_topology: numa.clone(),
            nested: nested.clone(),
            claimed_at: now,
        };
        if dry_run {
            return Ok(ClaimOutcome::would_fit(claim));
        }
        let mut changes = Changes::default();
        self.replace_devices(tested.devices, &mut changes);
        let record = InstanceRecord {
            uuid: uuid.clone(),
            project_id: info.project_id.clone(),
            user_id: info.user_id.clone(),
            os_type: info.os_type.clone(),
            vm_state: vm_state.to_string(),
            task_state: info.task_state.clone(),
            host: Some(self.settings.names.host.clone()),
            node: Some(self.settings.names.node.clone()),
            request,
            numa_topology: numa,
            nested,
            old_flavor: None,
            new_flavor: None,
            migration_context: None,
        };
        let (record, shared_claim) = (Arc::new(record), Arc::new(claim.clone()));
        self.state.instances.insert(uuid.clone(), record.clone());
        changes.instances.insert(uuid.clone(), Some(record));
        self.state.claims.insert(uuid.clone(), shared_claim.clone());
        changes.claims.insert(uuid.clone(), Some(shared_claim));
        if let Some(used) = self.used_cache.get_mut().as_mut() {
            for (class, amount) in &claim.resources {
                *used.entry(class.clone()).or_default() += amount;
            }
        }
        Ok((ClaimOutcome::granted(claim), changes))
    }

    /// Aborts a claim: an instance claim (`abort_instance_claim`: the instance leaves this node
    /// and its devices are freed) or, failing that, the instance's move claim here.
    pub fn abort(&mut self, uuid: &str) -> Result<Changes, ClaimError> {
        self.invalidate_usage();
        let mut changes = Changes::default();
        if self.state.claims.contains_key(uuid) {
            self.free_devices(uuid, None, &mut changes);
            self.state.claims.remove(uuid);
            changes.claims.insert(uuid.to_string(), None);
            self.forget_instance_unless_moving(uuid, &mut changes);
            return Ok(changes);
        }
        let move_id = self
            .state
            .move_claims
            .iter()
            .find(|(_, c)| c.instance_uuid == uuid)
            .map(|(id, _)| *id);
        match move_id {
            Some(id) => {
                // The move did not happen: the migration ends, holding nothing.
                self.drop_move_claim(id, "failed", &mut changes);
                Ok(changes)
            }
            None => Err(ClaimError::NotFound {
                what: "claim",
                id: uuid.to_string(),
            }),
        }
    }

    pub(in crate::tracker) fn forget_instance_unless_moving(
        &mut self,
        uuid: &str,
        changes: &mut Changes,
    ) {
        let moving = self
            .state
            .migrations
            .values()
            .any(|m| m.instance_uuid == uuid && m.in_progress());
        if !moving && self.state.instances.remove(uuid).is_some() {
            changes.instances.insert(uuid.to_string(), None);
        }
    }

    /// Nova's failed-build counter.
    pub fn build_result(&mut self, failed: bool) -> Changes {
        self.state.failed_builds = if failed {
            self.state.failed_builds + 1
        } else {
            0
        };
        Changes {
            counters: Some(self.counters()),
            ..Changes::default()
        }
    }
}

/// The NUMA cells that hold tracked devices, gathered only for a claim with PCI requests: for
/// one without, a walk over every tracked device was most of the claim's cost.
fn cells_with_devices(
    devices: &crate::tracker::pci::devices::TrackedDevices,
    wants_pci: bool,
) -> std::collections::BTreeSet<u32> {
    if !wants_pci {
        return Default::default();
    }
    devices.values().filter_map(|d| d.numa_node).collect()
}

/// A claim that passed its test.
pub(crate) struct TestedClaim {
    /// The device states after it (none when no device changes).
    pub devices: Option<Vec<TrackedDevice>>,
    /// The devices given.
    pub assignments: Vec<Assignment>,
    /// The resources counted, per class.
    pub resources: BTreeMap<ResourceClass, i64>,
    /// Where the guest's NUMA cells go, when it has any.
    pub numa: Option<FittedTopology>,
    /// Its vGPUs and encryption contexts, when it asks for any.
    pub nested: Option<NestedAllocation>,
}

/// What [`Tracker::test_claim`] checks a request for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TestKind {
    /// An instance claim: devices claimed, usage from the cache kept in step with claims.
    Instance,
    /// The destination side of a move: usage derived afresh from the records (a move changes
    /// them in ways only a full derivation follows). Devices are claimed for every move type,
    /// live migration included (Nova claims a live-migrating instance's flavor and port devices
    /// at the destination in `check_can_live_migrate_destination`).
    Move {
        /// The migration (new mdev uuids differ per move).
        migration_id: i64,
    },
}

impl Tracker {
    /// Checks resources, fits the NUMA topology and claims devices; nothing is changed.
    pub(crate) fn test_claim(
        &self,
        uuid: &str,
        req: &InstanceRequest,
        kind: TestKind,
        allocations: &BTreeMap<uuid::Uuid, BTreeMap<ResourceClass, i64>>,
        placed: Option<&FittedTopology>,
    ) -> Result<TestedClaim, ClaimError> {
        let cache_usage = kind == TestKind::Instance;
        let rules = self.settings.counting_rules();
        let resources = req.flavor.resources(ResourceRules {
            is_bfv: req.is_bfv,
            shared_disk: rules.shared_disk,
            legacy_cpus: rules.legacy_cpus,
        });
        // Only an instance claim keeps the cache up to date as it changes the records; a move
        // claim changes them in ways only a full derivation follows. A NUMA guest needs the
        // consumers too (their placements make the cells' usage).
        let full = (!cache_usage || req.numa.is_some()).then(|| self.usage());
        let used = match &full {
            Some(u) if !cache_usage => u.used.clone(),
            _ => self.used(),
        };
        let mut shortfalls = self.shortfalls(&resources, &used);
        let salt = match kind {
            TestKind::Instance => format!("{uuid}/build"),
            TestKind::Move { migration_id } => format!("{uuid}/migration-{migration_id}"),
        };
        let mapping = self.nested_mapping(uuid, allocations)?;
        let nested = if shortfalls.is_empty() {
            match self.place_nested(
                uuid,
                req,
                &resources,
                full.as_ref(),
                mapping.as_ref(),
                &salt,
            ) {
                Ok(n) => n,
                Err(Ok(s)) => {
                    shortfalls = s;
                    None
                }
                Err(Err(e)) => return Err(e),
            }
        } else {
            None
        };
        let wants_pci = !req.pci_requests.is_empty();
        if wants_pci {
            self.check_provider_mapping(uuid, &req.pci_requests)?;
        }
        let cleaned = self.cleaned_in_placement(&req.pci_requests);
        let devices = cleaned.as_ref().unwrap_or(&self.state.devices);
        let index = if wants_pci {
            self.pci_index()
        } else {
            Default::default()
        };
        // Whether the requests can be met depends only on which of the cells hold devices
        // that could serve them, and on the cells' sockets: a fit that tries many cell sets
        // asks the device claim once per such shape.
        let device_cells = cells_with_devices(devices, wants_pci);
        type Shape = (Vec<u32>, Vec<Option<i64>>);
        let mut refused_shapes: BTreeMap<Shape, PciRefusal> = BTreeMap::new();
        let mut pci = |cells: &[u32]| -> Result<PciOutcome, PciRefusal> {
            if !wants_pci {
                return Ok((None, Vec::new()));
            }
            let mut sockets: Vec<Option<i64>> = cells
                .iter()
                .map(|c| self.view.sockets.get(c).copied().flatten())
                .collect();
            sockets.sort_unstable();
            sockets.dedup();
            let shape: Shape = (
                cells
                    .iter()
                    .copied()
                    .filter(|c| device_cells.contains(c))
                    .collect(),
                sockets,
            );
            if let Some(r) = refused_shapes.get(&shape) {
                return Err(r.clone());
            }
            claim_devices(
                devices,
                &index,
                &req.pci_requests,
                cells,
                &self.view.sockets,
                uuid,
            )
            .map(|(d, a)| (Some(d), a))
            .inspect_err(|r| {
                refused_shapes.insert(shape, r.clone());
            })
        };
        let (pci_result, numa, numa_refusal) = match (&req.numa, &full) {
            (Some(guest), Some(usage)) => self.place_numa(req, guest, usage, placed, pci),
            _ => (pci(&[]), None, None),
        };
        match (shortfalls.is_empty() && numa_refusal.is_none(), pci_result) {
            (true, Ok((devices, assignments))) => Ok(TestedClaim {
                devices,
                assignments,
                resources,
                numa,
                nested,
            }),
            (_, pci) => Err(ClaimError::Refused(Box::new(Refusal {
                instance_uuid: uuid.to_string(),
                resources: shortfalls,
                pci: pci.err(),
                numa: numa_refusal,
            }))),
        }
    }

    /// Where a NUMA guest goes, and its devices (the PCI claim for the cells chosen): `placed`
    /// checked as it is, else Nova's fit; a refusal says why.
    fn place_numa(
        &self,
        req: &InstanceRequest,
        guest: &GuestTopology,
        usage: &Usage,
        placed: Option<&FittedTopology>,
        mut pci: impl FnMut(&[u32]) -> Result<PciOutcome, PciRefusal>,
    ) -> PlacedNuma {
        let cell_usage = self.numa_usage(usage);
        if let Some(placed) = placed {
            return match check_placed(&self.view.numa, &cell_usage, guest, placed) {
                Ok(()) => (pci(&placed.host_cells()), Some(placed.clone()), None),
                Err(reason) => (
                    Ok((None, Vec::new())),
                    None,
                    Some(NumaRefusal {
                        reason,
                        cells: Vec::new(),
                    }),
                ),
            };
        }
        let pci_free = self.pci_free_per_cell();
        let r = &self.settings.policy.resources;
        let input = FitInput {
            host: &self.view.numa,
            usage: &cell_usage,
            guest,
            cpu_ratio: r
                .cpu_allocation_ratio
                .unwrap_or(r.initial_cpu_allocation_ratio),
            ram_ratio: r
                .ram_allocation_ratio
                .unwrap_or(r.initial_ram_allocation_ratio),
            pack: r.packing_host_numa_cells_allocation_strategy,
            pci_free_per_cell: &pci_free,
            wants_pci: !req.pci_requests.is_empty(),
            policy: &r.topology,
        };
        match fit_instance(&input, pci) {
            Ok((topology, pci)) => (Ok(pci), Some(topology), None),
            Err((refusal, pci_err)) => (
                pci_err.map_or(Ok((None, Vec::new())), Err),
                None,
                Some(refusal),
            ),
        }
    }
}

/// `req` with each PCI request limited to the devices a placed guest already has (by request
/// id); a request id the guest's requests lack, or a request given a different number of
/// devices than it asks for, is a conflict naming it.
fn with_placed_devices(
    req: &InstanceRequest,
    placed: &BTreeMap<String, Vec<crate::probes::pci::PciAddress>>,
) -> Result<InstanceRequest, ClaimError> {
    let mut out = req.clone();
    for (request_id, addresses) in placed {
        let Some(r) = out
            .pci_requests
            .iter_mut()
            .find(|r| &r.request_id == request_id)
        else {
            return Err(ClaimError::Conflict {
                id: "as_placed.devices".into(),
                message: format!(
                    "as_placed.devices: request id {} is not one of the instance's PCI requests",
                    crate::echo::quoted(request_id)
                ),
            });
        };
        if addresses.len() != r.count as usize {
            return Err(ClaimError::Conflict {
                id: "as_placed.devices".into(),
                message: format!(
                    "as_placed.devices: request {} asks for {} device(s), {} given",
                    crate::echo::quoted(request_id),
                    r.count,
                    addresses.len()
                ),
            });
        }
        r.devices = addresses.clone();
    }
    Ok(out)
}

/// What a PCI claim gives: the new device states and the devices assigned.
type PciOutcome = (Option<Vec<TrackedDevice>>, Vec<Assignment>);

/// A NUMA guest's place: the PCI claim for its cells, the topology, or why it does not fit.
type PlacedNuma = (
    Result<PciOutcome, PciRefusal>,
    Option<FittedTopology>,
    Option<NumaRefusal>,
);
