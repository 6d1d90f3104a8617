"""A drop-in for Nova 34's ``nova.compute.resource_tracker.ResourceTracker`` backed by rtrackd.

Every decision (does it fit, which host CPUs, which page size, which PCI devices, which vGPU)
is rtrackd's, asked over its socket with Nova's own objects as the bodies. This class only:

- builds the bodies (``RequestSpec.from_components(...)`` primitives, the instance's state,
  Placement's allocations) and applies rtrackd's answers to Nova's objects (the instance's
  ``numa_topology``, host/node, ``pci_devices``, the ``MigrationContext``);
- keeps Nova's DB records in step: the ComputeNode (loaded from rtrackd's ComputeNode primitive
  and saved through Nova's objects after every change, so the scheduler's filters read what
  rtrackd computed) and the PciDevice rows;
- keeps what is Nova's: the per-node ``Stats`` (derived counts), the driver's own traits on the
  compute node provider (rtrackd reports the inventory), Placement allocation clean-ups, the
  Migration records.

rtrackd refusing, timing out or being down makes the claim fail with
``ComputeResourcesUnavailable`` so that Nova reschedules: never a guest on an unclaimed host.
"""

from __future__ import annotations

import collections
import copy
from typing import Any, Callable, Optional

import os_traits
from oslo_log import log as logging
from oslo_serialization import jsonutils
from oslo_utils import excutils

from nova.compute import monitors
from nova.compute import stats as compute_stats
from nova.compute import task_states
from nova.compute import utils as compute_utils
from nova.compute import vm_states
import nova.conf
from nova import exception
from nova import objects
from nova.objects import fields
from nova.objects import migration as migration_obj
from nova.pci import request as pci_request
from nova.pci import whitelist
from nova.scheduler.client import report
from nova import utils
from nova.virt import node as virt_node

from nova_rtrack import claims as rt_claims
from nova_rtrack import client as rt_client
from nova_rtrack import conf as rt_conf
from nova_rtrack import driver_patches
from nova_rtrack import pci_placement

CONF = nova.conf.CONF
# The Nova components whose warnings the drop-in gives in their place (see
# _warn_held_unselected).
PCI_MANAGER_LOG = logging.getLogger('nova.pci.manager')
PCI_PLACEMENT_LOG = logging.getLogger('nova.compute.pci_placement_translator')
rt_conf.register_opts(CONF)
LOG = logging.getLogger(__name__)

COMPUTE_RESOURCE_SEMAPHORE = 'compute_resources'

# ComputeNode fields rtrackd decides. The rest (hypervisor facts, cpu_info, host_ip,
# disk_available_least, supported_hv_specs) comes from the virt driver, and stats from Nova's
# Stats.
RTRACK_NODE_FIELDS = (
    'vcpus', 'memory_mb', 'local_gb', 'vcpus_used', 'memory_mb_used', 'local_gb_used',
    'free_ram_mb', 'free_disk_gb', 'running_vms', 'numa_topology', 'pci_device_pools',
    'cpu_allocation_ratio', 'ram_allocation_ratio', 'disk_allocation_ratio',
)

NUMA_REFUSED = 'Requested instance NUMA topology cannot fit the given host NUMA topology'
NUMA_PCI_REFUSED = ('Requested instance NUMA topology together with requested PCI devices '
                    'cannot fit the given host NUMA topology')
PAGE_SIZE_REFUSED = 'Requested page size is different from current page size.'
PCI_REFUSED = 'Claim pci failed'

OPEN_RTRACK_MIGRATION = ('pre-migrating', 'accepted', 'migrating', 'post-migrating',
                         'finished', 'running', 'preparing', 'queued')


# -- how the tracker reaches its rtrackd ---------------------------------------------------

