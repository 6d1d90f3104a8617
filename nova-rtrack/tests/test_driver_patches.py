"""The libvirt driver's vGPU choice follows rtrackd's answer (nova_rtrack.driver_patches)."""

from __future__ import annotations

from typing import Any, Optional
from unittest import mock

from nova import exception
from nova import test

from nova_rtrack import driver_patches


class FakeDriver:
    """What choose_mdevs needs of LibvirtDriver."""

    def __init__(self, present: list[str]) -> None:
        self.present = list(present)
        self.created: list[tuple[str, str, Optional[str]]] = []

    def _vgpu_allocations(self, allocations: Any) -> dict:
        return {rp: a for rp, a in (allocations or {}).items()
                if a['resources'].get('VGPU')}

    def _get_mediated_devices(self, types: Any = None) -> list:
        return [{'uuid': u} for u in self.present]

    def _create_new_mediated_device(self, parent: str, uuid: Optional[str] = None) -> str:
        self.created.append((parent, uuid))
        self.present.append(uuid or 'generated')
        return uuid or 'generated'


class FakeTracker:
    def __init__(self, mdevs: Optional[list]) -> None:
        self.mdevs = mdevs

    def mdevs_for(self, instance: Any) -> Optional[list]:
        return self.mdevs


ALLOC = {'rp-gpu': {'resources': {'VGPU': 2}}}
INSTANCE = mock.Mock(uuid='3f1e1c9e-0000-4000-8000-00000000000a')


class ChooseMdevsTest(test.NoDBTestCase):
    def test_existing_and_new_mdevs_as_rtrackd_chose(self) -> None:
        drv = FakeDriver(present=['aaaa'])
        tracker = FakeTracker([
            {'uuid': 'aaaa', 'parent': '0000:81:00.0', 'type': 'nvidia-11', 'existing': True},
            {'uuid': 'bbbb', 'parent': '0000:81:00.0', 'type': 'nvidia-11', 'existing': False},
        ])
        self.assertEqual(['aaaa', 'bbbb'],
                         driver_patches.choose_mdevs(drv, tracker, INSTANCE, ALLOC))
        # only the missing one is created, on rtrackd's parent, with rtrackd's uuid
        self.assertEqual([('pci_0000_81_00_0', 'bbbb')], drv.created)

    def test_no_vgpu_asked_nothing_chosen(self) -> None:
        drv = FakeDriver(present=[])
        self.assertEqual([], driver_patches.choose_mdevs(
            drv, FakeTracker(None), INSTANCE, {'rp': {'resources': {'VCPU': 1}}}))

    def test_no_claim_in_rtrackd_fails_the_spawn(self) -> None:
        with self.assertRaises(exception.ComputeResourcesUnavailable):
            driver_patches.choose_mdevs(FakeDriver([]), FakeTracker(None), INSTANCE, ALLOC)

    def test_libvirt_names(self) -> None:
        self.assertEqual('pci_0000_84_00_0', driver_patches.libvirt_name('0000:84:00.0'))
        self.assertEqual('mtty_mtty', driver_patches.libvirt_name('mtty_mtty'))


class InstallTest(test.NoDBTestCase):
    def test_the_instance_of_the_calling_method_reaches_allocate_mdevs(self) -> None:
        from nova.virt.libvirt import driver as libvirt_driver
        driver_patches.install()
        cls = libvirt_driver.LibvirtDriver
        self.assertTrue(cls._rtrack_patched)
        seen = []

        def fake_spawn(self_: Any, context: Any, instance: Any, *a: Any, **k: Any) -> None:
            seen.append(driver_patches.current_instance())

        wrapped = driver_patches._with_instance(fake_spawn)
        wrapped(object(), 'ctx', INSTANCE, 'image')
        self.assertEqual([INSTANCE], seen)
        self.assertIsNone(driver_patches.current_instance())
        # the real methods are wrapped, and know where the original is
        for name in driver_patches.INSTANCE_METHODS:
            self.assertIsNotNone(driver_patches.unwrap(getattr(cls, name)), name)

    def test_a_driver_without_tracker_keeps_novas_choice(self) -> None:
        from nova.virt.libvirt import driver as libvirt_driver
        driver_patches.install()
        drv = mock.Mock(spec=['_vgpu_allocations'])
        drv._vgpu_allocations.return_value = {}
        with mock.patch.object(driver_patches, 'current_instance', return_value=INSTANCE):
            # Nova's own _allocate_mdevs runs (and finds no vGPU asked)
            self.assertEqual([], libvirt_driver.LibvirtDriver._allocate_mdevs(drv, ALLOC))
        drv._vgpu_allocations.assert_called_once_with(ALLOC)

    def test_a_bound_driver_asks_its_tracker(self) -> None:
        from nova.virt.libvirt import driver as libvirt_driver
        driver_patches.install()
        drv = FakeDriver(present=['aaaa'])
        driver_patches.bind(drv, FakeTracker([
            {'uuid': 'aaaa', 'parent': '0000:81:00.0', 'type': 'nvidia-11',
             'existing': True}]))
        with mock.patch.object(driver_patches, 'current_instance', return_value=INSTANCE):
            self.assertEqual(['aaaa'],
                             libvirt_driver.LibvirtDriver._allocate_mdevs(drv, ALLOC))


