"""The libvirt driver's own resource choices, made to follow rtrackd's answer.

Nova's libvirt driver picks the mediated devices of a vGPU guest itself
(``LibvirtDriver._allocate_mdevs``: an existing unassigned mdev of the parent Placement
allocated from, else a new one), and reads the parent from ``driver.provider_tree``, which only
``update_provider_tree`` fills (nova-compute on rtrack never runs it: rtrackd reports the
inventory). rtrackd decides which mdev each vGPU of a claim gets (``mdevs``: uuid, parent,
type, ``existing``); this patch makes the driver use exactly those, creating with rtrackd's
uuid the ones that do not exist yet.

``_allocate_mdevs(allocations)`` is not told the instance: the four driver methods that call it
(``spawn``, ``finish_migration``, ``_hard_reboot``, ``check_source_migrate_data_at_dest``) are
wrapped to remember it for the duration of the call (greenthread-local under eventlet).

Installed by :func:`nova_rtrack.cmd.install` (production) and by the test hook. A driver without
an rtrack tracker (``driver.rtrack_tracker`` unset) keeps Nova's behaviour.
"""

from __future__ import annotations

import functools
import inspect
import threading
from typing import Any, Callable, Optional

from oslo_log import log as logging

LOG = logging.getLogger(__name__)

# Methods of LibvirtDriver that call _allocate_mdevs, and the name of their instance argument.
INSTANCE_METHODS = ('spawn', 'finish_migration', '_hard_reboot',
                    'check_source_migrate_data_at_dest')

_current = threading.local()


def current_instance() -> Any:
    return getattr(_current, 'instance', None)


def current_call() -> tuple[Optional[str], dict[str, Any]]:
    """The wrapped driver method running now in this thread and its arguments by name."""
    return getattr(_current, 'method', None), getattr(_current, 'arguments', None) or {}


def libvirt_name(address: str) -> str:
    """A parent's libvirt node device name: ``0000:84:00.0`` -> ``pci_0000_84_00_0``;
    a virtual parent's name is kept."""
    parts = address.replace('.', ':').split(':')
    if len(parts) == 4 and all(all(c in '0123456789abcdefABCDEF' for c in p) for p in parts):
        return 'pci_' + '_'.join(parts)
    return address


def _with_instance(method: Callable[..., Any]) -> Callable[..., Any]:
    sig = inspect.signature(method)

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            arguments = dict(sig.bind_partial(self, *args, **kwargs).arguments)
        except TypeError:
            arguments = {}
        prev = (getattr(_current, 'instance', None), getattr(_current, 'method', None),
                getattr(_current, 'arguments', None))
        _current.instance = arguments.get('instance')
        _current.method = method.__name__
        _current.arguments = arguments
        try:
            return method(self, *args, **kwargs)
        finally:
            _current.instance, _current.method, _current.arguments = prev
    wrapper._rtrack_wrapped = method  # type: ignore[attr-defined]
    return wrapper


def choose_mdevs(driver: Any, tracker: Any, instance: Any, allocations: Any) -> list:
    """The mdev uuids of ``instance``'s vGPUs as rtrackd gave them (created when needed)."""
    if not driver._vgpu_allocations(allocations):
        return []
    mdevs = tracker.mdevs_for(instance)
    if mdevs is None:
        mdevs = _claim_live_migration(tracker, instance, allocations)
    if mdevs is None:
        from nova import exception
        raise exception.ComputeResourcesUnavailable(
            reason='rtrackd holds no vGPU for instance %s' % instance.uuid)
    present = {m['uuid'] for m in driver._get_mediated_devices()}
    chosen = []
    for m in mdevs:
        uuid = m['uuid']
        if uuid not in present:
            parent = libvirt_name(m['parent'])
            LOG.info('Creating mdev %s (%s) on %s as rtrackd chose', uuid, m.get('type'),
                     parent, instance=instance)
            # Nova's own creation path (the parent's configured type, its room left), with
            # rtrackd's parent and uuid.
            created = driver._create_new_mediated_device(parent, uuid=uuid)
            if not created:
                from nova import exception
                raise exception.ComputeResourcesUnavailable(
                    reason='mdev-capable resource is not available')
            if created != uuid:
                LOG.warning('mdev created as %s, rtrackd chose %s', created, uuid,
                            instance=instance)
                uuid = created
        else:
            LOG.info('Allocated mdev: %s (rtrackd).', uuid, instance=instance)
        chosen.append(uuid)
    return chosen