class DaemonBinding:
    """Where the tracker's rtrackd is, and what to do before each audit.

    Production: the socket of nova.conf's ``[rtrack] socket``. The test harness installs its
    own (one rtrackd per fake host, its tree generated from the driver's view).
    """

    def __init__(self, tracker: 'RtrackResourceTracker') -> None:
        self.tracker = tracker
        self._checked = False
        self._refresh_missing_logged = False

    def client(self, nodename: str) -> rt_client.RtrackClient:
        return rt_client.RtrackClient(CONF.rtrack.socket, timeout=CONF.rtrack.timeout)

    def startup_check(self) -> None:
        """At construction (service start): nova.conf and rtrack.toml must agree."""
        if not self._checked:
            self.check_config()
            self._checked = True

    def prepare(self, context: Any, nodename: str, resources: dict[str, Any],
                startup: bool) -> None:
        """Called at every update_available_resource before the ComputeNode is read."""
        if CONF.rtrack.refresh_on_periodic or startup:
            self.refresh(nodename)

    def check_config(self) -> None:
        if not CONF.rtrack.check_config:
            return
        try:
            problems = rt_conf.check_file(CONF, CONF.rtrack.config_file)
        except FileNotFoundError:
            problems = rt_conf.unsupported(CONF)
        if problems:
            raise exception.InvalidConfiguration(
                'nova.conf and %s disagree: %s' % (CONF.rtrack.config_file,
                                                   '; '.join(problems)))

    def refresh(self, nodename: str) -> None:
        disk = None
        if CONF.rtrack.disk_from_driver:
            disk = rt_conf.disk_totals(self.tracker.driver_resources.get(nodename) or {})
        try:
            self.tracker.note_refresh(nodename, self.client(nodename).refresh(disk_gb=disk))
        except rt_client.NotFound:
            if not self._refresh_missing_logged:
                LOG.warning('rtrackd has no POST /v1/refresh; relying on its own audit and '
                            'report intervals')
                self._refresh_missing_logged = True
        except rt_client.RtrackError as e:
            LOG.warning('rtrackd refresh failed: %s', e)

    def stop(self) -> None:
        """The tracker is going away (service stop); nothing to do in production."""


_binding_factory: Callable[['RtrackResourceTracker'], DaemonBinding] = DaemonBinding


def set_binding_factory(factory: Callable[['RtrackResourceTracker'], DaemonBinding]) -> None:
    global _binding_factory
    _binding_factory = factory


# -- helpers -------------------------------------------------------------------------------

def _unavailable(reason: str) -> exception.ComputeResourcesUnavailable:
    return exception.ComputeResourcesUnavailable(reason=reason)


def _refusal_reason(err: rt_client.RtrackError, has_pci: bool,
                    live_migration: bool = False) -> str:
    """Nova's sentence for a refusal (tests and operators grep for these)."""
    d = err.details or {}
    msg = err.message or ''
    if live_migration and 'page size' in msg.lower():
        return PAGE_SIZE_REFUSED
    if d.get('numa'):
        reason = str(d['numa'].get('reason') or '')
        if live_migration and 'page size' in reason.lower():
            return PAGE_SIZE_REFUSED
        return NUMA_PCI_REFUSED if has_pci else NUMA_REFUSED
    if d.get('pci'):
        return PCI_REFUSED
    return msg or 'rtrackd refused the claim'


def _in_resize_state(instance: Any) -> bool:
    """Nova's rule (resource_tracker._instance_in_resize_state)."""
    vm, task = instance.vm_state, instance.task_state
    if vm == vm_states.RESIZED:
        return True
    return vm in (vm_states.ACTIVE, vm_states.STOPPED) and task in (
        task_states.resizing_states + task_states.rebuild_states)


def _is_live_migrating(instance: Any) -> bool:
    return (instance.task_state == task_states.MIGRATING and
            instance.vm_state in (vm_states.ACTIVE, vm_states.PAUSED))


def _state(v: Optional[str]) -> str:
    return '' if v is None else v


