"""``nova-compute-rtrack``: nova-compute with rtrackd as its resource tracker.

Exactly ``nova-compute`` (same arguments, same configuration files), with
``nova.compute.resource_tracker.ResourceTracker`` replaced by the drop-in before the compute
manager is built. nova.conf's ``[rtrack]`` group says where rtrackd's socket is and which
rtrack.toml to check: a disagreement on a shared option stops the service at start, naming
the option.
"""

from __future__ import annotations

import sys


def install() -> None:
    """Puts the drop-in in place (import order: nova.cmd's monkey patching first)."""
    from nova.compute import resource_tracker

    from nova_rtrack import tracker

    from nova_rtrack import driver_patches
    driver_patches.install_manager()
    try:
        driver_patches.install()
    except ImportError:  # pragma: no cover (a compute without the libvirt driver)
        pass
    if resource_tracker.ResourceTracker is not tracker.RtrackResourceTracker:
        resource_tracker.NovaResourceTracker = resource_tracker.ResourceTracker
        resource_tracker.ResourceTracker = tracker.RtrackResourceTracker


def main() -> None:
    # nova.cmd.compute imports nova.cmd, which applies eventlet's monkey patching (or the
    # threading mode) before anything else of Nova is imported.
    from nova.cmd import compute

    install()
    compute.main()


if __name__ == '__main__':
    sys.exit(main())