class LiveMigrationDestinationTest(test.NoDBTestCase):
    """A vGPU guest live-migrating without NUMA: Nova's compute makes no claim, rtrackd must
    be asked for the destination's mdevs at check_source_migrate_data_at_dest."""

    def _tracker(self, refuse: bool = False) -> mock.Mock:
        tracker = mock.Mock()
        tracker._only_node.return_value = 'dest'
        held: list = []
        tracker.mdevs_for.side_effect = lambda inst: list(held) or None

        def claim(*a: Any, **k: Any) -> None:
            if refuse:
                raise exception.ComputeResourcesUnavailable(reason='no room')
            held.append({'uuid': 'cccc', 'parent': '0000:81:00.0', 'type': 'nvidia-11',
                         'existing': False})
        tracker.live_migration_claim.side_effect = claim
        return tracker

    def _run(self, tracker: Any, name: str = 'check_source_migrate_data_at_dest') -> list:
        drv = FakeDriver(present=[])
        migration = mock.sentinel.migration

        def method(self_: Any, ctxt: Any, instance: Any, migrate_data: Any,
                   migration: Any, limits: Any, allocs: Any) -> list:
            return driver_patches.choose_mdevs(drv, tracker, instance, allocs)
        method.__name__ = name
        wrapped = driver_patches._with_instance(method)
        return wrapped(drv, 'ctx', INSTANCE, None, migration, None, ALLOC)

    def test_the_incoming_move_is_claimed_then_its_mdevs_used(self) -> None:
        tracker = self._tracker()
        self.assertEqual(['cccc'], self._run(tracker))
        tracker.live_migration_claim.assert_called_once_with(
            'ctx', INSTANCE, 'dest', mock.sentinel.migration, None, ALLOC)

    def test_a_refusal_fails_the_precheck(self) -> None:
        with self.assertRaises(exception.MigrationPreCheckError):
            self._run(self._tracker(refuse=True))

    def test_other_methods_claim_nothing(self) -> None:
        tracker = self._tracker()
        with self.assertRaises(exception.ComputeResourcesUnavailable):
            self._run(tracker, name='spawn')
        tracker.live_migration_claim.assert_not_called()


class ManagerPatchTest(test.NoDBTestCase):
    def test_the_destination_precheck_arguments_are_known_inside_it(self) -> None:
        seen = []

        def check(self_: Any, ctxt: Any, instance: Any, block_migration: Any,
                  disk_over_commit: Any, migration: Any, limits: Any) -> None:
            seen.append(driver_patches.incoming_live_migration())
        wrapped = driver_patches._remember_live_migration_destination(check)
        wrapped(object(), 'ctx', INSTANCE, False, None, mock.sentinel.migration, None)
        self.assertEqual('ctx', seen[0]['ctxt'])
        self.assertIs(INSTANCE, seen[0]['instance'])
        self.assertIs(mock.sentinel.migration, seen[0]['migration'])
        self.assertIsNone(driver_patches.incoming_live_migration())

    def test_install_manager_wraps_the_real_method(self) -> None:
        from nova.compute import manager as compute_manager
        driver_patches.install_manager()
        self.assertIsNotNone(driver_patches.unwrap(
            compute_manager.ComputeManager.check_can_live_migrate_destination))
