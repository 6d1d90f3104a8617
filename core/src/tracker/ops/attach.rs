//! Devices for a port attached to a running instance, and their release on detach (Nova's
//! `attach_interface`: `claim_pci_devices` and `allocate_pci_devices_for_instance`; and
//! `detach_interface`: `unclaim_pci_devices` and the request's removal).
//!
//! In: an instance this host holds a claim for, the port's PCI requests (or, to detach, one
//! request id). Out: the devices given, the instance's request and claim with the port's request
//! added (or removed), and the [`Changes`] to commit; or a refusal, a conflict (the instance is
//! moving, the request id is taken by another request, a flavor's request cannot be detached) or
//! not found.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::Serialize;

use crate::tracker::error::{ClaimError, Refusal};
use crate::tracker::model::{InstanceRecord, PciRequest};
use crate::tracker::pci::claim::{claim_devices, Assignment};
use crate::tracker::{Changes, Tracker};

/// What an attach gave.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AttachOutcome {
    /// The instance.
    pub instance_uuid: String,
    /// The devices given to the attached requests (all of them when `existing`).
    pub assignments: Vec<Assignment>,
    /// The same requests were attached already: nothing changed.
    pub existing: bool,
}

impl Tracker {
    /// Claims devices for port requests of an instance this host holds a claim for, on the
    /// instance's NUMA cells (as its policy says), and adds the requests to the instance.
    /// Attaching the same requests again returns what they hold.
    pub fn attach_pci(
        &mut self,
        uuid: &str,
        requests: &[PciRequest],
    ) -> Result<(AttachOutcome, Changes), ClaimError> {
        let inst = self.running_instance(uuid, "attach")?;
        if requests.is_empty() {
            return Err(ClaimError::Invalid {
                field: "pci_requests.requests".into(),
                message: "is empty; attach at least one port's request".into(),
            });
        }
        let mut seen = BTreeSet::new();
        let mut existing = 0;
        for (i, r) in requests.iter().enumerate() {
            if r.alias_name.is_some() || r.requester_id.is_none() {
                return Err(ClaimError::Invalid {
                    field: format!("pci_requests.requests[{i}]"),
                    message: "only a port's request (requester_id set, no alias_name) is attached to a running instance; a flavor's devices change with a resize".into(),
                });
            }
            if !seen.insert(&r.request_id) {
                return Err(ClaimError::Invalid {
                    field: format!("pci_requests.requests[{i}].request_id"),
                    message: format!("{} appears twice", r.request_id),
                });
            }
            match inst
                .request
                .pci_requests
                .iter()
                .find(|h| h.request_id == r.request_id)
            {
                Some(held) if held == r => existing += 1,
                Some(_) => {
                    return Err(ClaimError::Conflict {
                        id: uuid.to_string(),
                        message: format!(
                            "instance {uuid} already holds PCI request {} with other specs; detach it first",
                            r.request_id
                        ),
                    })
                }
                None => {}
            }
        }
        if existing == requests.len() {
            let ids: BTreeSet<&String> = requests.iter().map(|r| &r.request_id).collect();
            let assignments = self.state.claims[uuid]
                .assignments
                .iter()
                .filter(|a| ids.contains(&a.request_id))
                .cloned()
                .collect();
            return Ok((
                AttachOutcome {
                    instance_uuid: uuid.to_string(),
                    assignments,
                    existing: true,
                },
                Changes::default(),
            ));
        }
        if existing > 0 {
            return Err(ClaimError::Conflict {
                id: uuid.to_string(),
                message: format!(
                    "instance {uuid} already holds some of these requests; attach the others alone"
                ),
            });
        }
        self.check_provider_mapping(uuid, requests)?;
        let cells = inst
            .numa_topology
            .as_ref()
            .map(|t| t.host_cells())
            .unwrap_or_default();
        let index = self.pci_index();
        let (devices, assignments) = claim_devices(
            &self.state.devices,
            &index,
            requests,
            &cells,
            &self.view.sockets,
            uuid,
        )
        .map_err(|pci| {
            ClaimError::Refused(Box::new(Refusal {
                instance_uuid: uuid.to_string(),
                resources: Vec::new(),
                pci: Some(pci),
                numa: None,
            }))
        })?;
        let mut changes = Changes::default();
        self.replace_devices(Some(devices), &mut changes);
        self.edit_port_requests(
            uuid,
            |reqs| reqs.extend(requests.iter().cloned()),
            |held| held.extend(assignments.iter().cloned()),
            &mut changes,
        );
        Ok((
            AttachOutcome {
                instance_uuid: uuid.to_string(),
                assignments,
                existing: false,
            },
            changes,
        ))
    }

    /// Frees the devices of one port request of an instance and removes the request. The
    /// flavor's requests are not detached (a resize changes them).
    pub fn detach_pci(&mut self, uuid: &str, request_id: &str) -> Result<Changes, ClaimError> {
        let inst = self.running_instance(uuid, "detach")?;
        let Some(req) = inst
            .request
            .pci_requests
            .iter()
            .find(|r| r.request_id == request_id)
        else {
            return Err(ClaimError::NotFound {
                what: "PCI request",
                id: request_id.to_string(),
            });
        };
        if let Some(alias) = &req.alias_name {
            return Err(ClaimError::Conflict {
                id: uuid.to_string(),
                message: format!(
                    "PCI request {request_id} comes from the flavor's alias {alias}; only a port's devices are detached (a resize changes the flavor's)"
                ),
            });
        }
        let mut changes = Changes::default();
        let ids = BTreeSet::from([request_id.to_string()]);
        self.free_devices(uuid, Some(&ids), &mut changes);
        self.edit_port_requests(
            uuid,
            |reqs| reqs.retain(|r| r.request_id != request_id),
            |held| held.retain(|a| a.request_id != request_id),
            &mut changes,
        );
        Ok(changes)
    }

    /// The instance, if it runs here: known, holding a claim, not moving.
    fn running_instance(&self, uuid: &str, verb: &str) -> Result<&InstanceRecord, ClaimError> {
        let inst = self
            .state
            .instances
            .get(uuid)
            .ok_or_else(|| ClaimError::NotFound {
                what: "instance",
                id: uuid.to_string(),
            })?;
        if !self.state.claims.contains_key(uuid) || inst.migration_context.is_some() {
            return Err(ClaimError::Conflict {
                id: uuid.to_string(),
                message: format!(
                    "instance {uuid} is moving to or from this host; {verb} its port once the move is confirmed or reverted"
                ),
            });
        }
        Ok(inst)
    }

    /// Edits an instance's PCI requests and its claim's devices together (the claim shares
    /// the instance's request) and records both.
    fn edit_port_requests(
        &mut self,
        uuid: &str,
        requests: impl FnOnce(&mut Vec<PciRequest>),
        held: impl FnOnce(&mut Vec<Assignment>),
        changes: &mut Changes,
    ) {
        let Some(shared) = self.state.instances.get_mut(uuid) else {
            return;
        };
        let inst = Arc::make_mut(shared);
        requests(&mut Arc::make_mut(&mut inst.request).pci_requests);
        let request = inst.request.clone();
        changes
            .instances
            .insert(uuid.to_string(), Some(shared.clone()));
        if let Some(shared) = self.state.claims.get_mut(uuid) {
            let claim = Arc::make_mut(shared);
            claim.request = request;
            held(&mut claim.assignments);
            changes
                .claims
                .insert(uuid.to_string(), Some(shared.clone()));
        }
    }
}
