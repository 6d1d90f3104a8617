"""The periodic: ``update_available_resource`` (the driver's resources, rtrackd's refresh, the
audit under the lock), the instances rtrackd must learn about, and the ComputeNode record
(the driver's facts plus rtrackd's accounting).

``AuditMixin`` of ``RtrackResourceTracker``.
"""

from __future__ import annotations

import copy
from typing import Any, Optional

from nova.compute import stats as compute_stats
from nova.compute import vm_states
from nova import exception
from nova import objects
from nova import utils
from nova.virt import node as virt_node

from nova_rtrack import client as rt_client
from nova_rtrack.tracker.bodies import _placed_devices
from nova_rtrack.tracker.common import COMPUTE_RESOURCE_SEMAPHORE
from nova_rtrack.tracker.common import CONF
from nova_rtrack.tracker.common import LOG
from nova_rtrack.tracker.common import PCI_PLACEMENT_LOG
from nova_rtrack.tracker.common import RTRACK_NODE_FIELDS
from nova_rtrack.tracker.common import _in_resize_state
from nova_rtrack.tracker.common import _is_live_migrating
from nova_rtrack.tracker.common import _state


class AuditMixin:
    """``RtrackResourceTracker``'s periodic (see the tracker's __init__ for its state)."""

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
