"""The request bodies: Nova's objects (instance, flavor, image, PCI requests, limits,
Placement's allocations) as the JSON rtrackd takes.

``RequestBodiesMixin`` of ``RtrackResourceTracker``, and ``_placed_devices`` (an instance's
devices for a claim *as placed*).
"""

from __future__ import annotations

from typing import Any, Optional

from nova.compute import utils as compute_utils
from nova import objects


class RequestBodiesMixin:
    """``RtrackResourceTracker``'s request bodies (see the tracker's __init__ for its state)."""

    # -- request bodies ---------------------------------------------------------------------

    def _instance_ref(self, instance: Any, with_numa: bool = False,
                      host: Any = Ellipsis, node: Any = Ellipsis) -> dict[str, Any]:
        ref: dict[str, Any] = {
            'uuid': instance.uuid,
            'project_id': instance.project_id,
            'user_id': instance.user_id,
            'vm_state': instance.vm_state,
            'task_state': instance.task_state,
        }
        if 'os_type' in instance and instance.os_type:
            ref['os_type'] = instance.os_type
        h = instance.host if host is Ellipsis else host
        n = instance.node if node is Ellipsis else node
        if h:
            ref['host'] = h
        if n:
            ref['node'] = n
        if with_numa and instance.numa_topology:
            ref['numa_topology'] = instance.numa_topology.obj_to_primitive()
        return ref

    def _is_bfv(self, context: Any, instance: Any) -> bool:
        if instance.uuid not in self.is_bfv:
            self.is_bfv[instance.uuid] = compute_utils.is_volume_backed_instance(
                instance._context or context, instance)
        return self.is_bfv[instance.uuid]

    @staticmethod
    def _network_metadata(limits: Any) -> Any:
        """The NUMA-affine networks the scheduler's filter found (Nova hands them to the
        compute's claim in the limits)."""
        if not limits:
            return None
        if isinstance(limits, objects.SchedulerLimits):
            limits = limits.to_dict()
        nl = limits.get('numa_topology') if isinstance(limits, dict) else None
        if nl is not None and 'network_metadata' in nl:
            return nl.network_metadata
        return None

    def _request_spec(self, context: Any, instance: Any, flavor: Any, image_meta: Any,
                      pci_requests: Any, limits: Any = None) -> dict[str, Any]:
        if pci_requests is None:
            pci_requests = objects.InstancePCIRequests(requests=[],
                                                       instance_uuid=instance.uuid)
        if image_meta is None:
            image_meta = instance.image_meta
        if isinstance(image_meta, dict):
            image_meta = objects.ImageMeta.from_dict(image_meta)
        spec = objects.RequestSpec.from_components(
            context, instance.uuid, image_meta, flavor, None, pci_requests, {}, None,
            instance.availability_zone if 'availability_zone' in instance else None,
            project_id=instance.project_id, user_id=instance.user_id)
        # PCI request groups (Nova's pci_in_placement) come out of from_components unmapped:
        # which providers they use is in the PCI requests' rp_uuids and the allocations. An
        # unmapped group would read as "no provider" to rtrackd.
        spec.requested_resources = [
            g for g in (spec.requested_resources or [])
            if 'provider_uuids' in g and g.provider_uuids]
        spec.is_bfv = self._is_bfv(context, instance)
        netmeta = self._network_metadata(limits)
        if netmeta is not None:
            spec.network_metadata = netmeta
        return spec.obj_to_primitive()

    @staticmethod
    def _allocations(allocations: Any) -> Optional[dict[str, Any]]:
        if not allocations:
            return None
        out = {}
        for rp, alloc in allocations.items():
            body = {'resources': dict(alloc.get('resources', {}))}
            if alloc.get('generation') is not None:
                body['generation'] = alloc['generation']
            out[rp] = body
        return out

    @staticmethod
    def _rid(context: Any) -> Optional[str]:
        return getattr(context, 'request_id', None)


def _placed_devices(inst: Any) -> list[dict[str, str]]:
    """The PCI devices an instance has (its allocated PciDevice rows), with the request each
    serves, as rtrackd's ``as_placed.devices``."""
    try:
        devices = inst.pci_devices or []
    except Exception:  # noqa (an instance without the field loaded has none to carry)
        return []
    return [{'request_id': d.request_id, 'address': d.address}
            for d in devices if d.request_id and d.address]
