"""The post-import hook: Nova's functional tests, unmodified, with rtrack as the tracker.

``install()`` puts a finder first on ``sys.meta_path``. When these modules have executed it
patches them (no Nova file is changed):

- ``nova.compute.resource_tracker``: ``ResourceTracker`` becomes the drop-in (the module
  attribute, which the compute manager reads at construction and tests patch through), bound
  to the harness's per-host rtrackd;
- ``nova.tests.functional.fixtures``: ``PlacementFixture.setUp`` also serves the intercepted
  Placement application on 127.0.0.1 for rtrackd;
- ``nova.test``: ``TestCase.setUp`` tells the harness which test runs (daemons are stopped in
  its cleanup).

Nova is not imported here: the patches run inside the import of those modules, after
``nova.tests.functional`` has monkey-patched eventlet.
"""

from __future__ import annotations

import importlib.abc
import sys
from typing import Any, Callable


def _patch_rt(module: Any) -> None:
    from nova_rtrack import tracker
    from nova_rtrack.testing import launcher
    tracker.set_binding_factory(launcher.binding_factory)
    module.NovaResourceTracker = module.ResourceTracker
    module.ResourceTracker = tracker.RtrackResourceTracker


def _patch_placement_fixture(module: Any) -> None:
    from nova_rtrack.testing import launcher
    from nova_rtrack.testing import placement

    orig_setup = module.PlacementFixture.setUp

    def setUp(self: Any) -> None:
        orig_setup(self)
        url, stop = placement.serve_intercepted(self.endpoint)
        self.loopback_url = url
        launcher.set_placement_url(url)

        def _stop() -> None:
            stop()
            if launcher.STATE.placement_url == url:
                launcher.set_placement_url(None)
        self.addCleanup(_stop)

    module.PlacementFixture.setUp = setUp


def _patch_testcase(module: Any) -> None:
    from nova_rtrack.testing import launcher

    orig_setup = module.TestCase.setUp

    def setUp(self: Any) -> None:
        launcher.begin_test(self)
        self.addCleanup(launcher.end_test, self)
        orig_setup(self)

    module.TestCase.setUp = setUp


def _patch_libvirt_driver(module: Any) -> None:
    from nova_rtrack import driver_patches
    driver_patches.install()


def _patch_compute_manager(module: Any) -> None:
    from nova_rtrack import driver_patches
    driver_patches.install_manager()


TARGETS: dict[str, Callable[[Any], None]] = {
    'nova.virt.libvirt.driver': _patch_libvirt_driver,
    'nova.compute.manager': _patch_compute_manager,
    'nova.compute.resource_tracker': _patch_rt,
    'nova.tests.functional.fixtures': _patch_placement_fixture,
    'nova.test': _patch_testcase,
}


class _PostImportFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        hook = TARGETS.get(name)
        if hook is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, 'find_spec'):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        orig_exec = loader.exec_module

        def exec_module(module: Any) -> None:
            orig_exec(module)
            hook(module)
        loader.exec_module = exec_module
        return spec


_installed = False


def install() -> None:
    """Installs the hook (idempotent); modules already imported are patched at once."""
    global _installed
    if _installed:
        return
    _installed = True
    sys.meta_path.insert(0, _PostImportFinder())
    for name, hook in TARGETS.items():
        if name in sys.modules:
            hook(sys.modules[name])
