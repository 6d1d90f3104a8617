"""An instance's own claim: ``instance_claim``, its abort, ``update_usage`` (state changes,
deletes), and what a claim's answer assigns besides CPUs and devices (vPMEM namespaces, vGPU
mdevs).

``InstanceClaimsMixin`` of ``RtrackResourceTracker``.
"""

from __future__ import annotations

from typing import Any, Optional

from oslo_serialization import jsonutils
from oslo_utils import excutils

from nova.compute import vm_states
from nova import exception
from nova import objects
from nova import utils

from nova_rtrack import claims as rt_claims
from nova_rtrack import client as rt_client
from nova_rtrack.tracker.common import COMPUTE_RESOURCE_SEMAPHORE
from nova_rtrack.tracker.common import LOG
from nova_rtrack.tracker.common import _refusal_reason
from nova_rtrack.tracker.common import _state
from nova_rtrack.tracker.common import _unavailable


class InstanceClaimsMixin:
    """``RtrackResourceTracker``'s instance claims (see the tracker's __init__ for its state)."""

    # -- instance claims --------------------------------------------------------------------

    @utils.synchronized(COMPUTE_RESOURCE_SEMAPHORE, fair=True)
    def instance_claim(self, context: Any, instance: Any, nodename: str, allocations: Any,
                       limits: Any = None) -> rt_claims.RtrackClaim:
        if self.disabled(nodename):
            raise exception.ComputeResourcesUnavailable(
                ('Attempt to claim resources for instance %(inst)s '
                 'on unknown node %(node)s failed') % {
                     'inst': instance.uuid, 'node': nodename})
        if instance.host:
            LOG.warning('Host field should not be set on the instance '
                        'until resources have been claimed.', instance=instance)
        if instance.node:
            LOG.warning('Node field should not be set on the instance '
                        'until resources have been claimed.', instance=instance)

        cn = self.compute_nodes[nodename]
        client = self._client(nodename)
        pci_requests = instance.pci_requests
        body: dict[str, Any] = {
            'instance': self._instance_ref(instance, host=None, node=None),
            'request_spec': self._request_spec(context, instance, instance.flavor,
                                               instance.image_meta, pci_requests, limits),
        }
        allocs = self._allocations(allocations)
        if allocs:
            body['allocations'] = allocs
        try:
            _status, answer = client.claim(body, request_id=self._rid(context))
        except rt_client.Refused as e:
            reason = _refusal_reason(e, bool(pci_requests and pci_requests.requests))
            LOG.info('Failed to claim: %s (rtrackd: %s; %s)', reason, e.message,
                     jsonutils.dumps(e.details)[:2000], instance=instance)
            raise _unavailable(reason)
        except rt_client.RtrackError as e:
            LOG.warning('Failed to claim on node %s: %s', nodename, e, instance=instance)
            raise _unavailable(str(e))

        LOG.info('Claim successful on node %s', nodename, instance=instance)
        claim = rt_claims.RtrackClaim(context, instance, nodename, self, answer)
        try:
            instance.numa_topology = claim.claimed_numa_topology
            self._set_instance_host_and_node(instance, cn)
            self._apply_pci(context, nodename, instance, answer)
            instance.resources = self._resources_from_answer(cn, answer)
            self._remember_mdevs(instance.uuid, answer)
            self.tracked_instances.add(instance.uuid)
            self.stats[nodename].update_stats_for_instance(instance, False)
            self._sync_node(context, nodename)
        except Exception:
            with excutils.save_and_reraise_exception():
                LOG.warning('Undoing the claim after a failure to record it',
                            instance=instance)
                try:
                    client.abort(instance.uuid)
                except rt_client.RtrackError as e:
                    LOG.error('Could not abort the claim in rtrackd: %s', e,
                              instance=instance)
        try:
            self._pci_placement(context.elevated(), nodename, None)
        except Exception as e:  # noqa (healing is best effort here, as the periodic retries)
            LOG.warning('PCI allocation healing failed: %s', e, instance=instance)
        return claim

    @utils.synchronized(COMPUTE_RESOURCE_SEMAPHORE, fair=True)
    def abort_instance_claim(self, context: Any, instance: Any, nodename: str) -> None:
        self.claimed_mdevs.pop(instance.uuid, None)
        try:
            self._client(nodename).abort(instance.uuid, request_id=self._rid(context))
        except rt_client.RtrackError as e:
            LOG.error('rtrackd did not abort the claim: %s', e, instance=instance)
        self._forget_instance(nodename, instance)
        instance.clear_numa_topology()
        self._unset_instance_host_and_node(instance)
        self._apply_pci(context, nodename, instance, None)
        if nodename in self.compute_nodes:
            self._sync_node(context.elevated(), nodename)

    def _forget_instance(self, nodename: str, instance: Any) -> None:
        self.claimed_mdevs.pop(instance.uuid, None)
        if instance.uuid in self.tracked_instances:
            self.tracked_instances.discard(instance.uuid)
            self.stats[nodename].update_stats_for_instance(instance, True)
        self.is_bfv.pop(instance.uuid, None)

    def _set_instance_host_and_node(self, instance: Any, node: Any) -> None:
        instance.host = self.host
        instance.launched_on = self.host
        if node is not None:
            instance.node = node.hypervisor_hostname
            instance.compute_id = node.id
        instance.save()

    def _unset_instance_host_and_node(self, instance: Any) -> None:
        instance.host = None
        instance.node = None
        instance.compute_id = None
        instance.save()

    # -- state updates ----------------------------------------------------------------------

    @utils.synchronized(COMPUTE_RESOURCE_SEMAPHORE, fair=True)
    def update_usage(self, context: Any, instance: Any, nodename: str) -> None:
        if self.disabled(nodename):
            return
        uuid = instance['uuid']
        if uuid not in self.tracked_instances:
            return
        client = self._client(nodename)
        changes = {
            'vm_state': instance.vm_state,
            'task_state': _state(instance.task_state),
            'host': instance.host,
            'node': instance.node,
        }
        removed = vm_states.allow_resource_removal(
            vm_state=instance.vm_state, task_state=instance.task_state)
        try:
            answer = client.update_state(uuid, changes, request_id=self._rid(context))
            if answer.get('instance') is None:
                removed = True
        except rt_client.NotFound:
            removed = True
        except rt_client.RtrackError as e:
            LOG.error('rtrackd refused the state update: %s', e, instance=instance)
        stats = self.stats[nodename]
        stats.update_stats_for_instance(instance, removed)
        if removed:
            self.claimed_mdevs.pop(uuid, None)
            self.tracked_instances.discard(uuid)
            self.is_bfv.pop(uuid, None)
            self._apply_pci(context, nodename, instance, None, keep_instance=True)
        self._sync_node(context.elevated(), nodename)

    # -- assigned resources (vPMEM) ---------------------------------------------------------

    @staticmethod
    def _resources_from_answer(cn: Any, answer: Optional[dict[str, Any]]) -> Any:
        """``instance.resources`` as Nova's tracker assigns them (``_claim_resources``):
        one Resource per vPMEM namespace rtrackd gave the claim, on the compute node provider,
        its metadata the driver's LibvirtVPMEMDevice (the libvirt driver writes the guest's
        nvdimm from it). None when the claim holds none."""
        namespaces = (answer or {}).get('pmem_namespaces') or []
        if not namespaces:
            return None
        res = []
        for ns in namespaces:
            res.append(objects.Resource(
                provider_uuid=cn.uuid, resource_class=ns['resource_class'],
                identifier=ns['name'],
                metadata=objects.LibvirtVPMEMDevice(
                    label=ns['label'], name=ns['name'], size=ns['size'],
                    devpath=ns['devpath'], align=ns['align'])))
        return objects.ResourceList(objects=res)

    # -- vGPUs ------------------------------------------------------------------------------

    def _remember_mdevs(self, instance_uuid: str, answer: Optional[dict[str, Any]]) -> None:
        mdevs = (answer or {}).get('mdevs')
        if mdevs:
            self.claimed_mdevs[instance_uuid] = list(mdevs)
        else:
            self.claimed_mdevs.pop(instance_uuid, None)

    def mdevs_for(self, instance: Any) -> Optional[list[dict[str, Any]]]:
        """The mdevs rtrackd gave ``instance`` on this host (its claim, or its incoming move's
        claim): ``[{uuid, parent, type, existing}]``; None when rtrackd holds none."""
        cached = self.claimed_mdevs.get(instance.uuid)
        if cached:
            return cached
        nodename = instance.node if instance.node in self.compute_nodes else self._only_node()
        if nodename is None:
            return None
        try:
            claim = self._client(nodename).get_claim(instance.uuid)
        except rt_client.RtrackError as e:
            LOG.warning('Cannot read the claim of %s from rtrackd: %s', instance.uuid, e)
            return None
        if not claim:
            return None
        mdevs = claim.get('mdevs') or (claim.get('claim') or {}).get('mdevs')
        return list(mdevs) if mdevs else None