def _claim_live_migration(tracker: Any, instance: Any, allocations: Any) -> Optional[list]:
    """The destination of a vGPU live migration: Nova's compute claims a live migration only
    for NUMA guests (``_live_migration_claim``) and lets the driver take mdevs from the
    Placement allocations at ``check_source_migrate_data_at_dest``. rtrackd decides the
    mdevs, so the incoming move is claimed there first, as a NUMA live migration is; its
    rollback or completion is settled like one (the Migration's status, at the periodic).
    Refused: MigrationPreCheckError, as Nova's pre-check fails."""
    method, args = current_call()
    if method != 'check_source_migrate_data_at_dest' or args.get('migration') is None:
        return None
    from nova import exception
    nodename = tracker._only_node()
    if nodename is None:
        return None
    try:
        context = args.get('ctxt') or args.get('context')
        tracker.live_migration_claim(context, instance, nodename, args['migration'],
                                     args.get('limits'), allocations)
    except exception.ComputeResourcesUnavailable as e:
        raise exception.MigrationPreCheckError(reason=e.format_message())
    return tracker.mdevs_for(instance)


def incoming_live_migration() -> Optional[dict[str, Any]]:
    """The arguments (``ctxt``, ``instance``, ``migration``, ``limits``) of the
    ``ComputeManager.check_can_live_migrate_destination`` running in this thread, if any."""
    return getattr(_current, 'live_migration_destination', None)


def _remember_live_migration_destination(method: Callable[..., Any]) -> Callable[..., Any]:
    """Nova's destination pre-check claims in its tracker only for NUMA guests; a guest with
    flavor PCI devices still asks the tracker for them (``claim_pci_devices``). The drop-in
    then registers the incoming move in rtrackd with these arguments."""
    sig = inspect.signature(method)

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            arguments = dict(sig.bind_partial(self, *args, **kwargs).arguments)
        except TypeError:
            arguments = {}
        prev = getattr(_current, 'live_migration_destination', None)
        _current.live_migration_destination = arguments
        try:
            return method(self, *args, **kwargs)
        finally:
            _current.live_migration_destination = prev
    wrapper._rtrack_wrapped = method  # type: ignore[attr-defined]
    return wrapper


def install_manager() -> None:
    """Patches ``nova.compute.manager.ComputeManager`` (idempotent)."""
    from nova.compute import manager as compute_manager

    cls = compute_manager.ComputeManager
    if getattr(cls, '_rtrack_patched', False):
        return
    cls.check_can_live_migrate_destination = _remember_live_migration_destination(
        cls.check_can_live_migrate_destination)
    cls._rtrack_patched = True


def install() -> None:
    """Patches ``nova.virt.libvirt.driver.LibvirtDriver`` (idempotent)."""
    from nova.virt.libvirt import driver as libvirt_driver

    cls = libvirt_driver.LibvirtDriver
    if getattr(cls, '_rtrack_patched', False):
        return
    for name in INSTANCE_METHODS:
        if hasattr(cls, name):
            setattr(cls, name, _with_instance(getattr(cls, name)))

    orig = cls._allocate_mdevs

    @functools.wraps(orig)
    def _allocate_mdevs(self: Any, allocations: Any) -> list:
        tracker = getattr(self, 'rtrack_tracker', None)
        instance = current_instance()
        if tracker is None or instance is None:
            return orig(self, allocations)
        return choose_mdevs(self, tracker, instance, allocations)

    _allocate_mdevs._rtrack_wrapped = orig  # type: ignore[attr-defined]
    cls._allocate_mdevs = _allocate_mdevs
    cls._rtrack_patched = True


def bind(driver: Any, tracker: Any) -> None:
    """Tells a driver which tracker's rtrackd decides its devices."""
    try:
        driver.rtrack_tracker = tracker
    except AttributeError:  # pragma: no cover (a driver that refuses attributes)
        pass


def unwrap(func: Any) -> Optional[Any]:
    return getattr(func, '_rtrack_wrapped', None)
