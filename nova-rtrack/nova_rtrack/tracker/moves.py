"""Moves: resize, cold and live migration, evacuation (rebuild) claims at the destination,
their confirm and revert at either end, and the moves Nova does not tell the tracker about
(settled or registered from the Migration records).

``MovesMixin`` of ``RtrackResourceTracker``.
"""

from __future__ import annotations

import copy
from typing import Any, Optional

from oslo_serialization import jsonutils
from oslo_utils import excutils

from nova.compute import task_states
from nova import exception
from nova import objects
from nova.objects import fields
from nova.objects import migration as migration_obj
from nova.pci import request as pci_request
from nova import utils

from nova_rtrack import claims as rt_claims
from nova_rtrack import client as rt_client
from nova_rtrack.tracker.common import COMPUTE_RESOURCE_SEMAPHORE
from nova_rtrack.tracker.common import LOG
from nova_rtrack.tracker.common import OPEN_RTRACK_MIGRATION
from nova_rtrack.tracker.common import _refusal_reason
from nova_rtrack.tracker.common import _unavailable


class MovesMixin:
    """``RtrackResourceTracker``'s moves (see the tracker's __init__ for its state)."""

    # -- moves ------------------------------------------------------------------------------

    @utils.synchronized(COMPUTE_RESOURCE_SEMAPHORE, fair=True)
    def rebuild_claim(self, context: Any, instance: Any, nodename: str, allocations: Any,
                      limits: Any = None, image_meta: Any = None,
                      migration: Any = None) -> rt_claims.RtrackMoveClaim:
        return self._move_claim(
            context, instance, instance.flavor, nodename, migration, allocations,
            move_type=fields.MigrationType.EVACUATION, image_meta=image_meta,
            limits=limits)

    @utils.synchronized(COMPUTE_RESOURCE_SEMAPHORE, fair=True)
    def resize_claim(self, context: Any, instance: Any, flavor: Any, nodename: str,
                     migration: Any, allocations: Any, image_meta: Any = None,
                     limits: Any = None) -> rt_claims.RtrackMoveClaim:
        return self._move_claim(context, instance, flavor, nodename, migration,
                                allocations, image_meta=image_meta, limits=limits)

    @utils.synchronized(COMPUTE_RESOURCE_SEMAPHORE, fair=True)
    def live_migration_claim(self, context: Any, instance: Any, nodename: str,
                             migration: Any, limits: Any,
                             allocs: Any) -> rt_claims.RtrackMoveClaim:
        return self._move_claim(
            context, instance, instance.flavor, nodename, migration, allocs,
            move_type=fields.MigrationType.LIVE_MIGRATION,
            image_meta=instance.image_meta, limits=limits)

    def _move_claim(self, context: Any, instance: Any, new_flavor: Any, nodename: str,
                    migration: Any, allocations: Any, move_type: Optional[str] = None,
                    image_meta: Any = None, limits: Any = None) -> rt_claims.RtrackMoveClaim:
        image_meta = image_meta or {}
        if self.disabled(nodename):
            raise exception.ComputeResourcesUnavailable(
                ('Attempt to claim move resources for instance %(inst)s on '
                 'unknown node %(node)s failed') % {
                     'inst': instance.uuid, 'node': 'nodename'})
        cn = self.compute_nodes[nodename]
        if migration:
            self._claim_existing_migration(migration, cn)
        else:
            migration = self._create_migration(context, instance, new_flavor, cn, move_type)

        if migration.is_live_migration and instance.pci_requests:
            # Same flavor: the instance's own requests, whose ids the destination's later
            # claim_pci_devices (Nova's _flavor_based_pci_claim) asks for.
            new_pci_requests = objects.InstancePCIRequests(
                requests=list(instance.pci_requests.requests), instance_uuid=instance.uuid)
        else:
            new_pci_requests = pci_request.get_pci_requests_from_flavor(new_flavor)
            new_pci_requests.instance_uuid = instance.uuid
            if instance.pci_requests:
                for request in instance.pci_requests.requests:
                    if request.source == objects.InstancePCIRequest.NEUTRON_PORT:
                        new_pci_requests.requests.append(request)

        client = self._client(nodename)
        self._settle_migrations(context, client, nodename, instance.uuid)
        is_live = migration.is_live_migration
        # The devices the instance holds before the claim: rtrackd's claim makes the new ones
        # allocated to the instance at once (Nova's are only claimed), so a lazy load after it
        # would list both hosts' devices and a revert would map the ports back to the new ones.
        old_pci_devices = copy.deepcopy(instance.pci_devices)
        body: dict[str, Any] = {
            'instance': self._instance_ref(instance, with_numa=True),
            'request_spec': self._request_spec(context, instance, new_flavor, image_meta,
                                               new_pci_requests, limits),
            'current': {'request_spec': self._request_spec(
                context, instance, instance.flavor, instance.image_meta,
                instance.pci_requests)},
            'move_type': migration.migration_type,
            'migration_id': migration.id,
            'dest_compute': self.host,
            'dest_node': nodename,
        }
        if 'uuid' in migration and migration.uuid:
            body['migration_uuid'] = migration.uuid
        if migration.source_compute:
            body['source_compute'] = migration.source_compute
        if migration.source_node:
            body['source_node'] = migration.source_node
        allocs = self._allocations(self._own_allocations(cn, allocations))
        if allocs:
            body['allocations'] = allocs
        try:
            _status, answer = client.migrate(body, request_id=self._rid(context))
        except (rt_client.Refused, rt_client.Conflict) as e:
            # A live migration's page-size check is a 409 conflict in rtrackd.
            reason = _refusal_reason(e, bool(new_pci_requests.requests), is_live)
            LOG.info('Failed to claim: %s (rtrackd: %s; %s)', reason, e.message,
                     jsonutils.dumps(e.details)[:2000], instance=instance)
            raise _unavailable(reason)
        except rt_client.RtrackError as e:
            LOG.warning('Failed to claim a move on node %s: %s', nodename, e,
                        instance=instance)
            raise _unavailable(str(e))
        LOG.info('Claim successful on node %s', nodename, instance=instance)

        claim_answer = answer.get('claim', {})
        claim = rt_claims.RtrackMoveClaim(context, instance, nodename, new_flavor,
                                          image_meta, self, claim_answer, migration)
        try:
            claimed_pci = objects.PciDeviceList(objects=[])
            if not is_live:
                claimed_pci = objects.PciDeviceList(objects=self._pci_objects_for(
                    context, nodename, claim_answer.get('pci_devices') or []))
            mig_context = objects.MigrationContext(
                context=context, instance_uuid=instance.uuid,
                migration_id=migration.id,
                old_numa_topology=instance.numa_topology,
                new_numa_topology=claim.claimed_numa_topology,
                old_pci_devices=old_pci_devices,
                new_pci_devices=claimed_pci,
                old_pci_requests=instance.pci_requests,
                new_pci_requests=new_pci_requests,
                old_resources=instance.resources,
                new_resources=self._resources_from_answer(cn, claim_answer))
            instance.migration_context = mig_context
            instance.save()
            self._remember_mdevs(instance.uuid, claim_answer)
            self.tracked_migrations[instance.uuid] = migration
            self._sync_pci_rows(context, nodename)
            self._sync_node(context.elevated(), nodename)
        except Exception:
            with excutils.save_and_reraise_exception():
                try:
                    client.revert(migration.id)
                except rt_client.RtrackError as e:
                    LOG.error('Could not revert the move in rtrackd: %s', e,
                              instance=instance)
        try:
            self._pci_placement(context.elevated(), nodename, [migration])
        except Exception as e:  # noqa (healing is best effort here, as the periodic retries)
            LOG.warning('PCI allocation healing failed: %s', e, instance=instance)
        return claim

    def _own_allocations(self, cn: Any, allocations: Any) -> Any:
        """The part of an allocation on this host's tree (an evacuation holds both hosts)."""
        if not allocations:
            return allocations
        mine = {}
        tree = self._tree_uuids(cn)
        for rp, alloc in allocations.items():
            if tree is None or rp in tree:
                mine[rp] = alloc
        return mine

    def _tree_uuids(self, cn: Any) -> Optional[set]:
        try:
            pt = self.reportclient._provider_tree
            if pt.exists(cn.uuid):
                return set(pt.get_provider_uuids_in_tree(cn.uuid))
        except Exception:  # noqa
            pass
        return None

    def _claim_existing_migration(self, migration: Any, node: Any) -> None:
        migration.dest_compute = self.host
        migration.dest_node = node.hypervisor_hostname
        migration.dest_compute_id = node.id
        migration.dest_host = self.driver.get_host_ip_addr()
        if not migration.is_live_migration:
            migration.status = 'pre-migrating'
        migration.save()

    def _create_migration(self, context: Any, instance: Any, new_flavor: Any, node: Any,
                          move_type: Optional[str] = None) -> Any:
        migration = objects.Migration(context=context.elevated())
        migration.dest_compute = self.host
        migration.dest_node = node.hypervisor_hostname
        migration.dest_compute_id = node.id
        migration.dest_host = self.driver.get_host_ip_addr()
        migration.old_instance_type_id = instance.flavor.id
        migration.new_instance_type_id = new_flavor.id
        migration.status = 'pre-migrating'
        migration.instance_uuid = instance.uuid
        migration.source_compute = instance.host
        migration.source_node = instance.node
        if move_type:
            migration.migration_type = move_type
        else:
            migration.migration_type = migration_obj.determine_migration_type(migration)
        migration.create()
        return migration

    def _settle_migrations(self, context: Any, client: rt_client.RtrackClient,
                           nodename: str, instance_uuid: Optional[str] = None) -> None:
        """Confirms or reverts in rtrackd the moves Nova has finished meanwhile.

        Nova does not tell a destination's tracker that its incoming resize was confirmed,
        nor a source's that its outgoing one was reverted: rtrackd learns it here, from the
        Migration records, before the next operation on the instance and at every audit.
        """
        try:
            rmigs = client.migrations()
        except rt_client.RtrackError as e:
            LOG.warning('Cannot list rtrackd migrations: %s', e)
            return
        for rm in rmigs:
            if instance_uuid and rm.get('instance_uuid') != instance_uuid:
                continue
            if rm.get('status') not in OPEN_RTRACK_MIGRATION:
                continue
            try:
                mig = objects.Migration.get_by_id(context.elevated(), rm['id'])
            except exception.MigrationNotFound:
                mig = None
            status = mig.status if mig else 'error'
            try:
                if status in ('confirmed', 'done', 'completed'):
                    client.confirm(rm['id'])
                elif status in ('reverted', 'error', 'failed', 'cancelled'):
                    client.revert(rm['id'])
            except rt_client.RtrackError as e:
                LOG.warning('Cannot settle migration %s in rtrackd: %s', rm['id'], e)

    def _ensure_outgoing(self, context: Any, client: rt_client.RtrackClient, instance: Any,
                         migration: Any, nodename: str) -> bool:
        """Makes sure rtrackd knows a move leaving this node (Nova never says so)."""
        if client.get_migration(migration.id) is not None:
            return True
        old_flavor = instance.old_flavor or instance.flavor
        new_flavor = instance.new_flavor or instance.flavor
        body: dict[str, Any] = {
            'instance': self._instance_ref(instance, with_numa=False, host=self.host,
                                           node=nodename),
            'request_spec': self._request_spec(context, instance, new_flavor,
                                               instance.image_meta, None),
            'current': {'request_spec': self._request_spec(
                context, instance, old_flavor, instance.image_meta, None)},
            'move_type': migration.migration_type,
            'migration_id': migration.id,
            'source_compute': self.host,
            'source_node': nodename,
            'dest_compute': migration.dest_compute,
            'dest_node': migration.dest_node,
        }
        if 'uuid' in migration and migration.uuid:
            body['migration_uuid'] = migration.uuid
        try:
            client.migrate(body, request_id=self._rid(context))
            return True
        except rt_client.RtrackError as e:
            LOG.warning('rtrackd did not record the outgoing move %s: %s', migration.id, e,
                        instance=instance)
            return False

    def _register_outgoing(self, context: Any, client: rt_client.RtrackClient, nodename: str,
                           migrations: Any) -> None:
        """Tells rtrackd of the resizes and cold migrations leaving this node.

        Nova's own tracker counts them from the Migration records at every audit; rtrackd
        needs them so that the source side is held under the migration's uuid, as Placement
        holds it (a VCPU -> PCPU reshape moves that consumer too). A new one is reported at once.
        """
        registered = False
        for mig in migrations:
            outgoing = (mig.source_compute == self.host and mig.source_node == nodename and
                        (mig.dest_compute, mig.dest_node) != (self.host, nodename))
            if (not outgoing or mig.status == 'error' or
                    mig.migration_type not in ('resize', 'migration')):
                continue
            try:
                if client.get_migration(mig.id) is not None:
                    continue
            except rt_client.RtrackError as e:
                LOG.warning('Cannot read migration %s from rtrackd: %s', mig.id, e)
                return
            try:
                instance = objects.Instance.get_by_uuid(
                    context, mig.instance_uuid,
                    expected_attrs=['system_metadata', 'numa_topology', 'flavor',
                                    'migration_context', 'resources'])
            except exception.InstanceNotFound:
                continue
            registered |= self._ensure_outgoing(context, client, instance, mig, nodename)
        if registered:
            try:
                client.refresh()
            except rt_client.RtrackError as e:
                LOG.warning('rtrackd refresh after recording outgoing moves failed: %s', e)

    @utils.synchronized(COMPUTE_RESOURCE_SEMAPHORE, fair=True)
    def drop_move_claim_at_source(self, context: Any, instance: Any, migration: Any) -> None:
        self.claimed_mdevs.pop(instance.uuid, None)
        migration.status = 'confirmed'
        migration.save()
        nodename = migration.source_node
        if nodename in self.compute_nodes:
            client = self._client(nodename)
            same_node = (migration.dest_compute == self.host and
                         migration.dest_node == nodename)
            if same_node or self._ensure_outgoing(context, client, instance, migration,
                                                   nodename):
                try:
                    client.confirm(migration.id, request_id=self._rid(context))
                except rt_client.NotFound:
                    pass
                except rt_client.RtrackError as e:
                    LOG.error('rtrackd did not confirm migration %s: %s', migration.id, e,
                              instance=instance)
            if not same_node:
                self._forget_instance(nodename, instance)
            self.tracked_migrations.pop(instance.uuid, None)
            self._sync_pci_rows(context, nodename)
            self._sync_node(context.elevated(), nodename)
        instance.drop_migration_context()

    @utils.synchronized(COMPUTE_RESOURCE_SEMAPHORE, fair=True)
    def drop_move_claim_at_dest(self, context: Any, instance: Any, migration: Any) -> None:
        self.claimed_mdevs.pop(instance.uuid, None)
        migration.status = 'reverted'
        migration.save()
        nodename = migration.dest_node
        if nodename in self.compute_nodes:
            client = self._client(nodename)
            try:
                client.revert(migration.id, request_id=self._rid(context))
            except rt_client.NotFound:
                pass
            except rt_client.RtrackError as e:
                LOG.error('rtrackd did not revert migration %s: %s', migration.id, e,
                          instance=instance)
            self.tracked_migrations.pop(instance.uuid, None)
            if migration.source_compute != self.host or migration.source_node != nodename:
                self._forget_instance(nodename, instance)
        instance.revert_migration_context()
        instance.save(expected_task_state=[task_states.RESIZE_REVERTING])
        if nodename in self.compute_nodes:
            self._apply_pci(context, nodename, instance, None)
            self._sync_node(context.elevated(), nodename)

    @utils.synchronized(COMPUTE_RESOURCE_SEMAPHORE, fair=True)
    def drop_move_claim(self, context: Any, instance: Any, nodename: str,
                        flavor: Any = None, prefix: str = 'new_') -> None:
        """Drops the incoming move claim at this node (abort, live-migration rollback)."""
        self.claimed_mdevs.pop(instance.uuid, None)
        if nodename in self.compute_nodes:
            client = self._client(nodename)
            mig_id = None
            mc = instance.migration_context if 'migration_context' in instance else None
            if mc is not None:
                mig_id = mc.migration_id
            elif instance.uuid in self.tracked_migrations:
                mig_id = self.tracked_migrations[instance.uuid].id
            if mig_id is None:
                mig_id = self._incoming_migration_id(client, instance.uuid, nodename)
            if mig_id is not None:
                try:
                    client.revert(mig_id, request_id=self._rid(context))
                except rt_client.NotFound:
                    pass
                except rt_client.RtrackError as e:
                    LOG.error('rtrackd did not drop move %s: %s', mig_id, e,
                              instance=instance)
            self._sync_pci_rows(context, nodename)
            self._sync_node(context.elevated(), nodename)
        self.tracked_migrations.pop(instance.uuid, None)
        if instance.uuid in self.tracked_instances and instance.host != self.host:
            self._forget_instance(nodename, instance)

    def _incoming_migration_id(self, client: rt_client.RtrackClient, instance_uuid: str,
                               nodename: str) -> Optional[int]:
        try:
            for rm in client.migrations():
                if (rm.get('instance_uuid') == instance_uuid and
                        rm.get('dest_node') == nodename and
                        rm.get('status') in OPEN_RTRACK_MIGRATION):
                    return rm['id']
        except rt_client.RtrackError:
            pass
        return None

    @utils.synchronized(COMPUTE_RESOURCE_SEMAPHORE, fair=True)
    def finish_evacuation(self, instance: Any, node: Optional[str], migration: Any) -> None:
        instance.apply_migration_context()
        instance.host = self.host
        instance.node = node
        instance.compute_id = node and self.compute_nodes[node].id or None
        instance.save()
        instance.drop_migration_context()
        if migration:
            migration.status = 'done'
            migration.save()
            if node in self.compute_nodes:
                try:
                    self._client(node).confirm(migration.id)
                except rt_client.RtrackError as e:
                    LOG.warning('rtrackd did not confirm evacuation %s: %s', migration.id, e)
                self.tracked_migrations.pop(instance.uuid, None)
                self.tracked_instances.add(instance.uuid)
                self.stats[node].update_stats_for_instance(instance, False)
                self._sync_node(instance._context, node)