class RtrackResourceTracker(object):
    """Nova's ResourceTracker interface, every decision asked of rtrackd."""

    def __init__(self, host: str, driver: Any, reportclient: Any = None) -> None:
        self.service_ref = None
        self.host = host
        self.driver = driver
        self.pci_tracker = None
        self.compute_nodes: dict[str, Any] = {}
        self.stats: dict[str, compute_stats.Stats] = collections.defaultdict(
            compute_stats.Stats)
        self.tracked_instances: set[str] = set()
        self.tracked_migrations: dict[str, Any] = {}
        self.is_bfv: dict[str, bool] = {}
        monitor_handler = monitors.MonitorHandler(self)
        self.monitors = monitor_handler.monitors
        self.old_resources: dict[str, Any] = collections.defaultdict(objects.ComputeNode)
        self.reportclient = reportclient or report.report_client_singleton()
        self.ram_allocation_ratio = CONF.ram_allocation_ratio
        self.cpu_allocation_ratio = CONF.cpu_allocation_ratio
        self.disk_allocation_ratio = CONF.disk_allocation_ratio
        self.provider_tree = None
        self.assigned_resources: dict = collections.defaultdict(
            lambda: collections.defaultdict(set))
        self.absent_providers: set = set()
        self.provider_configs: dict = {}
        # Last driver resources per node (the harness and the ComputeNode sync read it).
        self.driver_resources: dict[str, dict[str, Any]] = {}
        # Per node: the PCI inventory changes Placement refused at the last refresh.
        self.pci_inventory_in_use: dict[str, list[dict[str, Any]]] = {}
        # rtrackd's vGPU choices per instance (mdevs of the last claim or move answer), for
        # the libvirt driver's _allocate_mdevs (driver_patches).
        self.claimed_mdevs: dict[str, list[dict[str, Any]]] = {}
        # instance uuid -> PCI addresses claimed but not yet allocated (see _claim_only)
        self.pci_claimed_only: dict[str, set[str]] = {}
        # Nova's PciDevTracker reads [pci] device_spec once, when the service starts.
        self.device_spec: list[str] = list(CONF.pci.device_spec or [])
        driver_patches.bind(driver, self)
        self.binding = _binding_factory(self)
        # A disagreement between nova.conf and rtrack.toml stops nova-compute here, naming
        # the option (the manager builds the tracker while the service is created).
        self.binding.startup_check()

    # -- service ----------------------------------------------------------------------------

    def set_service_ref(self, service_ref: Any) -> None:
        if self.service_ref and self.service_ref.id != service_ref.id:
            raise exception.ComputeServiceInUse(
                'Resource tracker re-initialized with a different service')
        elif service_ref.host != self.host:
            raise exception.ServiceNotUnique(
                'Resource tracker initialized with service that does '
                'not match host')
        self.service_ref = service_ref

    def disabled(self, nodename: str) -> bool:
        return (nodename not in self.compute_nodes or
                not self.driver.node_is_available(nodename))

    def _client(self, nodename: str) -> rt_client.RtrackClient:
        return self.binding.client(nodename)

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

    # -- the periodic -----------------------------------------------------------------------

    def update_available_resource(self, context: Any, nodename: str,
                                  startup: bool = False) -> None:
        LOG.debug('Auditing locally available compute resources for '
                  '%(host)s (node: %(node)s)', {'node': nodename, 'host': self.host})
        resources = self.driver.get_available_resource(nodename)
        resources['host_ip'] = CONF.my_ip
        if 'uuid' not in resources:
            resources['uuid'] = virt_node.get_local_node_uuid()
        if 'cpu_info' not in resources or resources['cpu_info'] is None:
            resources['cpu_info'] = ''
        self.driver_resources[nodename] = resources
        if startup:
            self._check_pci_reporting_kept(context, resources['uuid'])
        # Outside the lock: starting or refreshing rtrackd may wait on Placement.
        self.pci_inventory_in_use.pop(nodename, None)
        self.binding.prepare(context, nodename, resources, startup)
        self._update_available_resource(context, resources, startup=startup)
        self._raise_pci_inventory_in_use(nodename)

    def note_refresh(self, nodename: str, answer: Any) -> None:
        """What ``POST /v1/refresh`` answered: the PCI inventory changes Placement refused, and
        the PCI providers kept above what the device specs report (with Nova's warning, in the
        words and logger of its PCI Placement translator)."""
        pl = answer.get('placement') if isinstance(answer, dict) else None
        refused = pl.get('inventory_in_use') if isinstance(pl, dict) else None
        self.pci_inventory_in_use[nodename] = [
            e for e in refused or [] if isinstance(e, dict) and e.get('pci')]
        raised = pl.get('pci_raised') if isinstance(pl, dict) else None
        for r in raised or []:
            if not isinstance(r, dict):
                continue
            PCI_PLACEMENT_LOG.warning(
                "Needed to adjust inventories of %s on resource provider %s from %d to %d "
                "due to existing placement allocations. This should only happen while VMs "
                "using already removed devices.",
                r.get('class'), r.get('provider'), int(r.get('reported') or 0),
                int(r.get('total') or 0))

    def _raise_pci_inventory_in_use(self, nodename: str) -> None:
        """Nova's tracker raises PlacementPciException when Placement refuses a PCI inventory
        change (the classes it removes are in use: a device spec changed under an instance);
        the compute manager re-raises it at start, stopping nova-compute, and logs it later."""
        refused = self.pci_inventory_in_use.get(nodename)
        if refused:
            raise exception.PlacementPciException(
                error=refused[0].get('detail') or 'PCI inventory in use')

    @utils.synchronized(COMPUTE_RESOURCE_SEMAPHORE, fair=True)
    def _update_available_resource(self, context: Any, resources: dict[str, Any],
                                   startup: bool = False) -> None:
        nodename = resources['hypervisor_hostname']
        is_new = self._init_compute_node(context, resources)
        if self.disabled(nodename):
            return
        cn = self.compute_nodes[nodename]
        client = self._client(nodename)

        instances = objects.InstanceList.get_by_host_and_node(
            context, self.host, nodename,
            expected_attrs=['system_metadata', 'numa_topology', 'flavor',
                            'migration_context', 'resources'])
        migrations = objects.MigrationList.get_in_progress_and_error(
            context, self.host, nodename)
        self._settle_migrations(context, client, nodename)
        self._register_outgoing(context, client, nodename, migrations)
        instance_by_uuid = self._sync_instances(context, client, nodename, instances,
                                                migrations)
        self._ensure_compute_id_for_instances(context, instances, cn)
        if not is_new:
            self._remove_deleted_instances_allocations(context, cn, migrations,
                                                       instance_by_uuid)
        self._sync_pci_rows(context, nodename)
        self._sync_node(context, nodename, resources=resources, startup=startup)
        self._sync_traits(context, cn)
        self._pci_placement(context, nodename, migrations, check=True)

    def _sync_instances(self, context: Any, client: rt_client.RtrackClient, nodename: str,
                        instances: Any, migrations: Any) -> dict[str, Any]:
        """Stats from Nova's instances; rtrackd told of instances that left this node."""
        stats = self.stats[nodename]
        prev_failed = stats.get('failed_builds', 0)
        stats.clear()
        stats['failed_builds'] = prev_failed
        self.tracked_instances.clear()
        instance_by_uuid = {}
        for inst in instances:
            instance_by_uuid[inst.uuid] = inst
            if not vm_states.allow_resource_removal(vm_state=inst.vm_state,
                                                    task_state=inst.task_state):
                self.tracked_instances.add(inst.uuid)
                stats.update_stats_for_instance(inst, False)
        moving = {m.instance_uuid for m in migrations}
        self.tracked_migrations = {m.instance_uuid: m for m in migrations
                                   if m.dest_compute == self.host}
        try:
            rclaims = client.claims()
        except rt_client.RtrackError as e:
            LOG.warning('Cannot list rtrackd claims: %s', e)
            return instance_by_uuid
        held = {rc['instance_uuid'] for rc in rclaims}
        for uuid in sorted(self.tracked_instances - held - moving):
            # On this node for Nova, unknown to rtrackd: an instance that arrived without a
            # move claim (Nova claims a live migration only for NUMA guests). Claim it now so
            # that rtrackd counts it; a refusal is an overcommit to report, not to hide.
            self._claim_found_instance(context, client, nodename, instance_by_uuid[uuid])
        read_deleted = context.elevated(read_deleted='yes')
        for rc in rclaims:
            if rc.get('migration_id'):
                continue
            uuid = rc['instance_uuid']
            if uuid in self.tracked_instances:
                continue
            try:
                inst = objects.Instance.get_by_uuid(read_deleted, uuid, expected_attrs=[])
            except exception.InstanceNotFound:
                inst = None
            if (inst is not None and uuid in moving and
                    (_in_resize_state(inst) or _is_live_migrating(inst))):
                # The source side of a move still counts here (Nova's rule), until the
                # confirm (or, for a live migration, its end).
                continue
            if inst is None or inst.deleted:
                changes = {'vm_state': 'deleted', 'task_state': ''}
            elif inst.host == self.host and inst.node == nodename:
                if not vm_states.allow_resource_removal(vm_state=inst.vm_state,
                                                        task_state=inst.task_state):
                    continue
                changes = {'vm_state': inst.vm_state,
                           'task_state': _state(inst.task_state)}
            elif inst.host is None and inst.vm_state == vm_states.BUILDING:
                continue
            else:
                changes = {'host': inst.host, 'node': inst.node,
                           'vm_state': inst.vm_state,
                           'task_state': _state(inst.task_state)}
            LOG.info('Telling rtrackd that instance %s left node %s: %s', uuid, nodename,
                     changes)
            try:
                answer = client.update_state(uuid, changes)
            except rt_client.RtrackError as e:
                LOG.warning('rtrackd refused %s for %s: %s; aborting its claim', changes,
                            uuid, e)
                client.abort(uuid)
                continue
            left = inst is None or inst.deleted or (
                inst.host, inst.node) != (self.host, nodename)
            if left and (answer or {}).get('instance') is not None:
                # Gone from this node with no move in progress (an evacuated instance
                # found when the source comes back, ...): Nova frees everything it held here,
                # its PCI devices included (PciDevTracker.clean_usage). rtrackd still holds
                # the claim after the state update (gaps file): abort it.
                LOG.info('rtrackd still holds instance %s, which left node %s: aborting its '
                         'claim', uuid, nodename)
                try:
                    client.abort(uuid)
                except rt_client.RtrackError as e:
                    LOG.warning('rtrackd did not abort the claim of %s: %s', uuid, e)
        return instance_by_uuid

    def _claim_found_instance(self, context: Any, client: rt_client.RtrackClient,
                              nodename: str, inst: Any) -> None:
        # The guest already runs here (a host switched over from Nova's tracker, or an
        # instance that arrived unclaimed): rtrackd counts it where it is, with the pins, cells,
        # page size and PCI devices its domain has, not where a fresh fit would put it.
        body: dict[str, Any] = {
            'instance': self._instance_ref(inst, with_numa=True),
            'request_spec': self._request_spec(context, inst, inst.flavor, inst.image_meta,
                                               inst.pci_requests),
            'as_placed': {'devices': _placed_devices(inst)},
        }
        try:
            client.claim(body, request_id=self._rid(context))
            LOG.info('rtrackd did not hold instance %s found on node %s: claimed it', inst.uuid,
                     nodename)
        except rt_client.RtrackError as e:
            LOG.error('Instance %s is on node %s but rtrackd holds no claim for it and '
                      'refused one: %s', inst.uuid, nodename, e)

    def _ensure_compute_id_for_instances(self, context: Any, instances: Any,
                                         node: Any) -> None:
        for instance in instances:
            if 'compute_id' not in instance or instance.compute_id != node.id:
                instance.compute_id = node.id
                instance.save()

    def _init_compute_node(self, context: Any, resources: dict[str, Any]) -> bool:
        nodename = resources['hypervisor_hostname']
        node_uuid = resources['uuid']
        if nodename in self.compute_nodes:
            cn = self.compute_nodes[nodename]
            if 'service_id' not in cn or cn.service_id is None:
                cn.service_id = self.service_ref.id
            elif cn.service_id != self.service_ref.id:
                LOG.warning('Moving ComputeNode %s from service %i to %i',
                            cn.uuid, cn.service_id, self.service_ref.id)
                cn.service_id = self.service_ref.id
            return False
        with utils.temporary_mutation(context, read_deleted='yes'):
            try:
                cn = objects.ComputeNode.get_by_uuid(context, node_uuid)
            except exception.NotFound:
                cn = None
            if cn and cn.deleted:
                LOG.info('Undeleting compute node %s', cn.uuid)
                cn.deleted = False
                cn.deleted_at = None
                cn.save()
        if cn:
            if cn.host != self.host:
                LOG.info('ComputeNode %(name)s moving from %(old)s to %(new)s',
                         {'name': nodename, 'old': cn.host, 'new': self.host})
                cn.host = self.host
                cn.service_id = self.service_ref.id
                cn.save()
            self.compute_nodes[nodename] = cn
            return False
        cn = objects.ComputeNode(context)
        cn.host = self.host
        cn.service_id = self.service_ref.id
        self._fill_node(cn, resources, self._rtrack_node(nodename), initial=True)
        try:
            cn.create()
        except exception.DuplicateRecord:
            raise exception.InvalidConfiguration(
                'Duplicate compute node record found for host %s node %s' % (
                    cn.host, cn.hypervisor_hostname))
        self.compute_nodes[nodename] = cn
        self.old_resources[nodename] = copy.deepcopy(cn)
        LOG.info('Compute node record created for %(host)s:%(node)s with uuid: %(uuid)s',
                 {'host': self.host, 'node': nodename, 'uuid': cn.uuid})
        return True

    def _rtrack_node(self, nodename: str) -> Any:
        prim = self._client(nodename).compute_node()
        return objects.ComputeNode.obj_from_primitive(prim)

    def _fill_node(self, cn: Any, resources: Optional[dict[str, Any]], rcn: Any,
                   initial: bool = False) -> bool:
        """Copies the driver's facts and rtrackd's resources into ``cn``; True if changed."""
        changed = False

        def put(key: str, value: Any) -> None:
            nonlocal changed
            if key not in cn or getattr(cn, key) != value:
                setattr(cn, key, value)
                changed = True

        if resources is not None:
            for key in ('cpu_info', 'hypervisor_type', 'hypervisor_version',
                        'hypervisor_hostname', 'disk_available_least', 'host_ip'):
                if key in resources:
                    put(key, resources[key])
            if initial and 'uuid' in resources:
                cn.uuid = resources['uuid']
            if 'supported_instances' in resources:
                specs = [objects.HVSpec.from_list(s)
                         for s in resources['supported_instances']]
                if ('supported_hv_specs' not in cn or
                        [s.obj_to_primitive() for s in cn.supported_hv_specs] !=
                        [s.obj_to_primitive() for s in specs]):
                    cn.supported_hv_specs = specs
                    changed = True
        for key in RTRACK_NODE_FIELDS:
            if key not in rcn:
                continue
            value = getattr(rcn, key)
            if key == 'pci_device_pools':
                if ('pci_device_pools' not in cn or cn.pci_device_pools is None or
                        cn.pci_device_pools.obj_to_primitive() != value.obj_to_primitive()):
                    cn.pci_device_pools = value
                    changed = True
                continue
            put(key, value)
        nodename = cn.hypervisor_hostname if 'hypervisor_hostname' in cn else None
        stats = self.stats[nodename] if nodename else compute_stats.Stats()
        put('current_workload', stats.calculate_workload())
        if 'stats' not in cn or dict(cn.stats or {}) != dict(stats):
            cn.stats = copy.copy(stats)
            changed = True
        return changed

    def _sync_node(self, context: Any, nodename: str,
                   resources: Optional[dict[str, Any]] = None, startup: bool = False) -> None:
        """The ComputeNode in the DB = the driver's facts + rtrackd's accounting."""
        cn = self.compute_nodes.get(nodename)
        if cn is None:
            return
        try:
            rcn = self._rtrack_node(nodename)
        except rt_client.RtrackError as e:
            LOG.error('Cannot read the ComputeNode from rtrackd: %s', e)
            return
        if rcn.uuid != cn.uuid:
            LOG.error('rtrackd tracks compute node %s, Nova has %s for node %s', rcn.uuid,
                      cn.uuid, nodename)
        if self._fill_node(cn, resources, rcn):
            cn.save()

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

    # -- bookkeeping ------------------------------------------------------------------------

    def build_failed(self, nodename: str) -> None:
        self.stats[nodename].build_failed()

    def build_succeeded(self, nodename: str) -> None:
        self.stats[nodename].build_succeeded()

    def remove_node(self, nodename: str) -> None:
        self.stats.pop(nodename, None)
        self.compute_nodes.pop(nodename, None)
        self.old_resources.pop(nodename, None)

    @utils.synchronized(COMPUTE_RESOURCE_SEMAPHORE, fair=True)
    def clean_compute_node_cache(self, compute_nodes_in_db: Any) -> None:
        names = {cn.hypervisor_hostname for cn in compute_nodes_in_db}
        for stale in set(self.compute_nodes) - names:
            self.remove_node(stale)
            self.reportclient.invalidate_resource_provider(stale)

    def get_node_by_name(self, nodename: str) -> Any:
        try:
            return self.compute_nodes[nodename]
        except KeyError:
            raise exception.ComputeHostNotFound(host=nodename)


def _placed_devices(inst: Any) -> list[dict[str, str]]:
    """The PCI devices an instance has (its allocated PciDevice rows), with the request each
    serves, as rtrackd's ``as_placed.devices``."""
    try:
        devices = inst.pci_devices or []
    except Exception:  # noqa (an instance without the field loaded has none to carry)
        return []
    return [{'request_id': d.request_id, 'address': d.address}
            for d in devices if d.request_id and d.address]
