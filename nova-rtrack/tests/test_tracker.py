"""The drop-in tracker against a fake rtrackd: claims, aborts, moves, refusals, rtrackd down."""

from __future__ import annotations

from typing import Any
from unittest import mock

import fixtures

from nova.compute import vm_states
from nova import context as nova_context
from nova import exception
from nova import objects
from nova import test
from nova.tests.unit import fake_instance

from nova_rtrack import client as rt_client
from nova_rtrack import tracker as rt_tracker
from tests.fake_rtrackd import FakeRtrackd, compute_node_primitive

NODE_UUID = '9d3a1b2c-0000-4000-8000-000000000001'


class StaticBinding(rt_tracker.DaemonBinding):
    socket = ''

    def client(self, nodename: str) -> rt_client.RtrackClient:
        return rt_client.RtrackClient(self.socket, timeout=2)

    def prepare(self, context: Any, nodename: str, resources: dict, startup: bool) -> None:
        pass


class TrackerTestBase(test.NoDBTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.fake = FakeRtrackd().start()
        self.addCleanup(self.fake.stop)
        StaticBinding.socket = self.fake.socket
        self.useFixture(_BindingFixture())
        self.ctxt = nova_context.get_admin_context()
        self.driver = mock.Mock()
        self.driver.node_is_available.return_value = True
        self.driver.get_host_ip_addr.return_value = '192.0.2.1'
        self.rt = rt_tracker.RtrackResourceTracker('compute1', self.driver,
                                                   reportclient=mock.Mock())
        self.cn = objects.ComputeNode(
            context=self.ctxt, id=1, uuid=NODE_UUID, host='compute1',
            hypervisor_hostname='compute1', vcpus=8, memory_mb=16384, local_gb=128,
            vcpus_used=0, memory_mb_used=512, local_gb_used=0, free_ram_mb=15872,
            free_disk_gb=128, running_vms=0, current_workload=0, numa_topology=None,
            pci_device_pools=objects.PciDevicePoolList(objects=[]), stats={},
            cpu_allocation_ratio=4.0, ram_allocation_ratio=1.0, disk_allocation_ratio=1.0)
        self.rt.compute_nodes['compute1'] = self.cn
        self.cn_save = self.useFixture(_Patch(objects.ComputeNode, 'save')).mock
        self.inst_save = self.useFixture(_Patch(objects.Instance, 'save')).mock
        self.useFixture(_Patch(objects.Instance, 'drop_migration_context'))
        self.useFixture(_Patch(rt_tracker.compute_utils, 'is_volume_backed_instance',
                               return_value=False))

    def instance(self, extra_specs: dict | None = None, **kw: Any) -> Any:
        flavor = objects.Flavor(id=1, name='f1', memory_mb=512, vcpus=2, root_gb=1,
                                ephemeral_gb=0, flavorid='1', swap=0, rxtx_factor=1.0,
                                vcpu_weight=1, disabled=False, is_public=True,
                                extra_specs=extra_specs or {}, projects=[])
        kw.setdefault('host', None)
        kw.setdefault('node', None)
        kw.setdefault('vm_state', vm_states.BUILDING)
        kw.setdefault('task_state', None)
        inst = fake_instance.fake_instance_obj(self.ctxt, flavor=flavor, **kw)
        inst.numa_topology = None
        inst.pci_requests = objects.InstancePCIRequests(requests=[])
        inst.pci_devices = objects.PciDeviceList(objects=[])
        inst.migration_context = None
        inst.resources = None
        inst.system_metadata = {}
        return inst


class _BindingFixture(fixtures.Fixture):
    """Binds every tracker built meanwhile to the fake rtrackd."""

    def _setUp(self) -> None:
        old = rt_tracker._binding_factory
        rt_tracker.set_binding_factory(StaticBinding)
        self.addCleanup(rt_tracker.set_binding_factory, old)


def _Patch(obj: Any, attr: str, **kw: Any) -> fixtures.MockPatchObject:
    return fixtures.MockPatchObject(obj, attr, **kw)


class ClaimTest(TrackerTestBase):
    def test_claim_applies_rtrack_pinning_and_saves(self) -> None:
        inst = self.instance({'hw:cpu_policy': 'dedicated'})
        self.fake.node = compute_node_primitive(memory_mb_used=1024)
        with self.rt.instance_claim(self.ctxt, inst, 'compute1', {NODE_UUID: {
                'resources': {'PCPU': 2, 'MEMORY_MB': 512}, 'generation': 3}}) as claim:
            pass
        body = self.fake.calls('POST', '/v1/claims')[0]['body']
        spec = body['request_spec']
        self.assertEqual('RequestSpec', spec['nova_object.name'])
        self.assertEqual('dedicated', spec['nova_object.data']['flavor'][
            'nova_object.data']['extra_specs']['hw:cpu_policy'])
        self.assertEqual(inst.uuid, body['instance']['uuid'])
        self.assertEqual({'PCPU': 2, 'MEMORY_MB': 512},
                         body['allocations'][NODE_UUID]['resources'])
        # rtrackd's answer reached the instance
        self.assertEqual({0: 4, 1: 5}, inst.numa_topology.cells[0].cpu_pinning)
        self.assertEqual(1, inst.numa_topology.cells[0].id)
        self.assertEqual(claim.claimed_numa_topology.cells[0].cpu_pinning, {0: 4, 1: 5})
        self.assertEqual('compute1', inst.host)
        self.assertEqual('compute1', inst.node)
        self.assertEqual(1, inst.compute_id)
        self.assertTrue(self.inst_save.called)
        # the ComputeNode saved from rtrackd's primitive
        self.assertEqual(1024, self.cn.memory_mb_used)
        self.assertTrue(self.cn_save.called)
        self.assertIn(inst.uuid, self.rt.tracked_instances)
        self.assertEqual(1, self.rt.stats['compute1'].num_instances)

    def test_failed_build_aborts(self) -> None:
        inst = self.instance()
        with self.assertRaises(RuntimeError):
            with self.rt.instance_claim(self.ctxt, inst, 'compute1', None):
                raise RuntimeError('spawn failed')
        self.assertEqual(1, len(self.fake.calls('DELETE', '/v1/claims/%s' % inst.uuid)))
        self.assertIsNone(inst.host)
        self.assertIsNone(inst.node)
        self.assertNotIn(inst.uuid, self.rt.tracked_instances)
        self.assertEqual({}, self.fake.claims)

    def test_numa_refusal_uses_novas_sentence(self) -> None:
        self.fake.refuse('POST', '/v1/claims', {'numa': {'reason': 'no host cell fits'}})
        inst = self.instance({'hw:cpu_policy': 'dedicated'})
        with self.assertRaises(exception.ComputeResourcesUnavailable) as cm:
            self.rt.instance_claim(self.ctxt, inst, 'compute1', None)
        self.assertIn(rt_tracker.NUMA_REFUSED, str(cm.exception))
        self.assertIsNone(inst.host)
        self.assertFalse(self.inst_save.called)

    def test_pci_refusal(self) -> None:
        self.fake.refuse('POST', '/v1/claims', {'pci': {'requested': 1, 'usable': 0}})
        with self.assertRaises(exception.ComputeResourcesUnavailable) as cm:
            self.rt.instance_claim(self.ctxt, self.instance(), 'compute1', None)
        self.assertIn(rt_tracker.PCI_REFUSED, str(cm.exception))

    def test_rtrackd_down_fails_the_claim(self) -> None:
        self.fake.stop()
        inst = self.instance()
        with self.assertRaises(exception.ComputeResourcesUnavailable) as cm:
            self.rt.instance_claim(self.ctxt, inst, 'compute1', None)
        self.assertIn('rtrackd unavailable', str(cm.exception))
        self.assertIsNone(inst.host)

    def test_rtrackd_slow_fails_the_claim(self) -> None:
        self.fake.delay = 3
        with self.assertRaises(exception.ComputeResourcesUnavailable):
            self.rt.instance_claim(self.ctxt, self.instance(), 'compute1', None)

    def test_unknown_node(self) -> None:
        with self.assertRaises(exception.ComputeResourcesUnavailable):
            self.rt.instance_claim(self.ctxt, self.instance(), 'other', None)
        self.assertEqual([], self.fake.calls('POST', '/v1/claims'))

    def test_failure_to_record_undoes_the_claim(self) -> None:
        self.inst_save.side_effect = exception.InstanceNotFound(instance_id='x')
        inst = self.instance()
        with self.assertRaises(exception.InstanceNotFound):
            self.rt.instance_claim(self.ctxt, inst, 'compute1', None)
        self.assertEqual({}, self.fake.claims)

    def test_delete_frees_through_update_usage(self) -> None:
        inst = self.instance()
        self.rt.instance_claim(self.ctxt, inst, 'compute1', None)
        inst.vm_state = vm_states.DELETED
        self.rt.update_usage(self.ctxt, inst, 'compute1')
        body = self.fake.calls('POST', '/v1/instances/%s/state' % inst.uuid)[0]['body']
        self.assertEqual('deleted', body['vm_state'])
        self.assertEqual('', body['task_state'])
        self.assertNotIn(inst.uuid, self.rt.tracked_instances)
        self.assertEqual(0, self.rt.stats['compute1'].num_instances)

    def test_update_usage_of_untracked_instance_is_not_sent(self) -> None:
        self.rt.update_usage(self.ctxt, self.instance(), 'compute1')
        self.assertEqual([], self.fake.calls('POST', '/v1/instances/.*/state'))


class MoveTest(TrackerTestBase):
    def setUp(self) -> None:
        super().setUp()
        self.mig_save = self.useFixture(_Patch(objects.Migration, 'save')).mock
        self.useFixture(_Patch(objects.Instance, 'revert_migration_context'))

    def migration(self, inst: Any, **kw: Any) -> Any:
        values = dict(id=7, uuid='6c4ff9a8-0000-4000-8000-000000000007',
                      instance_uuid=inst.uuid, source_compute='compute0',
                      source_node='compute0', dest_compute='compute1',
                      dest_node='compute1', migration_type='resize', status='accepted',
                      old_instance_type_id=1, new_instance_type_id=2)
        values.update(kw)
        return objects.Migration(context=self.ctxt, **values)

    def test_resize_claim_builds_the_migration_context(self) -> None:
        inst = self.instance({'hw:cpu_policy': 'dedicated'}, host='compute0',
                             node='compute0', vm_state=vm_states.ACTIVE)
        new = objects.Flavor(id=2, name='f2', memory_mb=1024, vcpus=3, root_gb=1,
                             ephemeral_gb=0, flavorid='2', swap=0, rxtx_factor=1.0,
                             vcpu_weight=1, disabled=False, is_public=True,
                             extra_specs={'hw:cpu_policy': 'dedicated'}, projects=[])
        mig = self.migration(inst)
        with self.rt.resize_claim(self.ctxt, inst, new, 'compute1', mig, None) as claim:
            self.assertIs(mig, claim.migration)
        body = self.fake.calls('POST', '/v1/migrations')[0]['body']
        self.assertEqual('resize', body['move_type'])
        self.assertEqual(7, body['migration_id'])
        self.assertEqual('compute0', body['source_compute'])
        self.assertEqual(3, body['request_spec']['nova_object.data']['flavor'][
            'nova_object.data']['vcpus'])
        self.assertEqual(2, body['current']['request_spec']['nova_object.data']['flavor'][
            'nova_object.data']['vcpus'])
        self.assertEqual('pre-migrating', mig.status)
        self.assertEqual('compute1', mig.dest_compute)
        mc = inst.migration_context
        self.assertEqual(7, mc.migration_id)
        self.assertEqual({0: 4, 1: 5, 2: 6}, mc.new_numa_topology.cells[0].cpu_pinning)
        self.assertEqual({0: 4, 1: 5, 2: 6}, claim.claimed_numa_topology.cells[0].cpu_pinning)

    def test_the_migration_context_keeps_the_devices_held_before_the_claim(self) -> None:
        # rtrackd allocates the destination's devices to the instance with the claim, so the
        # instance's pci_devices read after it (a lazy load of the rows) lists both hosts'
        # devices; the old ones must be those held before, or a revert maps ports to the new.
        inst = self.instance(host='compute0', node='compute0', vm_state=vm_states.ACTIVE)
        inst.pci_devices = objects.PciDeviceList(objects=[
            objects.PciDevice(address='0000:81:00.1', compute_node_id=0, request_id='r1')])
        mig = self.migration(inst)
        orig = rt_client.RtrackClient.migrate

        def migrate_then_rows_change(self_: Any, *a: Any, **k: Any) -> Any:
            answer = orig(self_, *a, **k)
            inst.pci_devices.objects.append(
                objects.PciDevice(address='0000:81:00.2', compute_node_id=1, request_id='r1'))
            return answer
        with mock.patch.object(rt_client.RtrackClient, 'migrate', migrate_then_rows_change):
            self.rt.resize_claim(self.ctxt, inst, inst.flavor, 'compute1', mig, None)
        self.assertEqual(['0000:81:00.1'],
                         [d.address for d in inst.migration_context.old_pci_devices])

    def test_an_instance_rtrackd_does_not_hold_is_claimed_where_it_runs(self) -> None:
        # A host switched over from Nova's tracker: Nova has the instance on this node with its
        # pins and a VF; rtrackd holds nothing for it. The periodic claims it as placed.
        inst = self.instance({'hw:cpu_policy': 'dedicated'}, host='compute1', node='compute1',
                             vm_state=vm_states.ACTIVE)
        inst.numa_topology = objects.InstanceNUMATopology(cells=[
            objects.InstanceNUMACell(id=1, cpuset=set(), pcpuset={0, 1}, memory=512,
                                     cpu_policy='dedicated', cpu_pinning_raw={'0': 9, '1': 13})])
        inst.pci_devices = objects.PciDeviceList(objects=[
            objects.PciDevice(address='0000:3b:02.1', compute_node_id=1, request_id='r1')])
        client = self.rt._client('compute1')
        self.rt._sync_instances(self.ctxt, client, 'compute1', [inst], [])
        body = self.fake.calls('POST', '/v1/claims')[0]['body']
        self.assertEqual([{'request_id': 'r1', 'address': '0000:3b:02.1'}],
                         body['as_placed']['devices'])
        cell = body['instance']['numa_topology']['nova_object.data']['cells'][0]
        self.assertEqual(1, cell['nova_object.data']['id'])
        self.assertEqual({'0': 9, '1': 13}, cell['nova_object.data']['cpu_pinning_raw'])

    def test_failed_move_aborts_through_drop_move_claim(self) -> None:
        inst = self.instance(host='compute0', node='compute0', vm_state=vm_states.ACTIVE)
        mig = self.migration(inst)
        # As test_numa_live_migration does: patched on the class, the abort must go through it.
        calls = []
        orig = rt_tracker.RtrackResourceTracker.drop_move_claim

        def spy(self_: Any, *a: Any, **k: Any) -> None:
            calls.append(a)
            return orig(self_, *a, **k)
        with mock.patch.object(rt_tracker.RtrackResourceTracker, 'drop_move_claim', spy):
            with self.assertRaises(RuntimeError):
                with self.rt.resize_claim(self.ctxt, inst, inst.flavor, 'compute1', mig,
                                          None):
                    raise RuntimeError('migrate failed')
        self.assertEqual(1, len(calls))
        self.assertEqual(1, len(self.fake.calls('POST', '/v1/migrations/7/revert')))

    def test_confirm_at_source_registers_then_confirms(self) -> None:
        inst = self.instance(host='compute1', node='compute1', vm_state=vm_states.RESIZED)
        inst.old_flavor = inst.flavor
        inst.new_flavor = inst.flavor
        mig = self.migration(inst, source_compute='compute1', source_node='compute1',
                             dest_compute='compute2', dest_node='compute2',
                             status='finished')
        self.rt.drop_move_claim_at_source(self.ctxt, inst, mig)
        self.assertEqual('confirmed', mig.status)
        reg = self.fake.calls('POST', '/v1/migrations')[0]['body']
        self.assertEqual('compute1', reg['source_compute'])
        self.assertEqual('compute2', reg['dest_compute'])
        self.assertEqual(1, len(self.fake.calls('POST', '/v1/migrations/7/confirm')))

    def test_revert_at_dest(self) -> None:
        inst = self.instance(host='compute0', node='compute0', vm_state=vm_states.ACTIVE)
        mig = self.migration(inst)
        self.rt.resize_claim(self.ctxt, inst, inst.flavor, 'compute1', mig, None)
        inst.task_state = 'resize_reverting'
        self.rt.drop_move_claim_at_dest(self.ctxt, inst, mig)
        self.assertEqual('reverted', mig.status)
        self.assertEqual('reverted', self.fake.migrations[7]['status'])

    def test_a_pci_inventory_change_placement_refused_is_novas_pci_failure(self) -> None:
        detail = ("There was a conflict when trying to complete your request.\n\n update "
                  "conflict: Inventory for 'CUSTOM_PCI_8086_1528' on resource provider "
                  "'%s' in use.  " % NODE_UUID)
        refused = {'provider': NODE_UUID, 'pci': True, 'detail': detail}
        other = dict(refused, pci=False, detail='VGPU in use')
        self.fake.answer('POST', '/v1/refresh', 200, {
            'audited': True,
            'placement': {'changes': 0, 'requests': 2, 'conflicts': 0,
                          'inventory_in_use': [other, refused]}})
        StaticBinding(self.rt).refresh('compute1')
        ex = self.assertRaises(exception.PlacementPciException,
                               self.rt._raise_pci_inventory_in_use, 'compute1')
        self.assertIn("Failed to gather or report PCI resources to Placement: There was a "
                      "conflict", str(ex))
        self.assertIn("Inventory for 'CUSTOM_PCI_8086_1528'", str(ex))
        # Only PCI providers' refusals: another class in use is rtrackd's to retry.
        self.fake.answer('POST', '/v1/refresh', 200, {
            'audited': True,
            'placement': {'changes': 0, 'requests': 2, 'conflicts': 0,
                          'inventory_in_use': [other]}})
        StaticBinding(self.rt).refresh('compute1')
        self.rt._raise_pci_inventory_in_use('compute1')

    def test_a_pci_provider_kept_for_held_devices_is_warned_as_nova_warns(self) -> None:
        raised = {'provider': 'compute1_0000:81:00.0', 'class': 'CUSTOM_PCI_8086_1515',
                  'reported': 0, 'total': 1}
        self.fake.answer('POST', '/v1/refresh', 200, {
            'audited': True,
            'placement': {'changes': 1, 'requests': 2, 'conflicts': 0,
                          'pci_raised': [raised, 'not an object']}})
        with self.assertLogs('nova.compute.pci_placement_translator', 'WARNING') as logs:
            StaticBinding(self.rt).refresh('compute1')
        self.assertEqual(1, len(logs.output))
        self.assertIn(
            "Needed to adjust inventories of CUSTOM_PCI_8086_1515 on resource provider "
            "compute1_0000:81:00.0 from 0 to 1 due to existing placement allocations.",
            logs.output[0])

    def test_move_refused_when_rtrackd_down(self) -> None:
        inst = self.instance(host='compute0', node='compute0', vm_state=vm_states.ACTIVE)
        self.fake.stop()
        with self.assertRaises(exception.ComputeResourcesUnavailable):
            self.rt.resize_claim(self.ctxt, inst, inst.flavor, 'compute1',
                                 self.migration(inst), None)
        self.assertIsNone(inst.migration_context)

    def test_live_migration_page_size_refusal(self) -> None:
        self.fake.refuse('POST', '/v1/migrations',
                         {'numa': {'reason': 'the page size must stay 2048 KiB'}},
                         message='live migration: page size differs')
        inst = self.instance(host='compute0', node='compute0', vm_state=vm_states.ACTIVE)
        mig = self.migration(inst, migration_type='live-migration')
        with self.assertRaises(exception.ComputeResourcesUnavailable) as cm:
            self.rt.live_migration_claim(self.ctxt, inst, 'compute1', mig, None, None)
        self.assertIn(rt_tracker.PAGE_SIZE_REFUSED, str(cm.exception))


class StartupCheckTest(test.NoDBTestCase):
    """In production the tracker is built at service start: a mismatch stops it."""

    def test_mismatch_stops_the_service(self) -> None:
        import tempfile
        with tempfile.NamedTemporaryFile('w', suffix='.toml', delete=False) as f:
            f.write('[resources]\nreserved_host_memory_mb = 4096\n')
        self.addCleanup(__import__('os').unlink, f.name)
        self.flags(config_file=f.name, group='rtrack')
        self.flags(reserved_host_memory_mb=512)
        with self.assertRaises(exception.InvalidConfiguration) as cm:
            rt_tracker.RtrackResourceTracker('compute1', mock.Mock(), reportclient=mock.Mock())
        self.assertIn('[DEFAULT] reserved_host_memory_mb = 512 in nova.conf', str(cm.exception))

    def test_vcpu_pin_set_missing_from_rtrack_toml_stops_the_service(self) -> None:
        # Honoured with Nova's legacy meaning, so both files must say the same.
        import tempfile
        with tempfile.NamedTemporaryFile('w', suffix='.toml', delete=False) as f:
            f.write('[resources]\n')
        self.addCleanup(__import__('os').unlink, f.name)
        self.flags(config_file=f.name, group='rtrack')
        self.flags(vcpu_pin_set='0-3')
        with self.assertRaises(exception.InvalidConfiguration) as cm:
            rt_tracker.RtrackResourceTracker('compute1', mock.Mock(), reportclient=mock.Mock())
        self.assertIn('vcpu_pin_set', str(cm.exception))
