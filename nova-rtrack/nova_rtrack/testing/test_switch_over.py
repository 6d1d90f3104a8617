"""Switching a running host from Nova's own resource tracker to rtrack (docs/nova-compute.md).

Nova's functional fixtures, as Nova's own tests use them: one fake-libvirt compute host runs
pinned guests under Nova's ``ResourceTracker``; nova-compute is then restarted with the drop-in
(the guests keep running: the fake hypervisor's state is kept), and rtrackd, which has never
seen the host, must count every guest where it runs: the host CPUs its domain is pinned to,
not where a fresh fit would put it. Run by ``scripts/nova-functional`` with the other modules.
"""

from __future__ import annotations

# Nova's functional package first: it applies eventlet's monkey patching, which must come
# before anything else of Nova is imported (Nova's own test modules get it from their package).
import nova.tests.functional  # noqa: F401,I100

from typing import Any  # noqa: I100
from unittest import mock

from nova.compute import resource_tracker
from nova import context as nova_context
from nova import objects
from nova.tests.fixtures import libvirt as fakelibvirt
from nova.tests.functional.libvirt import base


def _pins(numa_topology: Any) -> dict[int, int]:
    out: dict[int, int] = {}
    for cell in numa_topology.cells:
        out.update(cell.cpu_pinning or {})
    return out


class SwitchOverTest(base.ServersTestBase):

    ADMIN_API = True

    def setUp(self) -> None:
        super().setUp()
        self.flags(cpu_dedicated_set='0-7', cpu_shared_set=None, group='compute')
        self.flags(vcpu_pin_set=None)
        self.ctxt = nova_context.get_admin_context()
        self.api.microversion = 'latest'

    def _pinned_server(self, flavor_id: str) -> dict[str, Any]:
        return self._create_server(flavor_id=flavor_id, networks='none')

    def test_running_guests_keep_their_pins_when_rtrack_takes_over(self) -> None:
        host_info = fakelibvirt.HostInfo(cpu_nodes=1, cpu_sockets=1, cpu_cores=8,
                                         cpu_threads=1)
        flavor_id = self._create_flavor(vcpu=2, extra_spec={'hw:cpu_policy': 'dedicated'})
        nova_tracker = getattr(resource_tracker, 'NovaResourceTracker', None)
        if nova_tracker is None:
            self.skipTest("Nova's tracker is in place (--baseline): nothing to switch to")
        with mock.patch.object(resource_tracker, 'ResourceTracker', nova_tracker):
            self.start_compute(host_info=host_info, hostname='compute1')
            self.assertIsInstance(self.computes['compute1'].manager.rt, nova_tracker)
            first = self._pinned_server(flavor_id)
            second = self._pinned_server(flavor_id)
            # Free the first guest's CPUs: a fresh fit on this host would now pick them, while
            # the second guest runs on others.
            self._delete_server(first)
        inst = objects.Instance.get_by_uuid(self.ctxt, second['id'])
        running_pins = _pins(inst.numa_topology)
        self.assertEqual(2, len(running_pins))

        compute = self.restart_compute_service('compute1')
        rt = compute.manager.rt
        self.assertNotIsInstance(rt, nova_tracker)
        self._run_periodics()
        claims = {c['instance_uuid']: c for c in rt._client('compute1').claims()}
        self.assertEqual({second['id']}, set(claims))
        cells = claims[second['id']]['numa_topology']['nova_object.data']['cells']
        held: dict[int, int] = {}
        for cell in cells:
            raw = cell['nova_object.data'].get('cpu_pinning_raw') or {}
            held.update({int(g): int(h) for g, h in raw.items()})
        self.assertEqual(running_pins, held)

        # What is left is what rtrack gives next: the CPUs the deleted guest had.
        third = self._pinned_server(flavor_id)
        third_pins = _pins(objects.Instance.get_by_uuid(self.ctxt, third['id']).numa_topology)
        self.assertFalse(set(third_pins.values()) & set(running_pins.values()))
