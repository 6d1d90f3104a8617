"""PCI devices: the claims for ports (interface attach, a live migration's destination), their
release, and the PciDevice rows kept equal to rtrackd's tracked devices.

``PciMixin`` of ``RtrackResourceTracker``. PCI in Placement (healing allocations, the
device_spec checks) is in :mod:`.placement`.
"""

from __future__ import annotations

from typing import Any, Optional

from oslo_serialization import jsonutils

from nova import exception
from nova import objects
from nova.objects import fields
from nova.pci import whitelist
from nova import utils

from nova_rtrack import client as rt_client
from nova_rtrack import driver_patches
from nova_rtrack.tracker.common import COMPUTE_RESOURCE_SEMAPHORE
from nova_rtrack.tracker.common import LOG


class PciMixin:
    """``RtrackResourceTracker``'s PCI devices (see the tracker's __init__ for its state)."""

    # -- PCI --------------------------------------------------------------------------------

    @utils.synchronized(COMPUTE_RESOURCE_SEMAPHORE, fair=True)
    def claim_pci_devices(self, context: Any, pci_requests: Any,
                          instance_numa_topology: Any) -> list:
        """Devices for ports (interface attach, live-migration destination)."""
        nodename = self._only_node()
        if nodename is None or not pci_requests.requests:
            return []
        client = self._client(nodename)
        instance_uuid = pci_requests.instance_uuid
        # A live migration's move already took the ports' devices at this destination.
        held = self._held_devices(client, instance_uuid, pci_requests)
        if held is not None:
            self._claim_only(instance_uuid, held)
            return self._pci_objects_for(context, nodename, held)
        held = self._claim_incoming_live_migration(context, client, nodename, instance_uuid,
                                                   pci_requests)
        if held is not None:
            self._claim_only(instance_uuid, held)
            self._sync_pci_rows(context, nodename)
            self._sync_node(context, nodename)
            return self._pci_objects_for(context, nodename, held)
        try:
            answer = client.attach_pci(instance_uuid, pci_requests.obj_to_primitive(),
                                       request_id=self._rid(context))
        except rt_client.RtrackError as e:
            raise exception.PciDeviceRequestFailed(requests=pci_requests.requests) from e
        devices = answer.get('pci_devices') or []
        self._claim_only(instance_uuid, devices)
        self._sync_pci_rows(context, nodename)
        self._sync_node(context, nodename)
        return self._pci_objects_for(context, nodename, devices)

    def _claim_only(self, instance_uuid: str, devices: list) -> None:
        """Devices Nova has claimed but not allocated yet (interface attach, live-migration
        destination): their rows say 'claimed' until allocate_pci_devices_for_instance, as
        Nova's PciDevTracker keeps them (Instance.pci_devices loads only 'allocated' rows, and
        the manager adds the claimed device itself)."""
        addrs = {d['address'] for d in devices if d.get('address')}
        if addrs:
            self.pci_claimed_only.setdefault(instance_uuid, set()).update(addrs)

    def _claim_incoming_live_migration(self, context: Any, client: rt_client.RtrackClient,
                                       nodename: str, instance_uuid: str,
                                       pci_requests: Any) -> Optional[list]:
        """A live migration's destination asking for flavor PCI devices of a guest Nova did
        not claim for (no NUMA: ``_live_migration_claim`` is skipped): the incoming move is
        registered in rtrackd, which chooses the devices, as for a NUMA guest; its end is
        settled from the Migration's status. None when this is not that case."""
        lm = driver_patches.incoming_live_migration()
        if not lm or lm.get('migration') is None:
            return None
        instance = lm.get('instance')
        if instance is None or instance.uuid != instance_uuid:
            return None
        if client.get_migration(lm['migration'].id) is not None:
            return None
        ctxt = lm.get('ctxt') or context
        try:
            allocs = self.reportclient.get_allocations_for_consumer(ctxt, instance_uuid)
        except Exception as e:  # noqa
            LOG.warning('Cannot read the allocations of %s: %s', instance_uuid, e)
            allocs = None
        try:
            claim = self._move_claim(ctxt, instance, instance.flavor, nodename,
                                     lm['migration'], allocs,
                                     move_type=fields.MigrationType.LIVE_MIGRATION,
                                     image_meta=instance.image_meta, limits=lm.get('limits'))
        except exception.ComputeResourcesUnavailable as e:
            raise exception.PciDeviceRequestFailed(requests=pci_requests.requests) from e
        wanted = {r.request_id for r in pci_requests.requests}
        held = [d for d in (claim.answer or {}).get('pci_devices') or []
                if d.get('request_id') in wanted]
        return held or self._held_devices(client, instance_uuid, pci_requests)

    def _held_devices(self, client: rt_client.RtrackClient, instance_uuid: str,
                      pci_requests: Any) -> Optional[list]:
        wanted = {r.request_id for r in pci_requests.requests}
        claim = client.get_claim(instance_uuid)
        if not claim:
            return None
        held = [d for d in claim.get('pci_devices') or [] if d.get('request_id') in wanted]
        return held if held else None

    @utils.synchronized(COMPUTE_RESOURCE_SEMAPHORE, fair=True)
    def unclaim_pci_devices(self, context: Any, pci_device: Any, instance: Any) -> None:
        self.pci_claimed_only.get(instance.uuid, set()).discard(pci_device.address)
        nodename = self._only_node()
        if nodename is None:
            return
        try:
            self._client(nodename).detach_pci(instance.uuid, pci_device.request_id,
                                              request_id=self._rid(context))
        except rt_client.RtrackError as e:
            LOG.warning('rtrackd did not free device %s: %s', pci_device.address, e,
                        instance=instance)
        self._sync_pci_rows(context, nodename)
        self._sync_node(context, nodename)

    @utils.synchronized(COMPUTE_RESOURCE_SEMAPHORE, fair=True)
    def allocate_pci_devices_for_instance(self, context: Any, instance: Any) -> None:
        self.pci_claimed_only.pop(instance.uuid, None)
        nodename = self._only_node()
        if nodename is not None:
            self._sync_pci_rows(context, nodename)

    @utils.synchronized(COMPUTE_RESOURCE_SEMAPHORE, fair=True)
    def free_pci_device_allocations_for_instance(self, context: Any, instance: Any) -> None:
        nodename = self._only_node()
        if nodename is not None:
            self._sync_pci_rows(context, nodename)

    @utils.synchronized(COMPUTE_RESOURCE_SEMAPHORE, fair=True)
    def free_pci_device_claims_for_instance(self, context: Any, instance: Any) -> None:
        self.pci_claimed_only.pop(instance.uuid, None)
        nodename = self._only_node()
        if nodename is not None:
            self._sync_pci_rows(context, nodename)

    def _only_node(self) -> Optional[str]:
        if not self.compute_nodes:
            return None
        return next(iter(self.compute_nodes))

    def _pci_rows(self, context: Any, nodename: str) -> dict[str, Any]:
        cn = self.compute_nodes.get(nodename)
        if cn is None or 'id' not in cn:
            return {}
        rows = objects.PciDeviceList.get_by_compute_node(context, cn.id)
        return {r.address: r for r in rows}

    def _pci_objects_for(self, context: Any, nodename: str, devices: list) -> list:
        if not devices:
            return []
        self._sync_pci_rows(context, nodename, force=True)
        rows = self._pci_rows(context, nodename)
        return [rows[d['address']] for d in devices if d.get('address') in rows]

    def _apply_pci(self, context: Any, nodename: str, instance: Any,
                   answer: Optional[dict[str, Any]], keep_instance: bool = False) -> None:
        """Writes rtrackd's device states to the rows and the instance's pci_devices."""
        if not self._tracks_pci(nodename) and not (answer and answer.get('pci_devices')):
            return
        self._sync_pci_rows(context, nodename, force=True)
        if keep_instance:
            return
        rows = self._pci_rows(context, nodename)
        mine = [r for r in rows.values()
                if r.instance_uuid == instance.uuid and r.status == 'allocated']
        instance.pci_devices = objects.PciDeviceList(objects=mine)

    def _tracks_pci(self, nodename: str) -> bool:
        res = self.driver_resources.get(nodename) or {}
        return bool(res.get('pci_passthrough_devices') not in (None, '[]'))

    def _driver_pci_devices(self, nodename: str) -> dict[str, dict[str, Any]]:
        """The driver's PCI devices by address, as Nova's PciDevTracker takes them: the
        hypervisor's dict with the matching device spec's ``managed`` and
        ``live_migratable`` tags added (``enhanced_pci_device_with_spec_tags``)."""
        raw = (self.driver_resources.get(nodename) or {}).get('pci_passthrough_devices')
        if not raw:
            return {}
        try:
            spec_filter = whitelist.Whitelist(self.device_spec)
        except exception.NovaException as e:
            LOG.warning('Cannot read [pci] device_spec: %s', e)
            spec_filter = None
        out = {}
        for dev in jsonutils.loads(raw):
            if spec_filter is not None:
                try:
                    spec = spec_filter.device_assignable(dict(dev))
                    if spec is not None:
                        spec.enhanced_pci_device_with_spec_tags(dev)
                except exception.NovaException:
                    pass
            out[dev['address']] = dev
        return out

    def _unselected_free(self, nodename: str, devices: list[dict[str, Any]]) -> set[str]:
        """Free devices the hypervisor no longer reports or the ``[pci] device_spec`` no
        longer selects: Nova's PciDevTracker drops them at once (a held one when it is
        freed); rtrackd may list them until its next audit."""
        raw = (self.driver_resources.get(nodename) or {}).get('pci_passthrough_devices')
        if raw is None:
            return set()
        try:
            whitelist.Whitelist(self.device_spec)
        except exception.NovaException:
            return set()
        chosen = {d['address'] for d, _tags in self._spec_selected(nodename)}
        return {d['address'] for d in devices
                if not d.get('instance_uuid') and d['address'] not in chosen}

    def _sync_pci_rows(self, context: Any, nodename: str, force: bool = False) -> None:
        """PciDevice rows = rtrackd's tracked devices.

        What a device is (vendor, product, type, NUMA node, parent) and its state (status,
        instance, request) are rtrackd's; the rest of the row is built as Nova's PciDevTracker
        builds it from the driver's dict (label, dev_id, and in extra_info the capabilities,
        parent_ifname, mac_address and the spec's managed/live_migratable tags), and kept up to
        date when the hypervisor reports a change (PciDevice.update_device).
        """
        cn = self.compute_nodes.get(nodename)
        if cn is None or 'id' not in cn:
            return
        if not force and not self._tracks_pci(nodename):
            return
        try:
            devices = self._client(nodename).pci_devices()
        except rt_client.RtrackError as e:
            LOG.warning('Cannot read rtrackd PCI devices: %s', e)
            return
        drv = self._driver_pci_devices(nodename)
        rows = self._pci_rows(context, nodename)
        seen = set()
        dropped = self._unselected_free(nodename, devices)
        for d in devices:
            if d['address'] in dropped:
                continue
            addr = d['address']
            seen.add(addr)
            row = rows.get(addr)
            dev = dict(drv.get(addr) or {})
            dev.setdefault('label', 'label_%s_%s' % (d.get('vendor_id'), d.get('product_id')))
            dev.setdefault('dev_id', 'pci_%s' % addr.replace(':', '_').replace('.', '_'))
            dev.update({
                'compute_node_id': cn.id,
                'address': addr,
                'vendor_id': d.get('vendor_id'),
                'product_id': d.get('product_id'),
                'dev_type': d.get('dev_type'),
                'numa_node': d.get('numa_node'),
                'parent_addr': d.get('parent_addr'),
            })
            if row is None:
                row = objects.PciDevice.create(context, dev)
                row.compute_node_id = cn.id
            else:
                row.update_device(dev)
            status = d.get('status') or 'available'
            nova_status = {'reserved': 'unavailable'}.get(status, status)
            if (nova_status == 'allocated' and
                    addr in self.pci_claimed_only.get(d.get('instance_uuid') or '', ())):
                nova_status = 'claimed'
            for k, v in (('status', nova_status), ('instance_uuid', d.get('instance_uuid')),
                         ('request_id', d.get('request_id'))):
                if not row.obj_attr_is_set(k) or getattr(row, k) != v:
                    setattr(row, k, v)
            if 'id' not in row or row.obj_what_changed():
                row._context = context
                row.save()
        for addr, row in rows.items():
            if addr not in seen and row.status not in ('deleted', 'removed'):
                row.status = 'removed'
                row._context = context
                row.save()
