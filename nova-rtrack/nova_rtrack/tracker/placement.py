"""Placement: what is still Nova's there (the driver's traits on the compute node provider,
PCI-in-Placement's device_spec checks and allocation healing, the clean-up of allocations of
deleted or evacuated instances); rtrackd reports the inventories itself.

``PlacementMixin`` of ``RtrackResourceTracker``.
"""

from __future__ import annotations

import collections
from typing import Any, Optional

import os_traits
from oslo_serialization import jsonutils

from nova import exception
from nova import objects
from nova.objects import fields
from nova.pci import whitelist

from nova_rtrack import client as rt_client
from nova_rtrack import conf as rt_conf
from nova_rtrack import pci_placement
from nova_rtrack.tracker.common import CONF
from nova_rtrack.tracker.common import LOG
from nova_rtrack.tracker.common import PCI_MANAGER_LOG
from nova_rtrack.tracker.common import PCI_PLACEMENT_LOG


class PlacementMixin:
    """``RtrackResourceTracker``'s Placement duties (see the tracker's __init__ for its state)."""

    # -- Placement: what is still Nova's ----------------------------------------------------

    def _sync_traits(self, context: Any, cn: Any) -> None:
        """The driver's traits on the compute node provider (rtrackd reports the inventory).

        Nova's own rule (resource_tracker._get_traits): the traits of the provider, plus the
        driver's static traits and capabilities (removing those it says are false),
        COMPUTE_NODE, OWNER_NOVA, and COMPUTE_STATUS_DISABLED from the service record.
        """
        rc = self.reportclient
        uuid = cn.uuid
        try:
            rc.get_provider_tree_and_ensure_root(context, uuid,
                                                 name=cn.hypervisor_hostname)
        except Exception as e:  # noqa
            LOG.warning('Cannot read the provider tree of %s: %s', uuid, e)
        for _attempt in range(4):
            try:
                info = rc.get_provider_traits(context, uuid)
            except Exception as e:  # noqa
                LOG.warning('Cannot read the traits of %s: %s', uuid, e)
                return
            traits = set(info.traits)
            try:
                owned = dict(self.driver.static_traits)
            except Exception:  # noqa
                owned = {}
            for trait, supported in self.driver.capabilities_as_traits().items():
                if trait == os_traits.COMPUTE_REMOTE_MANAGED_PORTS:
                    supported = supported and self._has_remote_managed(cn)
                owned[trait] = supported
            for trait, on in owned.items():
                if on:
                    traits.add(trait)
                else:
                    traits.discard(trait)
            traits.add(os_traits.COMPUTE_NODE)
            traits.add(os_traits.OWNER_NOVA)
            try:
                service = objects.Service.get_by_compute_host(context, self.host)
                if service.disabled:
                    traits.add(os_traits.COMPUTE_STATUS_DISABLED)
                else:
                    traits.discard(os_traits.COMPUTE_STATUS_DISABLED)
            except exception.NotFound:
                LOG.error('Unable to find services table record for nova-compute host %s',
                          self.host)
            pt = getattr(rc, '_provider_tree', None)
            if pt is not None and pt.exists(uuid):
                pt.update_traits(uuid, info.traits, generation=info.generation)
            if traits == info.traits:
                return
            try:
                rc.set_traits_for_provider(context, uuid, traits,
                                           generation=info.generation)
                return
            except exception.ResourceProviderUpdateConflict:
                continue
            except Exception as e:  # noqa
                LOG.warning('Cannot set the traits of %s: %s', uuid, e)
                return

    def _spec_selected(self, nodename: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """The driver's PCI devices the ``[pci] device_spec`` selects, in the hypervisor's
        order, each with its spec's tags."""
        raw = (self.driver_resources.get(nodename) or {}).get('pci_passthrough_devices')
        if not raw:
            return []
        try:
            spec_filter = whitelist.Whitelist(self.device_spec)
        except exception.NovaException:
            return []
        out = []
        for dev in jsonutils.loads(raw):
            try:
                spec = spec_filter.device_assignable(dict(dev))
            except exception.NovaException:
                spec = None
            if spec is not None:
                out.append((dev, dict(spec.get_tags())))
        return out

    def _check_pci_reporting_kept(self, context: Any, root_uuid: str) -> None:
        """Nova refuses to turn ``[pci] report_in_placement`` off once PCI providers
        (``COMPUTE_MANAGED_PCI_DEVICE``) exist in the compute's tree: checked at start (Nova
        checks at every periodic; only the start's refusal stops the service), before
        rtrackd is given the new configuration (which would remove them)."""
        if CONF.pci.report_in_placement:
            return
        try:
            resp = self.reportclient.get(
                '/resource_providers?in_tree=%s&required=%s' % (
                    root_uuid, os_traits.COMPUTE_MANAGED_PCI_DEVICE),
                version='1.18', global_request_id=context.global_id)
            found = resp.json()['resource_providers'] if resp else []
        except Exception as e:  # noqa
            LOG.warning('Cannot read the provider tree of %s: %s', root_uuid, e)
            return
        if found:
            raise exception.PlacementPciException(
                error='The [pci]report_in_placement is False but it was enabled before on '
                      'this compute. Nova does not support disabling it after it is enabled.')

    def _pci_placement(self, context: Any, nodename: str, migrations: Any,
                       check: bool = False) -> None:
        """Nova's PCI-in-Placement duties left to nova-compute (pci_placement): with
        ``check``, the device_spec refusals (PlacementPciException, which stops nova-compute
        at start as Nova's does); then the healing of instance allocations missing their
        PCI devices."""
        if not CONF.pci.report_in_placement:
            return
        cn = self.compute_nodes.get(nodename)
        if cn is None:
            return
        selected = self._spec_selected(nodename)
        if check:
            err = pci_placement.devname_refusal(
                e for e in rt_conf._json_entries(self.device_spec) if isinstance(e, dict))
            err = err or pci_placement.view_refusal(nodename, selected)
            if err is not None:
                raise err
        physnet = {d['address'] for d, tags in selected if tags.get('physical_network')}
        try:
            devices = self._client(nodename).pci_devices()
        except rt_client.RtrackError as e:
            LOG.warning('Cannot read rtrackd PCI devices: %s', e)
            return
        self._warn_held_unselected(cn, devices, selected)
        held: dict[str, collections.Counter] = {}
        for d in devices:
            uuid = d.get('instance_uuid')
            name = pci_placement.rp_name(nodename, d)
            if not uuid or name is None or d['address'] in physnet:
                continue
            held.setdefault(uuid, collections.Counter())[name] += 1
        if not held:
            return
        rc = self.reportclient
        try:
            resp = rc.get('/resource_providers?in_tree=%s' % cn.uuid, version='1.14',
                          global_request_id=context.global_id)
            rps = resp.json()['resource_providers'] if resp else []
        except Exception as e:  # noqa
            LOG.warning('Cannot read the provider tree of %s: %s', cn.uuid, e)
            return
        tree = {p['uuid'] for p in rps}
        wanted = {n for c in held.values() for n in c}
        providers: dict[str, tuple[str, Optional[str]]] = {}
        for p in rps:
            if p['name'] not in wanted:
                continue
            inv = rc._get_inventory(context, p['uuid']) or {}
            classes = sorted((inv.get('inventories') or {}).keys())
            providers[p['name']] = (p['uuid'], classes[0] if len(classes) == 1 else None)
        skip = {m.instance_uuid for m in migrations or []
                if m.source_compute == m.dest_compute and
                m.migration_type == fields.MigrationType.RESIZE}
        allocations = {}
        for consumer in held:
            try:
                allocations[consumer] = rc.get_allocs_for_consumer(context, consumer)
            except Exception as e:  # noqa
                LOG.warning('Cannot read the allocations of %s: %s', consumer, e)
        for consumer, current in pci_placement.heal(
                nodename, held, providers, tree, allocations, skip).items():
            payload = {
                'allocations': {rp: {'resources': a['resources']}
                                for rp, a in current['allocations'].items()
                                if a.get('resources')},
                'consumer_generation': current.get('consumer_generation'),
                'project_id': current.get('project_id'),
                'user_id': current.get('user_id'),
            }
            LOG.info('Healing the PCI allocations of %s in Placement: %s', consumer,
                     payload['allocations'])
            try:
                rc.put_allocations(context, consumer, payload)
            except Exception as e:  # noqa
                LOG.warning('Cannot heal the PCI allocations of %s: %s', consumer, e)

    def _warn_held_unselected(self, cn: Any, devices: list[dict[str, Any]],
                              selected: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
        """Nova's warnings for a device an instance holds that the hypervisor no longer
        reports or the ``[pci] device_spec`` no longer selects (rtrackd keeps it, and its
        Placement provider, until it is freed), with the words and logger names of the Nova
        components the drop-in replaces (PciDevTracker, the PCI Placement translator), which
        operators' log checks know."""
        chosen = {d['address'] for d, _tags in selected}
        reported = set()
        raw = (self.driver_resources.get(cn.hypervisor_hostname) or {}).get(
            'pci_passthrough_devices')
        if raw:
            reported = {d['address'] for d in jsonutils.loads(raw)}
        try:
            spec_filter = whitelist.Whitelist(self.device_spec)
        except exception.NovaException:
            spec_filter = None
        for d in devices:
            owner = d.get('instance_uuid')
            status = d.get('status')
            if not owner or status not in ('allocated', 'claimed') or d['address'] in chosen:
                continue
            invalid = exception.PciDeviceInvalidStatus(
                compute_node_id=cn.id, address=d['address'], status=status,
                hopestatus=['available', 'unavailable', 'unclaimable'])
            PCI_MANAGER_LOG.warning(
                "Unable to remove device with status '%(status)s' and ownership "
                "%(instance_uuid)s because of %(pci_exception)s. Check your [pci]device_spec "
                "configuration to make sure this allocated device is whitelisted. If you have "
                "removed the device from the whitelist intentionally or the device is no "
                "longer available on the host you will need to delete the server or migrate "
                "it to another host to silence this warning.",
                {'status': status, 'instance_uuid': owner,
                 'pci_exception': invalid.format_message()})
            in_spec = False
            if d['address'] not in reported and spec_filter is not None:
                try:
                    in_spec = spec_filter.device_assignable(
                        {k: d.get(k) for k in ('address', 'vendor_id', 'product_id',
                                               'dev_type', 'parent_addr')}) is not None
                except exception.NovaException:
                    in_spec = False
            if not in_spec:
                PCI_PLACEMENT_LOG.warning(
                    "Device spec is not found for device %s in [pci]device_spec. The device "
                    "is allocated by %s. We are keeping this device in the Placement view. You "
                    "should not remove an allocated device from the configuration. Please "
                    "restore the configuration. If you cannot restore the configuration as the "
                    "device is dead then delete or cold migrate the instance and then restart "
                    "the nova-compute service to resolve the inconsistency.",
                    d['address'], owner)

    @staticmethod
    def _has_remote_managed(cn: Any) -> bool:
        pools = cn.pci_device_pools.objects if cn.pci_device_pools else []
        return any(p.tags.get('remote_managed') == 'true' for p in pools)

    def _remove_deleted_instances_allocations(self, context: Any, cn: Any, migrations: Any,
                                              instance_by_uuid: dict[str, Any]) -> None:
        """Nova's clean-up of allocations of instances deleted behind its back (as in
        nova.compute.resource_tracker; allocations are the scheduler's and Nova's)."""
        migration_uuids = [m.uuid for m in migrations if 'uuid' in m]
        try:
            pai = self.reportclient.get_allocations_for_resource_provider(context, cn.uuid)
        except Exception as e:  # noqa
            LOG.error('Skipping removal of allocations for deleted instances: %s', e)
            return
        allocations = pai.allocations
        if not allocations:
            return
        read_deleted = context.elevated(read_deleted='yes')
        for consumer_uuid, alloc in allocations.items():
            if consumer_uuid in self.tracked_instances or consumer_uuid in migration_uuids:
                continue
            instance = instance_by_uuid.get(consumer_uuid)
            if not instance:
                try:
                    instance = objects.Instance.get_by_uuid(read_deleted, consumer_uuid,
                                                            expected_attrs=[])
                except exception.InstanceNotFound:
                    continue
            if instance.deleted and not instance.hidden:
                LOG.debug('Instance %s has been deleted (perhaps locally). Deleting '
                          'allocations that remained for this instance against this '
                          'compute host: %s.', consumer_uuid, alloc)
                self.reportclient.delete_allocation_for_instance(context, consumer_uuid,
                                                                 force=False)
                continue
            if not instance.host:
                continue
            if instance.host == cn.host and instance.node == cn.hypervisor_hostname:
                if not instance.task_state:
                    LOG.warning('Instance %s is not being actively managed by this compute '
                                'host but has allocations referencing this compute host: '
                                '%s. Skipping heal of allocation because we do not know '
                                'what to do.', consumer_uuid, alloc)
                continue
            if instance.host != cn.host:
                LOG.warning('Instance %s has been moved to another host %s(%s). There are '
                            'allocations remaining against the source host that might '
                            'need to be removed: %s.', consumer_uuid, instance.host,
                            instance.node, alloc)

    def delete_allocation_for_evacuated_instance(self, context: Any, instance: Any,
                                                 node: str, node_type: str = 'source') -> None:
        cn_uuid = self.compute_nodes[node].uuid
        if not self.reportclient.remove_provider_tree_from_instance_allocation(
                context, instance.uuid, cn_uuid):
            LOG.error('Failed to clean allocation of evacuated instance on the %s node %s',
                      node_type, cn_uuid, instance=instance)

    def delete_allocation_for_shelve_offloaded_instance(self, context: Any,
                                                        instance: Any) -> None:
        self.reportclient.delete_allocation_for_instance(context, instance.uuid, force=True)
